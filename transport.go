package retryhttp

import (
	"net/http"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/header"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// Transport is an http.RoundTripper that retries through next. Create it
// with New; a zero Transport sends nothing and returns an error saying so.
// It is safe for concurrent use.
type Transport struct {
	next    http.RoundTripper
	s       settings
	hooks   *Hooks   // nil: none
	budget  *Budget  // nil: no budget
	breaker *Breaker // nil: no circuits
	// keyFunc computes a request's key; nil: scheme://host[:port].
	keyFunc func(*http.Request) string
	// partFunc names a request's quota partition, kept apart within its
	// key; nil: one partition per key.
	partFunc func(*http.Request) string
	// noQuota: responses are not read for the quota they advertise.
	noQuota bool
	// localOpen: a request an open circuit refuses gets a local 503.
	localOpen bool
	// horizon: RetryAt answers ReasonGone for a key failing longer; 0: never.
	horizon time.Duration
	fleet   *Fleet // nil: this process alone
	// lanes holds what is kept per key: the breaker's own lanes, or,
	// without a breaker, lanes whose circuits never open, so that a
	// policy's memory of a key, its holds and its send rate do not depend
	// on whether a breaker is configured.
	lanes *perkey.Set
	stats stats
}

// New returns a Transport that sends requests through next, or through
// cleanhttp.DefaultPooledTransport() when next is nil. Options adjust the
// defaults: FullJitter{Base: 200ms, Cap: 30s}, 4 attempts, Retry-After
// clamped to 30 s with a 1 s spread, a fresh retry budget and a fresh
// circuit breaker with their default configurations. New starts no
// goroutine.
func New(next http.RoundTripper, opts ...Option) *Transport {
	if next == nil {
		next = cleanhttp.DefaultPooledTransport()
	}
	t := &Transport{
		next: next,
		s: settings{
			policy:           FullJitter{},
			maxAttempts:      defaultMaxAttempts,
			maxRetryAfter:    defaultMaxRetryAfter,
			retryAfterSpread: defaultRetryAfterSpread,
			retryIf:          DefaultRetryIf,
			idempotentIf:     DefaultIdempotentIf,
			throttleOn:       []int{http.StatusTooManyRequests},
			maxWait:          defaultMaxWait,
		},
		budget:  NewBudget(BudgetConfig{}),
		breaker: NewBreaker(BreakerConfig{}),
	}
	for _, o := range opts {
		if o != nil {
			o.applyTransport(t)
		}
	}
	t.s.stateful = stateful(t.s.policy)
	t.s.slowCalls = t.breaker != nil && t.breaker.cfg.SlowAfter > 0
	if t.fleet != nil {
		t.fleet.attach(t.breaker, t.budget)
	}
	if t.breaker != nil {
		t.lanes = t.breaker.set
	} else {
		t.lanes = perkey.NewSet(perkey.Config{})
	}
	return t
}

// CloseIdleConnections closes the idle connections of the next RoundTripper,
// if it has such a method; http.Client.CloseIdleConnections reaches it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper: it sends req through the next
// RoundTripper and retries as the package documentation describes. Each
// pass of its loop is one attempt: admit it, send it, decide on its
// outcome, rewind for the next, and wait.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.next == nil {
		// A Transport{} literal: say so rather than panic on a nil field.
		attempt.CloseRequestBody(req)
		return nil, errNotFromNew
	}
	ctx := req.Context()
	r := retrier{t: t, s: &t.s, req: req}
	pr, _ := ctx.Value(requestKey{}).(*perRequest)
	r.hooks = hookSet{t: t.hooks}
	if pr != nil {
		r.hooks.r = pr.hooks
		if len(pr.opts) > 0 {
			r.s = pr.settings(&t.s)
		}
	}
	if t.budget != nil {
		t.budget.deposit(r.keyOf())
	}
	if t.breaker != nil || r.s.stateful || r.s.maxInFlight > 0 {
		// Without these, the key's lane is needed only once some key has
		// been held or paced: admit looks it up then.
		r.lane = t.lanes.Lane(r.keyOf())
	}
	defer r.unwind()
	r.idempotent = r.s.idempotentIf(req)
	r.body.First(req, r.s.maxAttempts, r.s.bodyBuffer) // what the first attempt sends

	if r.s.firstJitter > 0 {
		// Spread a bulk sender's first attempts; cancellable like any sleep.
		if err := r.sleep(perkey.Uniform(0, r.s.firstJitter)); err != nil {
			return r.finish(nil, nil, reasonOf(err), err)
		}
	}

	var err error // the latest attempt's error
	for {
		// Admit: the key's circuit, hold, send rate and limit on attempts
		// in flight let the attempt go, or refuse it off the network (or
		// it waits for the key to recover). A wait may already have
		// admitted it.
		if !r.admitted {
			if aerr := r.admit(); aerr != nil {
				return r.finish(r.kept, err, reasonOf(aerr), aerr)
			}
		}

		// Attempt: send it through the next RoundTripper.
		var resp *http.Response
		r.kept = nil // superseded by this attempt's outcome
		resp, err = r.attempt()

		// Decide: what the outcome is, what the key learns from it, and
		// whether a retry follows. Decide before draining: a request that
		// stops hands back the last response untouched.
		v := classify(req, resp, err, r.s.retryIf)
		r.judgeTime(&v)
		if resp != nil && r.readsQuota(resp) {
			r.applyQuota(resp)
		}
		if v.success() {
			r.record(v)
			return r.finish(resp, nil, ReasonNone, nil)
		}
		wait := r.recordFailure(v, resp)
		var delay time.Duration
		if v.retry {
			delay = r.delay(wait)
		}
		f := r.facts(v, delay)
		then, reason := decide(f)
		if then == stop {
			return r.finish(resp, err, reason, nil)
		}

		// Rewind: the next attempt's body, then, for a retry after a
		// delay, the budget's token (without one the retry waits for the
		// key instead, or stops), the key's memory of the delay, the
		// stats and the hooks. A step that fails stops the request with
		// the last response untouched.
		if then, reason = r.rewind(then, delay, wait); then == stop {
			return r.finish(resp, err, reason, nil)
		}

		// Wait: release the failed response's connection (keeping a copy
		// of a small one to hand back if the wait ends unanswered), then
		// sleep until the retry is due (the drain is part of the delay,
		// not added to it), waking early if the context ends or the key's
		// circuit opens; or wait in the key's queue.
		if then == retryAfter {
			if resp != nil {
				attempt.Drain(resp.Body, r.drainTime())
				r.resp = nil
			}
			if serr := r.sleep(time.Until(f.now.Add(delay))); serr != nil && !(serr == ErrCircuitOpen && r.maxWaitLeft() > 0) {
				return r.finish(nil, err, reasonOf(serr), serr)
			}
			continue // an open circuit woke it: the next admission waits
		}
		r.keep(resp)
		if then == queueBehind {
			// The budget refused the retry, or others already wait: wait
			// in the key's queue. A retry that joined others without
			// asking the budget gives up, if its wait ends unanswered, as
			// one the budget refused.
			if qerr := r.queue(reason); qerr != nil {
				return r.finish(r.kept, err, reasonOf(qerr), qerr)
			}
		}
	}
}

