package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// DefaultMaxAttempts is the default number of attempts, the first included:
// the seed's four.
const DefaultMaxAttempts = 4

// drainLimit bounds how much of a discarded response body is read so that
// its connection can be reused; a larger body is closed unread past it.
const drainLimit = 64 << 10

// Transport is an http.RoundTripper that retries through next. Create it
// with New; a zero Transport sends nothing and returns an error saying so.
// It is safe for concurrent use.
type Transport struct {
	next             http.RoundTripper
	policy           Policy
	maxAttempts      int
	firstJitter      time.Duration
	maxRetryAfter    time.Duration
	retryAfterSpread time.Duration
	retryIf          func(*http.Response, error) bool
	idempotentIf     func(*http.Request) bool
	bodyBuffer       int64
	attemptTimeout   time.Duration
	hooks            *Hooks // nil: none
	stats            stats
	budget           *Budget  // nil: no budget
	breaker          *Breaker // nil: no circuits
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
		next:             next,
		policy:           FullJitter{},
		maxAttempts:      DefaultMaxAttempts,
		maxRetryAfter:    DefaultMaxRetryAfter,
		retryAfterSpread: DefaultRetryAfterSpread,
		retryIf:          DefaultRetryIf,
		idempotentIf:     DefaultIdempotentIf,
		budget:           NewBudget(BudgetConfig{}),
		breaker:          NewBreaker(BreakerConfig{}),
	}
	for _, o := range opts {
		o(t)
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
	r := retrier{t: t, req: req, first: req, key: keyOf(req.URL), hooks: hooksOf(t, ctx)}
	if t.budget != nil {
		t.budget.deposit(r.key)
	}
	if t.breaker != nil {
		r.lane = t.breaker.lane(r.key)
	}
	r.replayable()

	if t.firstJitter > 0 {
		// Spread a bulk sender's first attempts; cancellable like any sleep.
		if err := r.sleep(ctx, uniform(0, t.firstJitter)); err != nil {
			closeRequestBody(r.first)
			return r.finish(nil, nil, ReasonContextDone, err)
		}
	}

	areq := r.first
	var err error // the latest attempt's error
	for {
		if aerr := r.admit(); aerr != nil {
			// The host's circuit is open: fail fast, off the network.
			closeRequestBody(areq)
			return r.finish(nil, err, ReasonCircuitOpen, aerr)
		}
		var resp *http.Response
		resp, err = r.attempt(areq)
		stop, reason := r.stopReason(resp, err)
		var delay time.Duration
		if !stop {
			delay, reason = r.delay(resp)
			if reason == ReasonNone {
				areq, reason = r.nextRequest()
			}
			if reason == ReasonNone {
				reason = r.schedule(areq, delay)
			}
			stop = reason != ReasonNone
		}
		if stop {
			// Decide before draining: the last response goes back untouched.
			return r.finish(resp, err, reason, nil)
		}
		if resp != nil {
			drain(resp.Body)
		}
		if serr := r.sleep(ctx, delay); serr != nil {
			closeRequestBody(areq)
			reason := ReasonContextDone
			if errors.Is(serr, ErrCircuitOpen) {
				reason = ReasonCircuitOpen
				t.stats.circuitRejected.Add(1)
			}
			return r.finish(nil, err, reason, serr)
		}
	}
}

// retrier holds the state of one call to RoundTrip. It lives on the stack.
type retrier struct {
	t     *Transport
	req   *http.Request                 // the caller's request, never modified
	first *http.Request                 // what the first attempt sends
	body  func() (io.ReadCloser, error) // a fresh body for each retry; nil: no body
	hooks hookSet
	// stop is why no retry is possible before anything is sent (not
	// idempotent, body not replayable), or ReasonNone.
	stop     Reason
	attempts int
	prev     time.Duration // the previous delay, for DecorrelatedJitter without a lane
	key      hostKey
	lane     *lane  // the host's circuit and memory; nil without a Breaker
	ticket   ticket // the latest attempt's admission by the circuit
	// fromHeader and clamped describe the latest drawn delay: a Retry-After
	// set it, and was clamped.
	fromHeader, clamped bool
}

// stopReason tells whether the outcome of the latest attempt ends the
// request, and why, and tells the host's circuit what the outcome was. It
// runs before anything is drained. A request that ends on a response that is
// not a failure stops with ReasonNone.
func (r *retrier) stopReason(resp *http.Response, err error) (bool, Reason) {
	t := r.t
	ctxDone := r.req.Context().Err() != nil
	var retryable bool
	o := outcomeNone
	switch {
	case err != nil && ctxDone:
		// The caller's context ended: its own error is never retried, and
		// says nothing about the host.
	case err != nil && malformedURL(r.req):
		// The same URL will fail the same way.
	default:
		retryable = t.retryIf(resp, err)
		switch {
		case retryable:
			o = outcomeFailure
		case resp != nil:
			// The host answered: a success to the circuit.
			o = outcomeSuccess
		}
		// A transport error that no retry mends (a certificate error)
		// tells nothing of the host's health.
	}
	if retryable && resp != nil {
		r.countRetryAfter(resp)
	}
	opened := false
	if r.lane != nil {
		r.report(r.lane.record(r.ticket, o))
		// Open now, by this failure or by others while this attempt was
		// in flight: no retry would be let through.
		opened = r.lane.isOpen()
	}
	switch {
	case !retryable && err == nil:
		return true, ReasonNone
	case !retryable && ctxDone:
		return true, ReasonContextDone
	case !retryable:
		return true, ReasonNotRetryable
	case ctxDone:
		return true, ReasonContextDone
	case r.stop != ReasonNone:
		return true, r.stop
	case r.attempts >= t.maxAttempts:
		return true, ReasonAttemptsUsed
	case opened:
		// The host's circuit is open: no retry would be let through, so
		// none is scheduled, no token spent, and the response goes back.
		return true, ReasonCircuitOpen
	}
	return false, ReasonNone
}

