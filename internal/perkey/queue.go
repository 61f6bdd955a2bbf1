package perkey

import (
	"context"
	"sync"
)

// waiter is one attempt waiting its turn in a queue.
type waiter struct {
	ch   chan struct{} // closed when the waiter is let go
	gen  uint64        // what the releaser handed over with it (a pacer's gen)
	gone bool          // its request stopped waiting; guarded by the queue's owner
}

// queue is the one waiter queue of this package: first come, first served,
// for the attempts that wait for a key's send rate (pacer) and for a place
// among its attempts in flight (slots). It is guarded by its owner's
// mutex; a waiter whose request gives up is marked gone and skipped, so
// that leaving costs no search.
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

// letNext lets the first waiter still waiting go, handing it gen, and
// reports whether there was one. Called with the owner's mutex held.
func (q *queue) letNext(gen uint64) bool {
	for len(q.ws) > 0 {
		w := q.ws[0]
		q.ws[0] = nil
		q.ws = q.ws[1:]
		if !w.gone {
			q.live--
			w.gen = gen
			close(w.ch)
			return true
		}
	}
	return false
}

// wait blocks until w is let go, returning what it was handed, or until
// ctx ends, returning the context's error. mu is the owner's mutex, not
// held on entry or return. A waiter let go just as its context ended does
// not use its turn: handOn, called with mu held, passes it to the next in
// line, so that the turn is not lost.
func (q *queue) wait(ctx context.Context, mu *sync.Mutex, w *waiter, handOn func()) (uint64, error) {
	select {
	case <-w.ch:
		return w.gen, nil
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case <-w.ch:
		handOn()
	default:
		w.gone = true
		q.live--
	}
	return 0, ctx.Err()
}
