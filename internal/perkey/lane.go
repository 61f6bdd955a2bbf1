package perkey

import (
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Set. The root package fills in its defaults; here
// every field is taken as it is.
type Config struct {
	// Circuits: lanes trip, open and half-open. Without it they keep the
	// rest (holds, send rates, policy memory) and never open.
	Circuits     bool
	Span         time.Duration // how long failures must persist before a trip
	MinFailures  int           // failures a trip needs
	FailureRatio float64       // share of failures among outcomes a trip needs
	OpenFor      time.Duration // the first open time of an outage
	MaxOpenFor   time.Duration // the longest, as the outage goes on; <= OpenFor: always OpenFor
	OpenJitter   time.Duration // width of the random time added to OpenFor; <= 0: none
	Probes       int           // probes a half-open circuit lets through at once
	MaxKeys      int           // lanes held before idle ones leave; 0: defaultMaxKeys
	SlowAfter    time.Duration // the least wait that counts against the key when the caller gives up (slowcall.go); <= 0: none
	// SeesEverySuccess: every attempt to a key goes through its lane, so
	// a lane knows how many have succeeded (see Lane.early). Without it a
	// lane may be made only after its key first throttled.
	SeesEverySuccess bool
}

// Set holds the lanes of one breaker, or of a transport without one, in a
// bounded table (see Table for how a lane leaves memory). It is safe for
// concurrent use.
type Set struct {
	cfg   Config
	table Table[*Lane]
	// flagged: some lane has been held or paced. Until then a transport
	// that needs lanes for nothing else skips the look-up on its success
	// path.
	flagged atomic.Bool
}

// NewSet returns an empty Set configured by c.
func NewSet(c Config) *Set {
	s := &Set{cfg: c}
	s.table.Idle = (*Lane).idle
	s.table.Max = c.MaxKeys
	return s
}

// Lane returns the key's lane, creating it if needed.
func (s *Set) Lane(k Key) *Lane {
	return s.table.Get(k, func(k Key) *Lane {
		l := &Lane{set: s, key: k, born: time.Now()}
		if s.cfg.SeesEverySuccess {
			l.word.Store(coldBit) // see firstWave
		} else {
			l.early.Store(earlyMax)
			l.sent.Store(earlyMax)
			l.ended.Store(earlyMax)
		}
		return l
	})
}

// Peek returns the key's lane, or nil if the Set holds none.
func (s *Set) Peek(k Key) *Lane { return s.table.Peek(k) }

// Lanes returns every lane the Set holds.
func (s *Set) Lanes() []*Lane { return s.table.Values() }

// Len returns how many lanes the Set holds.
func (s *Set) Len() int { return s.table.Len() }

// Flagged reports whether some lane has been held or paced.
func (s *Set) Flagged() bool { return s.flagged.Load() }

func (s *Set) flag() {
	if !s.flagged.Load() {
		s.flagged.Store(true)
	}
}

// Lane is one key's memory: its circuit, its hold, its send rate and
// attempts in flight, and the previous delay that a policy such as
// DecorrelatedJitter grows from. The circuit and the previous delay are
// reset by a success, never by time alone; a hold ends at its instant.
//
// Concurrency: word is read without the lock (the closed, unheld path of
// every request is that one load) and written only under mu; failing,
// succ, prev and early are atomics so that a success on the closed path
// takes no lock;
// the rest is guarded by mu. A success that read failing just before a
// failure period ends may be counted into the next period: harmless, as it
// only makes the next trip a little less likely. Lock order: mu before a
// pacer's or a slots' own mutex.
type Lane struct {
	set *Set
	key Key // the table's own copy
	// word is the circuit's state in its low 2 bits, the held, paced,
	// wait, route and young flags in bits 2 to 6 and the generation above
	// them, so that one atomic load tells a request all of them. The generation grows at
	// every change of circuit state; an outcome from an earlier generation
	// is ignored (a request admitted before the circuit opened must not
	// count against the next closed period).
	word atomic.Uint64
	// failing is set while a failure period is under way; only then do
	// successes pay for an atomic add to succ.
	failing atomic.Bool
	succ    atomic.Int64 // successes during the failure period
	// streak counts the failures since the latest success, while a
	// failure period is under way (see streakFailing).
	streak atomic.Int64
	// back is closed by the next success while a failure period is under
	// way, or by a close (see Sleep); nil until a request sleeps
	// on it.
	back atomic.Pointer[chan struct{}]
	// rodeOut is set when a request rode the key's failure out in vain,
	// until the key next answers (see RodeOut).
	rodeOut atomic.Bool
	prev    atomic.Int64           // previous delay drawn for this key
	hedger  atomic.Pointer[Hedger] // what hedging knows of the key; nil until a request hedges (see Hedger)
	// early counts the key's successes since the lane was made (born),
	// up to earlyMax, so that a pacer knows all the key's first burst was
	// admitted (see burstRateLocked); earlyMax when not known.
	// sent counts the attempts admitted, and ended the outcomes of those
	// that did not succeed, likewise: until sent reaches earlyMax, the
	// attempts in flight are known (see inFlight).
	early  atomic.Int64
	sent   atomic.Int64
	ended  atomic.Int64
	born   time.Time
	answer atomic.Int64 // the key's answer time, in nanoseconds (slowcall.go)
	watch  atomic.Int64 // when the key's watch ends, in Unix nanoseconds; 0: not watched
	// pace limits the key's send rate after it throttled; nil, with the
	// paced bit clear, for a key that never did (or recovered since).
	pace  atomic.Pointer[pacer]
	slots atomic.Pointer[slots]    // attempts in flight, when limited
	due   atomic.Pointer[calendar] // where Spread has sent callers back; nil until it first does
	// advertises is set once a response of the key advertised a quota
	// (see Advertise): from then on every response is read for it.
	advertises atomic.Bool

	mu        sync.Mutex
	since     time.Time // first failure of the period; guarded by mu
	fails     int       // failures in the period; guarded by mu
	changed   time.Time // when the circuit last changed state; guarded by mu
	openUntil time.Time // when an open circuit may half-open; guarded by mu
	episode   time.Time // when the circuit last opened; guarded by mu
	isolated  bool      // open until an operator resets it; guarded by mu
	holdUntil time.Time // no attempt before then, while the held bit is set; guarded by mu
	// routes are the key's routes held on their own, with when each hold
	// ends, while the route bit is set (see holdFor). Guarded by mu.
	routes    map[Route]time.Time
	heldSince time.Time // guarded by mu
	// The test of the key's short holds (see proof): what it showed,
	// when the current hold's test may go (zero: none due), and whether
	// one is under way. Guarded by mu.
	holdProof    proof
	holdRefusals int // tests refused so far
	holdTestAt   time.Time
	holdWindow   time.Time // the server's reset when the test was set (see heldTested)
	holdTesting  bool
	probes       int // probes in flight while half-open; guarded by mu
	sleepers     int // requests sleeping toward the key; guarded by mu
	// The key's young phase (see firstWave): the attempts it let go,
	// the answers they had, and those waiting their turn. Guarded by mu.
	coldLet, coldAnswers int
	cold                 queue
	// failingSince is when the key began failing: the start of the failure
	// period that tripped the circuit, kept while it stays open or
	// half-open, cleared by a close. Guarded by mu.
	failingSince time.Time
	// The requests waiting for the key to recover (see wait.go), the timer
	// that lets the next go, the recovery under way, and the test of a
	// closed key whose requests wait. Guarded by mu.
	adv     Advert   // the latest quota advertised; guarded by mu
	seen    evidence // what the key's answers showed of its quotas; guarded by mu
	queue   queue
	joins   joins // requests joining the queue, per second
	timer   *time.Timer
	timerAt time.Time
	rec     *recovery
	testing bool
	testAt  time.Time
	// opened is closed when the circuit opens, to wake the requests
	// sleeping toward the key. It is made when the first of them starts
	// sleeping, and while the circuit is open it is closedChan.
	opened chan struct{} // guarded by mu
}

const (
	stateBits = 7      // state, held, paced, wait, route and cold flags
	stateMask = 3      // the circuit's state
	heldBit   = 1 << 2 // a hold is in force
	pacedBit  = 1 << 3 // the key's send rate is limited (see pacer)
	waitBit   = 1 << 4 // requests wait for the key, or it recovers (see wait.go)
	routeBit  = 1 << 5 // some route of the key is held (see hold.go)
	coldBit   = 1 << 6 // the key is young: its sends grow with its answers (see firstWave)
	flagBits  = heldBit | pacedBit | waitBit | routeBit | coldBit
	// fastMask: none of these set means closed, not held, not paced,
	// nobody waits, and the key is past its young phase.
	fastMask = 1<<stateBits - 1
)

func unpack(w uint64) (State, uint64) { return State(w & stateMask), w >> stateBits }

// Key returns the lane's key.
func (l *Lane) Key() Key { return l.key }

// Config returns the configuration of the lane's Set.
func (l *Lane) Config() Config { return l.set.cfg }

// Kind is what an attempt's outcome tells the key's circuit.
type Kind uint8

// The kinds of outcome: None tells nothing (the caller's context ended, a
// certificate error, an attempt admitted but not sent); Success, an answer
// that is not a retryable failure; Failure, a retryable failure, which
// counts toward the circuit unless the host throttled (Outcome.Throttled).
const (
	None Kind = iota
	Success
	Failure
)

// Outcome is what an attempt's outcome tells the key: its kind and, for a
// response, the facts from which the lane decides on a hold and a cut of
// the send rate (see Done). It keeps to four fields, which the compiler
// keeps in registers on the success path.
type Outcome struct {
	Kind  Kind
	Facts Facts
	// Wait is what a usable Retry-After asked for, clamped, and Asked what
	// it asked before the clamp.
	Wait, Asked time.Duration
	// Route is the route the attempt went to; the zero Route stands for
	// the whole key (see holdFor).
	Route Route
}

// Facts are what a response said, or an error showed, that the key's
// hold, send rate and recovery follow.
type Facts uint8

const (
	Throttles  Facts = 1 << iota // the status is one of the adaptive rate's
	TooMany                      // the status is 429
	RetryAfter                   // a usable Retry-After asked for Outcome.Wait
	// Unreached: the attempt found the host not there (its connection
	// refused, say): a recovery's rate is not cut for it (see
	// doneWaitingLocked); a circuit counts it as any failure.
	Unreached
)

// Done records the outcome of the attempt that t admitted, frees the probe
// place and the place in flight that t holds, and returns the changes it
// made: a hold the response asks for comes first, so that the send rate it
// cuts starts again when the hold ends. Call it exactly once per Ticket.
func (l *Lane) Done(t Ticket, o Outcome) (trs Transitions) {
	if o.Kind == Success && o.Facts == 0 && t.plain() { // no fact: no hold, no cut
		l.recordSuccess() // the hot path: no lock, nothing to report
		countTo(&l.early)
		if w := l.word.Load(); w&(pacedBit|coldBit) != 0 {
			if w&coldBit != 0 {
				l.coldAnswer()
			}
			if w&pacedBit != 0 {
				// Sent before the key was paced: it counts toward what
				// the server admits.
				l.pacedSuccess(t)
			}
		}
		return trs
	}
	return l.doneSlow(t, o, true)
}

// Heard applies what the response to an attempt that no lane admitted
// (sent before its key had a lane) says of the key: its hold and its cut
// of the send rate; the circuit hears nothing. It returns the key's lane,
// or nil when the response asks nothing of it, and the changes made.
func (s *Set) Heard(k Key, o Outcome) (*Lane, Transitions) {
	if !o.holds() && !o.cuts() {
		return nil, Transitions{}
	}
	l := s.Lane(k)
	o.Kind = None
	return l, l.doneSlow(Ticket{}, o, o.cuts())
}

// doneSlow is Done past its fast path. counted: the attempt was counted
// among those sent (Lane.sent), so its outcome is counted too.
func (l *Lane) doneSlow(t Ticket, o Outcome, counted bool) Transitions {
	var trs Transitions
	if t.has(holdFlag) {
		trs = l.heldTested(time.Now(), o)
	}
	if o.holds() {
		trs.merge(l.holdFor(o, time.Now().Add(o.Wait)))
	}
	switch {
	case o.Kind == Success:
		countTo(&l.early)
	case counted:
		countTo(&l.ended)
	}
	if t.has(slotFlag) {
		l.slotsOf().release()
	}
	if t.has(pacedFlag) {
		if p := l.pace.Load(); p != nil {
			p.answered()
		}
	}
	kind := o.Kind
	if o.Throttled() {
		// It tells the circuit nothing: counted as a failure, a batch's
		// first burst, all answered at once, would trip the circuit of a
		// host that serves every request it admits.
		kind = None
	}
	l.record(t, kind, o.Facts&Unreached != 0, &trs)
	if o.cuts() {
		l.throttle(time.Now(), t.paceGen())
	}
	if kind == Success {
		l.pacedSuccess(t)
	}
	if counted && l.word.Load()&coldBit != 0 {
		// Last: the pace, the hold and the circuit this answer set may end
		// the young phase, rather than let two more go.
		l.coldAnswer()
	}
	return trs
}

// pacedSuccess tells the key's pacer, if it has one, of a success: of
// what it admitted, and, for an attempt it let go, that the server
// answered its generation.
func (l *Lane) pacedSuccess(t Ticket) {
	if p := l.pace.Load(); p != nil {
		p.success(time.Now(), t.paceGen(), t.has(pacedFlag))
	}
}

// recordSuccess records a success of an attempt that was not a probe: the
// hot path, with no lock, and no write unless there is memory to reset.
func (l *Lane) recordSuccess() {
	if l.failing.Load() {
		l.succ.Add(1)
		if l.streak.Load() != 0 {
			l.streak.Store(0)
		}
		if l.rodeOut.Load() {
			l.rodeOut.Store(false)
		}
		l.wakeBack()
	}
	if l.prev.Load() != 0 {
		l.prev.Store(0)
	}
}

// RodeOut records that a request rode the key's failure out in vain:
// its last attempts failed too. Until the key next answers, its failure
// is not young any more: waiting did not pay, and the requests after
// (an SDK's own retries, each a request of its own) do not wait again.
// It is recorded only while the key still fails as a whole: a ride-out
// that stopped because others are answered again says nothing.
func (l *Lane) RodeOut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failingWholeLocked() {
		l.rodeOut.Store(true)
	}
}

