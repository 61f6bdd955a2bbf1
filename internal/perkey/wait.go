package perkey

import (
	"context"
	"errors"
	"time"
)

// A request that its key would refuse (the circuit open, the key isolated,
// or, in the root package, its retry budget empty) may wait in the key's
// queue instead of failing. The key lets its waiters go only on evidence
// that it is back, and then no faster than it shows it can take:
//
//   - while the circuit is open, nobody: a timer half-opens it when its
//     open time is over, and the waiter with the most time left becomes
//     the probe (the oldest have the least, and a probe whose caller's
//     deadline ends before the host answers tells nothing);
//   - while the circuit is closed but requests wait (their retries found no
//     budget), one test at a time, spaced as the open time is, and none
//     while new requests, admitted beside them, test the key anyway; the
//     test, too, is the waiter with the most time left;
//   - once a probe, a test or any other request succeeds, the waiters go
//     oldest first at a rate that starts low and doubles every round while
//     the key keeps answering what it was sent (slow start; recovery.go),
//     spread over half a second at least; a failure cuts the rate to what
//     the key was seen to answer, and failures that persist over the span
//     reopen the circuit. New requests queue behind the waiters until the
//     rate has grown past what limits anything.
//
// Waiting costs no goroutine: each waiter blocks on its own channel, and
// one timer per lane lets the next one go.
const (
	// openGrowth: the open time grows with the outage, to a 64th of how
	// long the key has been failing (at least OpenFor). A host back within
	// a second is found within about half a second; one down for ten
	// minutes is probed every 10 to 20 s; one down for an hour at
	// MaxOpenFor.
	openGrowth = 64
)

// errWaitOver ends a wait whose time is up; the caller turns it back into
// the refusal that made the request wait.
var errWaitOver = errors.New("wait over")

// await queues the request and blocks until the key lets it go, ctx ends
// or until passes (errWaitOver). Changes made on the request's behalf are
// added to trs.
func (l *Lane) await(ctx context.Context, until time.Time, trs *Transitions) (*waiter, error) {
	l.mu.Lock()
	now := time.Now()
	w := l.queue.push()
	w.deadline, _ = ctx.Deadline()
	w.at = now
	l.joins.add(now)
	if state, _ := unpack(l.word.Load()); state == Closed && l.rec == nil && l.queue.len() == 1 && !l.testing {
		// The first to wait for a closed key: the first test goes when
		// an open circuit would let its probe through.
		l.testAt = now.Add(l.backoffLocked(now))
	}
	l.releaseLocked(now, trs, false)
	l.scheduleLocked(now)
	l.mu.Unlock()

	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(until.Sub(now))
		defer t.Stop()
		timeout = t.C
	}
	err := l.queue.wait(ctx, &l.mu, w, timeout, l.handOnLocked)
	// Changes made on the waiter's behalf (the lane's timer half-opened the
	// circuit to let it probe) are its request's to report, whether it
	// took its turn or gave it on as it left.
	trs.merge(w.trs)
	if err != nil {
		l.settleLocked()
		return nil, err
	}
	return w, nil
}

// newRecoveryLocked begins the recovery of the key's waiters, telling
// the flow apart from the herd: the flow is the requests that came at the
// rate new waiters joined the queue over the past second (a service's
// steady calls, which an outage piles up), for as long as the oldest has
// waited; the herd, the rest (requests that failed together). Called with
// mu held.
func (l *Lane) newRecoveryLocked(now time.Time) *recovery {
	n := l.queue.len()
	rate := l.joins.rate(now)
	flow := min(float64(n), rate*now.Sub(l.queue.oldest()).Seconds())
	return newRecovery(now, n, flow, rate)
}

// joins counts the requests that join a lane's queue, per second, to
// tell the rate of a steady flow. Guarded by the lane's mu.
type joins struct{ c stepCount }

func (j *joins) add(now time.Time) {
	j.c.roll(now, time.Second)
	j.c.n++
}

// rate returns the joins per second over the past second and the part of
// this one gone by.
func (j *joins) rate(now time.Time) float64 {
	j.c.roll(now, time.Second)
	part := float64(now.UnixNano()%int64(time.Second)) / float64(time.Second)
	return float64(j.c.prev+j.c.n) / (1 + part)
}

// handOnLocked passes what a waiter was let go with, as it gave up, to the
// next in line: a probe's place, a turn, the test. Called with mu held.
func (l *Lane) handOnLocked(w *waiter) {
	next := l.queue.pop()
	switch {
	case next != nil:
		next.grant, next.tk = w.grant, w.tk
		close(next.ch)
	case w.grant == grantProbe:
		l.probes-- // nobody to take the place
	case w.grant == grantTest:
		l.testing = false
	case w.grant == grantTurn && l.rec != nil:
		l.rec.answered() // a turn nobody takes is not in flight
	}
}

// settleLocked brings the lane's flags and timer up to date after a waiter
// left. It takes mu.
func (l *Lane) settleLocked() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updateWaitBitLocked()
	l.scheduleLocked(time.Now())
}

