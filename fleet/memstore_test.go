package fleet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/retryhttp/retryhttp/fleet"
)

// memStore is an in-memory fleet.Store for virtual-time tests of the Fleet, with
// a delivery latency, a share of pushes lost, and a switch that makes it
// fail. It keeps opens, holds, failure reports and heartbeats by its own
// clock, as a real store keeps them by its own.
type memStore struct {
	latency time.Duration // before a change reaches the watchers
	loss    float64       // share of pushes lost
	every   time.Duration // snapshot period; 0: only at (re)connect

	mu       sync.Mutex
	down     bool                             // guarded by mu
	lost     chan struct{}                    // closed when the store goes down: watchers lose it; guarded by mu
	opens    map[string]time.Time             // guarded by mu
	openBy   map[string]string                // key -> the instance whose open is kept; guarded by mu
	holds    map[string]time.Time             // guarded by mu
	failing  map[string]map[string]time.Time  // key -> instance -> until; guarded by mu
	alive    map[string]time.Time             // guarded by mu
	demand   map[string]map[string]time.Time  // key -> instance -> until; guarded by mu
	watchers map[*func(fleet.Change)]struct{} // guarded by mu
	pending  sync.WaitGroup
}

var errStoreDown = errors.New("memStore: down")

func newMemStore(latency time.Duration) *memStore {
	return &memStore{latency: latency, opens: map[string]time.Time{}, openBy: map[string]string{}, holds: map[string]time.Time{},
		failing: map[string]map[string]time.Time{}, alive: map[string]time.Time{}, demand: map[string]map[string]time.Time{}, watchers: map[*func(fleet.Change)]struct{}{}}
}

// setDown makes the store fail, as a restarting server does: calls fail,
// and watchers lose their subscription, to be made again when it is back.
func (s *memStore) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if down && !s.down && s.lost != nil {
		close(s.lost)
		s.lost = nil
	}
	s.down = down
}

func (s *memStore) Announce(ctx context.Context, c fleet.Change) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errStoreDown
	}
	now := time.Now()
	switch c.Kind {
	case fleet.ChangeAlive:
		s.alive[c.Instance] = now.Add(c.For)
	case fleet.ChangeFailing:
		s.report(c.Key, c.Instance, now.Add(c.For))
	case fleet.ChangeOpen:
		s.report(c.Key, c.Instance, now.Add(c.For))
		c.Reporters = 0
		for _, until := range s.failing[c.Key] {
			if now.Before(until) {
				c.Reporters++
			}
		}
		if until := now.Add(c.For); until.After(s.opens[c.Key]) {
			s.opens[c.Key] = until
			s.openBy[c.Key] = c.Instance
		}
	case fleet.ChangeClose:
		delete(s.opens, c.Key)
	case fleet.ChangeHold:
		if until := now.Add(c.For); until.After(s.holds[c.Key]) {
			s.holds[c.Key] = until
		}
	case fleet.ChangeDemand:
		if s.demand[c.Key] == nil {
			s.demand[c.Key] = map[string]time.Time{}
		}
		s.demand[c.Key][c.Instance] = now.Add(c.For)
	}
	for w := range s.watchers {
		if s.loss > 0 && rand.Float64() < s.loss {
			continue
		}
		s.deliver(*w, c, now)
	}
	return nil
}

func (s *memStore) report(key, instance string, until time.Time) {
	if s.failing[key] == nil {
		s.failing[key] = map[string]time.Time{}
	}
	s.failing[key][instance] = until
}

// deliver passes c to apply after the latency; durations shrink by it, as
// they would on a real wire. Called with mu held.
func (s *memStore) deliver(apply func(fleet.Change), c fleet.Change, sent time.Time) {
	s.pending.Add(1)
	time.AfterFunc(s.latency, func() {
		defer s.pending.Done()
		late := time.Since(sent)
		if c.For > 0 {
			c.For = max(c.For-late, 0)
		}
		c.Age += late
		apply(c)
	})
}

func (s *memStore) Watch(ctx context.Context, apply func(fleet.Change)) error {
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return errStoreDown
	}
	s.watchers[&apply] = struct{}{}
	s.snapshotLocked(apply)
	if s.lost == nil {
		s.lost = make(chan struct{})
	}
	lost := s.lost
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, &apply)
		s.mu.Unlock()
	}()
	var tick <-chan time.Time
	if s.every > 0 {
		t := time.NewTicker(s.every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-lost:
			return errStoreDown
		case <-tick:
			s.mu.Lock()
			s.snapshotLocked(apply)
			s.mu.Unlock()
		}
	}
}

// snapshotLocked hands apply every live open, hold, heartbeat and demand.
func (s *memStore) snapshotLocked(apply func(fleet.Change)) {
	now := time.Now()
	for k, insts := range s.demand {
		for id, until := range insts {
			if now.Before(until) {
				s.deliver(apply, fleet.Change{Kind: fleet.ChangeDemand, Instance: id, Key: k, For: until.Sub(now)}, now)
			}
		}
	}
	for k, until := range s.opens {
		if now.Before(until) {
			n := 0
			for _, u := range s.failing[k] {
				if now.Before(u) {
					n++
				}
			}
			s.deliver(apply, fleet.Change{Kind: fleet.ChangeOpen, Instance: s.openBy[k], Key: k, For: until.Sub(now), Reporters: n}, now)
		}
	}
	for k, until := range s.holds {
		if now.Before(until) {
			s.deliver(apply, fleet.Change{Kind: fleet.ChangeHold, Instance: "store", Key: k, For: until.Sub(now)}, now)
		}
	}
	for id, until := range s.alive {
		if now.Before(until) {
			s.deliver(apply, fleet.Change{Kind: fleet.ChangeAlive, Instance: id, For: until.Sub(now)}, now)
		}
	}
}
