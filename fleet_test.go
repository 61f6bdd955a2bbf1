package retryhttp

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fleetRun is one scenario for several transports in one process, each
// standing for a process of its own: its own breaker and budget, and, when
// sharing, its own Fleet on one store.
type fleetRun struct {
	transports int
	share      bool
	rate       int           // requests per second, in all
	sendFor    time.Duration // how long requests are sent
	outage     time.Duration // the host fails every attempt for this long
	status     int           // the failure; 0: 503
	retryAfter string        // sent with each failure
	bad        int           // transport whose own network fails every attempt; -1: none
}

// fleetResult counts what the host received.
type fleetResult struct {
	failed  int // attempts answered with a failure
	late    int // attempts the host received from 5 s into the outage until its end
	inHold  int // attempts in the 30 s after the first failure
	refused int // requests refused without an attempt by transports other than the bad one
}

func runFleetScenario(t *testing.T, c fleetRun) fleetResult {
	t.Helper()
	var res fleetResult
	synctest.Test(t, func(t *testing.T) {
		if c.status == 0 {
			c.status = http.StatusServiceUnavailable
		}
		start := time.Now()
		var mu sync.Mutex
		host := newBreakerFake(func(*http.Request) (int, error) {
			at := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if at < c.outage {
				res.failed++
				if at >= 5*time.Second {
					res.late++
				}
				if at < 30*time.Second {
					res.inHold++
				}
				return 0, nil
			}
			return http.StatusOK, nil
		})
		next := failWith{host, c.status, c.retryAfter}
		store := newMemStore(5 * time.Millisecond)
		store.every = 2 * time.Second
		ctx, cancel := context.WithCancel(context.Background())
		var running sync.WaitGroup
		trs := make([]*Transport, c.transports)
		for i := range trs {
			var rt http.RoundTripper = next
			if i == c.bad {
				rt = brokenNetwork{}
			}
			opts := []Option{}
			if c.share {
				f := NewFleet(store, FleetConfig{Instance: fmt.Sprint("p", i), Heartbeat: time.Second})
				running.Go(func() { _ = f.Run(ctx) })
				opts = append(opts, WithFleet(f))
			}
			trs[i] = New(rt, opts...)
		}
		time.Sleep(100 * time.Millisecond) // the first heartbeats go round
		start = time.Now()
		var wg sync.WaitGroup
		var refused atomic.Int64
		n := int(c.sendFor / time.Second * time.Duration(c.rate))
		for i := range n {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(c.rate))))
			tr := i % c.transports
			wg.Go(func() {
				resp, err := trs[tr].RoundTrip(newReq(context.Background(), http.MethodGet, nil))
				if err == nil {
					resp.Body.Close()
				} else if e, ok := err.(*Error); ok && e.Attempts == 0 && tr != c.bad {
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		cancel()
		running.Wait()
		store.pending.Wait()
		res.refused = int(refused.Load())
	})
	return res
}

// failWith turns the breaker fake's 0 status into a failure with a status
// and an optional Retry-After.
type failWith struct {
	f          *breakerFake
	status     int
	retryAfter string
}

func (w failWith) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.f.RoundTrip(req)
	if resp == nil && err == nil {
		resp = newResponse(req, w.status, http.NoBody)
		if w.retryAfter != "" {
			resp.Header.Set("Retry-After", w.retryAfter)
		}
	}
	return resp, err
}

// brokenNetwork fails every attempt, as one process's own bad network would.
type brokenNetwork struct{}

func (brokenNetwork) RoundTrip(req *http.Request) (*http.Response, error) { return nil, errReset() }

