package retryhttp

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/header"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// queue waits in the key's queue after the budget refused the retry
// (cause ReasonBudgetExhausted), or because others already wait (cause
// reasonNone).
func (r *retrier) queue(cause Reason) error {
	trs, err := r.waitFor(cause, r.laneOf().Queue)
	r.report(trs)
	return r.waitRefused(err, ErrBudgetExhausted)
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
	r.waits.kept = resp
}

// RetryAt tells a caller that got resp or err back the earliest instant
// worth sending the request again, and why: the latest of when the server
// asked (ReasonHeld), the key's circuit may probe (ReasonCircuitOpen) and
// the budget holds a token (ReasonBudgetExhausted), spread, and at most
// the failing horizon (or a day) ahead. For an answer retrying cannot
// change (a status of 400 or above WithRetryIf does not retry, a key past
// WithFailingHorizon): the zero time and ReasonNotRetryable, never send it
// again; for an isolated key, the zero time and ReasonCircuitOpen; for a
// success or what nothing explains, the zero time and Reason. It reads the
// transport's state when called.
func (t *Transport) RetryAt(resp *http.Response, err error) (time.Time, Reason) {
	at, why := t.retryAt(resp, err)
	if limit := t.retryAtLimit(); !at.IsZero() && time.Until(at) > limit {
		at = time.Now().Add(limit)
	}
	return at, why
}

// maxRetryAt bounds how far ahead RetryAt sends a request without a
// failing horizon: a day, about the span of the retry schedules webhook
// senders keep for one delivery (Stripe's retries run for three days,
// Standard Webhooks' suggested schedule for a day and a half).
const maxRetryAt = 24 * time.Hour

// retryAtLimit returns how far ahead RetryAt's instant may be: the failing
// horizon, or maxRetryAt without one.
func (t *Transport) retryAtLimit() time.Duration {
	if t.horizon > 0 {
		return t.horizon
	}
	return maxRetryAt
}

// retryAt is RetryAt before its instant is bounded.
func (t *Transport) retryAt(resp *http.Response, err error) (time.Time, Reason) {
	var (
		k     hostKey
		limit bool // the budget may be why: a failure handed back at once
		at    time.Time
		why   Reason
	)
	now := time.Now()
	switch {
	case resp != nil && resp.StatusCode == http.StatusGone:
		return time.Time{}, ReasonNotRetryable
	case resp != nil:
		if resp.Request == nil || resp.Request.URL == nil {
			return time.Time{}, reasonNone
		}
		if !t.s.retryIf(resp, nil) {
			if resp.StatusCode >= 400 {
				return time.Time{}, ReasonNotRetryable
			}
			return time.Time{}, reasonNone
		}
		k = t.requestKey(resp.Request)
		if resp.Header.Get(localHeader) == "" {
			if w := header.RetryAfter(resp.Header, now, t.retryAtLimit()); w.OK {
				at, why = now.Add(w.WithSpread(t.s.retryAfterSpread)), ReasonHeld
			}
		}
		limit = true
	default:
		var e *Error
		if errors.As(err, &e) && e.Reason == ReasonNotRetryable {
			return time.Time{}, ReasonNotRetryable
		}
		if e == nil || e.key == (hostKey{}) {
			return time.Time{}, reasonNone
		}
		k = e.key
		limit = e.Reason == ReasonBudgetExhausted
		if e.Reason == ReasonHeld && e.Until.After(now) {
			// Its route's hold, or its key's, which the key's view below
			// reads again.
			at, why = e.Until.Add(uniform(0, t.s.retryAfterSpread)), ReasonHeld
		}
	}
	l := t.lanes.Peek(k)
	if l != nil {
		v := l.View(now)
		if t.horizon > 0 && !v.FailingSince.IsZero() && now.Sub(v.FailingSince) > t.horizon {
			return time.Time{}, ReasonNotRetryable
		}
		if v.Isolated {
			return time.Time{}, ReasonCircuitOpen
		}
		if v.Held {
			if h := v.HoldUntil.Add(uniform(0, t.s.retryAfterSpread)); h.After(at) {
				at, why = h, ReasonHeld
			}
		}
		if v.State != perkey.Closed {
			// Open (till its open time, or already past it), or half-open
			// with its probe in flight: come back after the circuit may
			// let a probe through, spread as widely as the policy's longest
			// delay, so that the many callers an open circuit refused do not
			// come back as one herd when it closes.
			base := now
			if v.OpenUntil.After(now) {
				base = v.OpenUntil
			}
			if c := t.spread(l, base); c.After(at) {
				at, why = c, ReasonCircuitOpen
			}
		}
		if why == reasonNone && v.Paced {
			// A throttled key is sent to at the rate it admits: the budget
			// and the policy's spread would only leave it idle. Come back
			// about when the queue ahead is through.
			return now.Add(v.Ahead), ReasonHeld
		}
	}
	if limit && t.budget != nil {
		// Spread as widely too: the next token is one retry's, and every
		// caller handed back by an empty budget would come for it.
		if b, _ := t.budget.tokenAt(k, now); b.After(now) {
			if b = t.spread(l, b); b.After(at) {
				at, why = b, ReasonBudgetExhausted
			}
		}
	}
	return at, why
}

