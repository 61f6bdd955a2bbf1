package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Reason says why the transport stopped retrying a request, carried by
// Error and reported to hooks; or, from RetryAt, why it gave the instant it
// gave. One type serves both, because the causes are the same: a request
// that stops for an open circuit is told, by RetryAt, to come back when the
// circuit may let it through.
type Reason int

// The reasons a request stops being retried, or is to be sent again later.
// The zero Reason, whose String is "none", is none of them: the request
// did not stop for a reason of its own (it succeeded, say), or RetryAt
// knows of nothing that should delay it.
const (
	reasonNone Reason = iota
	// ReasonNotRetryable: the outcome is not retryable (a 404, a 410 Gone,
	// a certificate error, or whatever WithRetryIf rejects); from RetryAt,
	// also a key failing for longer than WithFailingHorizon allows: do not
	// send the request again.
	ReasonNotRetryable
	// ReasonNotReplayable: the request may not be sent again. Its method
	// may not be sent twice (a POST or PATCH without an Idempotency-Key,
	// or what WithIdempotentIf rejects), or its body cannot be sent again
	// (no GetBody, larger than WithBodyBuffer, or GetBody failed).
	ReasonNotReplayable
	// ReasonAttemptsUsed: WithMaxAttempts attempts have been made, and
	// any that rode out a young failure of the key past them.
	ReasonAttemptsUsed
	// ReasonDeadline: the context's deadline leaves no room for the delay.
	ReasonDeadline
	// ReasonBudgetExhausted: the retry budget has no token.
	ReasonBudgetExhausted
	// ReasonCircuitOpen: the host's circuit is open.
	ReasonCircuitOpen
	// ReasonContextDone: the request's context ended.
	ReasonContextDone
	// ReasonHeld: the server asked for time the request could not wait
	// (see WithMaxWait): a Retry-After on this response or an earlier one
	// of its key, or a quota it advertised as spent. From RetryAt: the
	// instant the server named, or when the key's send rate lets the
	// request go.
	ReasonHeld
	// ReasonConcurrencyLimit: the key had as many attempts in flight as
	// WithConcurrencyLimit allows, and the request may not wait for a
	// place (WithMaxWait(0)).
	ReasonConcurrencyLimit
)

var reasonNames = [...]string{
	reasonNone:             "none",
	ReasonNotRetryable:     "not retryable",
	ReasonNotReplayable:    "not replayable",
	ReasonAttemptsUsed:     "attempts used",
	ReasonDeadline:         "deadline too near",
	ReasonBudgetExhausted:  "budget exhausted",
	ReasonCircuitOpen:      "circuit open",
	ReasonContextDone:      "context done",
	ReasonHeld:             "held",
	ReasonConcurrencyLimit: "concurrency limit",
}

// String returns the reason in a few words, such as "attempts used".
func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Error is the error RoundTrip returns when it returns no response. It names
// the request's key and how many attempts were made, and wraps the cause,
// so errors.Is and errors.As reach it: the last attempt's transport error,
// the context's error, or ErrCircuitOpen.
type Error struct {
	Method   string // the request's method
	Key      string // the key of the request's circuit: scheme://host[:port], or what WithKey computes
	Attempts int    // attempts sent to the next RoundTripper; 0 if none was
	Reason   Reason // why no further attempt was made
	Err      error  // the cause; never nil
	// Until is, when an open circuit or a hold refused the request, when
	// the key may be tried again; the zero time otherwise, or when an
	// operator isolated the key.
	Until time.Time
	// Waited is how long the request waited, in all, for its key to
	// recover (see WithMaxWait).
	Waited time.Duration

	key hostKey
}

// Error implements error.
func (e *Error) Error() string {
	return "retryhttp: " + e.Method + " " + e.Key + ": " + strconv.Itoa(e.Attempts) +
		" attempt" + plural(e.Attempts) + " (" + e.Reason.String() + "): " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether the cause is a timeout, as url.Error does, so code
// that asks a net.Error keeps working.
func (e *Error) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.Err, &t) && t.Timeout() || errors.Is(e.Err, context.DeadlineExceeded)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// ErrCircuitOpen is wrapped by the error of a request that a host's open
// circuit refused, or woke from its sleep before a retry.
var ErrCircuitOpen = errors.New("retryhttp: circuit open")

