package retryhttp

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp/internal/fleetlink"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// Breaker defaults. Backoff handles transient failure and the breaker
// sustained failure, where sustained means lasting longer than the default
// retry sequence (4 attempts, at most 200+400+800 ms = 1.4 s of waiting).
const (
	// defaultBreakerSpan is how long failures must persist before the
	// circuit trips: longer than the 1.4 s that the default retry sequence
	// waits at most, so a failure that one request's retries could ride out
	// never trips it, and short enough that a 20 s outage is caught in its
	// first tenth, before most of its retry sequences would run out.
	defaultBreakerSpan = 2 * time.Second
	// defaultBreakerMinFailures is how many failures the span must hold, so
	// a host that is barely used does not trip on two unlucky requests.
	defaultBreakerMinFailures = 5
	// defaultBreakerFailureRatio is the share of failed outcomes, over the
	// span, at which the circuit trips: a host that fails more often than it
	// answers.
	defaultBreakerFailureRatio = 0.5
	// defaultBreakerOpenFor is the first open time of an outage: a quarter
	// of a second (half a second at most, with the jitter), so that a host
	// back within a second is found within about half a second, and the
	// requests that wait for it wait no longer than that. The open time
	// then grows with the outage, to a 64th of how long the host has been
	// failing: one probe in every 10 to 20 s after ten minutes.
	defaultBreakerOpenFor = 250 * time.Millisecond
	// defaultBreakerMaxOpenFor bounds that growth: a host down for hours
	// is probed about once a minute, spread over [60 s, 120 s).
	defaultBreakerMaxOpenFor = 60 * time.Second
	// defaultBreakerProbes is how many requests a half-open circuit lets
	// through at once: one, as gobreaker does, so a host that is still down
	// sees one request per open period, not a herd.
	defaultBreakerProbes = 1
)

// maxBreakerDuration bounds the breaker's durations: about 73 years.
const maxBreakerDuration = time.Duration(1<<63-1) / 4

// BreakerConfig configures a Breaker. The zero value means every default.
type BreakerConfig struct {
	// Span is how long failures must persist, from the first failure of a
	// failure period to the latest, before the circuit trips. 2,000 requests
	// failing within the same 100 ms are one event, not a reason to trip.
	// 0 means 2 s. A failure period that reaches twice
	// the span without tripping starts afresh, so failures count together
	// only when they come within twice the span of the period's first: a
	// span shorter than the gaps between a host's failures never trips.
	Span time.Duration
	// MinFailures is how many failures the period must hold to trip.
	// 0 means 5.
	MinFailures int
	// FailureRatio is the share of failures among the outcomes of the period
	// at or above which the circuit trips. 0 means
	// 0.5.
	FailureRatio float64
	// OpenFor is the first time an open circuit refuses requests in an
	// outage. When its probe fails, it opens again for longer: for a 64th
	// of how long the host has been failing, at least OpenFor, at most
	// MaxOpenFor. 0 means 250 ms.
	OpenFor time.Duration
	// MaxOpenFor is the longest time an open circuit refuses requests, as
	// an outage goes on. 0 means 60 s; a value at or below OpenFor keeps
	// every open time at OpenFor.
	MaxOpenFor time.Duration
	// OpenJitter is the width of the random time added to OpenFor each time
	// a circuit opens, so that circuits tripped together (a fleet of
	// clients, or many hosts behind one failed load balancer) do not
	// half-open together; it grows with the open time, in proportion. 0
	// means OpenFor (the first open time is in [250 ms, 500 ms) by default);
	// a negative value means none.
	OpenJitter time.Duration
	// Probes is how many requests a half-open circuit lets through at once.
	// The first that succeeds closes the circuit; the first that fails
	// opens it again. 0 means 1.
	Probes int
	// MaxHosts is how many hosts' lanes are kept before idle ones (circuit
	// closed, or open past its open time, and no request in flight toward
	// the host) are evicted, least recently used first. Lanes that are not
	// idle are never evicted, so the table exceeds MaxHosts only by those.
	// 0 means 65,536.
	MaxHosts int
	// SlowAfter is the least time an attempt must have waited for its
	// response headers, when its caller's deadline passes, to count as a
	// failure of its host: an attempt of a request without a body that
	// got no answer before its caller's deadline counts when it ran
	// longer than SlowAfter and longer than twice the host's recent
	// answers took (the slowest of them, followed as it comes down). A
	// host that hangs (accepts connections and never answers) then trips
	// its circuit under callers' deadlines, with no attempt timeout; a
	// healthy host slower than a caller's deadline does not, as its
	// answers have shown how long it takes. A cancelled context never
	// counts (a hedge that won elsewhere says nothing of this host), nor
	// does a request with a body (its time may have gone into the
	// caller's own slow upload). The answers timed are those of one
	// request in 8, and every one to a host whose callers gave up on an
	// attempt within the last minute; only requests whose context can
	// end, or whose attempts have a timeout, are timed, so a host whose
	// every answer went to callers without either has no answer time,
	// and SlowAfter alone decides. 0 means 1 s; a negative value turns
	// the rule off (a caller giving up then tells the circuit nothing).
	SlowAfter time.Duration
	// OnStateChange, if set, is called with every change of a circuit's
	// state: trips, half-openings, closings, and what an operator does
	// through Isolate and Reset (a hold is not a change of state: see
	// HostState.HeldUntil), with Key, From, To and Until set. It runs on
	// the goroutine that made the change, after the breaker's locks are
	// released, once for the Breaker however many transports share it.
	OnStateChange func(Event)
}

