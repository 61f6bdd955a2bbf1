package perkey

import "time"

// View is one lane read at one instant, under its lock: what RetryAt, a
// breaker's snapshot, a local 503 and an error's Until all read.
type View struct {
	State State     // Closed, Open or HalfOpen
	Since time.Time // when the circuit entered State; zero if it never changed
	// OpenUntil is when an open circuit may let a probe through; the zero
	// time while isolated, and in the other states.
	OpenUntil time.Time
	Isolated  bool // open until an operator resets it
	// Held reports a hold in force: no attempt before HoldUntil.
	Held      bool
	HeldSince time.Time
	HoldUntil time.Time
	// Paced reports that the key's send rate is limited; Ahead is how long
	// the releases of the attempts waiting, and of one more, take.
	Paced bool
	Ahead time.Duration
	// Rate is the send rate a paced key is held to, in requests per
	// second; Quota is the latest quota the key advertised (N 0: none).
	Rate  float64
	Quota Advert
	// FailingSince is when the key began failing: the start of the
	// failures that opened the circuit, kept while it stays open or
	// half-open, or of a failure period under way on a closed circuit; the
	// zero time if neither. Failing reports a failure period under way on
	// a closed circuit, and Failures and Successes its outcomes so far.
	FailingSince time.Time
	Failing      bool
	Failures     int
	Successes    int64
	// What the lane holds for requests: probes in flight while half-open,
	// requests sleeping toward the key, and requests waiting for it (see
	// wait.go); Recovering reports that its waiters are being let go at the
	// recovery's rate.
	Probes, Sleepers, Waiting int
	Recovering                bool
}

// View reads the lane at now. A hold whose time has come is over.
func (l *Lane) View(now time.Time) View {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.word.Load()
	state, _ := unpack(w)
	v := View{State: state, Since: l.changed, Isolated: l.isolated, Probes: l.probes, Sleepers: l.sleepers,
		Waiting: l.queue.len(), Recovering: l.rec != nil, Quota: l.adv}
	if l.failing.Load() {
		v.Failing, v.Failures, v.Successes = true, l.fails, l.succ.Load()
	}
	v.FailingSince = l.failingSinceLocked()
	if state == Open && !l.isolated {
		v.OpenUntil = l.openUntil
	}
	if w&heldBit != 0 && now.Before(l.holdUntil) {
		v.Held, v.HeldSince, v.HoldUntil = true, l.heldSince, l.holdUntil
	}
	if p := l.pace.Load(); p != nil {
		p.mu.Lock()
		v.Paced, v.Ahead, v.Rate = true, p.aheadLocked(now, p.queue.len()+1), p.rateAtLocked(now)
		p.mu.Unlock()
	}
	return v
}

// ProbeAt returns when the key may next be tried, as of now: when a hold
// or an open circuit's open time ends, whichever is later, or now. An
// isolated key has no such instant: the zero time.
func (v View) ProbeAt(now time.Time) time.Time {
	if v.Isolated {
		return time.Time{}
	}
	at := now
	if v.State == Open && v.OpenUntil.After(at) {
		at = v.OpenUntil
	}
	if v.Held && v.HoldUntil.After(at) {
		at = v.HoldUntil
	}
	return at
}

// Crowd returns how many requests sleep toward the key or wait for it.
func (l *Lane) Crowd() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sleepers + l.queue.len()
}

// FailingSince returns when the key began failing (see View.FailingSince;
// the zero time without circuits), and only, whether it fails as a whole
// now (see failingWholeLocked).
func (l *Lane) FailingSince() (since time.Time, only bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	since = l.failingSinceLocked()
	return since, l.failingWholeLocked()
}

// failingWholeLocked reports that the key fails as a whole now: its
// circuit is open or half-open, its failure period has seen no success,
// or its latest streakFailing outcomes or more were failures. A request
// reads it, with the failure's start, to tell a young failure from a
// sustained one. Called with mu held.
func (l *Lane) failingWholeLocked() bool {
	return !l.failingSince.IsZero() || l.failing.Load() && (l.succ.Load() == 0 || l.streak.Load() >= streakFailing)
}

// streakFailing is how many failures in a row, with no success between,
// show a key failing as a whole, when its failure period has seen
// successes: a host restarted every second or two answers between its
// restarts, and a failure period lasts until twice the breaker's span has
// passed, so its successes alone would hide each restart. Five in a row
// come by chance one time in 400 from a link that fails 30% of attempts
// at random, and at once from a host that refuses every connection.
const streakFailing = 5

// failingSinceLocked: the start of the failures that opened the circuit,
// while it is open or half-open, or of a failure period under way on a
// closed circuit; the zero time if neither. Called with mu held.
func (l *Lane) failingSinceLocked() time.Time {
	switch {
	case !l.failingSince.IsZero():
		return l.failingSince
	case l.failing.Load():
		return l.since
	}
	return time.Time{}
}
