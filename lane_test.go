package retryhttp

import (
	"crypto/x509"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLaneMemory checks the per-host memory that DecorrelatedJitter grows
// from: kept in the host's lane across requests, reset only by a success to
// that host, never by time.
func TestLaneMemory(t *testing.T) {
	const (
		failing = "http://failing.test/"
		healthy = "http://healthy.test/"
		base    = defaultBase
	)
	// setup returns a transport with one retry per request and
	// DecorrelatedJitter, whose breaker never trips, and the failing host's
	// lane.
	setup := func() (*breakerFake, *Transport, *perkey.Lane) {
		fake := newBreakerFake(func(req *http.Request) (int, error) {
			if req.URL.Host == "failing.test" {
				return http.StatusServiceUnavailable, nil
			}
			return http.StatusOK, nil
		})
		b := NewBreaker(BreakerConfig{MinFailures: math.MaxInt})
		tr := bkTransport(fake, b, WithPolicy(DecorrelatedJitter{}), WithMaxAttempts(2))
		return fake, tr, bkLane(b, failing)
	}
	prevOf := func(l *perkey.Lane) time.Duration { return l.Prev() }

	t.Run("grows across requests to a failing host", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake, tr, l := setup()
			require.Zero(t, prevOf(l), "a fresh lane's previous delay")
			var largest time.Duration
			for i := range 30 {
				before := prevOf(l)
				status, err := bkDo(t.Context(), tr, failing)
				require.NoError(t, err, "request %d", i)
				require.Equal(t, http.StatusServiceUnavailable, status, "request %d", i)
				at := fake.arrivals("failing.test")
				waited := at[len(at)-1].Sub(at[len(at)-2])
				// The retry's delay was drawn from the lane's previous delay:
				// in [Base, 3·max(prev, Base)], and it became the new one.
				hi := min(defaultCap, 3*max(before, base))
				require.GreaterOrEqual(t, waited, base, "request %d's delay", i)
				require.LessOrEqual(t, waited, hi, "request %d's delay: got %v, want at most 3×%v", i, waited, before)
				require.Equal(t, waited, prevOf(l), "request %d: the lane keeps the delay taken", i)
				largest = max(largest, waited)
			}
			// A request that started from nothing could not wait more than
			// 3·Base before its only retry.
			assert.Greater(t, largest, 3*base, "largest delay over 30 requests: got %v, want growth past 3×Base", largest)
		})
	})

	t.Run("time does not reset it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, tr, l := setup()
			_, err := bkDo(t.Context(), tr, failing)
			require.NoError(t, err)
			prev := prevOf(l)
			require.NotZero(t, prev, "previous delay after a failed retry")
			time.Sleep(time.Hour)
			assert.Equal(t, prev, prevOf(l), "previous delay an hour later")
		})
	})

	t.Run("only a success to the host resets it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake, tr, l := setup()
			_, err := bkDo(t.Context(), tr, failing)
			require.NoError(t, err)
			prev := prevOf(l)
			require.NotZero(t, prev, "previous delay after a failed retry")

			// Another host's success and its own memory are its own.
			status, err := bkDo(t.Context(), tr, healthy)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
			assert.Equal(t, prev, prevOf(l), "failing host's previous delay after another host's success")

			// An outcome that tells nothing (a certificate error) keeps it.
			fake.answer = func(*http.Request) (int, error) {
				return 0, &url.Error{Op: "Get", URL: failing, Err: x509.UnknownAuthorityError{}}
			}
			_, err = bkDo(t.Context(), tr, failing)
			assert.ErrorAs(t, err, new(x509.UnknownAuthorityError), "the certificate error")
			assert.Equal(t, prev, prevOf(l), "previous delay after a certificate error")

			// A response that is not a failure (a 404) is a success.
			fake.answer = func(*http.Request) (int, error) { return http.StatusNotFound, nil }
			status, err = bkDo(t.Context(), tr, failing)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, status)
			assert.Zero(t, prevOf(l), "previous delay after the host answered 404")
		})
	})
}

// bkLanes returns how many lanes a breaker's table holds.
func bkLanes(b *Breaker) int { return b.set.Len() }

