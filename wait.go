package retryhttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// maxWaitLeft returns how much longer the request may wait for its key.
func (r *retrier) maxWaitLeft() time.Duration {
	if r.req.Context().Err() != nil {
		return 0
	}
	return r.s.maxWait - r.waited
}

// waitUntil returns when a wait beginning at now must end: when the
// request's wait allowance or its context's deadline runs out, whichever
// comes first.
func (r *retrier) waitUntil(now time.Time) time.Time {
	until := now.Add(r.maxWaitLeft())
	if dl, ok := r.req.Context().Deadline(); ok && dl.Before(until) {
		until = dl
	}
	return until
}

// waitFor waits for the key, through f (the lane's Wait or Queue), for
// the reason cause; it counts the wait, reports it to the hooks, and adds
// it to the request's total. On success the attempt is admitted.
func (r *retrier) waitFor(cause Reason, f func(ctx context.Context, lim perkey.Limits, until time.Time) (perkey.Ticket, perkey.Transitions, error)) (perkey.Transitions, error) {
	start := time.Now()
	r.t.stats.waits.Add(1)
	r.didWait = true
	tk, trs, err := f(r.req.Context(), r.limits(), r.waitUntil(start))
	d := time.Since(start)
	r.waited += d
	r.t.stats.waitNanos.Add(uint64(d))
	r.ticket, r.admitted = tk, err == nil
	if err == nil {
		r.t.stats.waitsReleased.Add(1)
	}
	fire(r.hooks, (*Hooks).waitDone, WaitInfo{Request: r.req, Key: r.keyOf().String(), Cause: cause, Waited: d, Released: err == nil})
	return trs, err
}

// queue waits in the key's queue after the budget refused the retry
// (cause ReasonBudgetExhausted), or because others already wait (cause
// ReasonNone).
func (r *retrier) queue(cause Reason) error {
	trs, err := r.waitFor(cause, r.laneOf().Queue)
	r.report(trs)
	return r.waitRefused(err, ErrBudgetExhausted)
}

// waitRefused turns the end of a wait that was not answered into the
// request's error: the refusal it waited out (cause), with the wait it
// took, and the context's deadline if that is what ended it. A caller who
// cancelled gets the context's own error, as for any other wait.
func (r *retrier) waitRefused(err, cause error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return &waitedError{cause: cause, waited: r.waited, err: err}
	case r.pastDeadline():
		// The wait's end was the deadline: its own timer, set for that
		// instant, fired before the context's.
		return &waitedError{cause: cause, waited: r.waited, err: context.DeadlineExceeded}
	}
	return &waitedError{cause: cause, waited: r.waited}
}

// keep holds on to the failed response while the request waits for its
// key, for the caller to get if the wait ends unanswered: its body is read
// into memory (at most attempt.DrainLimit, within drainTime) and its connection
// released, as a drain would. A larger or slower body is closed, and the
// caller would get an Error instead.
func (r *retrier) keep(resp *http.Response) {
	if resp == nil {
		return
	}
	r.resp = nil
	body, ok := attempt.ReadBounded(resp.Body, r.drainTime())
	if !ok {
		return
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	r.kept = resp
}

// pastDeadline reports whether the request's context has a deadline that
// has come.
func (r *retrier) pastDeadline() bool {
	dl, ok := r.req.Context().Deadline()
	return ok && !time.Now().Before(dl)
}
