package retryhttp

import (
	"net/http"
	"time"
)

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

// DefaultRetryIf is the default test of WithRetryIf. It retries transport
// errors and the statuses 408, 429, 500, 502, 503 and 504, unless the server
// advises otherwise: on a response with a status of 400 or above, the
// headers X-Should-Retry (sent by OpenAI, Anthropic and other APIs whose
// SDKs are generated alike) and Stripe-Should-Retry, when "true" or "false",
// decide instead. Whatever it says, the transport never retries the
// caller's own context ending, a certificate error, or an error the request
// itself caused before anything reached the host (a malformed URL or
// header, an unsupported scheme).
func DefaultRetryIf(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	if resp.StatusCode >= 400 {
		if advice, ok := shouldRetry(resp.Header); ok {
			return advice
		}
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// shouldRetry reads a server's advice on retrying a response: ok is false
// when it gives none.
func shouldRetry(h http.Header) (retry, ok bool) {
	for _, name := range [...]string{"X-Should-Retry", "Stripe-Should-Retry"} {
		switch h.Get(name) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	return false, false
}

// DefaultIdempotentIf is the default test of WithIdempotentIf: the methods
// that RFC 9110 defines as idempotent (GET, HEAD, OPTIONS, TRACE, PUT,
// DELETE), and POST or PATCH carrying a non-empty Idempotency-Key header,
// which asks the server to apply the request at most once.
func DefaultIdempotentIf(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	case http.MethodPost, http.MethodPatch:
		return req.Header.Get("Idempotency-Key") != ""
	}
	return false
}
