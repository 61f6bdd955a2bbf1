package retryhttp

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// downFor answers 503 (with a body) until down has passed since start,
// then 200; it counts what it receives, and when.
type downFor struct {
	start time.Time
	down  time.Duration
	mu    sync.Mutex
	at    []time.Duration // guarded by mu
}

func (d *downFor) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Since(d.start)
	d.mu.Lock()
	d.at = append(d.at, at)
	d.mu.Unlock()
	if at < d.down {
		return newResponse(req, http.StatusServiceUnavailable, newCountingBody("down")), nil
	}
	return newResponse(req, http.StatusOK, newCountingBody("up")), nil
}

// between counts the attempts received in [from, to).
func (d *downFor) between(from, to time.Duration) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, at := range d.at {
		if at >= from && at < to {
			n++
		}
	}
	return n
}

// A plain caller, with the defaults and no queue of its own: 2,000
// concurrent GETs through a one-second blip are all delivered, each sending
// at most its four attempts, where without the wait the budget hands
// nearly all of them back failed. The waits are counted and reported.
func TestWaitPlainCallerBlip(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	const n = 2000
	run := func(opts ...Option) (delivered int, next *downFor, st Stats, waits []Event) {
		synctest.Test(t, func(t *testing.T) {
			next = &downFor{start: time.Now(), down: time.Second}
			var mu sync.Mutex
			hooks := &Hooks{WaitDone: func(w Event) {
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
			}}
			tr := New(next, append([]Option{WithHooks(hooks)}, opts...)...)
			var ok atomic.Int64
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
					if err == nil {
						if resp.StatusCode == http.StatusOK {
							ok.Add(1)
						}
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			delivered, st = int(ok.Load()), tr.Stats()
		})
		return delivered, next, st, waits
	}
	delivered, next, st, waits := run()
	t.Logf("defaults: delivered %d, attempts %d (%d in the blip), waits %d (released %d), %v waited in all; delivered after waiting %d, gave up after waiting %d",
		delivered, len(next.at), next.between(0, time.Second), st.Waits, st.WaitsReleased, st.WaitTime, st.WaitedDelivered, st.WaitedGaveUp)
	require.Equal(t, n, delivered, "delivered with the defaults")
	assert.LessOrEqual(t, len(next.at), n*defaultMaxAttempts, "attempts: at most WithMaxAttempts per request")
	assert.Equal(t, uint64(n), st.Requests)
	assert.Positive(t, st.Waits, "requests waited")
	assert.Equal(t, st.Waits, st.WaitsReleased, "every wait ended with the request let go")
	assert.Equal(t, st.WaitedDelivered, uint64(len(uniqueRequests(waits))), "requests that waited and were delivered")
	assert.Zero(t, st.WaitedGaveUp)
	require.Len(t, waits, int(st.Waits), "WaitDone calls")
	var sum time.Duration
	for _, w := range waits {
		assert.True(t, w.Released)
		assert.Equal(t, "http://example.test", w.Key)
		assert.Contains(t, []Reason{ReasonBudgetExhausted, ReasonCircuitOpen, reasonNone}, w.Reason)
		sum += w.Waited
	}
	assert.Equal(t, st.WaitTime, sum, "WaitTime is the sum of the waits")

	refused, _, _, _ := run(WithMaxWait(0))
	t.Logf("without the wait: delivered %d", refused)
	assert.Less(t, refused, n/10, "delivered without the wait")
}

// uniqueRequests returns the distinct requests of waits.
func uniqueRequests(waits []Event) map[*http.Request]bool {
	m := map[*http.Request]bool{}
	for _, w := range waits {
		m[w.Request] = true
	}
	return m
}

// A host that never comes back within the run: every request returns by
// its deadline, or by its wait bound; the caller gets what it would have
// got without waiting (the last 503, body intact, or an Error naming the
// refusal it waited out, how long it waited and what ended the wait), and
// while the circuit is open the host sees nothing but one probe per open
// period.
func TestWaitSustainedOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &downFor{start: time.Now(), down: time.Hour}
		var mu sync.Mutex
		var opens int
		var trip time.Duration = -1
		onState := func(c Event) {
			mu.Lock()
			defer mu.Unlock()
			if c.To == StateOpen {
				opens++
				if trip < 0 {
					trip = time.Since(next.start)
				}
			}
		}
		tr := New(next, WithBreaker(NewBreaker(BreakerConfig{OnStateChange: onState})), WithBudget(nil))
		type result struct {
			resp    *http.Response
			err     error
			elapsed time.Duration
		}
		// 100 with a deadline of 3 s, sent from 0 to 1 s; then 100 more
		// with no deadline and a wait bound of 5 s, from 3 s on.
		results := make([]result, 200)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				ctx := t.Context()
				if i < 100 {
					time.Sleep(time.Duration(i) * 10 * time.Millisecond)
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
				} else {
					time.Sleep(3*time.Second + time.Duration(i-100)*10*time.Millisecond)
					ctx = ContextWithOptions(ctx, WithMaxWait(5*time.Second))
				}
				start := time.Now()
				resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
				results[i] = result{resp, err, time.Since(start)}
			})
		}
		wg.Wait()
		require.GreaterOrEqual(t, trip, time.Duration(0), "the circuit opened")
		t.Logf("circuit opened at %v, %d times in all; attempts %d, after the trip %d", trip, opens, len(next.at), next.between(trip+1, time.Hour))
		assert.LessOrEqual(t, next.between(trip+1, time.Hour), opens, "attempts after the trip: one probe per open period")
		for i, r := range results {
			if i < 100 {
				require.LessOrEqual(t, r.elapsed, 3*time.Second, "request %d returned by its deadline", i)
			} else {
				// Its wait bound, plus the retries before it: at most 1.4 s.
				require.LessOrEqual(t, r.elapsed, 5*time.Second+1400*time.Millisecond, "request %d returned by its wait bound", i)
			}
			if r.resp != nil {
				// The last real response, its body intact.
				assert.Equal(t, http.StatusServiceUnavailable, r.resp.StatusCode, "request %d", i)
				assert.Equal(t, "down", readBody(t, r.resp), "request %d: the body of the last response", i)
				continue
			}
			var e *Error
			require.True(t, errors.As(r.err, &e), "request %d: %v", i, r.err)
			assert.Contains(t, []Reason{ReasonCircuitOpen, ReasonAttemptsUsed}, e.Reason, "request %d", i)
			if e.Reason == ReasonCircuitOpen {
				assert.ErrorIs(t, r.err, ErrCircuitOpen, "request %d", i)
				assert.Positive(t, e.Waited, "request %d: how long it waited", i)
				if i < 100 {
					assert.ErrorIs(t, r.err, context.DeadlineExceeded, "request %d: what ended its wait", i)
				}
			}
		}
	})
}

