package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// defaultMaxAttempts is the default number of attempts, the first included.
// With the default policy four attempts wait at most 0.2+0.4+0.8 = 1.4 s in
// all: enough to ride out a blip, short enough that a caller is not held
// long by a host that is down (the breaker handles that).
const defaultMaxAttempts = 4

// Transport is an http.RoundTripper that retries through next. Create it
// with New; a zero Transport sends nothing and returns an error saying so.
// It is safe for concurrent use.
type Transport struct {
	next    http.RoundTripper
	s       settings
	hooks   *Hooks // nil: none
	stats   stats
	budget  *Budget  // nil: no budget
	breaker *Breaker // nil: no circuits
	// keyFunc computes a request's key; nil: scheme://host[:port].
	keyFunc func(*http.Request) string
	// localOpen: a request an open circuit refuses gets a local 503.
	localOpen bool
	fleet     *Fleet // nil: this process alone
	// lanes holds per-host memory: the breaker's own lanes, or, without a
	// breaker, lanes whose circuits never open, so that a policy's memory
	// of a host does not depend on whether a breaker is configured.
	lanes *Breaker
}

// settings are what a Transport's options set for each request.
type settings struct {
	policy           Policy
	stateful         bool // policy may use its prev argument: it needs per-host memory
	maxAttempts      int
	firstJitter      time.Duration
	maxRetryAfter    time.Duration
	retryAfterSpread time.Duration
	retryIf          func(*http.Response, error) bool
	idempotentIf     func(*http.Request) bool
	bodyBuffer       int64
	attemptTimeout   time.Duration
	throttleOn       []int // statuses that cut a key's send rate when they come without Retry-After
	maxInFlight      int   // attempts in flight per key; 0: no limit
	refuseInFlight   bool  // refuse an attempt over maxInFlight rather than wait
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
		},
		budget:  NewBudget(BudgetConfig{}),
		breaker: NewBreaker(BreakerConfig{}),
	}
	for _, o := range opts {
		o.apply(t)
	}
	t.s.stateful = stateful(t.s.policy)
	if t.fleet != nil {
		t.fleet.attach(t.breaker, t.budget)
	}
	t.lanes = t.breaker
	if t.lanes == nil {
		t.lanes = newLanes(BreakerConfig{}, false)
	}
	return t
}

var errNotFromNew = errors.New("retryhttp: Transport used without New; create it with retryhttp.New")

// CloseIdleConnections closes the idle connections of the next RoundTripper,
// if it has such a method; http.Client.CloseIdleConnections reaches it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper: it sends req through the next
// RoundTripper and retries as the package documentation describes.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.next == nil {
		// A Transport{} literal: say so rather than panic on a nil field.
		closeRequestBody(req)
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
		// been held or paced: admit looks it up then, and recordRetryable
		// for the first.
		r.lane = t.lanes.lane(r.keyOf())
	}
	defer r.unwind()
	r.queued = r.replayable() // what the first attempt sends

	if r.s.firstJitter > 0 {
		// Spread a bulk sender's first attempts; cancellable like any sleep.
		if err := r.sleep(ctx, uniform(0, r.s.firstJitter)); err != nil {
			return r.finish(nil, nil, r.sleepReason(err), err)
		}
	}

	var err error // the latest attempt's error
	for {
		if aerr := r.admit(); aerr != nil {
			// The key's circuit is open, or it is held beyond what this
			// request can wait: fail fast, off the network.
			return r.finish(nil, err, admitReason(aerr), aerr)
		}
		var resp *http.Response
		resp, err = r.attempt()
		v := classify(req, resp, err, r.s.retryIf)
		wait := r.record(v, resp)
		if v.success() {
			return r.finish(resp, nil, ReasonNone, nil)
		}
		wake, reason := r.decide(v, wait)
		if reason != ReasonNone {
			// Decide before draining: the last response goes back untouched.
			return r.finish(resp, err, reason, nil)
		}
		if resp != nil {
			drain(resp.Body, r.drainTime())
			r.resp = nil
		}
		if serr := r.sleep(ctx, time.Until(wake)); serr != nil {
			return r.finish(nil, err, r.sleepReason(serr), serr)
		}
	}
}