// RiddenOut reports whether a request rode the key's failure out in vain
// since the key last answered.
func (l *Lane) RiddenOut() bool { return l.rodeOut.Load() }

// wakeBack wakes the requests sleeping until the key answers someone. A
// success calls it without mu, the lane's close with it: the swap, not
// the lock, makes one caller close a channel.
func (l *Lane) wakeBack() {
	if c := l.back.Load(); c != nil && l.back.CompareAndSwap(c, nil) {
		close(*c)
	}
}

// earlyMax bounds Lane.early and the counts beside it: past it a success
// or an admission costs only a load.
const earlyMax = 1 << 16

// countTo adds one to a count of the lane's youth, until earlyMax.
func countTo(n *atomic.Int64) {
	if n.Load() < earlyMax {
		n.Add(1)
	}
}

// inFlight returns how many attempts the lane admitted whose outcome it
// has not recorded, while it knows (until earlyMax attempts); 0 past that.
func (l *Lane) inFlight() int {
	s := l.sent.Load()
	if s >= earlyMax {
		return 0
	}
	return max(int(s-l.early.Load()-l.ended.Load()), 0)
}

// Prev returns the previous delay drawn for the key (0 after a success).
func (l *Lane) Prev() time.Duration { return time.Duration(l.prev.Load()) }

