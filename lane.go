package retryhttp

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrHeld is wrapped by the error of a request whose key is held: a server
// asked, with a long Retry-After, for no request before an instant that the
// request could not wait for (its deadline, or its Retry-After clamp, comes
// first). Error.Until says when the hold ends.
var ErrHeld = errors.New("retryhttp: held by the server's Retry-After")

// errIsolated refuses the requests to a key an operator isolated.
var errIsolated = &isolatedError{}

type isolatedError struct{}

func (*isolatedError) Error() string        { return "retryhttp: circuit open: isolated by an operator" }
func (*isolatedError) Is(target error) bool { return target == ErrCircuitOpen }

// holdThreshold is the shortest Retry-After that holds its key: as long as
// the breaker's shortest open time. A server that asks for that long has
// said what the breaker would need seconds of failures to learn, and every
// request to the key, not only the one answered, should wait. A shorter
// wait paces that one request, which its retry's delay obeys.
const holdThreshold = defaultBreakerOpenFor

// outcome is what an attempt tells the circuit.
type outcome int

const (
	outcomeNone    outcome = iota // tells nothing: the caller's context ended, a certificate error
	outcomeSuccess                // the host answered with a response that is not a retryable failure
	outcomeFailure                // a retryable failure
)

// lane is one key's memory: its circuit, its hold, and the previous delay
// that DecorrelatedJitter grows from. The circuit and the previous delay
// are reset by a success, never by time alone; a hold ends at its instant.
// A lane leaves memory only when its table must make room and the lane is
// idle (see idle and table).
//
// Concurrency: word is read without the lock (the closed, unheld path of
// every request is that one load) and written only under mu; failing, succ
// and prev are atomics so that a success on the closed path takes no lock;
// the rest is guarded by mu. A success that read failing just before a
// failure period ends may be counted into the next period: harmless, as it
// only makes the next trip a little less likely.
type lane struct {
	b   *Breaker
	key hostKey // the table's own copy
	// word is the state in its low 2 bits, the held flag in bit 2 and the
	// generation above them, so that one atomic load tells a request all
	// of them; bit 3 says the key's send rate is limited (pace). The generation grows at every change of circuit state; an
	// outcome from an earlier generation is ignored (a request admitted
	// before the circuit opened must not count against the next closed
	// period).
	word atomic.Uint64
	// failing is set while a failure period is under way; only then do
	// successes pay for an atomic add to succ.
	failing atomic.Bool
	succ    atomic.Int64 // successes during the failure period
	prev    atomic.Int64 // previous delay drawn for this key, for DecorrelatedJitter
	// pace limits the key's send rate after it throttled; nil, with the
	// paced bit clear, for a key that never did (or recovered since).
	pace  atomic.Pointer[pacer]
	slots atomic.Pointer[slots] // attempts in flight, with WithConcurrencyLimit
	// due is where RetryAt has told callers of this key to come back (see
	// calendar); nil until it first spreads one.
	due atomic.Pointer[calendar]

	mu        sync.Mutex
	since     time.Time // first failure of the period; guarded by mu
	fails     int       // failures in the period; guarded by mu
	changed   time.Time // when the circuit last changed state; guarded by mu
	openUntil time.Time // when an open circuit may half-open; guarded by mu
	episode   time.Time // when the circuit last opened; guarded by mu
	isolated  bool      // open until an operator resets it; guarded by mu
	holdUntil time.Time // no attempt before then, while the held bit is set; guarded by mu
	heldSince time.Time // guarded by mu
	probes    int       // probes in flight while half-open; guarded by mu
	sleepers  int       // requests sleeping toward the key; guarded by mu
	// opened is closed when the circuit opens, to wake the requests
	// sleeping toward the key. It is made when the first of them starts
	// sleeping, and while the circuit is open it is closedChan.
	opened chan struct{} // guarded by mu
}

const (
	stateBits = 4      // state, held and paced flags
	heldBit   = 1 << 2 // in word: a hold is in force
	pacedBit  = 1 << 3 // in word: the key's send rate is limited (see pacer)
	flagBits  = heldBit | pacedBit
)

