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

// HeldError refuses an attempt while the key is held.
type HeldError struct{ Until time.Time }

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
// attempt waits its turn for the send rate or a place in flight. A closed
// circuit with no hold, no pacing, no waiters and no limit admits with
// one atomic load.
func (l *Lane) Admit(ctx context.Context, lim Limits) (tk Ticket, trs Transitions, err error) {
	if w := l.word.Load(); w&fastMask == 0 && lim.MaxInFlight == 0 {
		tk.gen = w >> stateBits
		countTo(&l.sent)
		return tk, trs, nil
	}
	return l.admitSlow(ctx, lim)
}

// admitSlow is Admit past its fast path: the circuit, the hold and the
// key's waiters first, then the wait for the send rate, then a place in
// flight.
func (l *Lane) admitSlow(ctx context.Context, lim Limits) (Ticket, Transitions, error) {
	return l.admitLoop(ctx, lim, time.Time{}, false)
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
			// attempt waited its turn: it waits for the hold too.
			err = l.heldNow()
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

// HeldWait returns how long a request that a hold refused with e waits
// before it asks again: to the hold's end; and whether it then spreads
// (a draw the root package makes by the crowd then). ok is false when
// held plus that wait would pass patience, or the wait would reach
// deadline (the zero time: none).
func (l *Lane) HeldWait(e *HeldError, held, patience time.Duration, deadline time.Time) (wait time.Duration, spread, ok bool) {
	// Paced at the quota it advertises: its pacer lets the held requests
	// go one after another at that rate, which a spread on top would only
	// slow. Otherwise the spread keeps them from returning together.
	spread = !(l.Paced() && l.advertises.Load())
	now := time.Now()
	wait = e.Until.Sub(now)
	if held+wait > patience || !deadline.IsZero() && !now.Add(wait).Before(deadline) {
		return 0, false, false
	}
	return wait, spread, true
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
		c := l.back.Load()
		if c == nil {
			ch := make(chan struct{})
			c = &ch
			l.back.Store(c)
		}
		back = *c
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