// Breaker holds one circuit per host (scheme, host, port). A circuit counts
// retryable failures as failures (but not a 429 while WithAdaptiveRate
// covers 429, as it does by default: the host is up) and any other
// response as a success; it trips on failure that persists over
// BreakerConfig.Span, refuses requests while open, then lets a few probes
// through. Each host's lane also keeps the previous delay that
// DecorrelatedJitter grows from. A Breaker may be shared between
// transports and is safe for concurrent use; a request to a host whose
// circuit is closed takes no lock.
type Breaker struct {
	set      *perkey.Set
	cfg      BreakerConfig                          // with the defaults filled in
	announce atomic.Pointer[func(fleetlink.Change)] // shares changes through a fleet, when set
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
		c.Span = defaultBreakerSpan
	}
	if c.MinFailures <= 0 {
		c.MinFailures = defaultBreakerMinFailures
	}
	if c.FailureRatio <= 0 {
		c.FailureRatio = defaultBreakerFailureRatio
	}
	if c.OpenFor <= 0 {
		c.OpenFor = defaultBreakerOpenFor
	}
	if c.MaxOpenFor <= 0 {
		c.MaxOpenFor = defaultBreakerMaxOpenFor
	}
	if c.OpenJitter == 0 {
		c.OpenJitter = c.OpenFor
	}
	if c.Probes <= 0 {
		c.Probes = defaultBreakerProbes
	}
	if c.SlowAfter == 0 {
		c.SlowAfter = defaultSlowAfter
	}
	// Durations past a few decades mean "never"; bounding them keeps
	// 2·Span and OpenFor+OpenJitter from overflowing.
	c.Span = min(c.Span, maxBreakerDuration)
	c.OpenFor = min(c.OpenFor, maxBreakerDuration)
	c.OpenJitter = min(c.OpenJitter, maxBreakerDuration)
	c.MaxOpenFor = min(c.MaxOpenFor, maxBreakerDuration)
	return &Breaker{cfg: c, set: perkey.NewSet(perkey.Config{
		Circuits:     true,
		Span:         c.Span,
		MinFailures:  c.MinFailures,
		FailureRatio: c.FailureRatio,
		OpenFor:      c.OpenFor,
		MaxOpenFor:   c.MaxOpenFor,
		OpenJitter:   c.OpenJitter,
		Probes:       c.Probes,
		MaxKeys:      c.MaxHosts,
		SlowAfter:    c.SlowAfter,
		// Every request of a transport with a breaker looks its lane up.
		SeesEverySuccess: true,
	})}
}

