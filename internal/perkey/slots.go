package perkey

import (
	"context"
	"sync"
)

// slots limits the attempts in flight to one key (a bulkhead).
type slots struct {
	mu       sync.Mutex
	inFlight int   // guarded by mu
	queue    queue // guarded by mu
}

// acquire takes a place among the key's n attempts in flight: at once if
// one is free; else it refuses (refuse), or waits for one in turn, giving
// up when ctx ends.
func (s *slots) acquire(ctx context.Context, n int, refuse bool) error {
	s.mu.Lock()
	if s.inFlight < n {
		s.inFlight++
		s.mu.Unlock()
		return nil
	}
	if refuse {
		s.mu.Unlock()
		return ErrSlots
	}
	w := s.queue.push()
	s.mu.Unlock()
	return s.queue.wait(ctx, &s.mu, w, nil, func(*waiter) { s.releaseLocked() })
}

// release gives the place back, to the first waiter still waiting if any.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

// releaseLocked passes the place to the next in line, or frees it. Called
// with mu held.
func (s *slots) releaseLocked() {
	if !s.queue.letNext(0) {
		s.inFlight-- // nobody waits: the place is free
	}
}

// busy reports whether an attempt is in flight.
func (s *slots) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight > 0
}

// slotsOf returns the key's attempts in flight, made on first use.
func (l *Lane) slotsOf() *slots {
	if s := l.slots.Load(); s != nil {
		return s
	}
	l.slots.CompareAndSwap(nil, &slots{})
	return l.slots.Load()
}
