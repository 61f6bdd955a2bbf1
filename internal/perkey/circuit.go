package perkey

import "time"

// State is the state of a key's circuit, or its hold.
type State uint8

// The states, in the order of the root package's State values.
const (
	Closed   State = iota // requests pass; failures are counted
	Open                  // requests are refused without touching the network
	HalfOpen              // a few probes pass; the rest are refused
	Held                  // the server asked for no requests until an instant
)

// Transition is a change of state, returned so that it is reported after
// the lane's lock is released. From == To means no change, unless Failing
// or Extended says what else happened.
type Transition struct {
	From, To State
	// Until is when a hold or an open circuit ends, for a change to Held
	// or Open; the zero time for an isolation, which has no end.
	Until time.Time
	// Failing: a failure period began (or the circuit opened on one); a
	// fleet is told, nobody else.
	Failing bool
	// Extended: another process's open extended this open circuit's time.
	Extended bool
}

// Changed reports whether the transition is a change of state.
func (t Transition) Changed() bool { return t.From != t.To }

// Circuit reports whether the transition is a change of the circuit's
// state: not a hold beginning or ending, beside the circuit.
func (t Transition) Circuit() bool { return t.Changed() && t.From != Held && t.To != Held }

// Transitions is the changes one call made: at most three (a hold the
// response asks for, then a hold ending as the circuit half-opens; a hold
// and an isolation ending together). The
// zero value is none, which is what the success path returns: changes are
// rare, so they are kept out of line, and a call that made none returns
// one nil pointer.
type Transitions struct{ c *changes }

type changes struct {
	n    int
	list [3]Transition
}

// Any reports whether the call made a change, or began a failure period.
func (ts Transitions) Any() bool { return ts.c != nil }

// List returns the changes in the order they were made.
func (ts Transitions) List() []Transition {
	if ts.c == nil {
		return nil
	}
	return ts.c.list[:ts.c.n]
}

// add appends t if it says anything.
func (ts *Transitions) add(t Transition) {
	if !t.Changed() && !t.Failing && !t.Extended {
		return
	}
	if ts.c == nil {
		ts.c = new(changes)
	}
	ts.c.list[ts.c.n] = t
	ts.c.n++
}

// merge appends the changes of o.
func (ts *Transitions) merge(o Transitions) {
	for _, t := range o.List() {
		ts.add(t)
	}
}

// one returns t alone as Transitions.
func one(t Transition) Transitions {
	var ts Transitions
	ts.add(t)
	return ts
}