// spread returns the instant, at or after base, that RetryAt sends a
// caller back at: a point of the window from base to base plus the
// policy's longest delay (30 s by default), the width over which a retry
// far into its sequence is drawn. With a lane, the point is in the slot
// of the window where the fewest callers of the key are already due (see
// perkey.Lane.Spread), so that callers sent back at different times, over
// windows that overlap, still come back evenly rather than piled where the
// windows meet; without one, a draw of the policy.
func (t *Transport) spread(l *perkey.Lane, base time.Time) time.Time {
	w := maxDelay(t.s.policy)
	if l == nil || w <= 0 {
		return base.Add(max(t.s.policy.Delay(64, 0), 0))
	}
	return l.Spread(base, w)
}

// wait carries out the wait before the next attempt. For a retry after a
// delay, it releases the failed response's connection, then sleeps until
// the retry is due (the drain is part of the delay, not added to it),
// waking early if the context ends or the key's circuit opens (the next
// admission then waits for the key, if the request may wait). Otherwise it
// keeps a copy of a small failed response to hand back if the wait ends
// unanswered, and, when the budget refused the retry or others already
// wait, waits in the key's queue: a retry that joined others without
// asking the budget gives up, if its wait ends unanswered, as one the
// budget refused. On an error it returns what to hand back with it.
func (r *retrier) wait(p step, resp *http.Response) (*http.Response, error) {
	r.waits.kept = nil // superseded by this attempt's outcome
	if p.then == retryAfter || p.then == rideOut {
		if resp != nil {
			attempt.Drain(resp.Body, r.drainTime())
			r.resp = nil
		}
		sleep := r.sleep
		if p.then == rideOut {
			// Its own schedule, not the circuit's: a circuit that opens
			// meanwhile (perhaps on this request's own failures) would
			// wake it to probe at the open time's pace, every quarter to
			// half second, and spend its last attempts within one outage.
			// Its admission waits for the probe if the circuit is still
			// open when it is due.
			sleep = r.sleepThrough
		}
		err := sleep(time.Until(p.due))
		if err == nil && p.then == retryAfter && r.fail.wait.OK && !r.fail.throttled {
			_, err = r.spreadCrowd(r.s.retryAfterSpread)
		}
		if err != nil && !(err == ErrCircuitOpen && r.maxWaitLeft() > 0) {
			return nil, err
		}
		return nil, nil
	}
	r.keep(resp)
	if p.then == queueBehind {
		if err := r.queue(p.why); err != nil {
			return r.waits.kept, err
		}
	}
	return nil, nil
}

// spreadCrowd sleeps the spread above a server's Retry-After or a hold's
// end, once that wait is over (see crowdSpread): a draw from the spread
// the request's crowd calls for now, at most bound and at most half of
// what is left before the deadline. It returns what it slept.
func (r *retrier) spreadCrowd(bound time.Duration) (time.Duration, error) {
	s := min(r.crowdSpread(), bound)
	if dl, ok := r.req.Context().Deadline(); ok {
		s = min(s, time.Until(dl)/2)
	}
	if s <= 0 {
		return 0, nil
	}
	d := uniform(0, s)
	return d, r.sleep(d)
}

// drainTime bounds the drain of a failed response: attempt.DrainTimeout, and never
// past the caller's deadline.
func (r *retrier) drainTime() time.Duration {
	d := attempt.DrainTimeout
	if dl, ok := r.req.Context().Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return d
}
