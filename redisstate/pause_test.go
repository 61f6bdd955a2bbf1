package redisstate

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// okNext answers every request with one shared 200 response, in memory, so
// that what is measured is the transport's own cost.
type okNext struct{ resp *http.Response }

func (n *okNext) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return n.resp, nil
}

// timedStore measures how long after its context's deadline each Announce
// returns.
type timedStore struct {
	*Store
	calls, timedOut atomic.Int64
	mu              sync.Mutex
	late            time.Duration // the most an Announce returned after its deadline; guarded by mu
}

func (s *timedStore) Announce(ctx context.Context, c fleet.Change) error {
	err := s.Store.Announce(ctx, c)
	s.calls.Add(1)
	if deadline, ok := ctx.Deadline(); ok {
		late := time.Since(deadline)
		s.mu.Lock()
		s.late = max(s.late, late)
		s.mu.Unlock()
		if late >= 0 {
			s.timedOut.Add(1)
		}
	}
	return err
}

// With the server stopped (SIGSTOP) for 3 s, requests through a transport
// whose fleet uses the store keep their success-path cost and allocate
// nothing, and no Announce outlives its context.
func TestServerPaused(t *testing.T) {
	srv := startRedis(t)
	store := &timedStore{Store: New(srv.client(t), Options{Prefix: prefix(t), SnapshotPeriod: 300 * time.Millisecond, Timeout: 200 * time.Millisecond})}
	f := fleet.New(store, fleet.Config{Instance: "paused", Heartbeat: 100 * time.Millisecond, Timeout: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Go(func() { _ = f.Run(ctx) })
	defer func() {
		cancel()
		running.Wait()
	}()

	tr := retryhttp.New(&okNext{resp: &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}},
		retryhttp.WithFleet(f))
	req, err := http.NewRequest(http.MethodGet, "http://healthy.test/x", nil)
	require.NoError(t, err)
	roundTrip := func() {
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatal(resp, err)
		}
	}
	// 10,000 round trips in batches of 1,000: the median batch's cost per
	// round trip, steadier than the mean on a shared machine, and the
	// slowest batch's time, which would hold any wait for the store (each
	// call to it takes 200 ms while the server is paused).
	measure := func() (perOp, slowest time.Duration) {
		var batches []time.Duration
		for range 10 {
			start := time.Now()
			for range 1000 {
				roundTrip()
			}
			batches = append(batches, time.Since(start))
		}
		return percentile(batches, 0.5) / 1000, slices.Max(batches)
	}
	measure() // warm up
	deadline := time.Now().Add(5 * time.Second)
	for f.Stats().Announced == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Positive(t, f.Stats().Announced, "heartbeats reached the store")
	before, slowBefore := measure()

	srv.Pause()
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	callsAtPause := store.calls.Load()
	timer := time.NewTimer(300 * time.Millisecond) // heartbeats and snapshots are stuck by now
	<-timer.C
	during, slowDuring := measure()
	allocs := testing.AllocsPerRun(1000, roundTrip)
	timer.Reset(time.Until(paused.Add(3 * time.Second)))
	<-timer.C
	srv.Resume()
	resumed = true
	calls, timedOut := store.calls.Load()-callsAtPause, store.timedOut.Load()
	store.mu.Lock()
	late := store.late
	store.mu.Unlock()

	t.Logf("success path, median of 10 batches of 1,000: %v/op before the pause, %v/op during it (%.2fx); "+
		"slowest batch %v before, %v during; %v allocs/op during it",
		before, during, float64(during)/float64(before), slowBefore, slowDuring, allocs)
	t.Logf("during the 3 s pause: %d Announce calls, %d ended by their 200 ms timeout, the latest %v after its deadline; fleet %+v",
		calls, timedOut, late, f.Stats())
	assert.Less(t, float64(during), 3*float64(before), "cost per round trip during the pause against before")
	assert.Less(t, slowDuring, 100*time.Millisecond, "1,000 round trips during the pause: none waited for the store")
	assert.Zero(t, allocs, "allocations per round trip during the pause")
	assert.Positive(t, timedOut, "announcements timed out during the pause")
	assert.Less(t, late, 20*time.Millisecond, "no Announce outlives its context")

	// After the pause the fleet announces again.
	announced := f.Stats().Announced
	deadline = time.Now().Add(5 * time.Second)
	for f.Stats().Announced == announced && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.Greater(t, f.Stats().Announced, announced, "announcements after the pause")
}