// retrier holds the state of one call to RoundTrip. It lives on the stack.
type retrier struct {
	t        *Transport
	s        *settings
	req      *http.Request // the caller's request, never modified
	hooks    hookSet
	attempts int
	key      hostKey // the request's key, once keyOf has computed it
	keyed    bool
	lane     *perkey.Lane  // the key's lane; nil when nothing needs it
	ticket   perkey.Ticket // the latest attempt's admission
	// What the request holds and must release however it ends (see
	// unwind): resp, the latest response, until it is drained or handed
	// back; body, the next attempt's request, until it is sent or its
	// body closed; admitted, the ticket, until its outcome is recorded.
	resp     *http.Response
	body     attempt.Body // the request's body across its attempts
	admitted bool
	// kept is the latest response, its body read into memory, while the
	// request waits for its key: what the caller gets if the wait ends
	// unanswered. waited is how long the request has waited, in all.
	kept    *http.Response
	waited  time.Duration
	didWait bool
	// idempotent: the request may be sent more than once.
	idempotent bool
	// clock is the slow-call rule's timing (see slowcall.go).
	clock clock
	// sampled: the request's responses are read for a quota even if its
	// key has never advertised one (see readsQuota).
	sampled bool
	// throttled: the latest attempt was throttled (perkey.Outcome.Throttled):
	// the key's send rate, not a backoff or the budget, spaces its retry.
	throttled bool
}

// unwind runs when RoundTrip ends. After a return it finds nothing to do;
// after a panic (in a hook, a Policy, WithRetryIf, WithIdempotentIf or the
// next RoundTripper) it releases what the request holds, as if the request
// had ended: the key's admission (a half-open probe's place, a place in
// flight), the latest response, the next attempt's body. The panic goes on
// to the caller.
func (r *retrier) unwind() {
	if r.admitted {
		r.admitted = false
		r.lane.Done(r.ticket, perkey.Outcome{})
	}
	if r.resp != nil {
		r.resp.Body.Close()
	}
	r.body.Close()
}