// stateful reports whether a policy may use the previous delay, and so needs
// per-host memory: every policy but the ones known to ignore it.
func stateful(p Policy) bool {
	switch p.(type) {
	case FullJitter, EqualJitter, Exponential:
		return false
	}
	return true
}

// State is the state of one host's circuit.
type State int

// The states of a circuit. Their values are those of the lanes'
// perkey.State, so that one converts to the other.
const (
	StateClosed   = State(perkey.Closed)   // requests pass; failures are counted
	StateOpen     = State(perkey.Open)     // requests are refused without touching the network
	StateHalfOpen = State(perkey.HalfOpen) // a few probes pass; the rest are refused
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

// defaultSlowAfter is BreakerConfig.SlowAfter's default: an attempt whose
// caller gives up counts against its host only after it has waited a
// second for the response headers. Callers commonly give an interactive
// request a few hundred milliseconds; a deadline that short says more
// about the caller than about the host, and must never open a healthy
// host's circuit, even before the transport has seen the host answer. A
// second is also Hystrix's default command timeout, which it counts as a
// failure of the dependency. A host whose answers take longer is guarded
// by its own answer time (see perkey.Lane.Clocked); and a hung host is
// still caught within the breaker's 2 s span, by callers whose deadlines
// are longer than a second.
const defaultSlowAfter = time.Second

// HostState is what a Breaker holds for one key, as Host and Snapshot
// report it.
type HostState struct {
	Key   string // as hooks and errors report it
	State State  // the circuit's: StateClosed, StateOpen or StateHalfOpen
	// Since is when the circuit entered State; the zero time for a key the
	// breaker does not hold.
	Since time.Time
	// Until is when an open circuit may let a probe through; the zero
	// time while isolated, and for other states.
	Until time.Time
	// HeldUntil is when the key's hold ends: a server asked, with a long
	// Retry-After, for no request before then (a hold is not a state of
	// the circuit, which goes on as it was beside it). The zero time when
	// the key is not held.
	HeldUntil time.Time
	// Isolated reports that an operator opened the circuit with Isolate;
	// it stays open until Reset.
	Isolated bool
	// FailingSince is when the key began failing: the first failure of
	// the failures that opened its circuit, kept while it stays open or
	// half-open, or of a failure period under way on a closed circuit; the
	// zero time for a key that is not failing.
	FailingSince time.Time
	// Rate is the send rate the key is held to, in requests per second,
	// by its server's advertised quota or after a throttle; 0 when it is
	// not paced.
	Rate float64
}

// hostState turns a lane's view into what Host and Snapshot report.
func hostState(key string, v perkey.View) HostState {
	s := HostState{Key: key, State: State(v.State), Since: v.Since, Until: v.OpenUntil, Isolated: v.Isolated, FailingSince: v.FailingSince}
	if v.Held {
		s.HeldUntil = v.HoldUntil
	}
	if v.Paced {
		s.Rate = v.Rate
	}
	return s
}

// Host returns the state of one key: "scheme://host[:port]", or a key that
// WithKey computed. A key the breaker does not hold is closed.
func (b *Breaker) Host(key string) HostState {
	l := b.set.Peek(perkey.ParseKey(key))
	if l == nil {
		return HostState{Key: key, State: StateClosed}
	}
	return hostState(l.Key().String(), l.View(time.Now()))
}

// Snapshot returns the state of every key whose circuit is not closed,
// that is held or whose send rate is limited, in no particular order. It is safe to call while requests
// run; each key is read at its own instant.
func (b *Breaker) Snapshot() []HostState {
	now := time.Now()
	var out []HostState
	for _, l := range b.set.Lanes() {
		if s := hostState(l.Key().String(), l.View(now)); s.State != StateClosed || !s.HeldUntil.IsZero() || s.Rate > 0 {
			out = append(out, s)
		}
	}
	return out
}

// Isolate opens the key's circuit until Reset: every request to it is
// refused with an error wrapping ErrCircuitOpen that names the isolation,
// and requests sleeping toward it wake, as when a circuit trips. The change
// is reported to BreakerConfig.OnStateChange.
func (b *Breaker) Isolate(key string) {
	l := b.set.Lane(perkey.ParseKey(key))
	b.changed(l, l.Isolate(time.Now(), maxBreakerDuration), false)
}

// Reset closes the key's circuit and ends its hold and isolation, with the
// failures counted so far and the policy's memory of the key forgotten, as
// after a fix. The changes are reported to BreakerConfig.OnStateChange.
func (b *Breaker) Reset(key string) {
	l := b.set.Peek(perkey.ParseKey(key))
	if l == nil {
		return
	}
	b.changed(l, l.Reset(time.Now()), false)
}

// report passes the changes a call to the key's lane made to
// BreakerConfig.OnStateChange and to a fleet, after the lane's lock has
// been released. Most calls make none.
func (r *retrier) report(trs perkey.Transitions) {
	if trs.Any() && r.t.breaker != nil {
		r.t.breaker.changed(r.lane, trs, true)
	}
}

// changed reports the changes a call to the lane made (see notify).
func (b *Breaker) changed(l *perkey.Lane, trs perkey.Transitions, local bool) {
	for _, tr := range trs.List() {
		b.notify(l, tr, local)
	}
}

// notify reports a change of the lane to OnStateChange and, when local is
// set and the breaker is shared through a fleet, to the other processes:
// local changes are those a request made, not those adopted from another
// process or made by an operator, who acts on each process by itself. It
// is called after the lane's lock is released.
func (b *Breaker) notify(l *perkey.Lane, tr perkey.Transition, local bool) {
	if tr.Circuit() && b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(Event{Key: l.Key().String(), From: State(tr.From), To: State(tr.To), Until: tr.Until})
	}
	announce := b.announce.Load()
	if !local || announce == nil {
		return
	}
	c := fleetlink.Change{Key: l.Key().String()}
	switch {
	case tr.To == perkey.Open && tr.From != perkey.Open:
		c.Kind, c.For = fleetlink.Open, time.Until(tr.Until)
	case tr.To == perkey.Held:
		c.Kind, c.For = fleetlink.Hold, time.Until(tr.Until)
	case tr.To == perkey.Closed && tr.From != perkey.Held && tr.Changed():
		c.Kind = fleetlink.Close
	case tr.Failing:
		c.Kind, c.For = fleetlink.Failing, 2*b.cfg.Span
	default:
		return
	}
	(*announce)(c)
}