// allow admits an attempt as the circuit, the hold and the key's waiters
// see it: refused with ErrOpen (or ErrIsolated) while the circuit is open
// or its probes are taken, with a *HeldError while the key is held, and,
// when queue is set, with ErrTurn while the key recovers and others wait
// their turn. g is what the queue let the request go with, if it did. An
// admitted attempt to a paced key must still wait for the key's send rate
// (pacedFlag). Changes are added to trs.
func (l *Lane) allow(trs *Transitions, g grant, lim Limits) (Ticket, error) {
	w := l.word.Load()
	if w&fastMask == 0 {
		return Ticket{gen: w >> stateBits}, nil
	}
	if w&fastMask == pacedBit {
		return Ticket{gen: w >> stateBits, pace: pacedFlag}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.word.Load()&routeBit != 0 {
		if until := l.routes[lim.Route]; now.Before(until) {
			return Ticket{}, l.refusedLocked(g, &HeldError{Until: until})
		}
		l.routeHeldLocked(now) // forgets the holds that are over
	}
	if l.word.Load()&heldBit != 0 {
		if now.Before(l.holdUntil) {
			test, he := l.heldLocked(now, g == grantNone)
			if !test {
				return Ticket{}, l.refusedLocked(g, he)
			}
			// It goes now, unpaced: it is the hold's test.
			tk := Ticket{gen: l.word.Load() >> stateBits}
			tk.set(holdFlag)
			return tk, nil
		}
		trs.add(l.unholdLocked())
	}
	state, gen := unpack(l.word.Load())
	if state == Open {
		if l.isolated {
			return Ticket{}, l.refusedLocked(g, ErrIsolated)
		}
		if now.Before(l.openUntil) {
			return Ticket{}, l.refusedLocked(g, ErrOpen)
		}
		trs.add(l.halfOpenLocked(now))
		// The oldest waiters take the probes before any newcomer.
		l.releaseLocked(now, trs, false)
		state, gen = unpack(l.word.Load())
	}
	w = l.word.Load()
	tk := Ticket{gen: gen}
	if w&pacedBit != 0 {
		tk.set(pacedFlag)
	}
	switch {
	case state == Closed && w&waitBit == 0:
		return tk, nil
	case state == Closed:
		switch {
		case g == grantTurn && l.rec != nil:
			tk.set(recovFlag)
		case g == grantTurn:
			// The recovery is over: an attempt like any other.
		case g == grantTest:
			tk.set(testFlag)
		case l.rec != nil && lim.Queue && !l.rec.flowOnly():
			return Ticket{}, ErrTurn
		default:
			// Requests wait for a closed key (their retries found no
			// budget), or it recovers and this newcomer may not wait: it
			// goes, and its success lets the waiters go. While newcomers
			// test the key, the waiters' own test is not needed.
			tk.set(watchFlag)
			if l.rec == nil && !l.testing {
				l.testAt = later(l.testAt, now.Add(l.set.cfg.OpenFor))
			}
		}
		return tk, nil
	case l.queue.len() == 0 && l.probes < l.set.cfg.Probes:
		l.probes++
		tk.set(probeFlag)
		return tk, nil
	}
	return Ticket{}, l.refusedLocked(g, ErrOpen)
}

// refusedLocked returns err for a request the queue let go that could not
// be admitted after all: the test it was to be is not under way. Called
// with mu held.
func (l *Lane) refusedLocked(g grant, err error) error {
	switch {
	case g == grantTest:
		l.testing = false
		l.updateWaitBitLocked()
	case g == grantTurn && l.rec != nil:
		l.rec.answered() // a turn that sends nothing is not in flight
	}
	return err
}

// record tells the circuit the outcome of an attempt admitted with tk,
// and the key's waiters what it says; changes are added to trs. A
// throttle tells the circuit nothing, as None does.
func (l *Lane) record(tk Ticket, o Kind, unreached bool, trs *Transitions) {
	queued := tk.has(recovFlag | testFlag | watchFlag)
	if o == Success && !tk.has(probeFlag) && !queued {
		l.recordSuccess()
		return
	}
	if (o == None || !l.set.cfg.Circuits) && !tk.has(probeFlag) && !queued {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	// Whether the key failed as a whole before this outcome: a success
	// that ends such a failure starts the waiters' recovery.
	whole := !l.set.cfg.Circuits || l.failingWholeLocked()
	if o == Success && !tk.has(probeFlag) {
		l.recordSuccess()
	}
	if state, gen := unpack(l.word.Load()); gen == tk.gen {
		// An outcome from an earlier state is ignored. A probe of an
		// earlier half-open period no longer holds a place: its places
		// were freed when the period ended.
		if tk.has(probeFlag) {
			l.probes--
		}
		switch {
		case !l.set.cfg.Circuits:
		case state == HalfOpen && o == Success:
			trs.add(l.closeLocked(now))
		case state == HalfOpen && o == Failure:
			trs.add(l.openLocked(now, l.backoffLocked(now)))
		case state == Closed && o == Failure:
			trs.add(l.failLocked(now))
		}
	}
	if queued {
		l.doneWaitingLocked(tk, o, whole, unreached, now, trs)
		return
	}
	// A probe's place is free again, or the circuit changed: the waiters
	// may go, or wait for another instant.
	l.releaseLocked(now, trs, false)
	l.scheduleLocked(now)
}

// failLocked counts a failure in the closed state and trips the circuit
// when failure has persisted over the span: at least MinFailures failures,
// at least FailureRatio of the period's outcomes, the first at least Span
// before the latest. A failure period that reaches twice the span without
// tripping starts afresh. Called with mu held.
func (l *Lane) failLocked(now time.Time) Transition {
	c := &l.set.cfg
	var tr Transition
	if !l.failing.Load() || now.Sub(l.since) > 2*c.Span {
		// A new failure period: the first failure, or an old period that
		// never tripped.
		l.resetPeriodLocked()
		l.since = now
		l.failing.Store(true)
		tr.Failing = true
	}
	l.fails++
	l.streak.Add(1)
	total := l.fails + int(l.succ.Load())
	if now.Sub(l.since) >= c.Span && l.fails >= c.MinFailures &&
		float64(l.fails) >= c.FailureRatio*float64(total) {
		if l.failingSince.IsZero() {
			l.failingSince = l.since
		}
		tr = l.openLocked(now, l.backoffLocked(now))
		tr.Failing = true // an open reports the failure that caused it
	}
	return tr
}

// openLocked opens the circuit for d: what happens when the circuit opens.
// The failure period is over, the half-open period's probes are too, a
// recovery under way stops, and every request sleeping toward the key
// wakes (Sleep returns ErrOpen); until d has passed, Admit refuses, and
// the key's waiters wait for the probe. Called with mu held.
func (l *Lane) openLocked(now time.Time, d time.Duration) Transition {
	l.openUntil = now.Add(d)
	l.episode = now
	l.resetPeriodLocked()
	l.probes = 0
	l.rec = nil
	// A test of the closed key is over too: its outcome, if it comes, is
	// a probe's now, or from an earlier generation.
	l.testing = false
	if l.opened != nil && l.opened != closedChan {
		close(l.opened)
	}
	l.opened = closedChan
	tr := l.setLocked(Open, now)
	tr.Until = l.openUntil
	l.updateWaitBitLocked()
	l.scheduleLocked(now)
	return tr
}

// halfOpenLocked moves an open circuit whose open time is over to
// half-open. Called with mu held.
func (l *Lane) halfOpenLocked(now time.Time) Transition {
	tr := l.setLocked(HalfOpen, now)
	l.opened = nil
	l.probes = 0
	return tr
}

// backoffLocked draws how long an open circuit stays open, and how long a
// closed key whose requests wait goes between tests: OpenFor at first,
// growing to a 32nd of how long the key has been failing, at most
// MaxOpenFor; plus a random part of up to OpenJitter, grown in proportion,
// so that circuits tripped together (a fleet of clients, or many hosts
// behind one failed load balancer) do not half-open together. Called with
// mu held.
func (l *Lane) backoffLocked(now time.Time) time.Duration {
	c := &l.set.cfg
	base := c.OpenFor
	since := l.failingSince
	if since.IsZero() && l.failing.Load() {
		since = l.since
	}
	if c.MaxOpenFor > c.OpenFor && !since.IsZero() {
		base = min(max(base, now.Sub(since)/openGrowth), c.MaxOpenFor)
	}
	jitter := c.OpenJitter
	if jitter > 0 && c.OpenFor > 0 && base > c.OpenFor {
		// In float, and bounded before it becomes a Duration again: an
		// out-of-range conversion's result depends on the machine.
		jitter = time.Duration(min(float64(jitter)*float64(base)/float64(c.OpenFor), float64(maxJitter)))
	}
	return base + Uniform(0, jitter)
}

// maxJitter bounds a grown open jitter: a quarter of the largest
// duration, so that the open time plus it cannot overflow.
const maxJitter = time.Duration(1<<63-1) / 4

// closeLocked closes the circuit. It is the one rule for every close,
// whether a probe succeeded, an operator reset the key, or another process
// saw the key answer: the failure period and the outage are forgotten,
// the half-open period's probes are over (their outcomes will be ignored,
// so their places are freed now), the policy's memory of the outage is
// cleared, so that a policy growing from the previous delay starts again
// from its base, as after any success; and the requests waiting for the
// key begin to go, at the recovery's rate. A closed circuit only forgets.
// Called with mu held.
func (l *Lane) closeLocked(now time.Time) Transition {
	l.prev.Store(0)
	l.resetPeriodLocked()
	l.probes = 0
	l.failingSince = time.Time{}
	l.rodeOut.Store(false)
	l.wakeBack()
	if l.queue.len() > 0 && l.rec == nil {
		l.rec = l.newRecoveryLocked(now)
	}
	var tr Transition
	if state, _ := unpack(l.word.Load()); state != Closed {
		tr = l.setLocked(Closed, now)
	}
	l.releaseLocked(now, &Transitions{}, false)
	l.scheduleLocked(now)
	return tr
}

func (l *Lane) resetPeriodLocked() {
	l.failing.Store(false)
	l.succ.Store(0)
	l.streak.Store(0)
	l.fails = 0
	l.since = time.Time{}
}

// setLocked moves to state s in a new generation, keeping the held and
// paced flags. Called with mu held.
func (l *Lane) setLocked(s State, now time.Time) Transition {
	w := l.word.Load()
	from, gen := unpack(w)
	l.word.Store((gen+1)<<stateBits | w&flagBits | uint64(s))
	l.changed = now
	return Transition{From: from, To: s}
}

// AdoptOpen applies another process's open, which has d left: it extends
// an open circuit's time, never shortens it, and opens a circuit that is
// not open when quorum is set or when it is half-open (its own episode is
// under way).
func (l *Lane) AdoptOpen(now time.Time, d time.Duration, quorum bool) Transitions {
	l.mu.Lock()
	defer l.mu.Unlock()
	state, _ := unpack(l.word.Load())
	until := now.Add(d)
	switch {
	case l.isolated:
		return Transitions{}
	case state == Open:
		if !until.After(l.openUntil) {
			return Transitions{}
		}
		l.openUntil = until
		l.scheduleLocked(now)
		return one(Transition{From: Open, To: Open, Until: until, Extended: true})
	case state == Closed && !quorum:
		return Transitions{}
	}
	if l.failingSince.IsZero() {
		// Another process saw the key fail; from here, it is failing.
		l.failingSince = now
	}
	return one(l.openLocked(now, d))
}

// AdoptClose applies another process's close that happened at at: only a
// close newer than this process's open episode closes the circuit, by the
// one close rule.
func (l *Lane) AdoptClose(now, at time.Time) Transitions {
	l.mu.Lock()
	defer l.mu.Unlock()
	if state, _ := unpack(l.word.Load()); state == Closed || l.isolated || !l.episode.Before(at) {
		return Transitions{}
	}
	return one(l.closeLocked(now))
}

// Isolate opens the circuit until Reset, whatever its state: requests are
// refused with ErrIsolated, and those sleeping toward the key wake, as
// when a circuit trips.
func (l *Lane) Isolate(now time.Time, forever time.Duration) Transitions {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.isolated = true
	tr := l.openLocked(now, forever)
	tr.Until = time.Time{}
	return one(tr)
}

// Reset ends the key's hold and isolation and closes its circuit by the
// one close rule, as after a fix.
func (l *Lane) Reset(now time.Time) Transitions {
	var trs Transitions
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.word.Load()&heldBit != 0 {
		trs.add(l.unholdLocked())
	}
	l.isolated = false
	trs.add(l.closeLocked(now))
	return trs
}
