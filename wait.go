package retryhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
)

// defaultMaxWait is the longest a request waits, in all, for its key to
// recover, by default: the default policy's cap. A wait that long is still
// within a delivery's usefulness (an event delivered a minute late is
// still news; ten minutes late it is a log entry), and a request that
// waited its whole retry sequence would have spent about as long at its
// cap; the caller's own deadline bounds it first when shorter.
const defaultMaxWait = defaultCap

// WithMaxWait sets the longest a request waits, in all, for its key to
// recover, where the retry budget, an open circuit or an isolated key
// would otherwise refuse it. The default is 30 s; the request's context
// bounds the wait too. A waiting request holds no connection and no
// goroutine of the transport's; the key lets it go, oldest first, only on
// evidence that it is back (a probe or another request answered), at a
// rate that starts low and grows while the key keeps answering. The wait
// is not an attempt: a request still sends at most WithMaxAttempts times.
// When the wait ends unanswered, the caller gets what it would have got
// without waiting (the last response, or an Error with the reason), and
// GiveUpInfo and Error say how long it waited.
//
// 0 refuses at once, as a dispatcher with its own queue wants: it turns
// the request back and asks RetryAt when to send it again.
func WithMaxWait(d time.Duration) RequestOption {
	nonNegative("WithMaxWait", d)
	return newRequestOption("WithMaxWait", func(s *settings) { s.maxWait = d })
}

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

// waitReason names why a request whose wait for its key failed stopped:
// the caller's own cancellation, or the refusal it waited out.
func waitReason(err error, refusal Reason) Reason {
	if errors.Is(err, context.Canceled) {
		return ReasonContextDone
	}
	return refusal
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

// waitedError is the cause of a request that waited for its key and was
// not let go: it satisfies errors.Is for the refusal it waited out
// (ErrCircuitOpen, ErrBudgetExhausted) and for what ended the wait (the
// context's deadline), and says how long it waited.
type waitedError struct {
	cause  error
	waited time.Duration
	err    error // what ended the wait early; nil: the wait allowance
}

func (e *waitedError) Error() string {
	msg := fmt.Sprintf("%v after waiting %v for the key", e.cause, e.waited.Round(time.Millisecond))
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

func (e *waitedError) Unwrap() []error {
	if e.err == nil {
		return []error{e.cause}
	}
	return []error{e.cause, e.err}
}

// keep holds on to the failed response while the request waits for its
// key, for the caller to get if the wait ends unanswered: its body is read
// into memory (at most drainLimit, within drainTime) and its connection
// released, as a drain would. A larger or slower body is closed, and the
// caller would get an Error instead.
func (r *retrier) keep(resp *http.Response) {
	if resp == nil {
		return
	}
	r.resp = nil
	body, ok := readBounded(resp.Body, r.drainTime())
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