// adopt applies a change another process announced: an open (extending
// an open circuit here, never shortening it; opening a closed one only
// when quorum is set), a close newer than this process's open episode, or
// a hold. Adopted opens add a random extra of up to OpenFor, so that the
// fleet half-opens with about one probe per open period, not one per
// process. It reports whether anything changed.
func (b *Breaker) adopt(c fleetlink.Change, quorum bool, now time.Time) bool {
	k := perkey.ParseKey(c.Key)
	var (
		l   *perkey.Lane
		trs perkey.Transitions
	)
	switch c.Kind {
	case fleetlink.Open:
		if l = b.set.Peek(k); l == nil && !quorum {
			return false
		}
		if l == nil {
			l = b.set.Lane(k)
		}
		trs = l.AdoptOpen(now, c.For+perkey.Uniform(0, b.cfg.OpenFor), quorum)
	case fleetlink.Close:
		if l = b.set.Peek(k); l == nil {
			return false
		}
		trs = l.AdoptClose(now, now.Add(-c.Age))
	case fleetlink.Hold:
		l = b.set.Lane(k)
		trs = l.Hold(now.Add(c.For))
	default:
		return false
	}
	if !trs.Any() {
		return false
	}
	b.changed(l, trs, false)
	return true
}

// fleetBreaker is a Breaker as a fleet calls it (fleetlink.Breaker),
// without an exported method on Breaker itself.
type fleetBreaker Breaker

// Join implements fleetlink.Breaker: the breaker announces through the
// first fleet it joins.
func (b *fleetBreaker) Join(announce func(fleetlink.Change)) bool {
	return b.announce.CompareAndSwap(nil, &announce)
}

// Adopt implements fleetlink.Breaker.
func (b *fleetBreaker) Adopt(c fleetlink.Change, quorum bool, now time.Time) bool {
	return (*Breaker)(b).adopt(c, quorum, now)
}