// keyOf returns the request's key, computing it on first use: a request
// that needs no budget and no lane never needs it unless it fails.
func (r *retrier) keyOf() hostKey {
	if !r.keyed {
		r.key, r.keyed = r.t.requestKey(r.req), true
	}
	return r.key
}

// laneOf returns the key's lane, looking it up on first use.
func (r *retrier) laneOf() *perkey.Lane {
	if r.lane == nil {
		r.lane = r.t.lanes.Lane(r.keyOf())
	}
	return r.lane
}

// record tells the key what the latest attempt's outcome says about it,
// through the ticket that admitted the attempt: for an outcome that is not
// a retryable response, all there is to tell (recordFailure tells the
// rest).
func (r *retrier) record(v verdict) {
	if r.admitted {
		r.admitted = false
		r.report(r.lane.Done(r.ticket, perkey.Outcome{Kind: v.host}))
	}
}

// recordFailure records a failed attempt and returns the wait its
// response asks for. A retryable response's Retry-After is counted whether
// or not a retry follows (a rising rate is the early sign that a tenant is
// rate-limiting the caller); the key hears of the rest through the
// outcome: its circuit, its hold and its send rate (see perkey.Outcome).
func (r *retrier) recordFailure(v verdict, resp *http.Response) header.Wait {
	r.throttled = false
	if !v.retry || resp == nil {
		r.record(v)
		return header.Wait{}
	}
	w := header.RetryAfter(resp.Header, time.Now(), r.s.maxRetryAfter)
	if w.Seen {
		r.t.stats.raSeen.Add(1)
	}
	if w.Clamped {
		r.t.stats.raClamped.Add(1)
	}
	o := perkey.Outcome{Kind: v.host, Throttles: throttles(r.s.throttleOn, resp.StatusCode), TooMany: resp.StatusCode == http.StatusTooManyRequests,
		RetryAfter: w.OK, Wait: w.Duration, Asked: w.Asked}
	r.throttled = o.Throttled()
	if r.admitted {
		r.admitted = false
		r.report(r.lane.Done(r.ticket, o))
	} else if l, trs := r.t.lanes.Heard(r.keyOf(), o); l != nil {
		// Sent before its key had a lane: its hold and send rate hear of it.
		r.lane = l
		r.report(trs)
	}
	return w
}

func throttles(statuses []int, status int) bool {
	for _, s := range statuses {
		if s == status {
			return true
		}
	}
	return false
}

// delay returns the wait before the next attempt: the server's, spread,
// when it asked; otherwise the policy's draw. A Policy must not return a
// negative delay; one that does waits nothing, rather than a negative time
// in Stats.
func (r *retrier) delay(wait header.Wait) time.Duration {
	if r.throttled {
		// The key's send rate, just cut, spaces the retries of a
		// throttled key out (after the hold its Retry-After put on the
		// key); a backoff or a spread on top of it would only idle.
		return wait.Duration
	}
	if wait.OK {
		return wait.WithSpread(r.s.retryAfterSpread)
	}
	var prev time.Duration // a policy that uses it always has a lane: see RoundTrip
	if r.lane != nil {
		prev = r.lane.Prev()
	}
	return max(r.s.policy.Delay(r.attempts, prev), 0)
}

// facts gathers what decide needs to know about the failed latest attempt.
func (r *retrier) facts(v verdict, delay time.Duration) facts {
	f := facts{
		retryable:    v.retry,
		why:          v.why,
		ctxDone:      r.req.Context().Err() != nil,
		attemptsLeft: r.s.maxAttempts - r.attempts,
		idempotent:   r.idempotent,
		reached:      v.reach != notReached,
		replayable:   r.body.Replayable(),
		circuitOpen:  r.lane != nil && r.lane.IsOpen(),
		mayWait:      r.maxWaitLeft() > 0,
		delay:        delay,
		now:          time.Now(),
	}
	f.deadline, _ = r.req.Context().Deadline()
	return f
}