// releaseLocked lets go the waiters the key's state allows now: the
// probes of a circuit that may half-open, the recovery's turns, or the
// test of a closed key. Changes it makes are added to trs; with carry,
// they go with the first waiter let go, whose request reports them (the
// lane's timer makes them on nobody's behalf). It returns whether it let
// anyone go. Called with mu held.
func (l *Lane) releaseLocked(now time.Time, trs *Transitions, carry bool) bool {
	released := false
	let := func(w *waiter) {
		if carry && !released {
			w.trs, *trs = *trs, Transitions{}
		}
		released = true
		close(w.ch)
	}
	state, gen := unpack(l.word.Load())
	if state == Open && !l.isolated && !now.Before(l.openUntil) && l.queue.len() > 0 {
		trs.add(l.halfOpenLocked(now))
		state, gen = unpack(l.word.Load())
	}
	switch {
	case state == HalfOpen:
		for l.probes < l.set.cfg.Probes {
			w := l.queue.latest()
			if w == nil {
				break
			}
			l.probes++
			w.grant = grantProbe
			w.tk = Ticket{gen: gen, pace: probeFlag}
			if l.word.Load()&pacedBit != 0 {
				w.tk.set(pacedFlag)
			}
			let(w)
		}
	case state == Closed && l.rec != nil:
		l.rec.backlog(now, l.queue.len())
		setRate(l.rec.lim, now, l.rec.rateAt(now))
		for l.queue.len() > 0 && l.rec.lim.AllowN(now, 1) {
			w := l.queue.pop()
			w.grant = grantTurn
			l.rec.released(now)
			let(w)
		}
		if l.rec.finished(now, l.queue.len()) {
			l.rec = nil // the key takes whatever comes: recovered
		}
	case state == Closed && l.queue.len() > 0 && !l.testing && !now.Before(l.testAt):
		w := l.queue.latest()
		w.grant = grantTest
		l.testing = true
		let(w)
	}
	l.updateWaitBitLocked()
	return released
}

// scheduleLocked sets the lane's timer for when the next waiter may go,
// or stops it when nobody waits. Called with mu held.
func (l *Lane) scheduleLocked(now time.Time) {
	var at time.Time
	state, _ := unpack(l.word.Load())
	if l.queue.len() > 0 {
		switch {
		case state == Open && !l.isolated:
			at = l.openUntil
		case state == Closed && l.rec != nil:
			at = now.Add(l.rec.nextIn(now))
		case state == Closed && !l.testing:
			at = l.testAt
		}
	}
	switch {
	case at.IsZero():
		if l.timer != nil {
			l.timer.Stop()
		}
		l.timerAt = time.Time{}
	case l.timerAt.Equal(at):
		// Already set for then.
	case l.timer == nil:
		l.timer, l.timerAt = time.AfterFunc(at.Sub(now), l.tick), at
	default:
		l.timer.Reset(at.Sub(now))
		l.timerAt = at
	}
}

// tick lets go the waiters whose time has come, and sets the timer for
// the next. The one change it makes, half-opening an open circuit, it
// makes only for a waiter, who takes the probe and reports the change,
// whether it sends the probe or hands it on as it leaves.
func (l *Lane) tick() {
	var trs Transitions
	l.mu.Lock()
	now := time.Now()
	l.timerAt = time.Time{}
	l.releaseLocked(now, &trs, true)
	l.scheduleLocked(now)
	l.mu.Unlock()
}

// updateWaitBitLocked sets the wait bit while requests wait, the key
// recovers or its test is under way, so that admissions and outcomes take
// the slow path: the test's own admission among them, or, the last waiter
// gone to test, it would be admitted as a plain attempt whose outcome the
// lane never hears of, and the next waiters would wait for a test that
// never ends. Called with mu held.
func (l *Lane) updateWaitBitLocked() {
	w := l.word.Load()
	if l.queue.len() > 0 || l.rec != nil || l.testing {
		if w&waitBit == 0 {
			l.word.Store(w | waitBit)
		}
	} else if w&waitBit != 0 {
		l.word.Store(w &^ waitBit)
	}
}

// doneWaitingLocked records what an attempt the queue let go (a turn of
// the recovery, the test) or one admitted beside waiters says about the
// key: a success starts the recovery, or feeds its rate; a failure cuts
// the rate, unless it found the host not there (unreached: that tells
// nothing of how much the host can take; its circuit, if any, counts the
// failure, and opens again if the key fails as a whole), or spaces the
// next test out. whole reports that the key failed as a whole before this
// outcome: a success then ends an outage, and the waiters go at the
// recovery's rate; otherwise the key was up all along (a lossy link
// failed some of its requests), and they go at once, for a recovery there
// would gate every newcomer behind a rate that each random failure cuts.
// Called with mu held.
func (l *Lane) doneWaitingLocked(t Ticket, o Kind, whole, unreached bool, now time.Time, trs *Transitions) {
	if t.has(testFlag) {
		l.testing = false
	}
	state, _ := unpack(l.word.Load())
	switch {
	case state != Closed:
	case l.rec != nil && t.has(recovFlag) && o == Success:
		l.rec.success(now, now.Sub(time.Unix(0, t.at)))
	case l.rec != nil && t.has(recovFlag) && o == Failure && !unreached:
		l.rec.cut(now)
	case l.rec != nil && t.has(recovFlag):
		l.rec.answered() // it told nothing, but it is not in flight any more
	case l.rec == nil && o == Success && l.queue.len() > 0 && whole:
		l.rec = l.newRecoveryLocked(now)
	case l.rec == nil && o == Success:
		for w := l.queue.pop(); w != nil; w = l.queue.pop() {
			w.grant = grantTurn
			close(w.ch)
		}
	case t.has(testFlag) && o == Failure:
		l.testAt = now.Add(l.backoffLocked(now))
	case t.has(testFlag):
		l.testAt = now // it told nothing: the next test may go
	}
	l.releaseLocked(now, trs, false)
	l.scheduleLocked(now)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
