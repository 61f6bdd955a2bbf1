package retryhttp

import (
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
)

// attempt sends one attempt and normalises what next returned: exactly one
// of the response and the error is non-nil. With hooks, it reports the
// attempt's start and end; then the attempt is timed for AttemptDone.
func (r *retrier) attempt() (*http.Response, error) {
	r.attempts++
	if r.attempts == 1 {
		n := r.t.stats.first.add()
		r.sampled = n%quotaSample == 1      // a quota's (quotapply.go)
		r.clock.sampled = n%timeSample == 1 // the slow-call rule's (slowcall.go)
	} else {
		r.t.stats.retries.Add(1)
	}
	hooked := r.hooks.any()
	var start time.Time
	if hooked {
		// Until it is sent (AttemptStart may panic) the body is the
		// transport's to close.
		fire(r.hooks, (*Hooks).attemptStart, AttemptStartInfo{Request: r.req, Attempt: r.attempts})
		start = time.Now()
	}
	areq := r.body.Take() // the next RoundTripper closes its body
	var resp *http.Response
	var err error
	if r.timed() { // for the slow-call rule (slowcall.go)
		resp, err = r.sendClocked(areq)
	} else {
		resp, err = attempt.Send(r.t.next, areq, r.s.attemptTimeout, r.req.Context())
	}
	var headers time.Duration
	if hooked {
		headers = time.Since(start)
	}
	if r.s.responseBuffer > 0 { // off: the one check on the success path
		var b attempt.Buffering
		resp, b, err = attempt.ReadResponse(resp, err, r.s.responseBuffer, r.idempotent && r.body.Replayable() && r.s.maxAttempts > 1)
		r.t.stats.countBuffering(b, r.req.Context())
	}
	r.resp = resp
	if hooked {
		done := AttemptDoneInfo{Request: r.req, Attempt: r.attempts, Err: err, Duration: headers}
		switch {
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
