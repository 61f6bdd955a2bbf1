package retryhttp

import (
	"net/http"
	"time"
)

// Hooks is a set of optional callbacks that observe a Transport, in the
// manner of net/http/httptrace.ClientTrace. Set them with WithHooks: given
// to New they observe every request; through ContextWithOptions, the
// requests made with that context, after the transport's own. Any field
// may be nil.
//
// Hooks run synchronously on the goroutine of the request they observe, and
// never under a lock of the transport, budget or breaker: a slow hook
// delays only its own request. A hook must not modify the request or read
// or close a response body. Hooks shared between requests must be safe for
// concurrent use. The request a hook receives is the caller's, headers and
// query included; logging them can leak secrets (see the slog example).
type Hooks struct {
	// AttemptStart is called before each attempt is sent.
	AttemptStart func(Event)
	// AttemptDone is called when the next RoundTripper returns.
	AttemptDone func(Event)
	// RetryScheduled is called when a retry has passed every check and
	// is about to wait its Delay.
	RetryScheduled func(Event)
	// GiveUp is called when retrying stops on a failure, or RoundTrip
	// returns an error; Reason says why.
	GiveUp func(Event)
	// WaitDone is called when a request's wait for its key to recover
	// ends (see WithMaxWait).
	WaitDone func(Event)
	// Quota is called when a response's rate-limit headers set its key's
	// pace or hold.
	Quota func(Event)
}

// Event is what a hook, or BreakerConfig.OnStateChange, is told. Each
// field says which callbacks set it; the others leave it zero.
type Event struct {
	Request *http.Request // the caller's request; nil for OnStateChange
	// Key is the request's key: scheme://host[:port], or what WithKey
	// computes. Set for WaitDone, Quota and OnStateChange.
	Key string
	// Attempt is how many attempts have been sent: the attempt's own
	// number for AttemptStart and AttemptDone (1 for the first); for
	// RetryScheduled the retry's number (the retry is attempt Attempt+1).
	Attempt  int
	Status   int           // AttemptDone, GiveUp: the response's status code; 0 with an error
	Err      error         // AttemptDone, GiveUp: the error; nil with a response
	Duration time.Duration // AttemptDone: from sending to the response headers or the error
	// Delay is the wait drawn before the retry (RetryScheduled); after a
	// Retry-After, without the spread.
	Delay      time.Duration
	RetryAfter bool // RetryScheduled: the server's Retry-After set the delay
	Clamped    bool // RetryScheduled: the Retry-After asked for more than WithMaxRetryAfter allows
	// Reason is why no further attempt was made (GiveUp), or what would
	// have refused the request that waited (WaitDone): ReasonCircuitOpen
	// or ReasonBudgetExhausted; zero when it waited its turn behind
	// others.
	Reason   Reason
	Local    bool          // GiveUp: the response is the transport's own (WithCircuitOpenResponse)
	Waited   time.Duration // WaitDone: how long it waited; GiveUp: how long, in all
	Released bool          // WaitDone: the key let the request go; false: the wait ran out
	// Rate is the send rate the key is held to now, in requests per
	// second (Quota); 0 when it is not paced.
	Rate      float64
	HeldUntil time.Time // Quota: set when the quota is spent: the key is held until then
	From, To  State     // OnStateChange: the circuit's state before and after
	Until     time.Time // OnStateChange: for a change to StateOpen, when a probe may go
}

// hookSet is the hooks of one request: the transport's and the request's.
type hookSet struct {
	t, r *Hooks
}

func (h hookSet) any() bool { return h.t != nil || h.r != nil }

// fire calls the hook that pick selects, the transport's then the
// request's, skipping those not set.
func fire(h hookSet, pick func(*Hooks) func(Event), info Event) {
	if h.t != nil {
		if f := pick(h.t); f != nil {
			f(info)
		}
	}
	if h.r != nil {
		if f := pick(h.r); f != nil {
			f(info)
		}
	}
}

func (h *Hooks) attemptStart() func(Event)   { return h.AttemptStart }
func (h *Hooks) attemptDone() func(Event)    { return h.AttemptDone }
func (h *Hooks) retryScheduled() func(Event) { return h.RetryScheduled }
func (h *Hooks) giveUp() func(Event)         { return h.GiveUp }
func (h *Hooks) waitDone() func(Event)       { return h.WaitDone }
func (h *Hooks) quota() func(Event)          { return h.Quota }
