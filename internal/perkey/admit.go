package perkey

import (
	"context"
	"errors"
	"time"
)

// The refusals of Admit and Sleep. The root package turns each into its
// own error, which names the reason to the caller.
var (
	ErrOpen     = errors.New("circuit open")
	ErrIsolated = errors.New("circuit open: isolated by an operator")
	ErrSlots    = errors.New("concurrency limit reached")
	ErrPaced    = errors.New("the key's send rate leaves no room before the deadline")
)

// HeldError refuses an attempt while the key is held, until Until. Test,
// when set, is when one attempt may go as the hold's test; Tested, that
// the hold is short and under test, which may end it early (see proof).
type HeldError struct {
	Until, Test time.Time
	Tested      bool
}

func (e *HeldError) Error() string { return "held until " + e.Until.Format(time.RFC3339) }

// Limits are what one request's admission is bound by, besides the key's
// own state.
type Limits struct {
	// MaxInFlight is how many attempts to the key may be in flight at
	// once; 0 means no limit.
	MaxInFlight int
	// RefuseInFlight refuses an attempt over MaxInFlight (with ErrSlots)
	// rather than letting it wait its turn.
	RefuseInFlight bool
	// Queue: the request may wait in the key's queue. While the key
	// recovers, Admit then refuses a newcomer with ErrTurn (it waits its
	// turn through Wait); without it, the newcomer goes at once, as a
	// dispatcher that keeps its own queue wants.
	Queue bool
	// Route is the route the attempt goes to, which a hold of that route
	// alone refuses; the zero Route is the whole key's, which only a hold
	// of the whole key refuses.
	Route Route
}

// Ticket is what Admit hands an attempt, and the only way to record its
// outcome: pass it to Done exactly once.
//
// It is two words, so that the success path hands it around in registers:
// the circuit's generation at admission, and the pacer's generation the
// attempt went at with the ticket's flags in its low bits.
type Ticket struct {
	gen  uint64
	pace uint64 // pacer generation << ticketBits | flags
	at   int64  // with recovFlag: when the attempt went, in Unix nanoseconds
}

// The flags of a Ticket.
const (
	probeFlag  = 1 << iota // a half-open probe: holds one of the probe places
	pacedFlag              // went through the key's pacer
	slotFlag               // holds a place among the attempts in flight
	recovFlag              // let go by the key's recovery: its outcome feeds the rate
	testFlag               // the one test of a closed key whose requests wait
	watchFlag              // admitted beside waiters: its success lets them go
	holdFlag               // the test of a short hold (see proof)
	ticketBits = iota
)

func (t Ticket) has(f uint64) bool { return t.pace&f != 0 }

// Paced reports that the attempt went through the key's send rate.
func (t Ticket) Paced() bool     { return t.has(pacedFlag) }
func (t *Ticket) set(f uint64)   { t.pace |= f }
func (t Ticket) paceGen() uint64 { return t.pace >> ticketBits }

func (t *Ticket) setPaceGen(g uint64) {
	t.pace = g<<ticketBits | t.pace&(1<<ticketBits-1)
}

// plain reports a ticket that holds nothing: Done of a success need only
// count it.
func (t Ticket) plain() bool { return t.pace&(1<<ticketBits-1) == 0 }

// Admit admits an attempt to the key, or refuses it: with ErrOpen or
// ErrIsolated while the circuit is open or its probes are taken, with a
// *HeldError while the key is held, with ErrTurn while the key recovers
// and others wait (when lim.Queue is set), with ErrSlots when lim refuses
// over its limit, with ErrPaced when the key's send rate leaves no room
// before the deadline, and with ctx's error when it ends while the
// attempt waits its turn in the key's first wave, for the send rate or
// for a place in flight. A closed circuit past its young phase, with no
// hold, no pacing, no waiters and no limit, admits with one atomic load.
func (l *Lane) Admit(ctx context.Context, lim Limits) (tk Ticket, trs Transitions, err error) {
	if w := l.word.Load(); w&fastMask == 0 && lim.MaxInFlight == 0 {
		tk.gen = w >> stateBits
		countTo(&l.sent)
		return tk, trs, nil
	}
	return l.admitSlow(ctx, lim)
}

