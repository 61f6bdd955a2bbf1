package perkey

import (
	"context"
	"errors"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// A request that its key would refuse (the circuit open, the key isolated,
// or, in the root package, its retry budget empty) may wait in the key's
// queue instead of failing. The key lets its waiters go only on evidence
// that it is back, and then no faster than it shows it can take:
//
//   - while the circuit is open, nobody: a timer half-opens it when its
//     open time is over, and the oldest waiter becomes the probe;
//   - while the circuit is closed but requests wait (their retries found no
//     budget), one test at a time, spaced as the open time is, and none
//     while new requests, admitted beside them, test the key anyway;
//   - once a probe, a test or any other request succeeds, the waiters go
//     oldest first at a rate that starts low and doubles every
//     recoveryStep while the key keeps answering (slow start); a failure
//     cuts the rate as a throttle does, and failures that persist over the
//     span reopen the circuit. New requests queue behind the waiters until
//     the rate has grown past what limits anything.
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
	// recoveryRate is the rate at which waiters go when the key has just
	// come back: requests/s, five in the first recoveryStep.
	recoveryRate = 100
	// recoveryStep is how often the rate doubles while the key keeps
	// answering: 100/s reaches 10,000/s in seven steps, 0.35 s, if every
	// step is answered; so a backlog of 10,000 drains in about half a
	// second from a host that takes it, and a host that cannot is found
	// before the rate has passed what it takes by more than one doubling.
	recoveryStep = 50 * time.Millisecond
	// recoveryBeta is where a failure puts the rate: this share of what
	// the key was seen to answer in the step before it, the rate it can
	// take; from there it grows back along CUBIC's curve.
	recoveryBeta = 0.95
)

// errWaitOver ends a wait whose time is up; the caller turns it back into
// the refusal that made the request wait.
var errWaitOver = errors.New("wait over")

// ErrTurn asks a newcomer to wait its turn, through Wait, behind the
// waiters of a key that is recovering.
var ErrTurn = errors.New("wait your turn")

// Wait admits an attempt to the key as Admit does, but where Admit would
// refuse it because the circuit is open or the key isolated, or ask it to
// wait its turn (ErrTurn), it waits in the key's queue until the key lets
// it go (see the rules above), until ctx ends (the context's error) or
// until until (the refusal it waited out: ErrOpen, ErrIsolated, or
// ErrTurn). It starts no goroutine.
func (l *Lane) Wait(ctx context.Context, lim Limits, until time.Time) (Ticket, Transitions, error) {
	return l.admitLoop(ctx, lim, until, false)
}

// Queue is Wait for a request whose retry its budget refused: it joins
// the key's queue at once, however the key stands, and is let go by a
// test, or once the key shows it is back; until bounds it as it does
// Wait, and a wait whose time is up ends with ErrWaitedOut.
func (l *Lane) Queue(ctx context.Context, lim Limits, until time.Time) (Ticket, Transitions, error) {
	return l.admitLoop(ctx, lim, until, true)
}

// ErrWaitedOut ends a Queue whose time is up.
var ErrWaitedOut = errors.New("waited out")

// admitLoop admits an attempt; when until is set, it waits in the key's
// queue, for its turn while the key recovers, and instead of being refused
// while the circuit is open. join starts it in the queue.
func (l *Lane) admitLoop(ctx context.Context, lim Limits, until time.Time, join bool) (Ticket, Transitions, error) {
	var trs Transitions
	g := grantNone
	last := ErrWaitedOut // what a wait whose time is up ends with
	for {
		if !join {
			tk, err := l.allow(&trs, g, lim.Queue)
			switch {
			case err == nil:
				return l.admitted(ctx, lim, tk, trs)
			case (err == ErrTurn || err == ErrOpen || err == ErrIsolated) && !until.IsZero():
				last = err
			default:
				return Ticket{}, trs, err
			}
		}
		join = false
		w, err := l.await(ctx, until, &trs)
		switch {
		case err == errWaitOver:
			return Ticket{}, trs, last
		case err != nil:
			return Ticket{}, trs, err
		case w.grant == grantProbe:
			return l.admitted(ctx, lim, w.tk, trs)
		}
		g = w.grant
	}
}

// admitted finishes an admission the circuit granted: it waits for the
// key's send rate, if the key is paced, and takes a place among its
// attempts in flight, if they are limited. If either fails, the circuit's
// admission is given back.
func (l *Lane) admitted(ctx context.Context, lim Limits, tk Ticket, trs Transitions) (Ticket, Transitions, error) {
	var err error
	if tk.has(pacedFlag) {
		var gen uint64
		gen, err = l.waitPace(ctx)
		tk.setPaceGen(gen)
	}
	if err == nil && lim.MaxInFlight > 0 {
		if err = l.slotsOf().acquire(ctx, lim.MaxInFlight, lim.RefuseInFlight); err == nil {
			tk.set(slotFlag)
		}
	}
	if err != nil {
		trs.merge(l.Done(tk, Outcome{}))
		return Ticket{}, trs, err
	}
	return tk, trs, nil
}

// await queues the request and blocks until the key lets it go, ctx ends
// or until passes (errWaitOver). Changes made on the request's behalf are
// added to trs.
func (l *Lane) await(ctx context.Context, until time.Time, trs *Transitions) (*waiter, error) {
	l.mu.Lock()
	now := time.Now()
	w := l.queue.push()
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
			w := l.queue.pop()
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
		l.rec.lim.SetLimitAt(now, rate.Limit(l.rec.rateAt(now)))
		for l.queue.len() > 0 && l.rec.lim.AllowN(now, 1) {
			w := l.queue.pop()
			w.grant = grantTurn
			let(w)
		}
		if l.queue.len() == 0 && l.rec.rateAt(now) >= unpaceAt {
			l.rec = nil // the key takes whatever comes: recovered
		}
	case state == Closed && l.queue.len() > 0 && !l.testing && !now.Before(l.testAt):
		w := l.queue.pop()
		w.grant = grantTest
		l.testing = true
		let(w)
	}
	l.updateWaitBitLocked()
	return released
}

