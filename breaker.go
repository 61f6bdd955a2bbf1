package retryhttp

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCircuitOpen is wrapped by the error of a request that a host's open
// circuit refused, or woke from its sleep before a retry.
var ErrCircuitOpen = errors.New("retryhttp: circuit open")

// Breaker defaults. Backoff handles transient failure and the breaker
// sustained failure, where sustained means lasting longer than the default
// retry sequence (4 attempts, at most 200+400+800 ms = 1.4 s of waiting).
const (
	// DefaultBreakerSpan is how long failures must persist before the
	// circuit trips: longer than the 1.4 s that the default retry sequence
	// waits at most, so a failure that one request's retries could ride out
	// never trips it, and short enough that a 20 s outage is caught in its
	// first tenth, before most of its retry sequences would run out.
	DefaultBreakerSpan = 2 * time.Second
	// DefaultBreakerMinFailures is how many failures the span must hold, so
	// a host that is barely used does not trip on two unlucky requests.
	DefaultBreakerMinFailures = 5
	// DefaultBreakerFailureRatio is the share of failed outcomes, over the
	// span, at which the circuit trips: a host that fails more often than it
	// answers.
	DefaultBreakerFailureRatio = 0.5
	// DefaultBreakerOpenFor is the shortest time a circuit stays open: a few
	// seconds lets a struggling host drain its queues, and a recovered one
	// is found again within seconds.
	DefaultBreakerOpenFor = 5 * time.Second
	// DefaultBreakerProbes is how many requests a half-open circuit lets
	// through at once: one, as gobreaker does, so a host that is still down
	// sees one request per open period, not a herd.
	DefaultBreakerProbes = 1
)

// maxBreakerDuration bounds the breaker's durations: about 73 years.
const maxBreakerDuration = time.Duration(1<<63-1) / 4

// BreakerConfig configures a Breaker. The zero value means every default.
type BreakerConfig struct {
	// Span is how long failures must persist, from the first failure of a
	// failure period to the latest, before the circuit trips. 2,000 requests
	// failing within the same 100 ms are one event, not a reason to trip.
	// 0 means DefaultBreakerSpan (2 s). A failure period that reaches twice
	// the span without tripping starts afresh.
	Span time.Duration
	// MinFailures is how many failures the period must hold to trip.
	// 0 means DefaultBreakerMinFailures (5).
	MinFailures int
	// FailureRatio is the share of failures among the outcomes of the period
	// at or above which the circuit trips. 0 means
	// DefaultBreakerFailureRatio (0.5).
	FailureRatio float64
	// OpenFor is the shortest time an open circuit refuses requests.
	// 0 means DefaultBreakerOpenFor (5 s).
	OpenFor time.Duration
	// OpenJitter is the width of the random time added to OpenFor each time
	// a circuit opens, so that circuits tripped together (a fleet of
	// clients, or many hosts behind one failed load balancer) do not
	// half-open together. 0 means OpenFor (open for [5 s, 10 s) by default);
	// a negative value means none.
	OpenJitter time.Duration
	// Probes is how many requests a half-open circuit lets through at once.
	// The first that succeeds closes the circuit; the first that fails
	// opens it again. 0 means DefaultBreakerProbes (1).
	Probes int
	// MaxHosts is how many hosts' lanes are kept before idle ones (circuit
	// closed, or open past its open time, and no request in flight toward
	// the host) are evicted, least recently used first. Lanes that are not
	// idle are never evicted, so the table exceeds MaxHosts only by those.
	// 0 means DefaultMaxHosts (65,536).
	MaxHosts int
}

// Breaker holds one circuit per host (scheme, host, port). A circuit counts
// retryable failures as failures and any other response as a success; it
// trips on failure that persists over BreakerConfig.Span, refuses requests
// while open, then lets a few probes through. Each host's lane also keeps
// the previous delay that DecorrelatedJitter grows from. A Breaker may be
// shared between transports and is safe for concurrent use; a request to a
// host whose circuit is closed takes no lock.
type Breaker struct {
	cfg      BreakerConfig
	circuits bool // false: the lanes only keep policy memory, and never open
	lanes    table[*lane]
}

// NewBreaker returns a Breaker configured by c, with defaults for zero
// fields.
//
// NewBreaker panics if FailureRatio is NaN or above 1, which would never
// trip, or never stop tripping.
func NewBreaker(c BreakerConfig) *Breaker {
	if math.IsNaN(c.FailureRatio) || c.FailureRatio > 1 {
		panic(fmt.Sprintf("retryhttp: NewBreaker: BreakerConfig.FailureRatio is %v; use a share in (0, 1], or 0 for the default", c.FailureRatio))
	}
	if c.Span <= 0 {
		c.Span = DefaultBreakerSpan
	}
	if c.MinFailures <= 0 {
		c.MinFailures = DefaultBreakerMinFailures
	}
	if c.FailureRatio <= 0 {
		c.FailureRatio = DefaultBreakerFailureRatio
	}
	if c.OpenFor <= 0 {
		c.OpenFor = DefaultBreakerOpenFor
	}
	if c.OpenJitter == 0 {
		c.OpenJitter = c.OpenFor
	}
	if c.Probes <= 0 {
		c.Probes = DefaultBreakerProbes
	}
	// Durations past a few decades mean "never"; bounding them keeps
	// 2·Span and OpenFor+OpenJitter from overflowing.
	c.Span = min(c.Span, maxBreakerDuration)
	c.OpenFor = min(c.OpenFor, maxBreakerDuration)
	c.OpenJitter = min(c.OpenJitter, maxBreakerDuration)
	return newLanes(c, true)
}

