package retryhttp

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// herdRun is what TestBreakerDefaultsHerd's workers saw.
type herdRun struct {
	trip       time.Duration // first change of the circuit to open, from the hook; -1: none
	opens      int           // changes of the circuit to open
	firstOpen  time.Duration // first ErrCircuitOpen a worker got; -1: none
	closedAt   time.Duration // the circuit's last change to closed; -1: none
	openErrs   int64         // ErrCircuitOpen results
	gaveUp     int64         // requests that ended on a 503 after their attempts
	delivered  int64         // deliveries that ended in a 200
	failed     int64         // attempts answered 503
	arrivals   []time.Duration
	lastStatus []int // each worker's last status
}

// runBreakerHerd runs workers against one in-memory endpoint that answers
// 503 for the first outage and 200 after, each attempt taking latency.
// Each worker sends deliveries back to back; a delivery is sent again until
// it gets a 200 (at once after a 503, 500 ms later after ErrCircuitOpen),
// and the worker starts no delivery after stopAt. The transport has the
// default policy, attempts and breaker, and no budget: the default budget
// would end most retries in the outage, and this test is about what the
// breaker does with the full default retry sequence.
func runBreakerHerd(t *testing.T, workers int, outage, stopAt time.Duration) herdRun {
	const latency = 100 * time.Millisecond
	start := time.Now()
	run := herdRun{trip: -1, firstOpen: -1, closedAt: -1, lastStatus: make([]int, workers)}
	var mu sync.Mutex // guards run.trip, run.firstOpen, run.closedAt, run.arrivals
	var failed atomic.Int64
	fake := newBreakerFake(func(*http.Request) (int, error) {
		at := time.Since(start)
		mu.Lock()
		run.arrivals = append(run.arrivals, at)
		mu.Unlock()
		time.Sleep(latency)
		if at < outage {
			failed.Add(1)
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusOK, nil
	})
	onState := func(c Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case c.To == StateOpen:
			run.opens++
			if run.trip < 0 {
				run.trip = time.Since(start)
			}
		case c.To == StateClosed:
			run.closedAt = time.Since(start)
		}
	}
	tr := New(fake, WithBudget(nil), WithBreaker(NewBreaker(BreakerConfig{OnStateChange: onState})))

	var openErrs, gaveUp, delivered atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://tenant.example.test/hook", nil)
			if !assert.NoError(t, err) {
				return
			}
			for time.Since(start) < stopAt {
				for {
					resp, err := tr.RoundTrip(req)
					if errors.Is(err, ErrCircuitOpen) {
						openErrs.Add(1)
						mu.Lock()
						if run.firstOpen < 0 {
							run.firstOpen = time.Since(start)
						}
						mu.Unlock()
						run.lastStatus[w] = 0
						time.Sleep(500 * time.Millisecond)
						continue
					}
					if !assert.NoError(t, err, "worker %d", w) {
						return
					}
					_ = resp.Body.Close()
					run.lastStatus[w] = resp.StatusCode
					if resp.StatusCode == http.StatusOK {
						delivered.Add(1)
						break
					}
					gaveUp.Add(1)
				}
			}
		})
	}
	wg.Wait()
	run.openErrs, run.gaveUp, run.delivered, run.failed = openErrs.Load(), gaveUp.Load(), delivered.Load(), failed.Load()
	return run
}

// TestBreakerDefaultsHerd runs 500 workers with the default retry
// sequence and the default breaker against one endpoint. An outage shorter
// than the retry sequence must not trip the circuit; one that lasts must
// trip it with the first failures past the span (the requests' first
// ride-out attempts), after which the endpoint sees nothing but one probe per open period
// while the workers' requests wait, and the circuit closes within a second
// of the endpoint's return.
//
// 500 workers (2,000 took six times as long) are far above what the
// default breaker counts, 5 failures over its 2 s span: the trip came at
// 2.1 s with either before requests rode failures out (3.2 s since), and with the span not waited for the circuit opens at
// 100 ms in both outages. With probes not limited, 1,000 attempts reached
// the endpoint after the trip when tried, against one per open period.
func TestBreakerDefaultsHerd(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	const workers = 500

	t.Run("1s outage does not trip", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const outage = time.Second
			r := runBreakerHerd(t, workers, outage, 2500*time.Millisecond)
			t.Logf("outage [0s, %v): attempts failed %d, requests that used their 4 attempts %d, deliveries %d, ErrCircuitOpen %d, circuit opened at %v (-1ns: never)",
				outage, r.failed, r.gaveUp, r.delivered, r.openErrs, r.trip)
			assert.Equal(t, time.Duration(-1), r.trip, "the circuit opened at %v, want never", r.trip)
			assert.Zero(t, r.openErrs, "ErrCircuitOpen results: got %d, want 0", r.openErrs)
			assert.GreaterOrEqual(t, r.failed, int64(workers), "attempts that failed in the outage")
			for w, s := range r.lastStatus {
				if !assert.Equal(t, http.StatusOK, s, "worker %d's last delivery", w) {
					break
				}
			}
		})
	})

	t.Run("20s outage trips within 2.8s", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const outage = 20 * time.Second
			r := runBreakerHerd(t, workers, outage, outage+time.Second)
			after := 0 // attempts that reached the endpoint after the trip, inside the outage
			for _, at := range r.arrivals {
				if r.trip >= 0 && at > r.trip && at < outage {
					after++
				}
			}
			t.Logf("outage [0s, %v): circuit opened at %v, %d times; attempts failed %d, %d of them after the trip; ErrCircuitOpen %d; circuit closed again at %v; deliveries %d",
				outage, r.trip, r.opens, r.failed, after, r.openErrs, r.closedAt, r.delivered)
			require.GreaterOrEqual(t, r.trip, defaultBreakerSpan, "trip instant: got %v, want no earlier than the span", r.trip)
			// The trip comes with the first failure past the span. Once
			// their attempts are used (1.4 s of waiting at most, plus
			// 100 ms of latency each), the requests ride the young failure
			// out, their next attempt a quarter to a half of the 10 s
			// envelope later: the failures thin out from 1.8 s and resume
			// from about 2.8 s.
			assert.LessOrEqual(t, r.trip, 4*time.Second, "trip instant: got %v, want by the first ride-out attempts", r.trip)
			// The workers' requests wait for the endpoint instead of being
			// turned back; while the circuit is open the endpoint sees only
			// probes, one per open period, each failing and opening it again.
			assert.Zero(t, r.openErrs, "ErrCircuitOpen results: the requests wait")
			assert.LessOrEqual(t, after, r.opens, "attempts that reached the endpoint after the trip, inside the outage, vs open periods")
			assert.GreaterOrEqual(t, r.closedAt, outage, "the circuit closed again at %v, want after the outage", r.closedAt)
			assert.LessOrEqual(t, r.closedAt, outage+time.Second, "the circuit closed again at %v, want within a second of the endpoint's return", r.closedAt)
			for w, s := range r.lastStatus {
				if !assert.Equal(t, http.StatusOK, s, "worker %d's last delivery", w) {
					break
				}
			}
		})
	})
}