// admitSlow is Admit past its fast path: a young key's first wave first,
// then the circuit, the hold and the key's waiters, then the wait for the
// send rate, then a place in flight.
func (l *Lane) admitSlow(ctx context.Context, lim Limits) (Ticket, Transitions, error) {
	if l.word.Load()&coldBit != 0 {
		counted, err := l.firstWave(ctx)
		if err != nil {
			return Ticket{}, Transitions{}, err
		}
		tk, trs, err := l.admitLoop(ctx, lim, time.Time{}, false)
		if err != nil && counted {
			l.coldUnused() // refused after its turn: it sent nothing
		}
		return tk, trs, err
	}
	return l.admitLoop(ctx, lim, time.Time{}, false)
}

// A young key sends as TCP does before it knows its path (RFC 5681,
// RFC 6928): firstWave attempts before its first answer, then two more
// for each answer, so that what goes doubles each round trip; the rest
// wait their turn, first come first served. A server's quota is in its
// answers: a batch that sends its whole first wave before any comes back
// has no quota to pace by, and a limiter with a burst of 10 refuses all
// but ten of a wave of 200. The young phase ends as soon as another rule
// holds the key (a quota or a 429 has paced it, a Retry-After has held
// it, its circuit has left Closed), when the key has had quotaFirst
// answers (those whose quota is read however they come), or coldWait
// after the key's first request, whichever comes first: a host slow to
// answer costs a cold fan-out at most coldWait, and a key past its youth
// admits with one load again.
const (
	firstWave = 10
	coldWait  = 500 * time.Millisecond
)

// firstWave admits an attempt to a young key (see the constants above):
// at once while the key's allowance has room, or when its deadline would
// come before the young phase is over; else in its turn. It returns ctx's
// error, or nil and whether the attempt took a place of the allowance.
func (l *Lane) firstWave(ctx context.Context) (counted bool, err error) {
	dl, hasDl := ctx.Deadline()
	l.mu.Lock()
	now, end := time.Now(), l.born.Add(coldWait)
	switch {
	case l.word.Load()&coldBit == 0:
	case l.grownLocked(now):
		l.warmLocked()
	case l.coldLet < firstWave+2*l.coldAnswers || hasDl && dl.Before(end):
		l.coldLet++
		counted = true
	default:
		w := l.cold.push()
		timer := time.NewTimer(end.Sub(now))
		l.mu.Unlock()
		defer timer.Stop()
		err := l.cold.wait(ctx, &l.mu, w, timer.C, l.coldHandOnLocked)
		if err == errWaitOver {
			l.mu.Lock()
			l.warmLocked()
			l.mu.Unlock()
			return false, nil
		}
		// Let go in turn: the one who let it go counted it.
		return err == nil, err
	}
	l.mu.Unlock()
	return counted, nil
}

// coldUnused gives back the place of an attempt of the young phase that
// was refused after its turn came (by a hold, or a limit in flight): the
// next in line takes it.
func (l *Lane) coldUnused() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.word.Load()&coldBit == 0 {
		return
	}
	l.coldHandOnLocked(nil)
}

// grownLocked reports whether the key's young phase is over at now: its
// time is up, it has had its answers, or another rule holds the key.
// Called with mu held.
func (l *Lane) grownLocked(now time.Time) bool {
	w := l.word.Load()
	return !now.Before(l.born.Add(coldWait)) || l.coldAnswers >= quotaFirst ||
		w&(heldBit|pacedBit|routeBit|waitBit) != 0 || w&stateMask != uint64(Closed)
}

// coldAnswer records an answer of a young key: it lets two more attempts
// go, or every waiting one when the young phase is over.
func (l *Lane) coldAnswer() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.word.Load()&coldBit == 0 {
		return
	}
	l.coldAnswers++
	if l.grownLocked(time.Now()) {
		l.warmLocked()
		return
	}
	for l.coldLet < firstWave+2*l.coldAnswers && l.cold.letNext(0) {
		l.coldLet++
	}
}

// coldHandOnLocked passes the turn of a waiter let go just as its request
// stopped waiting to the next in line. Called with mu held.
func (l *Lane) coldHandOnLocked(*waiter) {
	if l.cold.letNext(0) {
		return
	}
	l.coldLet-- // nobody to take it: the allowance keeps it
}

