package retryhttp

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// An attempt that ends because its caller's context ended says, on its
// own, nothing about the host: classify gives it no outcome. Yet a host
// that accepts connections and never answers leaves its callers nothing
// else to see, and with no attempt timeout (none by default) its circuit
// would never open: every caller would wait its whole deadline, with a
// connection held, however long the outage. So the transport times
// attempts of requests whose context can end, and counts one as a failure
// of its key when it was sent, got no response headers before the
// caller's context ended, and ran longer than the key's slow-call
// threshold (perkey.Lane.Slow): BreakerConfig.SlowAfter, and twice the
// key's answer time, which the timed successes feed.
//
// Two reads of the clock cost as much as the rest of a successful
// request's way through the transport, so the attempts timed are those
// of one request in timeSample, which keeps a key's answer time known,
// and every attempt to a key that is watched: one whose callers have
// given up on an attempt within the last perkey.WatchFor. A hung host is
// judged on every attempt from its callers' first give-ups on (and on the
// sampled ones among the first), while a key whose callers never give up
// costs a request nothing but a counter it already increments and one
// atomic load. A request whose context cannot end (the Background
// context) and whose attempts have no timeout is never timed: it never
// ends this way, and has no answer to time but its successes'; with an
// attempt timeout, its successes feed the answer time. Nor is one through
// a transport without a breaker, which has no circuit to tell. Timing
// takes no lock, allocation or goroutine.
//
// Only a deadline blames the host, and only for a request with no body:
// see blames.

// timeSample: one request in timeSample has its attempts timed whether
// or not its key is watched. A key's answer time rises at once to its
// slowest timed answer, so a sample finds a slow host's latency within a
// few requests; and 8 keeps the cost of the clock, averaged over the
// requests, within the noise of the success path.
const timeSample = 8

// clock is the slow-call rule's part of a request: whether the request
// is one of the sample whose attempts are timed even if its key is not
// watched, and the timing of its latest attempt, while it waits for
// judgeTime.
type clock struct {
	sampled bool
	timed   bool // call holds the latest attempt's timing
	call    perkey.Call
}

// timed reports whether the latest attempt of the request is to be timed:
// it goes through a breaker with the rule on (settings.slowCalls, set by
// New, so that the success path reads the settings it has at hand rather
// than follow pointers to the breaker's configuration), it is one of the
// sample or its key is watched, and its context can end or its attempts
// have a timeout. The context is asked last: its Done is a call through
// an interface.
func (r *retrier) timed() bool {
	return r.s.slowCalls && r.lane != nil && (r.clock.sampled || r.lane.Watched()) &&
		(r.s.attemptTimeout > 0 || r.req.Context().Done() != nil)
}

// sendClocked sends the attempt of a timed request, timing it from the
// call to the response headers or the error.
func (r *retrier) sendClocked(areq *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := attempt.Send(r.t.next, areq, r.s.attemptTimeout, r.req.Context())
	r.clock.timed = true
	r.clock.call = perkey.Call{Start: start, Took: time.Since(start), Answered: err == nil}
	return resp, err
}

// judgeTime applies what the latest attempt's time says to its verdict,
// once classify has given it: the key's lane judges a timed attempt
// (perkey.Lane.Clocked), and one that got no answer before its caller's
// deadline passed, after longer than the key's slow-call threshold,
// becomes a failure of the key if blames says so (still not retried: the
// caller has gone). Any attempt that its caller gave up on starts, or
// prolongs, its key's watch.
func (r *retrier) judgeTime(v *verdict) {
	switch {
	case r.clock.timed:
		r.judgeTimed(v) // the untimed success path stops at two checks, inlined
	case v.why == ReasonContextDone && r.s.slowCalls && r.lane != nil:
		r.lane.Watch(time.Now())
	}
}

func (r *retrier) judgeTimed(v *verdict) {
	r.clock.timed = false
	gaveUp := v.why == ReasonContextDone
	if r.lane.Clocked(r.clock.call, v.host, gaveUp, gaveUp && r.blames()) {
		v.host = perkey.Failure
		r.t.stats.slowAttempts.Add(1)
	}
}

// blames reports whether the end of the caller's context, with no answer,
// can say anything against the host: its deadline passed (a cancellation
// may be the caller's own business: a hedged request won elsewhere, a
// sibling in an errgroup failed), and the request had no body to send
// (the wait may have gone into the caller's own slow upload, which the
// host was still reading).
func (r *retrier) blames() bool {
	return (r.req.Body == nil || r.req.Body == http.NoBody) &&
		errors.Is(r.req.Context().Err(), context.DeadlineExceeded)
}