// sleepReason names why a sleep ended early: the host's circuit opened
// (counted as a refusal), or the context ended.
func (r *retrier) sleepReason(err error) Reason {
	if errors.Is(err, ErrCircuitOpen) {
		r.t.stats.circuitRejected.Add(1)
		return ReasonCircuitOpen
	}
	return ReasonContextDone
}

// unwind runs when RoundTrip ends. After a return it finds nothing to do;
// after a panic (in a hook, a Policy, WithRetryIf, WithIdempotentIf or the
// next RoundTripper) it releases what the request holds, as if the request
// had ended: the circuit's admission (a half-open probe's place), the
// latest response, the next attempt's body. The panic goes on to the
// caller.
func (r *retrier) unwind() {
	if r.admitted {
		r.admitted = false
		r.lane.record(r.ticket, outcomeNone)
	}
	if r.slot {
		r.releaseSlot()
	}
	if r.resp != nil {
		r.resp.Body.Close()
	}
	closeRequestBody(r.queued)
}

// retrier holds the state of one call to RoundTrip. It lives on the stack.
type retrier struct {
	t        *Transport
	s        *settings
	req      *http.Request                 // the caller's request, never modified
	body     func() (io.ReadCloser, error) // a fresh body for each retry; nil: no body
	sent     *sentBody                     // the latest attempt's body, when tracked
	hooks    hookSet
	attempts int
	prev     time.Duration // the previous delay, for a policy without a lane
	key      hostKey       // the request's key, once keyOf has computed it
	keyed    bool
	lane     *lane  // the host's circuit and memory; nil when neither is needed
	ticket   ticket // the latest attempt's admission by the circuit
	// What the request holds and must release however it ends (see
	// unwind): resp, the latest response, until it is drained or handed
	// back; queued, the next attempt's request, until it is sent or its
	// body closed; admitted, the ticket, until its outcome is recorded.
	resp     *http.Response
	queued   *http.Request
	admitted bool
	slot     bool   // a place among the key's attempts in flight
	paceGen  uint64 // the key's pacer generation the latest attempt went at
	// tracked: the bodies come from a GetBody that may hand out one shared
	// reader again and again, so each attempt's body is a sentBody,
	// released before the next attempt takes its own.
	tracked bool
	// idempotent: the request may be sent more than once.
	idempotent bool
	// unreplayable: the body cannot be sent again (no GetBody and not
	// buffered, or larger than the buffer).
	unreplayable bool
}

// keyOf returns the request's key, computing it on first use: a request
// that needs no budget and no lane never needs it unless it fails.
func (r *retrier) keyOf() hostKey {
	if !r.keyed {
		r.key, r.keyed = r.t.requestKey(r.req), true
	}
	return r.key
}

// record tells the host what the latest attempt's outcome says about it,
// and counts a retryable response's Retry-After, whether or not a retry
// follows: a rising rate is the early sign that a tenant is rate-limiting
// the caller. It returns the wait the response asks for.
func (r *retrier) record(v verdict, resp *http.Response) serverWait {
	if r.admitted {
		r.admitted = false
		if tk := r.ticket; v.host == outcomeSuccess && !tk.probe && !tk.paced {
			r.lane.recordSuccess() // the hot path: no transition to report
		} else {
			o := v.host
			if o == outcomeFailure && resp != nil && resp.StatusCode == http.StatusTooManyRequests && slices.Contains(r.s.throttleOn, http.StatusTooManyRequests) {
				// "Too many": the host is up and asks for less, which the
				// adaptive rate gives it. Counted as a failure, a batch's
				// first burst, all answered 429 at once, would trip the
				// circuit of a host that serves every request it admits.
				// (A 503 added to the adaptive rate still counts: it may
				// be an outage.)
				o = outcomeNone
			}
			r.report(r.lane.record(tk, o))
			if tk.paced && v.host == outcomeSuccess {
				r.lane.paceSuccess(r.paceGen)
			}
		}
	}
	if !v.retry || resp == nil {
		return serverWait{}
	}
	return r.recordRetryable(resp)
}

