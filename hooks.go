package retryhttp

import (
	"net/http"
	"time"
)

// Hooks are optional callbacks that observe a Transport, as
// net/http/httptrace's do. They run on the request's goroutine, under no
// lock of the transport, and must not modify the request or touch a body.
// A request carries its headers and query: log them with care.
type Hooks struct {
	AttemptStart   func(Event) // before each attempt is sent
	AttemptDone    func(Event) // when the next RoundTripper returns
	RetryScheduled func(Event) // when a retry is about to wait its Delay
	GiveUp         func(Event) // when retrying stops on a failure, or RoundTrip returns an error
	WaitDone       func(Event) // when a wait for the key to recover ends (WithMaxWait)
	Quota          func(Event) // when rate-limit headers set the key's pace or hold
}

// Event is what a hook, or BreakerConfig.OnStateChange, is told; each
// field names the callbacks that set it.
type Event struct {
	Request *http.Request // the caller's request; nil for OnStateChange
	Key     string        // WaitDone, Quota, OnStateChange: the key
	// Attempt is how many attempts were sent: the attempt's own number for
	// AttemptStart and AttemptDone, the retry's for RetryScheduled.
	Attempt    int
	Hedge      bool          // AttemptStart, AttemptDone: a second copy of attempt Attempt (WithHedging)
	Status     int           // AttemptDone, GiveUp: the status; 0 with an error
	Err        error         // AttemptDone, GiveUp: the error; nil with a response
	Duration   time.Duration // AttemptDone: to the response headers or the error
	Delay      time.Duration // RetryScheduled: the wait drawn (a Retry-After without its spread)
	RetryAfter bool          // RetryScheduled: a Retry-After set Delay
	Clamped    bool          // RetryScheduled: ... and asked more than WithMaxRetryAfter
	Reason     Reason        // GiveUp: why; WaitDone: what would have refused it (zero: its turn)
	Local      bool          // GiveUp: the response is a local 503 (WithCircuitOpenResponse)
	Waited     time.Duration // WaitDone: the wait; GiveUp: all the waits
	Released   bool          // WaitDone: the key let the request go
	Rate       float64       // Quota: the key's send rate now, per second; 0: not paced
	HeldUntil  time.Time     // Quota: the quota is spent; the key is held until then
	From, To   State         // OnStateChange: the circuit's state before and after
	Until      time.Time     // OnStateChange: for a change to StateOpen, when a probe may go
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
