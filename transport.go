// Package retryhttp provides an http.RoundTripper that retries the requests
// it safely can, spreads the retries so that many clients that failed
// together do not come back together, and stops retrying when retrying would
// only deepen an outage.
//
// Use it as an http.Client's Transport, or under any SDK that accepts an
// *http.Client:
//
//	client := &http.Client{Transport: retryhttp.New(nil)}
//
// # Which RoundTripper rule it bends
//
// The http.RoundTripper contract says a RoundTripper should not interpret
// the response. This one looks at the status code, because a 503 or a 429 is
// the commonest failure a retry can mend. It keeps the rest of the contract:
// it never modifies the caller's request (each retry sends a clone with a
// fresh body), closes the request body on every path, returns a response or
// an error but never both, and never invents a response: when retries end on
// a status code, the caller gets that last real response, body unread, and a
// nil error.
//
// # What it retries
//
// Methods GET, HEAD, OPTIONS, TRACE, PUT and DELETE, and POST or PATCH only
// when they carry a non-empty Idempotency-Key header; a body must be
// replayable (GetBody, http.NoBody, or buffered by WithBodyBuffer). Outcomes:
// transport errors other than the request's own context ending, certificate
// errors and malformed URLs, and the statuses 408, 429, 500, 502, 503 and
// 504. Everything else is returned at once.
//
// Before each retry it checks, in this order: are attempts left, does the
// context's deadline leave room for the delay, does the retry budget hold a
// token. Only then does it sleep, and the sleep ends as soon as the request's
// context ends or the host's circuit opens.
package retryhttp

import (
	"context"
	"errors"
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
// with New; the zero value is not usable. It is safe for concurrent use.
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
	ctx := req.Context()
	r := retrier{t: t, req: req, first: req, key: keyOf(req.URL)}
	if t.budget != nil {
		t.budget.deposit(r.key)
	}
	if t.breaker != nil {
		r.lane = t.breaker.lane(r.key)
	}
	r.replayable()

	if t.firstJitter > 0 {
		// Spread a bulk sender's first attempts; cancellable like any sleep.
		if err := sleep(ctx, uniform(0, t.firstJitter), nil); err != nil {
			closeRequestBody(r.first)
			return nil, r.fail(ReasonContextDone, err)
		}
	}

	areq := r.first
	for {
		if err := r.admit(); err != nil {
			// The host's circuit is open: fail fast, off the network.
			closeRequestBody(areq)
			return nil, r.fail(ReasonCircuitOpen, err)
		}
		resp, err := r.attempt(areq)
		reason := r.stopReason(resp, err)
		var delay time.Duration
		if reason == ReasonNone {
			delay, reason = r.delay(resp)
		}
		if reason == ReasonNone {
			areq, reason = r.nextRequest()
		}
		if reason != ReasonNone {
			// Decide before draining: the last response goes back untouched.
			if err != nil {
				return nil, r.fail(reason, err)
			}
			return resp, nil
		}
		if resp != nil {
			drain(resp.Body)
		}
		if err := sleep(ctx, delay, r.opened()); err != nil {
			closeRequestBody(areq)
			reason := ReasonContextDone
			if errors.Is(err, ErrCircuitOpen) {
				reason = ReasonCircuitOpen
			}
			return nil, r.fail(reason, err)
		}
	}
}

// retrier holds the state of one call to RoundTrip. It lives on the stack.
type retrier struct {
	t     *Transport
	req   *http.Request                 // the caller's request, never modified
	first *http.Request                 // what the first attempt sends
	body  func() (io.ReadCloser, error) // a fresh body for each retry; nil: no body
	// stop is why no retry is possible before anything is sent (not
	// idempotent, body not replayable), or ReasonNone.
	stop     Reason
	attempts int
	prev     time.Duration // the previous delay, for DecorrelatedJitter without a lane
	key      hostKey
	lane     *lane  // the host's circuit and memory; nil without a Breaker
	ticket   ticket // the latest attempt's admission by the circuit
}

// replayable decides whether the request may be sent more than once and, if
// so, how each retry gets a fresh body. The caller's request is sent as it is
// by the first attempt unless its body had to be buffered.
func (r *retrier) replayable() {
	t, req := r.t, r.req
	switch {
	case t.maxAttempts <= 1:
		r.stop = ReasonAttemptsUsed
	case !t.idempotentIf(req):
		r.stop = ReasonNotIdempotent
	case req.Body == nil || req.Body == http.NoBody:
		// Nothing to replay.
	case req.GetBody != nil:
		r.body = req.GetBody
	case t.bodyBuffer > 0:
		r.bufferBody()
	default:
		r.stop = ReasonBodyNotReplayable
	}
}

// bufferBody reads up to bodyBuffer bytes of a body that cannot be replayed.
// A body that fits is kept and replayed from memory; a larger one is sent
// once, whole: the bytes read so far, then the rest of the caller's body.
func (r *retrier) bufferBody() {
	req := r.req
	buf, err := io.ReadAll(io.LimitReader(req.Body, r.t.bodyBuffer+1))
	if err != nil || int64(len(buf)) > r.t.bodyBuffer {
		// Too large, or the read failed: stream what was read and the rest
		// once, so the next RoundTripper sees the same body (and the same
		// read error) that it would have seen without this transport.
		first := req.Clone(req.Context())
		first.Body = &prefixedBody{Reader: io.MultiReader(bytesReader(buf), errAfter{req.Body, err}), Closer: req.Body}
		r.first, r.stop = first, ReasonBodyNotReplayable
		return
	}
	req.Body.Close()
	r.body = func() (io.ReadCloser, error) { return io.NopCloser(bytesReader(buf)), nil }
	r.first, _ = r.clone()
}