// countRetryAfter counts a retryable response's Retry-After, and whether it
// asks for more than the clamp, whether or not a retry follows: a rising
// rate is the early sign that a tenant is rate-limiting the caller.
func (r *retrier) countRetryAfter(resp *http.Response) {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return
	}
	r.t.stats.raSeen.Add(1)
	if d, ok := parseRetryAfter(v, time.Now()); ok && d > r.t.maxRetryAfter {
		r.t.stats.raClamped.Add(1)
	}
}

// delay draws the wait before the next attempt: the server's Retry-After
// if it gave a usable one, else the policy's. It then checks, first of the
// checks before a retry, that the caller's deadline leaves room for it.
func (r *retrier) delay(resp *http.Response) (time.Duration, Reason) {
	t := r.t
	now := time.Now()
	var d time.Duration
	r.fromHeader, r.clamped = false, false
	if resp != nil && resp.Header.Get("Retry-After") != "" {
		d, r.fromHeader, r.clamped = retryAfterDelay(resp.Header, now, t.maxRetryAfter, t.retryAfterSpread)
	}
	if !r.fromHeader {
		d = t.policy.Delay(r.attempts, r.getPrev())
	}
	if dl, ok := r.req.Context().Deadline(); ok && !now.Add(d).Before(dl) {
		// Sleeping would outlive the caller's deadline: return now.
		return d, ReasonDeadline
	}
	return d, ReasonNone
}

// schedule takes the retry's budget token, last of the checks so that a
// retry that is not made costs none, and records the retry. areq, the
// prepared next attempt, is released if the budget refuses.
func (r *retrier) schedule(areq *http.Request, d time.Duration) Reason {
	t := r.t
	if t.budget != nil && !t.budget.withdraw(r.key) {
		// No token: skip the sleep for an attempt that will not be made.
		t.stats.budgetDenied.Add(1)
		closeRequestBody(areq)
		return ReasonBudgetExhausted
	}
	// Only a delay that will be waited becomes the host's previous delay.
	r.setPrev(d)
	t.stats.recordDelay(r.attempts, d)
	fire(r.hooks, (*Hooks).retryScheduled, RetryInfo{Request: r.req, Retry: r.attempts, Delay: d, RetryAfter: r.fromHeader, Clamped: r.clamped})
	return ReasonNone
}

// finish ends the request. resp is the last response if it is still
// intact, and goes back to the caller as it is; otherwise the caller gets
// an Error whose cause is the reason's own error (the context's,
// ErrCircuitOpen, ErrBudgetExhausted), with the last attempt's error beside
// it so that errors.Is and errors.As reach both. A request that stops on a
// failure, or with an error, gives up: that is counted and reported.
func (r *retrier) finish(resp *http.Response, attemptErr error, reason Reason, cause error) (*http.Response, error) {
	if r.attempts == 0 {
		r.t.stats.notSent.Add(1)
	}
	if reason == ReasonNone {
		return resp, nil
	}
	r.t.stats.giveUps[reason].Add(1)
	info := GiveUpInfo{Request: r.req, Attempts: r.attempts, Reason: reason}
	var err error
	if resp != nil {
		info.Status = resp.StatusCode
	} else {
		err = r.wrap(attemptErr, reason, cause)
		info.Err = err
	}
	fire(r.hooks, (*Hooks).giveUp, info)
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
	return &Error{Method: r.req.Method, Host: host(r.req), Attempts: r.attempts, Reason: reason, Err: err}
}

// report passes a circuit's change of state to the hooks, after the lane's
// lock has been released.
func (r *retrier) report(tr transition) {
	if tr.from == tr.to || !r.hooks.any() {
		return
	}
	fire(r.hooks, (*Hooks).circuitChange, CircuitChangeInfo{Host: r.key.String(), From: tr.from, To: tr.to})
}

// admit asks the host's circuit to let the next attempt through.
func (r *retrier) admit() error {
	if r.lane == nil {
		return nil
	}
	tk, tr, err := r.lane.allow()
	r.ticket = tk
	r.report(tr)
	if err != nil {
		r.t.stats.circuitRejected.Add(1)
	}
	return err
}

// sleep waits before an attempt, ending early when the context ends or the
// host's circuit opens. Afterwards the request takes the host's lane afresh
// from the breaker, in case the one it held was dropped from memory before
// it slept.
func (r *retrier) sleep(ctx context.Context, d time.Duration) error {
	if r.lane == nil {
		return sleep(ctx, d, nil)
	}
	err := sleep(ctx, d, r.lane.sleepStart())
	r.lane.sleepEnd()
	r.lane = r.t.breaker.lane(r.key)
	return err
}

// getPrev returns the previous delay for DecorrelatedJitter: the host's,
// kept in its lane until a success, or this request's own without a lane.
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

// malformedURL reports a URL that no transport can send to.
func malformedURL(req *http.Request) bool {
	return req.URL == nil || req.URL.Scheme == "" || req.URL.Host == ""
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