// Eight processes sharing what they learn waste about what one process
// carrying all the traffic wastes; eight that share nothing waste more.
func TestFleetSharesWhatItLearns(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	base := fleetRun{rate: 200, sendFor: 30 * time.Second, outage: 20 * time.Second, bad: -1}
	one, shared, isolated := base, base, base
	one.transports = 1
	shared.transports, shared.share = 8, true
	isolated.transports = 8
	r1, rs, ri := runFleetScenario(t, one), runFleetScenario(t, shared), runFleetScenario(t, isolated)
	t.Logf("20 s outage, wasted attempts: one transport %d, 8 sharing %d (%.2fx), 8 isolated %d (%.2fx); from 5 s on: %d, %d, %d",
		r1.failed, rs.failed, float64(rs.failed)/float64(r1.failed), ri.failed, float64(ri.failed)/float64(r1.failed), r1.late, rs.late, ri.late)
	assert.LessOrEqual(t, float64(rs.failed), 1.10*float64(r1.failed), "8 sharing against one")
	assert.GreaterOrEqual(t, float64(ri.failed), 1.3*float64(r1.failed), "8 isolated against one")

	long := base
	long.sendFor, long.outage = 70*time.Second, 60*time.Second
	l1, ls := long, long
	l1.transports = 1
	ls.transports, ls.share = 8, true
	p1, ps := runFleetScenario(t, l1), runFleetScenario(t, ls)
	t.Logf("60 s outage, attempts from 5 s on (probes): one transport %d, 8 sharing %d (%.2fx)", p1.late, ps.late, float64(ps.late)/float64(p1.late))
	assert.LessOrEqual(t, float64(ps.late), 1.5*float64(p1.late), "probes of 8 sharing against one")
}

// A 429 with Retry-After: 30 holds the key across the fleet.
func TestFleetSharesHolds(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	r := runFleetScenario(t, fleetRun{transports: 8, share: true, rate: 200, sendFor: 10 * time.Second,
		outage: 30 * time.Second, status: http.StatusTooManyRequests, retryAfter: "30", bad: -1})
	t.Logf("attempts from the fleet in the 30 s of the hold: %d", r.inHold)
	assert.LessOrEqual(t, r.inHold, 10)
}

// One process whose own network fails does not open the others' circuits.
func TestFleetOneBadInstance(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	r := runFleetScenario(t, fleetRun{transports: 8, share: true, rate: 200, sendFor: 20 * time.Second, bad: 3})
	assert.Zero(t, r.refused, "requests the healthy processes refused")
	assert.Zero(t, r.failed, "the host failed nothing")
}

// A store that is down leaves each process as it would be alone: nothing
// blocks, announcements are dropped and counted, the fleet size decays to 1.
func TestFleetStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore(time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a := NewFleet(store, FleetConfig{Instance: "a", Heartbeat: time.Second})
		b := NewFleet(store, FleetConfig{Instance: "b", Heartbeat: time.Second})
		var running sync.WaitGroup
		running.Go(func() { _ = a.Run(ctx) })
		running.Go(func() { _ = b.Run(ctx) })
		budget := NewBudget(BudgetConfig{})
		tr := New(statusNext(200), WithBudget(budget), WithFleet(a))
		time.Sleep(1500 * time.Millisecond)
		require.Equal(t, 2, a.Stats().Size, "fleet size with both alive")
		assert.InDelta(t, 5.0, budget.tokens(hostKey{}, time.Now()), 0.01, "the floor's burst, halved")

		store.setDown(true)
		time.Sleep(10 * time.Second)
		for range 100 {
			sendGET(t, tr, testURL)
		}
		assert.Equal(t, 1, a.Stats().Size, "fleet size after heartbeats stopped")
		assert.Positive(t, a.Stats().Dropped, "announcements dropped")
		cancel()
		running.Wait()
		store.pending.Wait()
	})
}

// A transport shared through a fleet reads only local memory: its success
// path allocates nothing.
func TestFleetSuccessPathAllocs(t *testing.T) {
	tr := New(newOKNext(), WithFleet(NewFleet(newMemStore(0), FleetConfig{})))
	req, err := http.NewRequest(http.MethodGet, "http://example.test/x", nil)
	require.NoError(t, err)
	allocs := successAllocs(t, tr, req)
	assert.Zero(t, allocs)
}

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
		f := NewFleet(store, FleetConfig{Instance: "a", Heartbeat: time.Hour, Timeout: time.Minute})
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
