package retryhttp

import (
	"context"
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// send sends the next attempt through the next RoundTripper and
// normalises what it returned (attempt.Send): exactly one of the response
// and the error is non-nil. It times the attempt for the slow-call rule
// when the rule asks (see clock), reads a successful response's body with
// WithResponseBuffer, and, with hooks, reports the attempt's start and
// end, timed for AttemptDone.
func (r *retrier) send() (*http.Response, error) {
	r.attempts++
	if r.attempts == 1 {
		n := r.t.stats.first.add()
		r.sampled = n%quotaSample == 1      // a quota's (see readsQuota)
		r.clock.sampled = n%timeSample == 1 // the slow-call rule's (see clock)
	} else {
		r.t.stats.retries.Add(1)
	}
	hooked := r.hooks.any()
	var start time.Time
	if hooked {
		// Until it is sent (AttemptStart may panic) the body is the
		// transport's to close.
		fire(r.hooks, (*Hooks).attemptStart, Event{Request: r.req, Attempt: r.attempts})
		start = time.Now()
	}
	areq := r.body.Take() // the next RoundTripper closes its body
	var resp *http.Response
	var err error
	var headers time.Duration
	var lost bool // the hedge won: this copy was cancelled unanswered
	if !r.s.extras && !r.timed() {
		// The success path: one check besides the slow-call rule's.
		resp, err = attempt.Send(r.t.next, areq, r.s.attemptTimeout, r.req.Context())
		if hooked {
			headers = time.Since(start)
		}
	} else {
		resp, headers, lost, err = r.sendExtra(areq, hooked, start)
	}
	r.resp = resp
	if hooked {
		done := Event{Request: r.req, Attempt: r.attempts, Err: err, Duration: headers}
		switch {
		case lost:
			// Its hedge answered, and AttemptDone told it with Hedge set.
			done.Err = context.Canceled
		case resp != nil:
			done.Status = resp.StatusCode
		case err != nil:
			// A body cut while it was buffered: the error came after the
			// headers.
			done.Duration = time.Since(start)
		}
		fire(r.hooks, (*Hooks).attemptDone, done)
	}
	return resp, err
}

// sendExtra is send for an attempt that needs more than a plain send:
// a hedge (WithHedging), the slow-call rule's clock, the response buffer
// (WithResponseBuffer). headers is the time to the response headers or
// the error, when hooked; lost, that the attempt's hedge won while it had
// not answered.
func (r *retrier) sendExtra(areq *http.Request, hooked bool, start time.Time) (resp *http.Response, headers time.Duration, lost bool, err error) {
	if r.hedgeable() {
		resp, lost, err = r.sendHedged(areq)
	} else {
		resp, err = r.sendOne(areq)
	}
	if hooked {
		headers = time.Since(start)
	}
	if r.s.responseBuffer > 0 {
		var b attempt.Buffering
		resp, b, err = attempt.ReadResponse(resp, err, r.s.responseBuffer, r.idempotent && r.body.Replayable() && r.s.maxAttempts > 1)
		r.t.stats.countBuffering(b, r.req.Context())
	}
	return resp, headers, lost, err
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

// sendOne sends one copy of the attempt, timed for the slow-call rule
// when the rule asks (see timed).
func (r *retrier) sendOne(areq *http.Request) (*http.Response, error) {
	if !r.timed() {
		return attempt.Send(r.t.next, areq, r.s.attemptTimeout, r.req.Context())
	}
	start := time.Now()
	resp, err := attempt.Send(r.t.next, areq, r.s.attemptTimeout, r.req.Context())
	r.clocked(start, err == nil)
	return resp, err
}

// clocked records the timing of the latest attempt, sent at start, for
// the slow-call rule: from the call to its response headers or error.
func (r *retrier) clocked(start time.Time, answered bool) {
	r.clock.timed = true
	r.clock.call = perkey.Call{Start: start, Took: time.Since(start), Answered: answered}
}

// timeSample: one request in timeSample has its attempts timed whether
// or not its key is watched. A key's answer time rises at once to its
// slowest timed answer, so a sample finds a slow host's latency within a
// few requests; and 8 keeps the cost of the clock, averaged over the
// requests, within the noise of the success path.
const timeSample = 8