// SetPrev records d as the key's previous delay.
func (l *Lane) SetPrev(d time.Duration) { l.prev.Store(int64(d)) }

// Waiting reports whether requests wait for the key, or it recovers; one
// atomic load.
func (l *Lane) Waiting() bool { return l.word.Load()&waitBit != 0 }

// IsOpen reports whether the circuit is open now; one atomic load.
func (l *Lane) IsOpen() bool {
	state, _ := unpack(l.word.Load())
	return state == Open
}

// Paced reports whether the key's send rate is limited: its attempts go
// through its pacer, one after another at its rate.
func (l *Lane) Paced() bool { return l.word.Load()&pacedBit != 0 }

// idle reports that the lane may leave memory: no probe is in flight, no
// request sleeps toward or waits for the key, no recovery or test is
// under way, no hold or isolation is in force, no attempt waits for the
// send rate or holds a place in flight, and either
// the circuit is closed with no failure period under way (none, or one
// older than twice the span, which the next failure would start afresh),
// or it is open past its open time, or half-open with no probe in flight,
// when the next request would probe a key that nobody has asked for since.
// A policy's previous delay does not keep a lane: a key dropped from
// memory starts again from Base.
func (l *Lane) idle(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.word.Load()
	if l.probes != 0 || l.sleepers != 0 || l.isolated || (w&heldBit != 0 && now.Before(l.holdUntil)) || l.routeHeldLocked(now) ||
		l.queue.len() != 0 || l.cold.len() != 0 || l.rec != nil || l.testing {
		return false
	}
	if p := l.pace.Load(); p != nil && !p.free(now) {
		return false
	}
	if s := l.slots.Load(); s != nil && s.busy() {
		return false
	}
	switch state, _ := unpack(w); state {
	case Closed:
		return !l.failing.Load() || now.Sub(l.since) > 2*l.set.cfg.Span
	case Open:
		return !now.Before(l.openUntil)
	case HalfOpen:
		// With no probe in flight (checked above), as an open circuit
		// past its open time is: its probe told nothing (a throttle, or
		// its caller gave up), and the next request would probe again.
		return true
	}
	return false
}