// A dispatcher that keeps its own queue turns the wait off: RetryAt then
// also says "never", for a 410 Gone and for a key that has been failing for
// longer than the horizon it sets; Breaker.Host says since when.
func TestWaitDispatcherNever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gone := New(newNext(reply{status: http.StatusGone}), WithMaxWait(0))
		resp, err := gone.RoundTrip(newReq(t.Context(), http.MethodPost, nil))
		require.NoError(t, err)
		readBody(t, resp)
		at, why := gone.RetryAt(resp, nil)
		assert.Equal(t, ReasonNotRetryable, why, "410 Gone")
		assert.True(t, at.IsZero())

		start := time.Now()
		b := NewBreaker(BreakerConfig{})
		next := &downFor{start: start, down: 48 * time.Hour}
		tr := New(next, WithBreaker(b), WithBudget(nil), WithMaxWait(0), WithFailingHorizon(24*time.Hour))
		send := func() (time.Time, Reason) {
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			if err == nil {
				readBody(t, resp)
			}
			return tr.RetryAt(resp, err)
		}
		for time.Since(start) < 3*time.Second {
			send()
			time.Sleep(100 * time.Millisecond)
		}
		at, why = send()
		assert.Equal(t, ReasonCircuitOpen, why, "failing for 3 s")
		assert.True(t, at.After(time.Now()))
		host := b.Host(keyOf(mustParse(t, testURL)).String())
		assert.Equal(t, start, host.FailingSince, "failing since the first failure")

		// A day later, still failing: give it up.
		time.Sleep(25 * time.Hour)
		at, why = send()
		assert.Equal(t, ReasonNotRetryable, why, "failing for a day")
		assert.True(t, at.IsZero())
		assert.Equal(t, start, b.Host(host.Key).FailingSince, "still failing since the first failure")
	})
}

// Requests waiting for a key that would refuse them add no goroutine: with
// 100,000 of them waiting for an open circuit, the process has as many
// goroutines as their callers, and none left once the key lets them go.
// The goroutines are counted, so the test runs in a process of its own.
func TestWaitAddsNoGoroutine(t *testing.T) {
	if inChild(t, waitGoroutinesEnv) {
		return
	}
	const n = 100_000
	outside := goleak.IgnoreCurrent()
	synctest.Test(t, func(t *testing.T) {
		b := NewBreaker(BreakerConfig{})
		next := &downFor{start: time.Now(), down: 10 * time.Second}
		tr := New(next, WithBreaker(b), WithBudget(nil))
		// Trip the circuit, one attempt at a time.
		one := New(next, WithBreaker(b), WithBudget(nil), WithMaxAttempts(1))
		for b.Host(keyOf(mustParse(t, testURL)).String()).State != StateOpen {
			resp, err := one.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			time.Sleep(100 * time.Millisecond)
		}
		before := runtime.NumGoroutine()
		var delivered atomic.Int64
		var failed atomic.Value // the first failure, for the message
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				switch {
				case err != nil:
					failed.CompareAndSwap(nil, err.Error())
				case resp.StatusCode == http.StatusOK:
					delivered.Add(1)
				default:
					failed.CompareAndSwap(nil, resp.Status)
				}
				if err == nil {
					resp.Body.Close()
				}
			})
		}
		synctest.Wait() // every caller waits
		waiting := runtime.NumGoroutine()
		t.Logf("goroutines: %d before, %d with %d requests waiting", before, waiting, n)
		assert.Equal(t, before+n, waiting, "goroutines with the requests waiting: their callers', no more")
		wg.Wait()
		assert.Equal(t, int64(n), delivered.Load(), "delivered once the key was back; the first failure: %v", failed.Load())
		synctest.Wait() // a lane's timer may be running its release
	})
	// Once the bubble has ended, no goroutine is left but those from
	// before it. goleak reads the goroutines' stacks, retrying for a while,
	// so the runtime's finalizer goroutine, which counts in
	// runtime.NumGoroutine while it runs finalizers (a GC on a loaded
	// machine may have queued them by the thousand), is not taken for one.
	goleak.VerifyNone(t, outside)
}

// waitGoroutinesEnv makes the test binary, run as a child process, run
// TestWaitAddsNoGoroutine itself.
const waitGoroutinesEnv = "RETRYHTTP_TEST_WAIT_GOROUTINES"