// recordRetryable reads and counts what a retryable response asks for,
// holds the key for a long Retry-After, and slows a key that throttled
// without one.
func (r *retrier) recordRetryable(resp *http.Response) serverWait {
	now := time.Now()
	w := parseServerWait(resp.Header, now, r.s.maxRetryAfter)
	if r.lane == nil && len(r.s.throttleOn) > 0 {
		// The key's first hold or throttle, without a breaker.
		r.lane = r.t.lanes.lane(r.keyOf())
	}
	if w.seen {
		r.t.stats.raSeen.Add(1)
	}
	if w.clamped {
		r.t.stats.raClamped.Add(1)
	}
	if w.ok && w.asked >= holdThreshold && r.lane != nil {
		// A long wait asked for holds the whole key, never past the
		// clamp.
		r.report(r.lane.hold(now.Add(w.d)))
	}
	if !w.ok && r.lane != nil && slices.Contains(r.s.throttleOn, resp.StatusCode) {
		// "Too many" with no instant to come back: send slower.
		r.lane.throttle(now, r.paceGen)
	}
	return w
}

// decide tells whether the failed latest attempt is retried. Its checks
// read in the order they apply: is the outcome retryable; are attempts
// left; may the request be sent again; is the host's circuit still
// closed; does the context's deadline leave room for the delay; is the next
// body ready; does the budget hold a token. On a retry it returns when to
// send the next attempt, whose request it leaves in r.queued; otherwise why
// not, with nothing drained, so that the last response can go back
// untouched.
func (r *retrier) decide(v verdict, wait serverWait) (time.Time, Reason) {
	t, s, ctx := r.t, r.s, r.req.Context()
	switch {
	case !v.retry:
		return time.Time{}, v.why
	case ctx.Err() != nil:
		return time.Time{}, ReasonContextDone
	case r.attempts >= s.maxAttempts:
		return time.Time{}, ReasonAttemptsUsed
	case !r.idempotent && v.reach != notReached:
		// Sending it again could apply it twice; only a request that never
		// reached the server may go again whatever its method.
		return time.Time{}, ReasonNotIdempotent
	case r.unreplayable:
		return time.Time{}, ReasonBodyNotReplayable
	case r.lane != nil && r.lane.isOpen():
		// Open now, by this failure or by others while this attempt was in
		// flight: no retry would be let through, so none is scheduled and
		// no token spent.
		return time.Time{}, ReasonCircuitOpen
	}
	now := time.Now()
	d := wait.withSpread(s.retryAfterSpread)
	if !wait.ok {
		// A Policy must not return a negative delay; one that does waits
		// nothing, rather than a negative time in Stats.
		d = max(s.policy.Delay(r.attempts, r.getPrev()), 0)
	}
	if dl, ok := ctx.Deadline(); ok && !now.Add(d).Before(dl) {
		// Sleeping would outlive the caller's deadline: return now.
		return time.Time{}, ReasonDeadline
	}
	if reason := r.nextRequest(); reason != ReasonNone {
		return time.Time{}, reason
	}
	if t.budget != nil && !t.budget.withdraw(r.keyOf()) {
		// Last, so that a retry that is not made costs no token; and before
		// the sleep, which would wait for an attempt that will not be made.
		t.stats.budgetDenied.Add(1)
		return time.Time{}, ReasonBudgetExhausted
	}
	// Only a delay that will be waited becomes the host's previous delay.
	r.setPrev(d)
	t.stats.recordDelay(r.attempts, d)
	fire(r.hooks, (*Hooks).retryScheduled, RetryInfo{Request: r.req, Retry: r.attempts, Delay: d, RetryAfter: wait.ok, Clamped: wait.clamped})
	return now.Add(d), ReasonNone
}