// TestLaneSweep checks how lanes leave a breaker's table: idle lanes are
// swept as new hosts arrive, lanes that hold something are kept.
func TestLaneSweep(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	hostURL := func(i int) string { return "http://h" + strconv.Itoa(i) + ".test/" }

	t.Run("idle lanes of healthy hosts leave", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBreaker(BreakerConfig{MaxHosts: smallTable})
			tr := bkTransport(statusFake(http.StatusOK), b)
			largest := 0
			for i := range 10 * smallTable {
				status, err := bkDo(t.Context(), tr, hostURL(i))
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, status)
				largest = max(largest, bkLanes(b))
			}
			assert.Equal(t, smallTable, largest, "most lanes held over %d healthy hosts", 10*smallTable)
		})
	})

	t.Run("an open circuit's lane survives a sweep", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := bkConfig()
			c.MaxHosts = smallTable
			b := NewBreaker(c)
			const dead = "http://dead.test/"
			l := bkLane(b, dead)
			bkTrip(t, l)
			fake := statusFake(http.StatusOK)
			tr := bkTransport(fake, b)
			for i := range 3 * smallTable {
				_, err := bkDo(t.Context(), tr, hostURL(i))
				require.NoError(t, err)
			}
			require.Equal(t, smallTable, bkLanes(b), "lanes held: the healthy ones were evicted")
			assert.Same(t, l, bkLane(b, dead), "the open circuit's lane after sweeps")
			assert.Equal(t, StateOpen, bkState(l), "its state")
			_, err := bkDo(t.Context(), tr, dead)
			assert.ErrorIs(t, err, ErrCircuitOpen, "a request to the dead host")
			assert.Zero(t, fake.callsTo("dead.test"), "attempts to the dead host")
		})
	})

	// A probe answered 429 tells the circuit nothing: the host is up, and
	// its send rate is the adaptive rate's business. The circuit stays
	// half-open with no probe in flight, which holds nothing an open
	// circuit past its open time would not: idle, so it leaves.
	t.Run("a half-open circuit with no probe in flight leaves", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := bkConfig()
			c.MaxHosts = smallTable
			b := NewBreaker(c)
			tr := bkTransport(statusFake(http.StatusTooManyRequests), b, WithMaxAttempts(1))
			const n = 50
			for i := range n {
				bkTrip(t, bkLane(b, hostURL(i)))
			}
			time.Sleep(c.OpenFor)
			for i := range n {
				status, err := bkDo(t.Context(), tr, hostURL(i))
				require.NoError(t, err)
				require.Equal(t, http.StatusTooManyRequests, status, "the probe's answer")
				require.Equal(t, StateHalfOpen, bkState(bkLane(b, hostURL(i))), "after a probe answered 429")
			}
			time.Sleep(time.Hour)
			ok := bkTransport(statusFake(http.StatusOK), b)
			for i := range 2 * smallTable {
				_, err := bkDo(t.Context(), ok, "http://other"+strconv.Itoa(i)+".test/")
				require.NoError(t, err)
			}
			kept := 0
			for i := range n {
				u, err := url.Parse(hostURL(i))
				require.NoError(t, err)
				if b.set.Peek(keyOf(u)) != nil {
					kept++
				}
			}
			assert.Zero(t, kept, "half-open lanes kept after %d other hosts", 2*smallTable)
			assert.LessOrEqual(t, bkLanes(b), smallTable, "lanes held")
		})
	})

	// A lane whose failure period is older than twice the span holds
	// nothing a fresh lane would not (the next failure starts afresh), so
	// it is idle. Here 2,000 hosts fail once, with no retry (POSTs without
	// an Idempotency-Key, as webhook deliveries often are) so that no
	// previous delay is kept; an hour later 4,000 healthy hosts arrive.
	t.Run("a lane whose failure period is long over leaves", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBreaker(BreakerConfig{MaxHosts: smallTable})
			fake := newBreakerFake(func(req *http.Request) (int, error) {
				if req.URL.Path == "/down" {
					return http.StatusServiceUnavailable, nil
				}
				return http.StatusOK, nil
			})
			tr := bkTransport(fake, b)
			const failed = 2000
			for i := range failed {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://f"+strconv.Itoa(i)+".test/down", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			}
			require.Equal(t, int64(failed), fake.total.Load(), "attempts: one per POST")
			time.Sleep(time.Hour)
			for i := range 2 * failed {
				_, err := bkDo(t.Context(), tr, hostURL(i))
				require.NoError(t, err)
			}
			got := bkLanes(b)
			assert.Equal(t, smallTable, got,
				"lanes held an hour after %d hosts failed once, then %d healthy hosts: got %d, want the stale ones evicted",
				failed, 2*failed, got)
		})
	})
}

// TestLaneKeptWhileSleeping: a request sleeping toward a host keeps the
// host's lane in memory through sweeps of the lane table, so that the
// circuit's opening wakes it and refuses its retry, however many other
// hosts pass through meanwhile.
func TestLaneKeptWhileSleeping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := statusFake(http.StatusServiceUnavailable)
		c := bkConfig()
		c.MaxHosts = smallTable
		b := NewBreaker(c)
		tr := bkTransport(next, b, WithPolicy(Exponential{Base: time.Minute}))
		start := time.Now()
		got := bkGo(t.Context(), tr, "http://victim.test/")
		synctest.Wait() // asleep after its first attempt
		// Long after the failure period went stale, more hosts than the
		// table holds pass through the breaker.
		time.Sleep(10 * bkConfig().Span)
		for i := range 3 * smallTable {
			bkFeed(bkLane(b, fmt.Sprintf("http://h%d.test/", i)), outcomeSuccess)
		}
		bkTrip(t, bkLane(b, "http://victim.test/"))
		r := <-got
		require.ErrorIs(t, r.err, ErrCircuitOpen, "the sleeper is woken by the opening")
		require.Equal(t, 10*bkConfig().Span+bkConfig().Span, time.Since(start), "woken at the trip instant")
		require.Equal(t, 1, next.callsTo("victim.test"), "no attempt after the circuit opened")
	})
}