// newLanes returns a Breaker configured by c whose circuits open only if
// circuits is true: without them it keeps a host's memory for a policy.
func newLanes(c BreakerConfig, circuits bool) *Breaker {
	b := &Breaker{cfg: c, circuits: circuits}
	b.lanes.idle = (*lane).idle
	b.lanes.max = c.MaxHosts
	return b
}

// stateful reports whether a policy may use the previous delay, and so needs
// per-host memory: every policy but the ones known to ignore it.
func stateful(p Policy) bool {
	switch p.(type) {
	case FullJitter, EqualJitter, Exponential, Immediate:
		return false
	}
	return true
}

// WithBreaker sets the circuit breaker; nil turns it off. New uses a fresh
// NewBreaker(BreakerConfig{}) when this option is not given. Pass the same
// Breaker to several transports to share it.
func WithBreaker(b *Breaker) Option {
	return transportOption("WithBreaker", func(t *Transport) { t.breaker = b })
}

// lane returns the host's lane, creating it if needed.
func (b *Breaker) lane(k hostKey) *lane {
	return b.lanes.get(k, func() *lane { return newLane(b) })
}

// State is the state of one host's circuit.
type State int

// The states of a circuit.
const (
	StateClosed   State = iota // requests pass; failures are counted
	StateOpen                  // requests are refused without touching the network
	StateHalfOpen              // a few probes pass; the rest are refused
)

// String returns the state's name: closed, open or half-open.
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	}
	return "State(?)"
}

// outcome is what an attempt tells the circuit.
type outcome int

const (
	outcomeNone    outcome = iota // tells nothing: the caller's context ended, a certificate error
	outcomeSuccess                // the host answered with a response that is not a retryable failure
	outcomeFailure                // a retryable failure
)

// lane is one host's memory: its circuit and the previous delay that
// DecorrelatedJitter grows from. Both are reset by a success to the host,
// never by time alone; a lane leaves memory only when its host's table must
// make room and the lane is idle (see idle and table).
type lane struct {
	b *Breaker
	// word is the state in its low 2 bits and the generation above them, so
	// that one atomic load tells a request both. The generation grows at
	// every change of state; an outcome from an earlier generation is
	// ignored (a request admitted before the circuit opened must not count
	// against the next closed period). Written only under mu.
	word atomic.Uint64
	// failing is set while a failure period is under way; only then do
	// successes pay for an atomic add to succ.
	failing atomic.Bool
	succ    atomic.Int64 // successes during the failure period
	prev    atomic.Int64 // previous delay drawn for this host, for DecorrelatedJitter

	mu        sync.Mutex
	since     time.Time // first failure of the period; guarded by mu
	fails     int       // failures in the period; guarded by mu
	openUntil time.Time // when an open circuit may half-open; guarded by mu
	probes    int       // probes in flight while half-open; guarded by mu
	sleepers  int       // requests sleeping toward the host; guarded by mu
	// opened is closed when the circuit opens, to wake the requests
	// sleeping toward the host. It is made when the first of them starts
	// sleeping, and while the circuit is open it is closedChan. Guarded by
	// mu.
	opened chan struct{}
}

// closedChan is the opened channel of every open circuit.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func newLane(b *Breaker) *lane {
	return &lane{b: b}
}

func unpack(w uint64) (State, uint64) { return State(w & 3), w >> 2 }

// ticket is what admission hands a request: the generation it was admitted
// in, and whether it is a half-open probe.
type ticket struct {
	gen   uint64
	probe bool
}

// transition is a change of state, returned so that it can be reported
// after the lock is released.
type transition struct {
	from, to State
}

