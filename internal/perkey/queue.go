package perkey

import (
	"context"
	"sync"
	"time"
)

// waiter is one request waiting its turn in a queue.
type waiter struct {
	ch    chan struct{} // closed when the waiter is let go
	gen   uint64        // a pacer's: its generation at the release
	grant grant         // a lane's: what the waiter was let go with
	tk    Ticket        // with grantProbe: the probe's ticket
	trs   Transitions   // changes made on its behalf, for its request to report
	// deadline is when its request's context ends; zero for none.
	deadline time.Time
	at       time.Time // when it began to wait, in a lane's queue
	gone     bool      // its request stopped waiting, or was let go out of turn; guarded by the queue's owner
}

// grant is what a lane lets a waiter go with.
type grant uint8

const (
	grantNone  grant = iota
	grantProbe       // a half-open probe, with its ticket
	grantTurn        // its turn while the key recovers: admitted without queueing again
	grantTest        // the one test of a closed key whose requests wait
)

// queue is the one waiter queue of this package: first come, first served,
// for the attempts that wait for a key to recover (the lane's), for its
// send rate (a pacer's) and for a place among its attempts in flight
// (slots'). It is guarded by its owner's mutex; a waiter whose request
// gives up is marked gone and skipped, so that leaving costs no search.
type queue struct {
	ws   []*waiter
	live int // waiters not gone
}

// push adds a waiter at the back. Called with the owner's mutex held.
func (q *queue) push() *waiter {
	w := &waiter{ch: make(chan struct{})}
	q.ws = append(q.ws, w)
	q.live++
	return w
}

// len returns how many wait. Called with the owner's mutex held.
func (q *queue) len() int { return q.live }

// latest removes and returns the waiter still waiting with the most time
// left (a waiter without a deadline has the most; of equals, the first),
// or nil. The caller lets it go. It looks at every waiter. Called with the
// owner's mutex held.
func (q *queue) latest() *waiter {
	var best *waiter
	for _, w := range q.ws {
		switch {
		case w.gone:
		case best == nil:
			best = w
		case best.deadline.IsZero():
			// Nobody has more time than best.
		case w.deadline.IsZero() || w.deadline.After(best.deadline):
			best = w
		}
	}
	if best != nil {
		best.gone = true // taken out of turn: skipped where it stands
		q.live--
	}
	return best
}

// oldest returns when the first waiter still waiting began to wait; the
// zero time if none waits. Called with the owner's mutex held.
func (q *queue) oldest() time.Time {
	for _, w := range q.ws {
		if !w.gone {
			return w.at
		}
	}
	return time.Time{}
}

// pop removes and returns the first waiter still waiting, or nil. The
// caller lets it go. Called with the owner's mutex held.
func (q *queue) pop() *waiter {
	for len(q.ws) > 0 {
		w := q.ws[0]
		q.ws[0] = nil
		q.ws = q.ws[1:]
		if !w.gone {
			q.live--
			return w
		}
	}
	return nil
}

// letNext lets the first waiter still waiting go, handing it gen, and
// reports whether there was one. Called with the owner's mutex held.
func (q *queue) letNext(gen uint64) bool {
	w := q.pop()
	if w == nil {
		return false
	}
	w.gen = gen
	close(w.ch)
	return true
}

// wait blocks until w is let go, or until ctx ends (the context's error)
// or timeout fires (errWaitOver); a nil timeout never fires. mu is the
// owner's mutex, not held on entry or return. A waiter let go just as it
// stopped waiting does not use its turn: handOn, called with mu held,
// passes what it was let go with to the next in line, so that the turn is
// not lost.
func (q *queue) wait(ctx context.Context, mu *sync.Mutex, w *waiter, timeout <-chan time.Time, handOn func(*waiter)) error {
	var err error
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout:
		err = errWaitOver
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case <-w.ch:
		handOn(w)
	default:
		w.gone = true
		q.live--
	}
	return err
}
