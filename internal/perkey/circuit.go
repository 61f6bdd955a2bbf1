package perkey

import "time"

// allow admits an attempt as the circuit and the hold see it: refused
// with ErrOpen (or ErrIsolated) while the circuit is open or its probes
// are taken, with a *HeldError while the key is held. An admitted attempt
// to a paced key must still wait for the key's send rate (Ticket.paced).
func (l *Lane) allow() (Ticket, Transitions, error) {
	var trs Transitions
	w := l.word.Load()
	if w&fastMask == 0 {
		return Ticket{gen: w >> stateBits}, trs, nil
	}
	if w&fastMask == pacedBit {
		return Ticket{gen: w >> stateBits, pace: pacedFlag}, trs, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.word.Load()&heldBit != 0 {
		if now.Before(l.holdUntil) {
			return Ticket{}, trs, &HeldError{Until: l.holdUntil}
		}
		trs.add(l.unholdLocked())
	}
	state, gen := unpack(l.word.Load())
	if state == Open {
		if l.isolated {
			return Ticket{}, trs, ErrIsolated
		}
		if now.Before(l.openUntil) {
			return Ticket{}, trs, ErrOpen
		}
		trs.add(l.setLocked(HalfOpen, now))
		l.opened = nil
		l.probes = 0
		state, gen = unpack(l.word.Load())
	}
	tk := Ticket{gen: gen}
	if l.word.Load()&pacedBit != 0 {
		tk.set(pacedFlag)
	}
	switch {
	case state == Closed:
		return tk, trs, nil
	case l.probes < l.set.cfg.Probes:
		l.probes++
		tk.set(probeFlag)
		return tk, trs, nil
	}
	return Ticket{}, trs, ErrOpen
}

// record tells the circuit the outcome of an attempt admitted with tk. A
// throttle tells it nothing, as None does.
func (l *Lane) record(tk Ticket, o Kind) Transition {
	if o == Throttled {
		o = None
	}
	if o == Success && !tk.has(probeFlag) {
		l.recordSuccess()
		return Transition{}
	}
	if (o == None || !l.set.cfg.Circuits) && !tk.has(probeFlag) {
		return Transition{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	state, gen := unpack(l.word.Load())
	if gen != tk.gen {
		// From an earlier state: ignored. A probe of an earlier half-open
		// period no longer holds a place: its places were freed when the
		// period ended.
		return Transition{}
	}
	if tk.has(probeFlag) {
		l.probes--
	}
	now := time.Now()
	switch {
	case state == HalfOpen && o == Success:
		return l.closeLocked(now)
	case state == HalfOpen && o == Failure:
		return l.openLocked(now, l.openTime())
	case state == Closed && o == Failure:
		return l.failLocked(now)
	}
	return Transition{}
}

// openTime draws how long the circuit stays open: OpenFor plus a random
// part of up to OpenJitter, so that circuits tripped together (a fleet of
// clients, or many hosts behind one failed load balancer) do not half-open
// together.
func (l *Lane) openTime() time.Duration {
	c := &l.set.cfg
	return c.OpenFor + Uniform(0, c.OpenJitter)
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
	total := l.fails + int(l.succ.Load())
	if now.Sub(l.since) >= c.Span && l.fails >= c.MinFailures &&
		float64(l.fails) >= c.FailureRatio*float64(total) {
		tr = l.openLocked(now, l.openTime())
		tr.Failing = true // an open reports the failure that caused it
	}
	return tr
}

// openLocked opens the circuit for d: what happens when the circuit opens.
// The failure period is over, the half-open period's probes are too, and
// every request sleeping toward the key wakes (Sleep returns ErrOpen);
// until d has passed, Admit refuses. Called with mu held.
func (l *Lane) openLocked(now time.Time, d time.Duration) Transition {
	l.openUntil = now.Add(d)
	l.episode = now
	l.resetPeriodLocked()
	l.probes = 0
	if l.opened != nil && l.opened != closedChan {
		close(l.opened)
	}
	l.opened = closedChan
	tr := l.setLocked(Open, now)
	tr.Until = l.openUntil
	return tr
}

// closeLocked closes the circuit. It is the one rule for every close,
// whether a probe succeeded, an operator reset the key, or another process
// saw the key answer: the failure period is forgotten, the half-open
// period's probes are over (their outcomes will be ignored, so their
// places are freed now), and the policy's memory of the outage is cleared,
// so that a policy growing from the previous delay starts again from its
// base, as after any success. A closed circuit only forgets. Called with
// mu held.
func (l *Lane) closeLocked(now time.Time) Transition {
	l.prev.Store(0)
	l.resetPeriodLocked()
	l.probes = 0
	if state, _ := unpack(l.word.Load()); state == Closed {
		return Transition{}
	}
	return l.setLocked(Closed, now)
}

func (l *Lane) resetPeriodLocked() {
	l.failing.Store(false)
	l.succ.Store(0)
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
		return one(Transition{From: Open, To: Open, Until: until, Extended: true})
	case state == Closed && !quorum:
		return Transitions{}
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