// ErrBudgetExhausted is the reason reported when the retry budget has no
// token for a retry (and the request's wait for its key, if it may wait,
// ended unanswered). The caller still gets the last real response when it
// has one to give; an Error wraps ErrBudgetExhausted beside the last
// attempt's transport error, or alone when the response could not be kept
// while the request waited (see WithMaxWait).
var ErrBudgetExhausted = errors.New("retryhttp: retry budget exhausted")

// errTurn is the cause when a request that waited its turn behind the
// waiters of a recovering key was not let go in time. It satisfies
// errors.Is(err, ErrCircuitOpen): the circuit has just closed, and the key
// is taking back its load.
var errTurn = &turnError{}

type turnError struct{}

func (*turnError) Error() string {
	return "retryhttp: circuit open: the key is recovering, and the request's turn did not come"
}

func (*turnError) Is(target error) bool { return target == ErrCircuitOpen }

// errHeld is the cause of a request whose key is held: a server asked, with
// a long Retry-After or a spent quota, for no request before an instant
// that the request could not wait for. Error.Until says when the hold
// ends, and its Reason is ReasonHeld.
var errHeld = errors.New("retryhttp: held by the server")

// heldError refuses an attempt while the key is held.
type heldError struct{ until time.Time }

func (e *heldError) Error() string { return errHeld.Error() + " until " + e.until.Format(time.RFC3339) }

func (e *heldError) Is(target error) bool { return target == errHeld }

// errIsolated refuses the requests to a key an operator isolated.
var errIsolated = &isolatedError{}

type isolatedError struct{}

func (*isolatedError) Error() string { return "retryhttp: circuit open: isolated by an operator" }

func (*isolatedError) Is(target error) bool { return target == ErrCircuitOpen }

// errPaced is the cause when a throttled key's send rate leaves no room
// for the attempt before the request's deadline; it satisfies
// errors.Is(err, context.DeadlineExceeded).
var errPaced = &pacedError{}

type pacedError struct{}

func (*pacedError) Error() string {
	return "retryhttp: the key's send rate leaves no room before the deadline"
}

func (*pacedError) Is(target error) bool { return target == context.DeadlineExceeded }

// errConcurrencyLimit is the cause of a request refused because its key
// already had as many attempts in flight as WithConcurrencyLimit allows,
// and the request may not wait for a place (WithMaxWait(0)).
var errConcurrencyLimit = errors.New("retryhttp: concurrency limit reached")

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

var errNotFromNew = errors.New("retryhttp: Transport used without New; create it with retryhttp.New")

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
	k := r.keyOf()
	e := &Error{Method: r.req.Method, Key: k.String(), Attempts: r.attempts, Reason: reason, Err: err, Waited: r.waits.total, key: k}
	if (reason == ReasonCircuitOpen || reason == ReasonHeld) && r.lane != nil {
		e.Until = r.probeAt(cause)
	}
	return e
}

// reasonOf is the one mapping from what stopped a request off the network
// to its Reason: the error of an admission, a sleep or a wait for the key.
// The caller's own cancellation is always ReasonContextDone; a wait that
// ended unanswered names the refusal it waited out; a sleep or a wait that
// the deadline ended, with nothing else to blame, is ReasonContextDone too.
func reasonOf(err error) Reason {
	switch {
	case errors.Is(err, context.Canceled):
		return ReasonContextDone
	case errors.Is(err, errHeld):
		return ReasonHeld
	case errors.Is(err, ErrCircuitOpen):
		return ReasonCircuitOpen
	case errors.Is(err, ErrBudgetExhausted):
		return ReasonBudgetExhausted
	case err == errConcurrencyLimit:
		return ReasonConcurrencyLimit
	case err == errPaced:
		return ReasonDeadline
	}
	return ReasonContextDone
}
