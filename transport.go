package retryhttp

import (
	"errors"
	"net/http"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/fleetlink"
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
	// localOpen: a request an open circuit refuses gets a local 503.
	localOpen bool
	// horizon: RetryAt answers ReasonNotRetryable for a key failing longer; 0: never.
	horizon time.Duration
	fleet   *fleet.Fleet // nil: this process alone
	// lanes holds what is kept per key: the breaker's own lanes, or,
	// without a breaker, lanes whose circuits never open, so that a
	// policy's memory of a key, its holds and its send rate do not depend
	// on whether a breaker is configured.
	lanes *perkey.Set
	stats stats
	whys  whyTable // why each response a failure ended on came back (Why)
}

// New returns a Transport that sends requests through next, or through
// cleanhttp.DefaultPooledTransport() when next is nil, adjusted by opts.
// It starts no goroutine.
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
	t.s.setExtras()
	t.s.slowCalls = t.breaker != nil && t.breaker.cfg.SlowAfter > 0
	if t.fleet != nil {
		t.joinFleet()
	}
	if t.breaker != nil {
		t.lanes = t.breaker.set
	} else {
		// No circuits, but the requests that the budget turned back wait
		// for the key all the same, and its tests are spaced as an open
		// circuit's probes would be by default.
		t.lanes = perkey.NewSet(perkey.Config{OpenFor: defaultBreakerOpenFor, OpenJitter: defaultBreakerOpenFor})
	}
	return t
}

// joinFleet makes the transport's fleet share its breaker and budget: each
// joins only the first fleet it is given (see fleetlink).
func (t *Transport) joinFleet() {
	var b fleetlink.Breaker
	if t.breaker != nil {
		b = (*fleetBreaker)(t.breaker)
	}
	var bu fleetlink.Budget
	if t.budget != nil {
		bu = (*fleetBudget)(t.budget)
	}
	fleetlink.Join(t.fleet, b, bu)
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
	if t.next == nil {
		// A Transport{} literal: say so rather than panic on a nil field.
		attempt.CloseRequestBody(req)
		return nil, errNotFromNew
	}
	// Begin: the request's settings and hooks, with what its context
	// carries; the budget's deposit; the key's lane, when something needs
	// it from the first attempt on (admit looks it up otherwise, once some
	// key has been held or paced); the first attempt's body.
	r := retrier{t: t, s: &t.s, req: req, hooks: hookSet{t: t.hooks}}
	defer r.unwind()
	if pr, _ := req.Context().Value(requestKey{}).(*perRequest); pr != nil {
		r.apply(pr)
	}
	if t.budget != nil {
		t.budget.deposit(r.keyOf())
	}
	if t.breaker != nil || r.s.stateful || r.s.inFlight.MaxInFlight > 0 {
		r.lane = t.lanes.Lane(r.keyOf())
	}
	r.idempotent = r.s.idempotentIf(req)
	r.body.First(req, r.s.maxAttempts, r.s.bodyBuffer)
	if err := r.firstJitter(); err != nil {
		return r.finish(nil, nil, reasonOf(err), err)
	}
	var err error // the latest attempt's error
	for {
		// Admit: the key lets the attempt go, or refuses it off the
		// network, or it waits for the key. A wait may have admitted it.
		if aerr := r.admit(); aerr != nil {
			return r.finish(r.waits.kept, err, reasonOf(aerr), aerr)
		}
		// Send it through the next RoundTripper.
		var resp *http.Response
		resp, err = r.send()
		// Learn: what the outcome is, and what the key learns from it.
		v := classify(req, resp, err, r.s.retryIf)
		if r.learn(&v, resp); v.success() {
			return r.finish(resp, nil, reasonNone, nil)
		}
		// Decide whether a retry follows, and when, before anything is
		// drained: a request that stops hands back its last response.
		p := r.plan(v)
		if p.then == stop {
			return r.finish(resp, err, p.why, nil)
		}
		// Rewind: the next attempt's body, then the budget's token.
		if p.then, p.why = r.rewind(p); p.then == stop {
			return r.finish(resp, err, p.why, nil)
		}
		// Wait: release the failed response's connection, then sleep
		// until the retry is due, or wait for the key.
		if kept, werr := r.wait(p, resp); werr != nil {
			return r.finish(kept, err, reasonOf(werr), werr)
		}
	}
}

// apply applies what a request's context carries for the transport: its
// hooks and its options, over a copy of the transport's settings.
func (r *retrier) apply(pr *perRequest) {
	r.hooks.r = pr.hooks
	if len(pr.opts) > 0 {
		r.s = pr.settings(r.s)
	}
}

