package retryhttp

import (
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
)

// Hooks is a set of optional callbacks that observe a Transport, in the
// manner of net/http/httptrace.ClientTrace. Set them per transport with
// WithHooks and per request with ContextWithHooks; when both are set, both
// are called, the transport's first. Any field may be nil.
//
// Hooks run synchronously on the goroutine of the request they observe, and
// never under a lock of the transport, budget or breaker. A slow hook
// therefore delays only its own request (and spends that request's context
// deadline), never another's; a hook that blocks blocks its request. A hook
// must not modify the request or read or close a response body. Hooks shared
// between requests must be safe for concurrent use.
//
// The request a hook receives is the caller's, so it carries headers and
// the URL's query; logging them can leak secrets (see the slog example).
type Hooks struct {
	// AttemptStart is called before each attempt is sent to the next
	// RoundTripper.
	AttemptStart func(AttemptStartInfo)
	// AttemptDone is called when the next RoundTripper returns.
	AttemptDone func(AttemptDoneInfo)
	// RetryScheduled is called when a retry has passed every check and the
	// transport is about to wait before sending it.
	RetryScheduled func(RetryInfo)
	// GiveUp is called when the transport stops retrying a request whose
	// last outcome was a failure, or returns an error: the reason says why.
	GiveUp func(GiveUpInfo)
	// WaitDone is called when a request's wait for its key to recover
	// ends: the key let it go, or the wait ran out.
	WaitDone func(WaitInfo)
	// Quota is called when a response advertised its key's quota in
	// rate-limit headers and the transport applied it (see
	// WithQuotaHeaders).
	Quota func(QuotaInfo)
	// CircuitChange is called when a key's circuit changes state, with the
	// hooks of the request whose attempt (or admission) changed it; a
	// Breaker shared between transports reports through the transport whose
	// request caused the change. BreakerConfig.OnStateChange sees every
	// change of a Breaker once, whoever made it.
	CircuitChange func(CircuitChangeInfo)
}

// AttemptStartInfo describes an attempt about to be sent.
type AttemptStartInfo struct {
	Request *http.Request // the caller's request
	Attempt int           // 1 for the first attempt
}

// AttemptDoneInfo describes the outcome of an attempt.
type AttemptDoneInfo struct {
	Request  *http.Request // the caller's request
	Attempt  int           // 1 for the first attempt
	Status   int           // the response's status code; 0 on error
	Err      error         // the transport error; nil with a response
	Duration time.Duration // from sending to the response headers or the error
}

// RetryInfo describes a scheduled retry.
type RetryInfo struct {
	Request    *http.Request // the caller's request
	Retry      int           // the retry's number: 1 for the first retry (the second attempt)
	Delay      time.Duration // the wait drawn before it; after a Retry-After, without the spread, drawn when the wait is over
	RetryAfter bool          // the server's Retry-After set the delay
	Clamped    bool          // the Retry-After asked for more than the clamp allows
}

// GiveUpInfo describes why a request stopped being retried.
type GiveUpInfo struct {
	Request  *http.Request // the caller's request
	Attempts int           // attempts sent
	Reason   Reason        // why no further attempt was made
	Status   int           // the status of the response returned; 0 with an error
	Err      error         // the error returned; nil with a response
	// Local reports that the response is the transport's own answer for
	// an open circuit (WithCircuitOpenResponse), not the server's.
	Local bool
	// Waited is how long the request waited, in all, for its key to
	// recover (see WithMaxWait).
	Waited time.Duration
}

// WaitInfo describes a request's wait for its key to recover.
type WaitInfo struct {
	Request *http.Request // the caller's request
	Key     string        // the key it waited for
	// Cause is what would have refused the request: ReasonCircuitOpen (an
	// open circuit, or an isolated key) or ReasonBudgetExhausted (no token
	// for its retry); ReasonNone for a request that waited behind others
	// already waiting for its key (its retry asked no token), or for its
	// turn while the key takes back its load after recovering.
	Cause    Reason
	Waited   time.Duration // how long it waited
	Released bool          // the key let it go; false: the wait ran out, or its context ended
}

// QuotaInfo describes the quota a response advertised, and what the
// transport made of it.
type QuotaInfo struct {
	Request *http.Request
	Key     string  // the key (with its quota partition) the quota was applied to
	Quotas  []Quota // the policies the response advertised
	// Rate is the send rate the key is held to now, in requests per
	// second; 0 when it is not paced.
	Rate float64
	// HeldUntil is set when a policy had nothing left: the key is held
	// until its reset.
	HeldUntil time.Time
}

// CircuitChangeInfo describes a change of a host's circuit.
type CircuitChangeInfo struct {
	Key      string // the circuit's key: scheme://host[:port], or what WithKey computes
	From, To State  // the circuit's state before and after the change
	// Until is when an open circuit may let a probe through, for a change
	// to StateOpen; the zero time otherwise.
	Until time.Time
}

// hookSet is the hooks of one request: the transport's and the request's.
type hookSet struct {
	t, r *Hooks
}

func (h hookSet) any() bool { return h.t != nil || h.r != nil }

// fire calls the hook that pick selects, the transport's then the
// request's, skipping those not set.
func fire[I any](h hookSet, pick func(*Hooks) func(I), info I) {
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

func (h *Hooks) attemptStart() func(AttemptStartInfo)   { return h.AttemptStart }
func (h *Hooks) attemptDone() func(AttemptDoneInfo)     { return h.AttemptDone }
func (h *Hooks) retryScheduled() func(RetryInfo)        { return h.RetryScheduled }
func (h *Hooks) giveUp() func(GiveUpInfo)               { return h.GiveUp }
func (h *Hooks) circuitChange() func(CircuitChangeInfo) { return h.CircuitChange }
func (h *Hooks) waitDone() func(WaitInfo)               { return h.WaitDone }
func (h *Hooks) quota() func(QuotaInfo)                 { return h.Quota }

// Quota is one quota policy a server advertised in its rate-limit
// headers (RateLimit and RateLimit-Policy, X-RateLimit-*, and the vendors'
// forms): its limit per window, what is left, and when the window resets.
type Quota struct {
	// Partition is the server's name for the quota's partition: the pk
	// parameter of RateLimit, or GitHub's x-ratelimit-resource; "" when it
	// names none.
	Partition string
	Limit     int64         // requests per window; -1 unknown
	Window    time.Duration // the window; 0 unknown
	Remaining int64         // requests left in the window; -1 unknown
	Reset     time.Time     // when the window resets, clamped like a Retry-After; the zero time unknown
}

// quotasOf returns the policies of a as Quotas; nil for none.
func quotasOf(a perkey.Advert) []Quota {
	if a.N == 0 {
		return nil
	}
	out := make([]Quota, a.N)
	for i, p := range a.Policies[:a.N] {
		out[i] = Quota{Partition: p.Partition, Limit: p.Limit, Window: p.Window, Remaining: p.Remaining, Reset: p.Reset}
	}
	return out
}
