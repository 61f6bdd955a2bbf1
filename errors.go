package retryhttp

import (
	"context"
	"errors"
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
const (
	// ReasonNone: the request has not stopped for any of the reasons below
	// (for example, it succeeded).
	ReasonNone Reason = iota
	// ReasonNotRetryable: the outcome is not retryable (a 404, a certificate
	// error, or whatever WithRetryIf rejects).
	ReasonNotRetryable
	// ReasonNotIdempotent: the request may not be sent twice (a POST or
	// PATCH without an Idempotency-Key, or what WithIdempotentIf rejects).
	ReasonNotIdempotent
	// ReasonBodyNotReplayable: the body cannot be sent again (no GetBody,
	// larger than WithBodyBuffer, or GetBody failed).
	ReasonBodyNotReplayable
	// ReasonAttemptsUsed: WithMaxAttempts attempts have been made.
	ReasonAttemptsUsed
	// ReasonDeadline: the context's deadline leaves no room for the delay.
	ReasonDeadline
	// ReasonBudgetExhausted: the retry budget has no token.
	ReasonBudgetExhausted
	// ReasonCircuitOpen: the host's circuit is open.
	ReasonCircuitOpen
	// ReasonContextDone: the request's context ended.
	ReasonContextDone
	// ReasonHeld: the key is held by a server's long Retry-After beyond
	// what the request could wait.
	ReasonHeld
	// ReasonConcurrencyLimit: the key had as many attempts in flight as
	// WithConcurrencyLimit allows, which refuses the rest.
	ReasonConcurrencyLimit
	// ReasonRetryAfter (from RetryAt): the server asked for the wait, with
	// Retry-After or Retry-After-Ms.
	ReasonRetryAfter
	// ReasonPaced (from RetryAt): the key's send rate, cut after it
	// throttled, lets the request go about then; a request sent earlier
	// would wait its turn.
	ReasonPaced
	// ReasonGone (from RetryAt): do not send the request again. The server
	// said the resource is gone for good (410 Gone, which the Standard
	// Webhooks convention uses for "disable this endpoint"), or the key has
	// been failing for longer than WithFailingHorizon allows.
	ReasonGone
)

var reasonNames = [...]string{
	ReasonNone:              "none",
	ReasonNotRetryable:      "not retryable",
	ReasonNotIdempotent:     "not idempotent",
	ReasonBodyNotReplayable: "body not replayable",
	ReasonAttemptsUsed:      "attempts used",
	ReasonDeadline:          "deadline too near",
	ReasonBudgetExhausted:   "budget exhausted",
	ReasonCircuitOpen:       "circuit open",
	ReasonContextDone:       "context done",
	ReasonHeld:              "held",
	ReasonConcurrencyLimit:  "concurrency limit",
	ReasonRetryAfter:        "retry after",
	ReasonPaced:             "paced",
	ReasonGone:              "gone",
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

// Temporary implements the deprecated net.Error method as url.Error does.
func (e *Error) Temporary() bool {
	var t interface{ Temporary() bool }
	return errors.As(e.Err, &t) && t.Temporary()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// attemptTimeoutError is the cause when WithAttemptTimeout ended an attempt
// before its response headers arrived. It satisfies
// errors.Is(err, context.DeadlineExceeded) and still reaches the error that
// the next RoundTripper returned.
type attemptTimeoutError struct {
	d   time.Duration
	err error
}

func (e *attemptTimeoutError) Error() string {
	return "attempt timed out after " + e.d.String() + ": " + e.err.Error()
}

func (e *attemptTimeoutError) Unwrap() []error {
	return []error{context.DeadlineExceeded, e.err}
}

func (e *attemptTimeoutError) Timeout() bool { return true }
