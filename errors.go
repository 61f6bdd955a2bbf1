package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Reason says why a request stopped being retried (Error, GiveUp,
// Transport.Why), or why RetryAt gave its instant.
type Reason int

// The reasons. The zero Reason, "none", is none of them: the request did
// not stop for a reason of its own, or RetryAt knows of none.
const (
	reasonNone Reason = iota
	// ReasonNotRetryable: retrying cannot change the answer (a 404, a 410,
	// a certificate error, what WithRetryIf rejects; from RetryAt, a key
	// past WithFailingHorizon): do not send it again.
	ReasonNotRetryable
	// ReasonNotReplayable: the request may not be sent twice (a POST or
	// PATCH without an Idempotency-Key, what WithIdempotentIf rejects), or
	// its body cannot be (no GetBody, larger than WithBodyBuffer).
	ReasonNotReplayable
	ReasonAttemptsUsed    // WithMaxAttempts attempts were made
	ReasonBudgetExhausted // the retry budget has no token
	ReasonCircuitOpen     // the key's circuit is open
	ReasonContextDone     // the context ended, or its deadline leaves no room for the wait
	// ReasonHeld: the server asked for time the request could not wait (a
	// Retry-After, a spent quota); RetryAt says when, and gives it for a
	// key its send rate paces too.
	ReasonHeld
	// ReasonConcurrencyLimit: the key had WithConcurrencyLimit attempts in
	// flight, and the request waits for nothing (WithMaxWait(0)).
	ReasonConcurrencyLimit
)

var reasonNames = [...]string{
	reasonNone:             "none",
	ReasonNotRetryable:     "not retryable",
	ReasonNotReplayable:    "not replayable",
	ReasonAttemptsUsed:     "attempts used",
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

// Error is what RoundTrip returns without a response: it names the key,
// the attempts and the Reason, and wraps the cause (the last attempt's
// error, the context's, ErrCircuitOpen, ErrBudgetExhausted) for errors.Is
// and errors.As.
type Error struct {
	Method   string        // the request's method
	Key      string        // the request's key: scheme://host[:port], or what WithKey computes
	Attempts int           // attempts sent; 0 if none was
	Reason   Reason        // why no further attempt was made
	Err      error         // the cause; never nil
	Until    time.Time     // for an open circuit or a hold, when the key may be tried again
	Waited   time.Duration // how long the request waited for its key, in all

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

// ErrCircuitOpen is wrapped by the error of a request its key's open
// circuit refused.
var ErrCircuitOpen = errors.New("retryhttp: circuit open")

// ErrBudgetExhausted is wrapped by the error of a request whose retry the
// budget refused, when there is no response to give back.
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
	}
	return ReasonContextDone
}