// allow admits an attempt or refuses it with ErrCircuitOpen. A closed
// circuit admits with one atomic load.
func (l *lane) allow() (ticket, transition, error) {
	state, gen := unpack(l.word.Load())
	if state == StateClosed {
		return ticket{gen: gen}, transition{}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var tr transition
	state, gen = unpack(l.word.Load())
	if state == StateOpen {
		if time.Now().Before(l.openUntil) {
			return ticket{}, tr, ErrCircuitOpen
		}
		tr = l.setLocked(StateHalfOpen)
		l.opened = nil
		l.probes = 0
		_, gen = unpack(l.word.Load())
		state = StateHalfOpen
	}
	switch {
	case state == StateClosed:
		return ticket{gen: gen}, tr, nil
	case l.probes < l.b.cfg.Probes:
		l.probes++
		return ticket{gen: gen, probe: true}, tr, nil
	}
	return ticket{}, tr, ErrCircuitOpen
}

// record tells the circuit the outcome of an attempt admitted with tk.
func (l *lane) record(tk ticket, o outcome) transition {
	if o == outcomeSuccess && !tk.probe {
		// The hot path: no lock, and no write unless there is memory to
		// reset.
		if l.failing.Load() {
			l.succ.Add(1)
		}
		if l.prev.Load() != 0 {
			l.prev.Store(0)
		}
		return transition{}
	}
	if (o == outcomeNone || !l.b.circuits) && !tk.probe {
		return transition{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	state, gen := unpack(l.word.Load())
	if gen != tk.gen {
		// From an earlier state: ignored. A probe of an earlier half-open
		// period no longer holds a place: allow reset the count when the
		// current period began.
		return transition{}
	}
	if tk.probe {
		l.probes--
	}
	switch {
	case state == StateHalfOpen && o == outcomeSuccess:
		l.prev.Store(0)
		l.resetPeriodLocked()
		// Other probes still in flight belong to the half-open period that
		// ends here: their outcomes will be ignored, so their places are
		// freed now.
		l.probes = 0
		return l.setLocked(StateClosed)
	case state == StateHalfOpen && o == outcomeFailure:
		return l.openLocked(time.Now())
	case state == StateClosed && o == outcomeFailure:
		return l.failLocked(time.Now())
	}
	return transition{}
}

// failLocked counts a failure in the closed state and trips the circuit when
// failure has persisted over the span.
func (l *lane) failLocked(now time.Time) transition {
	c := &l.b.cfg
	if !l.failing.Load() || now.Sub(l.since) > 2*c.Span {
		// A new failure period: the first failure, or an old period that
		// never tripped.
		l.resetPeriodLocked()
		l.since = now
		l.failing.Store(true)
	}
	l.fails++
	total := l.fails + int(l.succ.Load())
	if now.Sub(l.since) >= c.Span && l.fails >= c.MinFailures &&
		float64(l.fails) >= c.FailureRatio*float64(total) {
		return l.openLocked(now)
	}
	return transition{}
}

// openLocked opens the circuit for OpenFor plus a jittered extra, and wakes
// every request sleeping toward the host.
func (l *lane) openLocked(now time.Time) transition {
	c := &l.b.cfg
	l.openUntil = now.Add(c.OpenFor + uniform(0, c.OpenJitter))
	l.resetPeriodLocked()
	l.probes = 0 // as on closing: the half-open period's probes are over
	if l.opened != nil && l.opened != closedChan {
		close(l.opened)
	}
	l.opened = closedChan
	return l.setLocked(StateOpen)
}

func (l *lane) resetPeriodLocked() {
	l.failing.Store(false)
	l.succ.Store(0)
	l.fails = 0
	l.since = time.Time{}
}

// setLocked moves to state s in a new generation.
func (l *lane) setLocked(s State) transition {
	from, gen := unpack(l.word.Load())
	l.word.Store((gen+1)<<2 | uint64(s))
	return transition{from: from, to: s}
}

// sleepStart returns a channel that is closed when the circuit opens (at
// once, if it is open now), for a sleep to select on, and counts the
// sleeper so that the lane is not dropped from memory under it: a dropped
// lane would neither wake the sleeper nor refuse its next attempt. Every
// call is paired with sleepEnd.
func (l *lane) sleepStart() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sleepers++
	if l.opened == nil {
		l.opened = make(chan struct{})
	}
	return l.opened
}

// sleepEnd ends what sleepStart began.
func (l *lane) sleepEnd() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sleepers--
}

// probeAt returns when the circuit may next let a probe through: when an
// open circuit's open time ends, or now.
func (l *lane) probeAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if state, _ := unpack(l.word.Load()); state == StateOpen && l.openUntil.After(now) {
		return l.openUntil
	}
	return now
}

// isOpen reports whether the circuit is open now; one atomic load.
func (l *lane) isOpen() bool {
	state, _ := unpack(l.word.Load())
	return state == StateOpen
}

// idle reports that the lane may leave memory: no probe is in flight, no
// request sleeps toward the host, and either the circuit is closed with no
// failure period under way (none, or one older than twice the span, which
// the next failure would start afresh), or it is open past its open time,
// when the next request would probe a host that nobody has asked for since.
// A policy's previous delay does not keep a lane: a host dropped from
// memory starts again from Base.
func (l *lane) idle(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.probes != 0 || l.sleepers != 0 {
		return false
	}
	switch state, _ := unpack(l.word.Load()); state {
	case StateClosed:
		return !l.failing.Load() || now.Sub(l.since) > 2*l.b.cfg.Span
	case StateOpen:
		return !now.Before(l.openUntil)
	}
	return false
}
