package retryhttp

import (
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

// BreakerConfig configures a Breaker. The zero value means every default,
// and the package's rule for settings holds for every field.
type BreakerConfig struct {
	// Span is how long failures must persist, from the first of a failure
	// period to the latest, before the circuit trips: 2,000 requests
	// failing in the same 100 ms are one event. A period that reaches
	// twice the span without tripping starts afresh. 0 means 2 s.
	Span time.Duration
	// MinFailures is how many failures the period must hold. 0 means 5.
	MinFailures int
	// FailureRatio is the share of failures among the period's outcomes at
	// or above which the circuit trips. 0 means 0.5.
	FailureRatio float64
	// OpenFor is how long a circuit first stays open. Each failed probe
	// opens it again for a 64th of how long the host has been failing,
	// within [OpenFor, MaxOpenFor]. 0 means 250 ms; MaxOpenFor 0 means
	// 60 s.
	OpenFor, MaxOpenFor time.Duration
	// OpenJitter is the most of the random time added to an open time,
	// growing with it, so that circuits tripped together do not half-open
	// together. 0 means OpenFor.
	OpenJitter time.Duration
	// Probes is how many requests a half-open circuit lets through at
	// once; the first answer closes or reopens it. 0 means 1.
	Probes int
	// MaxHosts is how many keys are kept before idle ones are evicted,
	// least recently used first. 0 means 65,536.
	MaxHosts int
	// SlowAfter: an attempt without a body unanswered at its caller's
	// deadline, after longer than SlowAfter and twice the host's recent
	// answers, fails its host, so that a hung host trips. 0 means 1 s.
	SlowAfter time.Duration
	// OnStateChange, if set, is told each change of a circuit (Event's
	// Key, From, To and Until), Isolate and Reset included, once however
	// many transports share the Breaker, after its locks are released.
	OnStateChange func(Event)
}

// Breaker holds one circuit per key. A circuit counts retryable failures
// (not a 429 WithAdaptiveRate covers: the host is up), trips on failure
// that persists over BreakerConfig.Span, refuses requests while open, then
// lets a probe through. It may be shared between transports.
type Breaker struct {
	set  *perkey.Set
	cfg  BreakerConfig             // with the defaults filled in
	link atomic.Pointer[fleetLink] // the fleet it shares through, when set
}

// fleetLink is what a breaker that joined a fleet calls it with.
type fleetLink struct {
	announce func(fleetlink.Change)   // announces a change the breaker's requests made
	share    func(key string) float64 // the part of a key's quota this process may spend
}

// quotaShare returns the part of the key's advertised quota this process
// may spend: all of it alone, its share in a fleet. Asking tells the fleet
// that this process paces the key to its quota: the processes that do
// divide it.
func (b *Breaker) quotaShare(key string) float64 {
	l := b.link.Load()
	if l == nil {
		return 1
	}
	l.announce(fleetlink.Change{Kind: fleetlink.Demand, Key: key})
	return l.share(key)
}

// shared reports whether the breaker shares through a fleet.
func (b *Breaker) shared() bool { return b.link.Load() != nil }

// NewBreaker returns a Breaker configured by c.
func NewBreaker(c BreakerConfig) *Breaker {
	if math.IsNaN(c.FailureRatio) {
		c.FailureRatio = 0 // the default
	}
	c.FailureRatio = min(c.FailureRatio, 1) // a share: more than all is all
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

// The states of a circuit.
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

// HostState is what a Breaker holds for one key.
type HostState struct {
	Key          string    // as hooks and errors report it
	State        State     // the circuit's
	Since        time.Time // when the circuit entered State; zero for a key the breaker does not keep
	Until        time.Time // when an open circuit may let a probe through; zero while isolated
	HeldUntil    time.Time // when a hold a server asked for ends; zero when not held
	Isolated     bool      // Isolate opened the circuit, until Reset
	FailingSince time.Time // when the key began failing; zero when it is not
	Rate         float64   // the send rate it is paced at, per second; 0 when not paced
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

// Host returns the state of one key, scheme://host[:port] or what WithKey
// computes; a key the breaker does not hold is closed.
func (b *Breaker) Host(key string) HostState {
	l := b.set.Peek(perkey.ParseKey(key))
	if l == nil {
		return HostState{Key: key, State: StateClosed}
	}
	return hostState(l.Key().String(), l.View(time.Now()))
}

// Snapshot returns the state of every key whose circuit is not closed, or
// that is held or paced, each read at its own instant, in any order.
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

// Isolate opens the key's circuit until Reset: its requests are refused,
// and those sleeping toward it wake.
func (b *Breaker) Isolate(key string) {
	l := b.set.Lane(perkey.ParseKey(key))
	b.changed(l, l.Isolate(time.Now(), maxBreakerDuration), false)
}

// Reset closes the key's circuit, ends its hold and isolation, and
// forgets its failures, as after a fix.
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
	link := b.link.Load()
	if !local || link == nil {
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
	link.announce(c)
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
func (b *fleetBreaker) Join(announce func(fleetlink.Change), share func(key string) float64) bool {
	return b.link.CompareAndSwap(nil, &fleetLink{announce: announce, share: share})
}

// Adopt implements fleetlink.Breaker.
func (b *fleetBreaker) Adopt(c fleetlink.Change, quorum bool, now time.Time) bool {
	return (*Breaker)(b).adopt(c, quorum, now)
}