// rewind prepares the retry that decide allowed, in this order: the next
// attempt's request with a fresh body (queued in r.body); then, for a
// retry after a delay, the budget's token, last so that a retry not made
// costs none (without one, or when others already wait for the key, the
// retry queues for the key if the request may wait, and stops otherwise);
// then the delay becomes the key's previous delay, and the stats and the
// hooks hear of the retry. It returns what follows, and why: why not when
// nothing does, what the queue stands in for when it queues (the budget's
// refusal, or none when it joined others).
func (r *retrier) rewind(then next, delay time.Duration, wait header.Wait) (next, Reason) {
	if reason := rewindReason(r.body.Next()); reason != ReasonNone {
		return stop, reason
	}
	if then == retryWhen {
		return then, ReasonNone
	}
	if r.lane != nil && r.lane.Waiting() && r.maxWaitLeft() > 0 {
		// Others already wait for the key to recover: this retry joins
		// them rather than spend a token on a host that is failing them.
		return queueBehind, ReasonNone
	}
	// A throttled retry takes no token while the adaptive rate covers
	// 429: the server is up and asks for less, and the key's send rate,
	// cut by every 429, already bounds the load retries add to it. A retry after a 5xx is a bet that the host
	// is still there; the budget limits how much of the traffic bets.
	if b := r.t.budget; b != nil && !r.throttled && !b.withdraw(r.keyOf()) {
		r.t.stats.budgetDenied.Add(1)
		if r.maxWaitLeft() > 0 {
			return queueBehind, ReasonBudgetExhausted
		}
		return stop, ReasonBudgetExhausted
	}
	if r.lane != nil {
		r.lane.SetPrev(delay)
	}
	r.t.stats.recordDelay(r.attempts, delay)
	fire(r.hooks, (*Hooks).retryScheduled, RetryInfo{Request: r.req, Retry: r.attempts, Delay: delay, RetryAfter: wait.OK, Clamped: wait.Clamped})
	return then, ReasonNone
}

// drainTime bounds the drain of a failed response: attempt.DrainTimeout, and never
// past the caller's deadline.
func (r *retrier) drainTime() time.Duration {
	d := attempt.DrainTimeout
	if dl, ok := r.req.Context().Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return d
}

// sleep waits d before an attempt, ending early when the context ends or
// the key's circuit opens. Afterwards the request takes the key's lane
// afresh, in case the one it held left memory before it slept.
func (r *retrier) sleep(d time.Duration) error {
	ctx := r.req.Context()
	if r.lane == nil {
		return perkey.Sleep(ctx, d)
	}
	err := r.lane.Sleep(ctx, d)
	r.lane = r.t.lanes.Lane(r.keyOf())
	if err == perkey.ErrOpen {
		// Counted as a refusal: the circuit ended the wait.
		r.t.stats.circuitRejected.Add(1)
		err = ErrCircuitOpen
	}
	return err
}

// finish ends the request. resp is the last response if it is still
// intact, and goes back to the caller as it is, with the caller's own
// request as its Request; otherwise the caller gets an Error whose cause is
// the reason's own error (the context's, ErrCircuitOpen,
// ErrBudgetExhausted), with the last attempt's error beside it so that
// errors.Is and errors.As reach both. A request that stops on a failure, or
// with an error, gives up: that is counted and reported.
func (r *retrier) finish(resp *http.Response, attemptErr error, reason Reason, cause error) (*http.Response, error) {
	if r.attempts == 0 {
		r.t.stats.notSent.Add(1)
	}
	// An attempt that will not be sent.
	r.body.Close()
	if resp != nil {
		resp.Request = r.req
	}
	if reason == ReasonNone {
		if r.didWait {
			r.t.stats.waitedDelivered.Add(1)
		}
		r.resp = nil
		return resp, nil
	}
	resp = r.body.HandBack(resp)
	r.t.stats.giveUps[reason].Add(1)
	if r.didWait {
		r.t.stats.waitedGaveUp.Add(1)
	}
	info := GiveUpInfo{Request: r.req, Attempts: r.attempts, Reason: reason, Waited: r.waited}
	if resp == nil && (reason == ReasonCircuitOpen || reason == ReasonHeld) && r.t.localOpen && r.lane != nil {
		resp = localOpenResponse(r.req, r.keyOf(), r.probeAt(), r.s.retryAfterSpread, reason)
		r.resp = resp
		info.Local = true
		r.t.stats.localResponses.Add(1)
	}
	var err error
	if resp != nil {
		info.Status = resp.StatusCode
	} else {
		err = r.wrap(attemptErr, reason, cause)
		info.Err = err
	}
	fire(r.hooks, (*Hooks).giveUp, info)
	r.resp = nil // handed back
	return resp, err
}

// probeAt returns when the key may next be tried (see perkey.View.ProbeAt).
func (r *retrier) probeAt() time.Time {
	now := time.Now()
	return r.lane.View(now).ProbeAt(now)
}

// hostKey is what per-key state is kept by: scheme://host[:port] by
// default, or what WithKey computes.
type hostKey = perkey.Key

// requestKey returns the key of req.
func (t *Transport) requestKey(req *http.Request) hostKey {
	var k hostKey
	if t.keyFunc != nil {
		k = perkey.ParseKey(t.keyFunc(req))
	} else {
		k = perkey.KeyOf(req.URL)
	}
	if t.partFunc != nil {
		if p := t.partFunc(req); p != "" {
			k = perkey.Key{Host: k.String() + "#" + p}
		}
	}
	return k
}
