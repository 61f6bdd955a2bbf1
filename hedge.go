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
// Hooks run here, on the request's goroutine, never in a copy's; a panic
// in a copy's goroutine (the next RoundTripper's) is raised here. lost
// reports that the hedge won while the first copy had not answered.
func (r *retrier) sendHedged(areq *http.Request) (_ *http.Response, lost bool, _ error) {
	l := r.laneOf()
	h := l.Hedger()
	h.Earn(r.s.hedge)
	start := time.Now()
	delay, ok := h.Delay()
	cp, copyable := r.body.Copier()
	if !ok || !copyable || !l.HedgePlain() || !h.Earned() {
		// No hedge could go: the attempt goes as any other.
		resp, err := r.sendOne(areq)
		if err == nil {
			h.Record(time.Since(start), false, r.s.hedge)
		}
		return resp, false, err
	}
	timed := r.timed()
	c := &hedgeCopies{abandon: make(chan struct{})}
	defer close(c.abandon)
	first := c.start(r.t.next, areq, r.s.attemptTimeout, r.req.Context(), nil)
	// firstDone takes the first copy's outcome: it times it for the
	// slow-call rule, as sendOne would, and counts its answer time.
	firstDone := func(o copyOutcome) copyOutcome {
		first.check(o)
		if timed {
			r.clocked(start, o.err == nil)
		}
		if o.err == nil {
			h.Record(time.Since(start), false, r.s.hedge)
		}
		return o
	}
	timer := time.NewTimer(delay)
	select {
	case o := <-first.out:
		timer.Stop()
		return first.keepAs(firstDone(o), false)
	case <-timer.C:
	}
	select {
	case o := <-first.out:
		// It answered just as the delay ran out: no hedge, which could
		// otherwise take the connection the answer has just freed.
		return first.keepAs(firstDone(o), false)
	default:
	}
	hedge := r.startHedge(c, cp)
	if hedge == nil {
		return first.keepAs(firstDone(<-first.out), false)
	}
	// The first usable answer wins; when neither is usable, the first
	// attempt's failure goes on to the retry loop.
	var failed *copyOutcome
	for pending := 2; pending > 0; pending-- {
		select {
		case o := <-first.out:
			o = firstDone(o)
			if r.usable(o, first) {
				r.hedgeDone(hedge, copyOutcome{err: context.Canceled}) // cancelled: it lost
				return first.keepAs(o, false)
			}
			failed, first.out = &o, nil
		case o := <-hedge.out:
			hedge.check(o)
			r.hedgeDone(hedge, o)
			if r.usable(o, hedge) {
				r.t.stats.hedgesWon.Add(1)
				if failed == nil {
					// The first had not answered: slower than the hedge,
					// by how much nobody will know.
					h.Record(time.Since(start), true, r.s.hedge)
				} else {
					discard(failed.resp, first.cancel)
				}
				first.cancel()
				return hedge.keepAs(o, failed == nil)
			}
			discard(o.resp, hedge.cancel)
			hedge.out = nil
		}
	}
	return first.keepAs(*failed, false)
}

// usable reports an outcome that ends the request: a response that is
// not to be retried. A panic in WithRetryIf closes the copy's response
// on its way up.
func (r *retrier) usable(o copyOutcome, hc *hedgeCopy) bool {
	judged := false
	defer func() {
		if !judged {
			discard(o.resp, hc.cancel)
		}
	}()
	ok := o.err == nil && !r.s.retryIf(o.resp, nil)
	judged = true
	return ok
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
	hc := &hedgeCopy{cancel: cancel, lane: l, ticket: tk, start: time.Now()}
	if r.hooks.any() {
		sent := false
		defer func() {
			if !sent { // AttemptStart panicked: the hedge is not sent
				l.Done(tk, perkey.Outcome{})
				cancel()
				attempt.CloseRequestBody(hreq)
			}
		}()
		fire(r.hooks, (*Hooks).attemptStart, Event{Request: r.req, Attempt: r.attempts, Hedge: true})
		sent = true
	}
	return c.start(r.t.next, hreq, r.s.attemptTimeout, r.req.Context(), hc)
}

// hedgeDone reports the hedge's outcome to the hooks.
func (r *retrier) hedgeDone(hc *hedgeCopy, o copyOutcome) {
	if r.hooks.any() {
		ev := Event{Request: r.req, Attempt: r.attempts, Hedge: true, Err: o.err, Duration: time.Since(hc.start)}
		if o.resp != nil {
			ev.Status = o.resp.StatusCode
		}
		fire(r.hooks, (*Hooks).attemptDone, ev)
	}
}

// hedgeCopies is what a request's copies share: abandon is closed when
// the request has its outcome, so that a copy still out closes its own.
type hedgeCopies struct {
	abandon chan struct{}
}

// hedgeCopy is one copy in flight: its outcome comes on out, and cancel
// ends its context. A hedge also holds its key's admission (ticket),
// which its goroutine records, and when it was sent.
type hedgeCopy struct {
	out    chan copyOutcome
	cancel context.CancelFunc
	lane   *perkey.Lane // nil for the first copy, whose admission is the request's
	ticket perkey.Ticket
	start  time.Time
}

// copyOutcome is what a copy's RoundTrip returned, or the panic it
// raised (panicked, with its value).
type copyOutcome struct {
	resp     *http.Response
	err      error
	panicked bool
	value    any
}

// start sends req through next in a goroutine: the first attempt with a
// context of its own (hc nil), or the hedge hc, whose request already
// has its context. A hedge's outcome tells its key nothing: the first
// attempt's, or the winner's, is the request's, which the main loop
// records.
func (c *hedgeCopies) start(next http.RoundTripper, req *http.Request, timeout time.Duration, callerCtx context.Context, hc *hedgeCopy) *hedgeCopy {
	if hc == nil {
		ctx, cancel := context.WithCancel(req.Context())
		req, hc = req.WithContext(ctx), &hedgeCopy{cancel: cancel}
	}
	hc.out = make(chan copyOutcome)
	go func() {
		var o copyOutcome
		func() {
			defer func() {
				if v := recover(); v != nil {
					o.panicked, o.value = true, v
				}
			}()
			if hc.lane != nil {
				defer hc.lane.Done(hc.ticket, perkey.Outcome{})
			}
			o.resp, o.err = attempt.Send(next, req, timeout, callerCtx)
		}()
		select {
		case hc.out <- o:
		case <-c.abandon:
			discard(o.resp, hc.cancel)
		}
	}()
	return hc
}

// check raises on the request's goroutine a panic of the copy's.
func (hc *hedgeCopy) check(o copyOutcome) {
	if o.panicked {
		discard(o.resp, hc.cancel)
		panic(o.value)
	}
}

// keepAs returns a copy's outcome as the attempt's, its body set to end
// its context when closed (with an error, it ends the context now), and
// lost, for sendHedged to return.
func (hc *hedgeCopy) keepAs(o copyOutcome, lost bool) (*http.Response, bool, error) {
	if o.err != nil {
		hc.cancel()
		return nil, lost, o.err
	}
	o.resp.Body = attempt.CancelOnClose(o.resp.Body, hc.cancel)
	return o.resp, lost, nil
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