// firstJitter spreads a bulk sender's first attempts over
// WithFirstAttemptJitter; cancellable like any sleep. Without it, the one
// check inlines.
func (r *retrier) firstJitter() error {
	if r.s.firstJitter <= 0 {
		return nil
	}
	return r.jitter()
}

func (r *retrier) jitter() error { return r.sleep(perkey.Uniform(0, r.s.firstJitter)) }

// retrier holds the state of one call to RoundTrip. It lives on the stack.
type retrier struct {
	t        *Transport
	s        *settings
	req      *http.Request // the caller's request, never modified
	hooks    hookSet
	attempts int
	// key is the request's key, once keyOf has computed it (ok).
	key struct {
		k  hostKey
		ok bool
	}
	lane *perkey.Lane // the key's lane; nil when nothing needs it
	// What the request holds and must release however it ends (see
	// unwind): adm, the latest attempt's admission, until its outcome is
	// recorded (ok); resp, the latest response, until it is drained or
	// handed back; body, the next attempt's request, until it is sent or
	// its body closed.
	adm struct {
		ticket perkey.Ticket
		ok     bool
	}
	resp *http.Response
	body attempt.Body // the request's body across its attempts
	// fail is what the latest failed attempt's response asked of the key
	// (see recordFailure).
	fail failure
	// waits is what the request's waits for its key have come to.
	waits waiting
	// idempotent: the request may be sent more than once.
	idempotent bool
	// clock is the slow-call rule's timing (see clock).
	clock clock
	// sampled: the request's responses are read for a quota even if its
	// key has never advertised one (see readsQuota).
	sampled bool
}

// unwind runs when RoundTrip ends. After a return it finds nothing to do;
// after a panic (in a hook, a Policy, WithRetryIf, WithIdempotentIf or the
// next RoundTripper) it releases what the request holds, as if the request
// had ended: the key's admission (a half-open probe's place, a place in
// flight), the latest response, the next attempt's body. The panic goes on
// to the caller.
func (r *retrier) unwind() {
	if r.adm.ok {
		r.adm.ok = false
		r.lane.Done(r.adm.ticket, perkey.Outcome{})
	}
	if r.resp != nil {
		r.resp.Body.Close()
	}
	r.body.Close()
}

// keyOf returns the request's key, computing it on first use: a request
// that needs no budget and no lane never needs it unless it fails.
func (r *retrier) keyOf() hostKey {
	if !r.key.ok {
		r.key.k, r.key.ok = r.t.requestKey(r.req), true
	}
	return r.key.k
}

// laneOf returns the key's lane, looking it up on first use.
func (r *retrier) laneOf() *perkey.Lane {
	if r.lane == nil {
		r.lane = r.t.lanes.Lane(r.keyOf())
	}
	return r.lane
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
	if reason == reasonNone {
		if r.waits.any {
			r.t.stats.wait.delivered.Add(1)
		}
		r.resp = nil
		return resp, nil
	}
	resp = r.body.HandBack(resp)
	r.t.stats.giveUps[reason].Add(1)
	if r.waits.any {
		r.t.stats.wait.gaveUp.Add(1)
	}
	info := Event{Request: r.req, Attempt: r.attempts, Reason: reason, Waited: r.waits.total}
	if resp == nil && (reason == ReasonCircuitOpen || reason == ReasonHeld) && r.t.localOpen && r.lane != nil {
		resp = localOpenResponse(r.req, r.keyOf(), r.probeAt(cause), r.s.retryAfterSpread, reason)
		r.resp = resp
		info.Local = true
		r.t.stats.localResponses.Add(1)
	}
	var err error
	if resp != nil {
		info.Status = resp.StatusCode
		r.t.whys.set(resp, reason)
	} else {
		err = r.wrap(attemptErr, reason, cause)
		info.Err = err
	}
	fire(r.hooks, (*Hooks).giveUp, info)
	r.resp = nil // handed back
	return resp, err
}

// probeAt returns when the request may next be tried: when its key may
// (see perkey.View.ProbeAt), or, if cause is a hold of its route alone,
// when that hold ends, whichever is later.
func (r *retrier) probeAt(cause error) time.Time {
	now := time.Now()
	at := r.lane.View(now).ProbeAt(now)
	var h *heldError
	if errors.As(cause, &h) && h.until.After(at) {
		at = h.until
	}
	return at
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
	return k
}
