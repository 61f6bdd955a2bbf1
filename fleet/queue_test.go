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