// closedChan is the opened channel of every open circuit.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func newLane(b *Breaker, k hostKey) *lane {
	return &lane{b: b, key: k}
}

func unpack(w uint64) (State, uint64) { return State(w & 3), w >> stateBits }

// ticket is what admission hands a request: the generation it was admitted
// in, and whether it is a half-open probe.
type ticket struct {
	gen   uint64
	probe bool
	paced bool // the key's send rate is limited: wait for the pacer
}

// transition is a change of state, returned so that it can be reported
// after the lock is released; until is when a hold or an open circuit ends.
type transition struct {
	from, to State
	until    time.Time
	failing  bool // a failure period began: the fleet is told, nobody else
	extended bool // an open circuit's time was extended by another process
}

// transitions holds the changes one call made: at most two (a hold ending
// as the circuit half-opens).
type transitions [2]transition

func (ts *transitions) add(t transition) {
	if ts[0].from == ts[0].to {
		ts[0] = t
	} else {
		ts[1] = t
	}
}

// heldError refuses an attempt while the key is held.
type heldError struct{ until time.Time }

func (e *heldError) Error() string        { return ErrHeld.Error() + " until " + e.until.Format(time.RFC3339) }
func (e *heldError) Is(target error) bool { return target == ErrHeld }

// allow admits an attempt or refuses it: with ErrCircuitOpen (or the
// isolation) while the circuit is open or its probes are taken, with a
// *heldError while the key is held. A closed circuit with no hold admits
// with one atomic load. An admitted attempt to a paced key must still wait
// for the key's send rate (ticket.paced).
func (l *lane) allow() (ticket, transitions, error) {
	var trs transitions
	w := l.word.Load()
	if w&(1<<stateBits-1) == 0 {
		return ticket{gen: w >> stateBits}, trs, nil
	}
	if w&(1<<stateBits-1) == pacedBit {
		return ticket{gen: w >> stateBits, paced: true}, trs, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.word.Load()&heldBit != 0 {
		if now.Before(l.holdUntil) {
			return ticket{}, trs, &heldError{until: l.holdUntil}
		}
		trs.add(l.unholdLocked())
	}
	state, gen := unpack(l.word.Load())
	if state == StateOpen {
		if l.isolated {
			return ticket{}, trs, errIsolated
		}
		if now.Before(l.openUntil) {
			return ticket{}, trs, ErrCircuitOpen
		}
		trs.add(l.setLocked(StateHalfOpen, now))
		l.opened = nil
		l.probes = 0
		state, gen = unpack(l.word.Load())
	}
	paced := l.word.Load()&pacedBit != 0
	switch {
	case state == StateClosed:
		return ticket{gen: gen, paced: paced}, trs, nil
	case l.probes < l.b.cfg.Probes:
		l.probes++
		return ticket{gen: gen, probe: true, paced: paced}, trs, nil
	}
	return ticket{}, trs, ErrCircuitOpen
}

// record tells the circuit the outcome of an attempt admitted with tk.
func (l *lane) record(tk ticket, o outcome) transition {
	if o == outcomeSuccess && !tk.probe {
		l.recordSuccess()
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
		// period no longer holds a place: its places were freed when the
		// period ended.
		return transition{}
	}
	if tk.probe {
		l.probes--
	}
	now := time.Now()
	switch {
	case state == StateHalfOpen && o == outcomeSuccess:
		l.prev.Store(0)
		l.resetPeriodLocked()
		// Other probes still in flight belong to the half-open period that
		// ends here: their outcomes will be ignored, so their places are
		// freed now.
		l.probes = 0
		return l.setLocked(StateClosed, now)
	case state == StateHalfOpen && o == outcomeFailure:
		return l.openLocked(now, l.b.cfg.OpenFor+uniform(0, l.b.cfg.OpenJitter))
	case state == StateClosed && o == outcomeFailure:
		return l.failLocked(now)
	}
	return transition{}
}

// recordSuccess records a success of an attempt that was not a probe: the
// hot path, with no lock, and no write unless there is memory to reset.
func (l *lane) recordSuccess() {
	if l.failing.Load() {
		l.succ.Add(1)
	}
	if l.prev.Load() != 0 {
		l.prev.Store(0)
	}
}

// failLocked counts a failure in the closed state and trips the circuit when
// failure has persisted over the span.
func (l *lane) failLocked(now time.Time) transition {
	c := &l.b.cfg
	var tr transition
	if !l.failing.Load() || now.Sub(l.since) > 2*c.Span {
		// A new failure period: the first failure, or an old period that
		// never tripped.
		l.resetPeriodLocked()
		l.since = now
		l.failing.Store(true)
		tr.failing = true
	}
	l.fails++
	total := l.fails + int(l.succ.Load())
	if now.Sub(l.since) >= c.Span && l.fails >= c.MinFailures &&
		float64(l.fails) >= c.FailureRatio*float64(total) {
		tr = l.openLocked(now, c.OpenFor+uniform(0, c.OpenJitter))
		tr.failing = true // an open reports the failure that caused it
	}
	return tr
}

// openLocked opens the circuit for d, and wakes every request sleeping
// toward the key.
func (l *lane) openLocked(now time.Time, d time.Duration) transition {
	l.openUntil = now.Add(d)
	l.episode = now
	l.resetPeriodLocked()
	l.probes = 0 // as on closing: the half-open period's probes are over
	if l.opened != nil && l.opened != closedChan {
		close(l.opened)
	}
	l.opened = closedChan
	tr := l.setLocked(StateOpen, now)
	tr.until = l.openUntil
	return tr
}

func (l *lane) resetPeriodLocked() {
	l.failing.Store(false)
	l.succ.Store(0)
	l.fails = 0
	l.since = time.Time{}
}

// setLocked moves to state s in a new generation, keeping the held flag.
func (l *lane) setLocked(s State, now time.Time) transition {
	w := l.word.Load()
	from, gen := unpack(w)
	l.word.Store((gen+1)<<stateBits | w&flagBits | uint64(s))
	l.changed = now
	return transition{from: from, to: s}
}

// adoptOpen applies another process's open: it extends an open circuit's
// time, never shortens it, and opens a circuit that is not open when
// quorum is set or when it is half-open (its own episode is under way).
func (l *lane) adoptOpen(now time.Time, d time.Duration, quorum bool) transition {
	l.mu.Lock()
	defer l.mu.Unlock()
	state, _ := unpack(l.word.Load())
	until := now.Add(d)
	switch {
	case l.isolated:
		return transition{}
	case state == StateOpen:
		if !until.After(l.openUntil) {
			return transition{}
		}
		l.openUntil = until
		return transition{from: StateOpen, to: StateOpen, until: until, extended: true}
	case state == StateClosed && !quorum:
		return transition{}
	}
	return l.openLocked(now, d)
}

// adoptClose applies another process's close that happened at at: only a
// close newer than this process's open episode closes the circuit.
func (l *lane) adoptClose(now, at time.Time) transition {
	l.mu.Lock()
	defer l.mu.Unlock()
	if state, _ := unpack(l.word.Load()); state == StateClosed || l.isolated || !l.episode.Before(at) {
		return transition{}
	}
	l.resetPeriodLocked()
	l.probes = 0
	return l.setLocked(StateClosed, now)
}

// hold holds the key until until, or keeps a longer hold: a hold is never
// shortened, by a success or by a shorter Retry-After. It reports the hold
// as a change to StateHeld when it begins or grows.
func (l *lane) hold(until time.Time) transition {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.word.Load()
	if w&heldBit != 0 && !until.After(l.holdUntil) {
		return transition{}
	}
	from, _ := unpack(w)
	if w&heldBit != 0 {
		from = StateHeld
	} else {
		l.heldSince = time.Now()
	}
	l.holdUntil = until
	l.word.Store(w | heldBit)
	l.b.flag()
	return transition{from: from, to: StateHeld, until: until}
}

// unholdLocked ends a hold whose time has come.
func (l *lane) unholdLocked() transition {
	w := l.word.Load()
	l.word.Store(w &^ heldBit)
	l.holdUntil, l.heldSince = time.Time{}, time.Time{}
	to, _ := unpack(w)
	return transition{from: StateHeld, to: to}
}

// throttle cuts the key's send rate after a throttling answer to an
// attempt sent at pacer generation gen, and starts pacing the key if it
// was not.
func (l *lane) throttle(now time.Time, gen uint64) {
	p := l.pace.Load()
	if p == nil {
		l.mu.Lock()
		if p = l.pace.Load(); p == nil {
			p = newPacer(now)
			l.pace.Store(p)
			l.word.Store(l.word.Load() | pacedBit)
			l.b.flag()
		}
		l.mu.Unlock()
	}
	p.throttle(now, gen)
}

// waitPace waits for the key's send rate, and returns the generation to
// send at. A pacer that no longer limits anything is dropped, and the key
// costs nothing again.
func (l *lane) waitPace(ctx context.Context) (uint64, error) {
	p := l.pace.Load()
	if p == nil {
		return 0, nil
	}
	gen, err := p.wait(ctx)
	if err == nil {
		p.mu.Lock()
		free := p.free(time.Now())
		p.mu.Unlock()
		if free {
			l.mu.Lock()
			if l.pace.CompareAndSwap(p, nil) {
				l.word.Store(l.word.Load() &^ pacedBit)
			}
			l.mu.Unlock()
		}
	}
	return gen, err
}

// paceSuccess tells the key's pacer, if any, of a normal answer to an
// attempt sent at gen.
func (l *lane) paceSuccess(gen uint64) {
	if p := l.pace.Load(); p != nil {
		p.success(gen)
	}
}

// slotsOf returns the key's attempts in flight, made on first use.
func (l *lane) slotsOf() *slots {
	if s := l.slots.Load(); s != nil {
		return s
	}
	l.slots.CompareAndSwap(nil, &slots{})
	return l.slots.Load()
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

// probeAt returns when the key may next be tried: when a hold or an open
// circuit's open time ends, whichever is later, or now. An isolated key
// has no such instant: the zero time.
func (l *lane) probeAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	w := l.word.Load()
	at := now
	if state, _ := unpack(w); state == StateOpen {
		if l.isolated {
			return time.Time{}
		}
		at = later(at, l.openUntil)
	}
	if w&heldBit != 0 {
		at = later(at, l.holdUntil)
	}
	return at
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// isOpen reports whether the circuit is open now; one atomic load.
func (l *lane) isOpen() bool {
	state, _ := unpack(l.word.Load())
	return state == StateOpen
}

// idle reports that the lane may leave memory: no probe is in flight, no
// request sleeps toward the key, no hold or isolation is in force, and
// either the circuit is closed with no failure period under way (none, or
// one older than twice the span, which the next failure would start
// afresh), or it is open past its open time, or half-open with no probe
// in flight, when the next request would probe a key that nobody has
// asked for since. A policy's previous delay
// does not keep a lane: a key dropped from memory starts again from Base.
func (l *lane) idle(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.word.Load()
	if l.probes != 0 || l.sleepers != 0 || l.isolated || (w&heldBit != 0 && now.Before(l.holdUntil)) {
		return false
	}
	if p := l.pace.Load(); p != nil {
		p.mu.Lock()
		free := p.free(now)
		p.mu.Unlock()
		if !free {
			return false
		}
	}
	if s := l.slots.Load(); s != nil {
		s.mu.Lock()
		busy := s.inFlight > 0
		s.mu.Unlock()
		if busy {
			return false
		}
	}
	switch state, _ := unpack(w); state {
	case StateClosed:
		return !l.failing.Load() || now.Sub(l.since) > 2*l.b.cfg.Span
	case StateOpen:
		return !now.Before(l.openUntil)
	case StateHalfOpen:
		// With no probe in flight (checked above), as an open circuit
		// past its open time is: its probe told nothing (a 429, or its
		// caller gave up), and the next request would probe again.
		return true
	}
	return false
}
