package retryhttp

import (
	"context"
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// Hedging (WithHedging): a request's first attempt that has not answered
// within its key's hedge delay (perkey.Hedger) is sent once more, and the
// first copy to answer usably wins; the other is cancelled, and its
// response, if it came, is closed unread, which resets an HTTP/2 stream
// rather than reading it to its end.
//
// A copy is sent only when it is safe and cheap:
//   - the request may be sent twice (idempotent, or with an
//     Idempotency-Key) and its body can be had afresh for the copy;
//   - its key is in plain health: circuit closed, not held, paced or
//     waited for, no failure period under way, and its answers have not
//     slowed as a whole (a copy would queue behind the first);
//   - the key has earned it: each request earns maxExtraLoad of a hedge;
//   - the retry budget holds hedgeReserve tokens, and pays one, so that
//     hedges never take what retries need, and under overload, when
//     retries spend the budget, hedging stops.
//
// Only the first attempt is hedged, and the race is settled before
// RoundTrip goes on: a hedge and a retry never run at once.

// hedgeReserve is what the retry budget must hold for a hedge to draw
// on it: a burst of retries is never left short by hedges.
const hedgeReserve = 10

// hedgeable reports whether the request's first attempt may be hedged,
// as far as the request alone can tell.
func (r *retrier) hedgeable() bool {
	return r.s.hedge > 0 && r.attempts == 1 && r.idempotent
}

// sendHedged sends the first attempt, areq, and a hedge if it is late.
// It returns what attempt.Send would: the winner, with its body wrapped
// to end its context when closed, or, when neither answered usably, the
// first attempt's outcome. Each copy runs in a goroutine of its own, so
// that the winner returns at once even through a RoundTripper slow to
// heed a cancelled context; a copy that loses closes its own response.
func (r *retrier) sendHedged(areq *http.Request) (*http.Response, error) {
	l := r.laneOf()
	h := l.Hedger()
	h.Earn(r.s.hedge)
	start := time.Now()
	delay, ok := h.Delay()
	cp, copyable := r.body.Copier()
	if !ok || !copyable {
		resp, err := attempt.Send(r.t.next, areq, r.s.attemptTimeout, r.req.Context())
		if err == nil {
			h.Record(time.Since(start), false, r.s.hedge)
		}
		return resp, err
	}
	c := &hedgeCopies{abandon: make(chan struct{})}
	defer close(c.abandon)
	first := c.start(r.t.next, areq, r.s, r.req.Context(), nil)
	timer := time.NewTimer(delay)
	select {
	case o := <-first.out:
		timer.Stop()
		if o.err == nil {
			h.Record(time.Since(start), false, r.s.hedge)
		}
		return first.keep(o)
	case <-timer.C:
	}
	hedge := r.startHedge(c, cp)
	if hedge == nil {
		o := <-first.out
		if o.err == nil {
			h.Record(time.Since(start), false, r.s.hedge)
		}
		return first.keep(o)
	}
	// The first usable answer wins; when neither is usable, the first
	// attempt's failure goes on to the retry loop.
	var failed copyOutcome
	for pending := 2; pending > 0; pending-- {
		select {
		case o := <-first.out:
			if r.usable(o) {
				h.Record(time.Since(start), false, r.s.hedge)
				hedge.cancel()
				return first.keep(o)
			}
			failed = o
			first.out = nil
		case o := <-hedge.out:
			if r.usable(o) {
				h.Record(time.Since(start), true, r.s.hedge) // the first, unanswered
				r.t.stats.hedgesWon.Add(1)
				first.cancel()
				return hedge.keep(o)
			}
			discard(o.resp, hedge.cancel)
			hedge.out = nil
		}
	}
	return first.keep(failed)
}

// usable reports an outcome that ends the request: a response that is
// not to be retried.
func (r *retrier) usable(o copyOutcome) bool {
	return o.err == nil && !r.s.retryIf(o.resp, nil)
}

// startHedge sends the hedge if the key allows it now, and returns it,
// or nil when it does not go.
func (r *retrier) startHedge(c *hedgeCopies, cp attempt.Copier) *hedgeCopy {
	l := r.lane
	if !l.HedgePlain() || !l.Hedger().Spend() {
		return nil
	}
	if b := r.t.budget; b != nil && !b.withdrawAbove(r.keyOf(), hedgeReserve) {
		return nil
	}
	ctx, cancel := context.WithCancel(r.req.Context())
	hreq, err := cp.Copy(ctx)
	if err != nil {
		cancel()
		return nil
	}
	tk, _, err := l.Admit(ctx, perkey.Limits{MaxInFlight: r.s.inFlight.MaxInFlight, RefuseInFlight: true})
	if err != nil {
		cancel()
		attempt.CloseRequestBody(hreq)
		return nil
	}
	r.t.stats.hedges.Add(1)
	ev := Event{Request: r.req, Attempt: r.attempts, Hedge: true}
	if r.hooks.any() {
		fire(r.hooks, (*Hooks).attemptStart, ev)
	}
	return c.start(r.t.next, hreq, r.s, r.req.Context(), &hedgeTail{lane: l, ticket: tk, hooks: r.hooks, ev: ev, cancel: cancel, retryIf: r.s.retryIf})
}

// hedgeCopies is what a request's copies share: abandon is closed when
// the request has its outcome, so that a copy still out closes its own.
type hedgeCopies struct {
	abandon chan struct{}
}

// hedgeCopy is one copy in flight: its outcome comes on out, and cancel
// ends its context.
type hedgeCopy struct {
	out    chan copyOutcome
	cancel context.CancelFunc
}

type copyOutcome struct {
	resp *http.Response
	err  error
}

// hedgeTail is what a hedge does once sent that the first attempt leaves
// to the request: it records its outcome with its key and reports it.
type hedgeTail struct {
	lane    *perkey.Lane
	ticket  perkey.Ticket
	hooks   hookSet
	ev      Event
	cancel  context.CancelFunc
	retryIf func(*http.Response, error) bool
}

// start sends req through next in a goroutine: the first attempt with a
// context of its own (tail nil), or the hedge, whose request already
// has its context.
func (c *hedgeCopies) start(next http.RoundTripper, req *http.Request, s *settings, callerCtx context.Context, tail *hedgeTail) *hedgeCopy {
	hc := &hedgeCopy{out: make(chan copyOutcome)}
	if tail == nil {
		ctx, cancel := context.WithCancel(req.Context())
		req, hc.cancel = req.WithContext(ctx), cancel
	} else {
		hc.cancel = tail.cancel
	}
	timeout := s.attemptTimeout
	go func() {
		var o copyOutcome
		begin := time.Now()
		o.resp, o.err = attempt.Send(next, req, timeout, callerCtx)
		if tail != nil {
			tail.done(o, time.Since(begin))
		}
		select {
		case hc.out <- o:
		case <-c.abandon:
			discard(o.resp, hc.cancel)
		}
	}()
	return hc
}

// done records the hedge's outcome with its key (a failure when it
// answered with one, nothing else: its success is the request's, which
// the first attempt's admission records) and reports it to the hooks.
func (t *hedgeTail) done(o copyOutcome, took time.Duration) {
	var out perkey.Outcome
	if o.err == nil && t.retryIf(o.resp, nil) {
		out.Kind = perkey.Failure
	}
	t.lane.Done(t.ticket, out)
	if t.hooks.any() {
		ev := t.ev
		ev.Err, ev.Duration = o.err, took
		if o.resp != nil {
			ev.Status = o.resp.StatusCode
		}
		fire(t.hooks, (*Hooks).attemptDone, ev)
	}
}

// keep returns a copy's outcome as the attempt's, its body set to end
// its context when closed; with an error, it ends the context now.
func (hc *hedgeCopy) keep(o copyOutcome) (*http.Response, error) {
	if o.err != nil {
		hc.cancel()
		return nil, o.err
	}
	o.resp.Body = attempt.CancelOnClose(o.resp.Body, hc.cancel)
	return o.resp, nil
}

// discard closes a losing copy's response unread, if it has one, and
// ends its context: HTTP/2 resets its stream; HTTP/1 closes its
// connection rather than read a body nobody wants.
func discard(resp *http.Response, cancel context.CancelFunc) {
	cancel()
	if resp != nil {
		resp.Body.Close()
	}
}