// drainTime bounds the drain of a failed response: drainTimeout, and never
// past the caller's deadline.
func (r *retrier) drainTime() time.Duration {
	d := drainTimeout
	if dl, ok := r.req.Context().Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return d
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
	if r.queued != nil {
		// An attempt that will not be sent.
		closeRequestBody(r.queued)
		r.queued = nil
	}
	if resp != nil {
		resp.Request = r.req
	}
	if reason == ReasonNone {
		r.resp = nil
		return resp, nil
	}
	r.t.stats.giveUps[reason].Add(1)
	info := GiveUpInfo{Request: r.req, Attempts: r.attempts, Reason: reason}
	if resp == nil && (reason == ReasonCircuitOpen || reason == ReasonHeld) && r.t.localOpen && r.lane != nil {
		resp = localOpenResponse(r.req, r.keyOf(), r.lane.probeAt(), r.s.retryAfterSpread, reason)
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

// wrap builds the Error returned without a response.
func (r *retrier) wrap(attemptErr error, reason Reason, cause error) error {
	if cause == nil {
		switch reason {
		case ReasonCircuitOpen:
			cause = ErrCircuitOpen
		case ReasonBudgetExhausted:
			cause = ErrBudgetExhausted
		}
	}
	err := attemptErr
	switch {
	case err == nil:
		err = cause
	case cause != nil && !errors.Is(err, cause):
		err = fmt.Errorf("%w after %w", cause, err)
	}
	k := r.keyOf()
	e := &Error{Method: r.req.Method, Host: host(r.req), Key: k.String(), Attempts: r.attempts, Reason: reason, Err: err, key: k}
	if (reason == ReasonCircuitOpen || reason == ReasonHeld) && r.lane != nil {
		e.Until = r.lane.probeAt()
	}
	return e
}

// report passes a circuit's change of state to the hooks, after the lane's
// lock has been released.
func (r *retrier) report(tr transition) {
	if tr.from == tr.to {
		if tr.failing {
			r.lane.b.notify(r.lane, tr, true) // for the fleet only
		}
		return
	}
	info := CircuitChangeInfo{Key: r.keyOf().String(), From: tr.from, To: tr.to, Until: tr.until}
	if r.hooks.any() {
		fire(r.hooks, (*Hooks).circuitChange, info)
	}
	r.lane.b.notify(r.lane, tr, true)
}

// admit asks the key's circuit and hold to let the next attempt through.
// While the key is held it waits for the hold's end, plus a spread drawn
// like a Retry-After's so that the held requests do not return together,
// when the request's deadline allows and its waits for holds stay within
// its Retry-After clamp; then it asks again.
func (r *retrier) admit() error {
	if r.lane == nil {
		if len(r.s.throttleOn) == 0 || !r.t.lanes.flagged.Load() {
			return nil
		}
		// A key has been held or paced, perhaps while this request
		// waited its first-attempt jitter: it needs its key's lane.
		r.lane = r.t.lanes.lane(r.keyOf())
	}
	if w := r.lane.word.Load(); w&(1<<stateBits-1) == 0 {
		// The hot path, as lane.allow begins it: closed, not held, not
		// paced.
		r.ticket, r.admitted = ticket{gen: w >> stateBits}, true
		r.paceGen = 0
		if r.s.maxInFlight > 0 {
			return r.admitPaced(false)
		}
		return nil
	}
	return r.admitSlow()
}

// admitSlow is admit past its hot path.
func (r *retrier) admitSlow() error {
	ctx := r.req.Context()
	var waited time.Duration
	for {
		tk, trs, err := r.lane.allow()
		r.ticket, r.admitted = tk, err == nil
		r.report(trs[0])
		r.report(trs[1])
		held, ok := err.(*heldError)
		if !ok {
			if err != nil {
				r.t.stats.circuitRejected.Add(1)
				return err
			}
			return r.admitPaced(tk.paced)
		}
		r.t.stats.held.Add(1)
		wait := time.Until(held.until) + uniform(0, r.s.retryAfterSpread)
		dl, hasDeadline := ctx.Deadline()
		if waited+wait > r.s.maxRetryAfter+r.s.retryAfterSpread || hasDeadline && !time.Now().Add(wait).Before(dl) {
			return err
		}
		if serr := r.sleep(ctx, wait); serr != nil {
			return serr
		}
		waited += wait
	}
}

// admitPaced finishes an admission the circuit granted: it waits for the
// key's send rate, if the key is paced, and takes a place among its
// attempts in flight, if they are limited. If either fails, the circuit's
// admission is given back.
func (r *retrier) admitPaced(paced bool) error {
	ctx := r.req.Context()
	var err error
	if paced {
		r.paceGen, err = r.lane.waitPace(ctx)
	} else {
		r.paceGen = 0
	}
	if err == nil && r.s.maxInFlight > 0 {
		err = r.lane.slotsOf().acquire(ctx, r.s.maxInFlight, r.s.refuseInFlight)
		r.slot = err == nil
	}
	if err != nil {
		r.admitted = false
		r.report(r.lane.record(r.ticket, outcomeNone))
	}
	return err
}

// releaseSlot gives back the request's place among its key's attempts in
// flight, if it holds one.
func (r *retrier) releaseSlot() {
	if r.slot {
		r.slot = false
		r.lane.slotsOf().release()
	}
}

// admitReason names why admission failed.
func admitReason(err error) Reason {
	switch {
	case errors.Is(err, ErrHeld):
		return ReasonHeld
	case errors.Is(err, ErrCircuitOpen):
		return ReasonCircuitOpen
	case errors.Is(err, ErrConcurrencyLimit):
		return ReasonConcurrencyLimit
	case err == errPaced:
		return ReasonDeadline
	}
	return ReasonContextDone
}

// sleep waits before an attempt, ending early when the context ends or the
// host's circuit opens. Afterwards the request takes the host's lane afresh,
// in case the one it held was dropped from memory before it slept.
func (r *retrier) sleep(ctx context.Context, d time.Duration) error {
	if r.lane == nil {
		return sleep(ctx, d, nil)
	}
	err := sleep(ctx, d, r.lane.sleepStart())
	r.lane.sleepEnd()
	r.lane = r.t.lanes.lane(r.keyOf())
	return err
}

// getPrev returns the previous delay for a policy that grows from it: the
// host's, kept in its lane until a success, or this request's own without
// a lane.
func (r *retrier) getPrev() time.Duration {
	if r.lane != nil {
		return time.Duration(r.lane.prev.Load())
	}
	return r.prev
}

func (r *retrier) setPrev(d time.Duration) {
	if r.lane != nil {
		r.lane.prev.Store(int64(d))
		return
	}
	r.prev = d
}

func host(req *http.Request) string {
	if req.URL == nil {
		return ""
	}
	return req.URL.Host
}

// sleep waits d, or less if ctx ends first (it returns the context's error)
// or if opened is closed first (it returns ErrCircuitOpen). It starts no
// goroutine.
func sleep(ctx context.Context, d time.Duration, opened <-chan struct{}) error {
	select {
	case <-opened:
		return ErrCircuitOpen
	default:
	}
	if d <= 0 {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			// The deadline is now: its timer may not have fired yet, but an
			// attempt sent at it could not finish.
			return context.DeadlineExceeded
		}
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-opened:
		return ErrCircuitOpen
	}
}
