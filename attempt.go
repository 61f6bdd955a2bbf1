package retryhttp

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// attempt sends one attempt and normalises what next returned: exactly one
// of the response and the error is non-nil. With hooks, it reports the
// attempt's start and end; then the attempt is timed for AttemptDone.
func (r *retrier) attempt() (*http.Response, error) {
	areq := r.queued
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
	r.queued = nil // the next RoundTripper closes its body
	var resp *http.Response
	var err error
	if r.timed() { // for the slow-call rule (slowcall.go)
		resp, err = r.sendClocked(areq)
	} else {
		resp, err = r.sendWithTimeout(areq)
	}
	var headers time.Duration
	if hooked {
		headers = time.Since(start)
	}
	resp, err = r.bufferResponse(resp, err)
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

func (r *retrier) sendWithTimeout(areq *http.Request) (*http.Response, error) {
	if r.s.attemptTimeout > 0 {
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
		if resp.Body != nil {
			resp.Body.Close()
		}
		return nil, err
	case err == nil && resp == nil:
		return nil, errNilResponse
	case resp != nil && resp.Body == nil:
		// A nil Body is an empty one, as http.Client treats it (Go issue
		// 38095: RoundTrippers written for tests return it).
		resp.Body = http.NoBody
	}
	return resp, err
}

var errNilResponse = errors.New("retryhttp: next RoundTripper returned a nil response and a nil error")

// attemptWithTimeout gives the attempt its own deadline for the response
// headers. The attempt's context stays alive until the response body is
// closed, so a slow body read after a timely response is not cut off.
func (r *retrier) attemptWithTimeout(areq *http.Request) (*http.Response, error) {
	d := r.s.attemptTimeout
	ctx, cancel := context.WithCancel(areq.Context())
	timer := time.AfterFunc(d, cancel)
	resp, err := r.send(areq.WithContext(ctx))
	fired := !timer.Stop()
	if err == nil && fired {
		// The timer ended the attempt just as its response arrived: the
		// response's context is cancelled, so its body cannot be read. It
		// is a timed-out attempt, never a success.
		resp.Body.Close()
		resp, err = nil, context.Canceled
	}
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