// clone returns a copy of the caller's request with a fresh body.
func (r *retrier) clone() (*http.Request, error) {
	c := r.req.Clone(r.req.Context())
	if r.body != nil {
		b, err := r.body()
		if err != nil {
			return nil, err
		}
		c.Body, c.GetBody = b, r.body
	}
	return c, nil
}

// attempt sends one attempt and normalises what next returned: exactly one
// of the response and the error is non-nil.
func (r *retrier) attempt(areq *http.Request) (*http.Response, error) {
	r.attempts++
	if r.t.attemptTimeout > 0 {
		return r.attemptWithTimeout(areq)
	}
	return r.send(areq)
}

func (r *retrier) send(areq *http.Request) (*http.Response, error) {
	resp, err := r.t.next.RoundTrip(areq)
	switch {
	case err != nil && resp != nil:
		// A RoundTripper must not return both; keep the error, as
		// http.Client does, and release the response.
		resp.Body.Close()
		return nil, err
	case err == nil && resp == nil:
		return nil, errNilResponse
	}
	return resp, nil
}

var errNilResponse = errors.New("retryhttp: next RoundTripper returned a nil response and a nil error")

// attemptWithTimeout gives the attempt its own deadline for the response
// headers. The attempt's context stays alive until the response body is
// closed, so a slow body read after a timely response is not cut off.
func (r *retrier) attemptWithTimeout(areq *http.Request) (*http.Response, error) {
	d := r.t.attemptTimeout
	ctx, cancel := context.WithCancel(areq.Context())
	timer := time.AfterFunc(d, cancel)
	resp, err := r.send(areq.WithContext(ctx))
	fired := !timer.Stop()
	if err != nil {
		cancel()
		if fired && r.req.Context().Err() == nil {
			err = &attemptTimeoutError{d: d, err: err}
		}
		return nil, err
	}
	resp.Body = cancelOnClose(resp.Body, cancel)
	return resp, nil
}

// stopReason tells whether the outcome of the latest attempt ends the
// request, and tells the host's circuit what the outcome was. It runs
// before anything is drained.
func (r *retrier) stopReason(resp *http.Response, err error) Reason {
	t := r.t
	reason, o := ReasonNone, outcomeFailure
	switch {
	case r.req.Context().Err() != nil:
		// The caller's context ended: its own error is never retried, and
		// says nothing about the host.
		reason, o = ReasonContextDone, outcomeNone
		if resp != nil {
			reason = ReasonNotRetryable
		}
	case err != nil && malformedURL(r.req):
		// The same URL will fail the same way.
		reason, o = ReasonNotRetryable, outcomeNone
	case !t.retryIf(resp, err):
		// The host answered (a response is a success to the circuit), or
		// failed in a way no retry mends (which tells nothing of the host).
		reason, o = ReasonNotRetryable, outcomeSuccess
		if resp == nil {
			o = outcomeNone
		}
	case r.stop != ReasonNone:
		reason = r.stop
	case r.attempts >= t.maxAttempts:
		reason = ReasonAttemptsUsed
	}
	if r.lane != nil {
		r.lane.record(r.ticket, o)
	}
	return reason
}

// delay draws the wait before the next attempt and checks, in the order of
// the package documentation, that the deadline leaves room for it and that
// the budget allows it.
func (r *retrier) delay(resp *http.Response) (time.Duration, Reason) {
	t := r.t
	now := time.Now()
	d, fromHeader := time.Duration(0), false
	if resp != nil {
		d, fromHeader, _ = retryAfterDelay(resp.Header, now, t.maxRetryAfter, t.retryAfterSpread)
	}
	if !fromHeader {
		d = t.policy.Delay(r.attempts, r.getPrev())
	}
	r.setPrev(d)
	if dl, ok := r.req.Context().Deadline(); ok && !now.Add(d).Before(dl) {
		// Sleeping would outlive the caller's deadline: return now.
		return d, ReasonDeadline
	}
	if t.budget != nil && !t.budget.withdraw(r.key) {
		// No token: skip the sleep for an attempt that will not be made.
		return d, ReasonBudgetExhausted
	}
	return d, ReasonNone
}

// admit asks the host's circuit to let the next attempt through.
func (r *retrier) admit() error {
	if r.lane == nil {
		return nil
	}
	tk, _, err := r.lane.allow()
	r.ticket = tk
	return err
}

// opened returns the channel closed when the host's circuit opens, or nil.
func (r *retrier) opened() <-chan struct{} {
	if r.lane == nil {
		return nil
	}
	return r.lane.openedChan()
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

// nextRequest prepares the next attempt's request before anything is
// drained, so that a failure to get a fresh body still returns the last
// response untouched.
func (r *retrier) nextRequest() (*http.Request, Reason) {
	c, err := r.clone()
	if err != nil {
		return nil, ReasonBodyNotReplayable
	}
	return c, ReasonNone
}

// malformedURL reports a URL that no transport can send to.
func malformedURL(req *http.Request) bool {
	return req.URL == nil || req.URL.Scheme == "" || req.URL.Host == ""
}

// fail wraps the cause in an Error.
func (r *retrier) fail(reason Reason, err error) error {
	return &Error{Method: r.req.Method, Host: host(r.req), Attempts: r.attempts, Reason: reason, Err: err}
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

// drain reads at most drainLimit bytes of a discarded body, so its
// connection can be reused, then closes it.
func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, drainLimit)
	_ = body.Close()
}

// closeRequestBody closes the body of a request that will not be sent.
func closeRequestBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}
