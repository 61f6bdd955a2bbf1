package fleet

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/fleetlink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowStore takes a second over each announcement and keeps what it got.
type slowStore struct {
	mu  sync.Mutex
	got []Change
}

func (s *slowStore) Announce(ctx context.Context, c Change) error {
	time.Sleep(time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, c)
	return nil
}

func (s *slowStore) Watch(ctx context.Context, apply func(Change)) error {
	<-ctx.Done()
	return nil
}

// A change that waited for a slow store says what is left of its time; one
// whose time ran out while it waited is dropped.
func TestFleetQueuedChangesAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &slowStore{}
		f := New(store, Config{Instance: "a", Heartbeat: time.Hour, Timeout: time.Minute})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = f.Run(ctx); close(done) }()
		synctest.Wait() // the first heartbeat is with the store
		f.announce(Change{Kind: ChangeHold, Key: "k", For: 3 * time.Second})
		f.announce(Change{Kind: ChangeHold, Key: "k", For: 1500 * time.Millisecond})
		f.announce(Change{Kind: ChangeClose, Key: "k"})
		time.Sleep(10 * time.Second)
		cancel()
		<-done
		store.mu.Lock()
		defer store.mu.Unlock()
		require.Len(t, store.got, 3, "the heartbeat, the first hold, the close")
		assert.Equal(t, 2*time.Second, store.got[1].For, "the hold waited 1 s behind the heartbeat")
		assert.Equal(t, 2*time.Second, store.got[2].Age, "the close waited 2 s: the dropped hold took no time")
		assert.Equal(t, uint64(1), f.Stats().Dropped, "the second hold ran out while it waited")
	})
}

// A breaker's change travels as a fleetlink.Change and an announced one
// as a Change: each kind is the same number in both.
func TestFleetLinkKinds(t *testing.T) {
	for _, k := range []struct {
		c ChangeKind
		l fleetlink.Kind
	}{{ChangeAlive, fleetlink.Alive}, {ChangeFailing, fleetlink.Failing}, {ChangeOpen, fleetlink.Open},
		{ChangeClose, fleetlink.Close}, {ChangeHold, fleetlink.Hold}} {
		assert.Equal(t, int(k.c), int(k.l))
	}
}

// Config follows retryhttp's rule for settings: zero and negative values
// mean the defaults, values past what can mean anything are bounded, and
// none panics.
func TestConfigRule(t *testing.T) {
	def := New(nil, Config{}).cfg
	assert.Equal(t, Config{Instance: def.Instance, Heartbeat: 2 * time.Second, Timeout: time.Second, Queue: 1024}, def)
	neg := New(nil, Config{Quorum: -1, Heartbeat: -1, Timeout: -1, Queue: -1})
	assert.Equal(t, []any{def.Heartbeat, def.Timeout, def.Queue}, []any{neg.cfg.Heartbeat, neg.cfg.Timeout, neg.cfg.Queue}, "negative: the defaults")
	neg.size.Store(3)
	assert.Equal(t, 2, neg.quorum(), "Quorum negative: the default")
	var absurd *Fleet
	require.NotPanics(t, func() {
		absurd = New(nil, Config{Quorum: 1 << 62, Heartbeat: 1<<63 - 1, Timeout: 1<<63 - 1, Queue: 1<<63 - 1})
	})
	assert.Equal(t, maxHeartbeat, absurd.cfg.Heartbeat, "bounded, so that three heartbeats cannot overflow")
	assert.Equal(t, maxQueue, cap(absurd.queue), "bounded: the queue is allocated whole")
	assert.Equal(t, 1<<62, absurd.quorum(), "a quorum no fleet reaches: no open is adopted unasked")
}

// A store back from an outage does not free the quota: the demand a
// process kept while the store was down counts a while more, for the
// others to say it again, though its time ran out during the outage.
func TestDemandOutlastsTheStoresReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := New(nil, Config{Instance: "a", Heartbeat: time.Second})
		f.size.Store(2)
		now := time.Now()
		f.lastOK.Store(f.mono(now))
		f.lastHeard.Store(f.mono(now))
		f.demanded("http://api.test", now) // queues an announcement; nobody runs the queue here
		f.apply(Change{Kind: ChangeDemand, Instance: "b", Key: "http://api.test", For: demandBeats * time.Second})
		time.Sleep(2 * time.Second)
		f.demanded("http://api.test", time.Now())
		f.reshare(time.Now())
		require.Equal(t, 0.5, f.share("http://api.test"), "two processes pace the key")

		// The store goes down for 10 s: b's demand runs out meanwhile,
		// and is kept.
		for range 10 {
			time.Sleep(time.Second)
			f.demanded("http://api.test", time.Now())
			f.reshare(time.Now())
		}
		assert.Equal(t, 0.5, f.share("http://api.test"), "the store down: the last share")

		// The store is back: it takes this process's announcements and
		// passes its own back, but b has not said its demand again yet.
		now = time.Now()
		f.lastOK.Store(f.mono(now))
		f.lastHeard.Store(f.mono(now))
		f.reshare(now)
		assert.Equal(t, 0.5, f.share("http://api.test"), "just back: b's demand still counts")
		time.Sleep(2 * time.Second)
		f.lastOK.Store(f.mono(time.Now()))
		f.lastHeard.Store(f.mono(time.Now()))
		f.demanded("http://api.test", time.Now())
		f.reshare(time.Now())
		assert.Equal(t, 0.5, f.share("http://api.test"), "2 s later: still counted, for b to say it again")
		time.Sleep(3 * time.Second)
		f.lastOK.Store(f.mono(time.Now()))
		f.lastHeard.Store(f.mono(time.Now()))
		f.demanded("http://api.test", time.Now())
		f.reshare(time.Now())
		assert.Equal(t, 1.0, f.share("http://api.test"), "b never said it again: after four heartbeats it lapses")
	})
}