// halfOpenLocked moves an open circuit whose open time is over to
// half-open. Called with mu held.
func (l *Lane) halfOpenLocked(now time.Time) Transition {
	tr := l.setLocked(HalfOpen, now)
	l.opened = nil
	l.probes = 0
	return tr
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
// the next. Changes it makes go with the first waiter let go, or, if none
// is, to the Set's Report.
func (l *Lane) tick() {
	var trs Transitions
	l.mu.Lock()
	now := time.Now()
	l.timerAt = time.Time{}
	l.releaseLocked(now, &trs, true)
	l.scheduleLocked(now)
	l.mu.Unlock()
	if trs.Any() && l.set.Report != nil {
		l.set.Report(l, trs)
	}
}

// updateWaitBitLocked sets the wait bit while requests wait or the key
// recovers, so that admissions and outcomes take the slow path. Called
// with mu held.
func (l *Lane) updateWaitBitLocked() {
	w := l.word.Load()
	if l.queue.len() > 0 || l.rec != nil {
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
// the rate, or spaces the next test out. Called with mu held.
func (l *Lane) doneWaitingLocked(t Ticket, o Kind, now time.Time, trs *Transitions) {
	if t.has(testFlag) {
		l.testing = false
	}
	state, _ := unpack(l.word.Load())
	switch {
	case state != Closed:
	case l.rec != nil && t.has(recovFlag) && o == Success:
		l.rec.success(now)
	case l.rec != nil && t.has(recovFlag) && o == Failure:
		l.rec.cut(now)
	case l.rec == nil && o == Success && l.queue.len() > 0:
		l.rec = newRecovery(now)
	case t.has(testFlag) && o == Failure:
		l.testAt = now.Add(l.backoffLocked(now))
	case t.has(testFlag):
		l.testAt = now // it told nothing: the next test may go
	}
	l.releaseLocked(now, trs, false)
	l.scheduleLocked(now)
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
		jitter = time.Duration(float64(jitter) * float64(base) / float64(c.OpenFor))
	}
	return base + Uniform(0, jitter)
}

// recovery is the slow start of a key that has come back: the rate at
// which its waiters go.
type recovery struct {
	lim    *rate.Limiter
	start  time.Time // when it began, or was last cut
	lastOK time.Time // the latest success of a request it let go
	wmax   float64   // the rate the key was seen to take at the latest cut; 0 in slow start
	beta   float64   // where the cut put the rate, as a share of wmax
	// The successes of the requests it let go, counted per recoveryStep
	// (the step at index step, and the one before), so that a cut knows
	// what the key answered.
	step    int64
	ok, was int
}

func newRecovery(now time.Time) *recovery {
	return &recovery{lim: rate.NewLimiter(recoveryRate, 1), start: now, lastOK: now}
}

// rateAt returns the rate at now. In slow start it doubles every
// recoveryStep, and stops growing a step after the latest success: it
// grows only while the key keeps answering. After a cut it follows CUBIC's
// curve around the rate the key was seen to take.
func (r *recovery) rateAt(now time.Time) float64 {
	if r.wmax > 0 {
		return cubicFrom(r.wmax, r.beta, now.Sub(r.start).Seconds())
	}
	t := min(now.Sub(r.start), r.lastOK.Sub(r.start)+recoveryStep).Seconds()
	return math.Min(recoveryRate*math.Exp2(t/recoveryStep.Seconds()), 2*unpaceAt)
}

// nextIn returns how long until the limiter has a token at the current
// rate.
func (r *recovery) nextIn(now time.Time) time.Duration {
	rt := r.rateAt(now)
	r.lim.SetLimitAt(now, rate.Limit(rt))
	missing := 1 - r.lim.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / rt * float64(time.Second))
}

func (r *recovery) success(now time.Time) {
	if now.After(r.lastOK) {
		r.lastOK = now
	}
	r.count(now)
	r.ok++
}

// count moves the per-step counts of successes to now's step.
func (r *recovery) count(now time.Time) {
	s := now.UnixNano() / int64(recoveryStep)
	switch {
	case s == r.step:
	case s == r.step+1:
		r.was, r.ok = r.ok, 0
	default:
		r.was, r.ok = 0, 0
	}
	r.step = s
}

// took returns the rate of successes the key was seen to answer: over the
// step before now's, or over the part of now's step gone by, when that is
// at least a quarter of a step and the higher (the rate went up at the
// step's start, and the key answered more of it than it had been sent
// before).
func (r *recovery) took(now time.Time) float64 {
	r.count(now)
	took := float64(r.was) / recoveryStep.Seconds()
	if part := time.Duration(now.UnixNano() % int64(recoveryStep)); part >= recoveryStep/4 {
		took = max(took, float64(r.ok)/part.Seconds())
	}
	return took
}

// cut lowers the rate after a failure of a request the recovery let go: to
// recoveryBeta of what the key was seen to answer, the rate it can take;
// with no success to go by, to half the rate. Failures
// within a step of the latest cut answer requests let go before it, at the
// old rate, and cut nothing more.
func (r *recovery) cut(now time.Time) {
	if r.wmax > 0 && now.Sub(r.start) < recoveryStep {
		return
	}
	if took := r.took(now); took > 0 {
		r.wmax, r.beta = took, recoveryBeta
	} else {
		r.wmax, r.beta = r.rateAt(now), 0.5
	}
	r.start = now
	r.lim.SetLimitAt(now, rate.Limit(r.rateAt(now)))
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
