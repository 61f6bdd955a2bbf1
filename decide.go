package retryhttp

import "time"

// facts are what decide knows of a failed attempt, as plain values.
type facts struct {
	retryable    bool   // classify found the outcome worth retrying
	why          Reason // classify's reason when it is not
	ctxDone      bool   // the caller's context has ended
	attemptsLeft int    // attempts the request may still make
	idempotent   bool   // the request may be sent more than once
	reached      bool   // the attempt reached the server, or may have
	replayable   bool   // the body can be sent again
	circuitOpen  bool   // the key's circuit is open now
	mayWait      bool   // the request may wait for its key to recover (WithMaxWait)
	delay        time.Duration
	now          time.Time
	deadline     time.Time // the context's; zero if it has none
}

// next is what follows a failed attempt.
type next uint8

const (
	stop       next = iota // no retry: return what there is
	retryAfter             // retry once the delay has passed
	retryWhen              // retry when the key lets the request go: it waits for the key to recover
	// queueBehind retries when the key lets the request go from its
	// queue: the budget refused the retry, or others already wait (only
	// rewind says so; decide does not).
	queueBehind
)

// decide answers whether a failed attempt is retried, and how: after the
// drawn delay, or when its key has recovered; or not, and why not. Its
// cases are checked in the order they apply, and each has its reason; what
// is not shown to be safe is not retried.
func decide(f facts) (next, Reason) {
	switch {
	case !f.retryable:
		// Nothing a retry could mend: a status outside the retried ones,
		// a certificate error, what WithRetryIf rejects, or the caller's
		// own context ending during the attempt.
		return stop, f.why
	case f.ctxDone:
		// The caller has gone: nobody would read the retry's answer.
		return stop, ReasonContextDone
	case f.attemptsLeft <= 0:
		return stop, ReasonAttemptsUsed
	case !f.idempotent && f.reached:
		// Sending it again could apply it twice; only a request that
		// never reached the server may go again whatever its method.
		return stop, ReasonNotIdempotent
	case !f.replayable:
		return stop, ReasonBodyNotReplayable
	case f.circuitOpen && f.mayWait:
		// Open now, by this failure or by others while this attempt was
		// in flight: the retry waits for the key to let it go, with no
		// delay drawn and no token spent (the wait is deferred work, not
		// a retry into the outage).
		return retryWhen, ReasonNone
	case f.circuitOpen:
		// Open, and the request may not wait (a dispatcher with its own
		// queue): no retry would be let through, so none is scheduled
		// and no token spent.
		return stop, ReasonCircuitOpen
	case f.deadline.IsZero() || f.now.Add(f.delay).Before(f.deadline):
		// Every check passed, and the retry can be sent before the
		// caller's deadline.
		return retryAfter, ReasonNone
	}
	// Sleeping would outlive the caller's deadline: return now.
	return stop, ReasonDeadline
}