// warmLocked ends the key's young phase: every attempt waiting for its
// turn goes. Called with mu held.
func (l *Lane) warmLocked() {
	if w := l.word.Load(); w&coldBit != 0 {
		l.word.Store(w &^ coldBit)
	}
	for l.cold.letNext(0) {
	}
}

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
// Wait, and a wait whose time is up ends with errWaitedOut.
func (l *Lane) Queue(ctx context.Context, lim Limits, until time.Time) (Ticket, Transitions, error) {
	return l.admitLoop(ctx, lim, until, true)
}

// errWaitedOut ends a Queue whose time is up.
var errWaitedOut = errors.New("waited out")

// admitLoop admits an attempt; when until is set, it waits in the key's
// queue, for its turn while the key recovers, and instead of being refused
// while the circuit is open. join starts it in the queue.
func (l *Lane) admitLoop(ctx context.Context, lim Limits, until time.Time, join bool) (Ticket, Transitions, error) {
	var trs Transitions
	g := grantNone
	last := errWaitedOut // what a wait whose time is up ends with
	for {
		if !join {
			tk, err := l.allow(&trs, g, lim)
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
		if err == nil {
			// A throttle's Retry-After may have held the key while the
			// attempt waited its turn: it waits for the hold too, or
			// goes as its test.
			err = l.heldNow(&tk)
		}
	}
	if err == nil && lim.MaxInFlight > 0 {
		if err = l.slotsOf().acquire(ctx, lim.MaxInFlight, lim.RefuseInFlight); err == nil {
			tk.set(slotFlag)
		}
	}
	if err != nil {
		// Not counted among those sent: nor is its end.
		trs.merge(l.doneSlow(tk, Outcome{}, false))
		return Ticket{}, trs, err
	}
	countTo(&l.sent)
	if tk.has(recovFlag) {
		tk.at = time.Now().UnixNano() // the recovery times its answer
	}
	return tk, trs, nil
}

// closedChan is the opened channel of every open circuit.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Sleep waits d before an attempt to the key, ending early with ctx's
// error when ctx ends, or with ErrOpen when the circuit opens (at once if
// it is open now); with onAnswer, instead of the open, with nil when the
// key answers another request (or its circuit closes): a request riding
// out the key's failure goes as soon as another shows the key back. It
// counts the sleeper, so that the lane does not leave memory under it: a
// dropped lane would neither wake the sleeper nor refuse its next attempt.
// It starts no goroutine.
func (l *Lane) Sleep(ctx context.Context, d time.Duration, onAnswer bool) error {
	var opened, back chan struct{}
	l.mu.Lock()
	l.sleepers++
	if onAnswer {
		back = l.backLocked()
	} else {
		if l.opened == nil {
			l.opened = make(chan struct{})
		}
		opened = l.opened
	}
	l.mu.Unlock()
	err := sleep(ctx, d, opened, back)
	l.mu.Lock()
	l.sleepers--
	l.mu.Unlock()
	return err
}

// backLocked returns the channel that the key's next answer closes (see
// wakeBack), making it if none is open. Called with mu held.
func (l *Lane) backLocked() chan struct{} {
	c := l.back.Load()
	if c == nil {
		ch := make(chan struct{})
		c = &ch
		l.back.Store(c)
	}
	return *c
}

// Sleep waits d, or less if ctx ends first (it returns the context's
// error). It starts no goroutine.
func Sleep(ctx context.Context, d time.Duration) error { return sleep(ctx, d, nil, nil) }

// sleep waits d, or less if ctx ends first (it returns the context's
// error), if opened is closed first (it returns ErrOpen), or if back is
// (it returns nil).
func sleep(ctx context.Context, d time.Duration, opened, back <-chan struct{}) error {
	select {
	case <-opened:
		return ErrOpen
	default:
	}
	if d <= 0 {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			// The deadline is now: its timer may not have fired yet, but an
			// attempt sent at it could not finish.
			return context.DeadlineExceeded
		}
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-opened:
		return ErrOpen
	case <-back:
		return nil
	}
}
