package retryhttp

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// At most n attempts in flight to one key: the rest wait their turn, or,
// for a request that waits for nothing (WithMaxWait(0)), are refused at
// once; other keys are not affected.
func TestPaceConcurrencyLimit(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(map[bool]string{false: "wait", true: "refuse"}[refuse], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var inFlight, most atomic.Int64
				slow := newBreakerFake(func(*http.Request) (int, error) {
					n := inFlight.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(time.Second)
					inFlight.Add(-1)
					return http.StatusOK, nil
				})
				opts := []Option{WithConcurrencyLimit(3)}
				if refuse {
					opts = append(opts, WithMaxWait(0))
				}
				tr := New(slow, opts...)
				var wg sync.WaitGroup
				var ok, refused atomic.Int64
				start := time.Now()
				for range 10 {
					wg.Go(func() {
						resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
						switch {
						case err == nil:
							resp.Body.Close()
							ok.Add(1)
						case assert.Equal(t, ReasonConcurrencyLimit, asError(t, err).Reason):
							refused.Add(1)
						}
					})
				}
				wg.Wait()
				assert.Equal(t, int64(3), most.Load(), "attempts in flight at once")
				if refuse {
					assert.Equal(t, int64(3), ok.Load())
					assert.Equal(t, int64(7), refused.Load())
					assert.Equal(t, time.Second, time.Since(start))
				} else {
					assert.Equal(t, int64(10), ok.Load())
					assert.Equal(t, 4*time.Second, time.Since(start), "10 in turns of 3")
				}
			})
		})
	}
}

// A dispatcher with a fixed pool of 100 workers sends 50 requests/s to
// each of 100 fast hosts (5 ms) and one slow host (5 s): the fast hosts'
// p99 delivery latency, queueing included, stays within 2x of their p99
// without the slow host when the per-key limit refuses at once; without
// the limit the slow host takes the pool.
func TestPaceSlowTenant(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	run := func(slowHost bool, opts ...Option) time.Duration {
		var p99 time.Duration
		synctest.Test(t, func(t *testing.T) {
			next := newBreakerFake(func(req *http.Request) (int, error) {
				if req.URL.Host == "slow.test" {
					time.Sleep(5 * time.Second)
				} else {
					time.Sleep(5 * time.Millisecond)
				}
				return http.StatusOK, nil
			})
			tr := New(next, append([]Option{WithMaxAttempts(1)}, opts...)...)
			type job struct {
				host string
				at   time.Time
			}
			jobs := make(chan job, 1<<16)
			var mu sync.Mutex
			var lat []time.Duration
			var workers sync.WaitGroup
			for range 100 {
				workers.Go(func() {
					for j := range jobs {
						req, err := http.NewRequest(http.MethodGet, "http://"+j.host+"/", nil)
						if err != nil {
							panic(err)
						}
						resp, err := tr.RoundTrip(req)
						if err == nil {
							resp.Body.Close()
						}
						if j.host != "slow.test" {
							mu.Lock()
							lat = append(lat, time.Since(j.at))
							mu.Unlock()
						}
					}
				})
			}
			const hosts, perSec, runFor = 100, 50, 5 * time.Second
			start := time.Now()
			for tick := range int(runFor / (20 * time.Millisecond)) {
				time.Sleep(time.Until(start.Add(time.Duration(tick) * 20 * time.Millisecond)))
				for h := range hosts {
					jobs <- job{fmt.Sprintf("h%d.test", h), time.Now()}
				}
				if slowHost {
					jobs <- job{"slow.test", time.Now()}
				}
			}
			close(jobs)
			workers.Wait()
			slices.Sort(lat)
			p99 = lat[len(lat)*99/100]
			_ = perSec
		})
		return p99
	}
	base := run(false)
	limited := run(true, WithConcurrencyLimit(5), WithMaxWait(0))
	unlimited := run(true)
	t.Logf("fast hosts' p99: alone %v; beside the slow host with a limit of 5 refusing %v; without a limit %v", base, limited, unlimited)
	assert.LessOrEqual(t, limited, 2*base)
}

// The pacer's edges, as a request sees them: one whose deadline the queue
// ahead cannot fit returns at once, with ReasonContextDone; one whose context
// ends while waiting returns its error; neither is sent.
func TestPaceEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newNext(reply{status: 200})
		tr := New(next, WithBudget(nil))
		l := tr.lanes.Lane(keyOf(mustParse(t, testURL)))
		l.Done(perkey.Ticket{}, perkey.Outcome{Facts: perkey.Throttles}) // paced from now, at 10/s
		// A success and a paced attempt throttled: the server held the key
		// to its rate, which a request may then be refused on.
		tk, _, err := l.Admit(t.Context(), perkey.Limits{})
		require.NoError(t, err)
		l.Done(tk, perkey.Outcome{Kind: perkey.Success})
		tk, _, err = l.Admit(t.Context(), perkey.Limits{})
		require.NoError(t, err)
		l.Done(tk, perkey.Outcome{Facts: perkey.Throttles})
		_, _, err = l.Admit(t.Context(), perkey.Limits{}) // takes the first release
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		defer cancel()
		_, err = tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, ReasonContextDone, asError(t, err).Reason)
		assert.Contains(t, err.Error(), "send rate")

		ctx, cancel = context.WithCancel(t.Context())
		done := make(chan error)
		go func() {
			_, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
			done <- err
		}()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		assert.Zero(t, next.calls())
	})
}

// In slow start a request with 3 s left waits its turn: 100 requests
// queued at 10/s doubling every 200 ms are served in about 1.03 s, not
// 10 s (the estimate is perkey's TestPaceSlowStartEstimate).
func TestPaceSlowStartEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newNext(reply{status: 200}), WithBreaker(nil), WithBudget(nil))
		l := tr.lanes.Lane(keyOf(mustParse(t, testURL)))
		l.Done(perkey.Ticket{}, perkey.Outcome{Facts: perkey.Throttles})
		var wg sync.WaitGroup
		var ok atomic.Int64
		for range 100 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
				defer cancel()
				if resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil)); err == nil {
					resp.Body.Close()
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(100), ok.Load(), "requests sent, the key paced without a breaker")
	})
}

// A lone caller answered 429 without a Retry-After backs off as for any
// failure: over 200 fresh transports, the mean gap before each of retries
// 1-3 is at least 0.8x full jitter's mean for that retry (100, 200 and
// 400 ms with the default policy). The key's send rate, which its first
// 429 starts, adds to the delay; it does not replace it.
func TestThrottledWithoutRetryAfterBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const trials = 200
		var sum [3]time.Duration
		for range trials {
			var at []time.Time
			stamp := func(*http.Request) { at = append(at, time.Now()) }
			tr := New(newNext(
				reply{status: http.StatusTooManyRequests, before: stamp},
				reply{status: http.StatusTooManyRequests, before: stamp},
				reply{status: http.StatusTooManyRequests, before: stamp},
				reply{status: http.StatusOK, before: stamp}))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			cancel()
			require.Len(t, at, 4)
			for i := range sum {
				sum[i] += at[i+1].Sub(at[i])
			}
		}
		for i, s := range sum {
			mean, jitter := s/trials, bound(i+1, 0, 0)/2
			t.Logf("retry %d: mean gap %v over %d trials, full jitter's mean %v (%.2fx)", i+1, mean.Round(time.Millisecond), trials, jitter, float64(mean)/float64(jitter))
			assert.GreaterOrEqual(t, float64(mean), 0.8*float64(jitter), "retry %d: mean gap %v, full jitter's mean %v", i+1, mean, jitter)
		}
	})
}
