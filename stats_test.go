package retryhttp

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/testhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statsCall is one request of TestStatsCounters.
type statsCall struct {
	name   string
	method string
	url    string
	body   io.Reader // nil: none
	// ctx derives the request's context from the test's; nil: the test's.
	ctx        func(context.Context) (context.Context, context.CancelFunc)
	wantStatus int           // the status returned; 0: an error is returned
	wantReason Reason        // the reason given to GiveUp; reasonNone: not called
	after      time.Duration // virtual time to wait before the next call
}

// TestStatsCounters sends a scripted sequence of requests, one at a time in
// virtual time, down every path that a counter counts, and checks every
// counter and histogram against the totals worked out by hand.
//
// The budget starts empty, has no floor, and earns one token per request
// (Ratio 1), so its balance is known at every step; it is written after
// each call below. The breaker trips on failure that lasts a minute: the
// failures to a.test all fall within 8 s and never trip it; c.test's two
// failures, a minute apart, do. The policy retries at once and Retry-After has
// no spread, so every delay is exact.
func TestStatsCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newHookFake(map[string][]hookStep{
			"/ok":       {{status: 200}},
			"/ra":       {{status: 503, retryAfter: "1"}, {status: 200}},
			"/budget":   {{status: 503, retryAfter: "3600"}, {status: 503}},
			"/404":      {{status: 404}},
			"/post":     {{status: 503}},
			"/cert":     {{err: x509.UnknownAuthorityError{}}},
			"/used":     {{status: 503}},
			"/put":      {{status: 503}},
			"/deadline": {{status: 503, retryAfter: "1"}},
			"/cancel":   {{status: 503, retryAfter: "1"}},
			"/trip":     {{status: 503}},
		})
		tr := New(next,
			WithBudget(NewBudget(BudgetConfig{Ratio: 1, MinPerSecond: -1})),
			WithBreaker(NewBreaker(BreakerConfig{Span: time.Minute, MinFailures: 1, OpenFor: time.Hour, OpenJitter: -1})),
			WithPolicy(immediate{}),
			WithMaxRetryAfter(time.Second),
			WithRetryAfterSpread(0),
			WithMaxWait(0), // a refusal is counted as one, not waited out
		)
		calls := []statsCall{
			// tokens 1.
			{name: "ok", method: "GET", url: "http://a.test/ok", wantStatus: 200},
			// tokens 2, then 1: one retry after a Retry-After of 1 s.
			{name: "retry_after", method: "GET", url: "http://a.test/ra", wantStatus: 200},
			// tokens 2: retry 1 after 3600 s clamped to 1 s (1 left),
			// retry 2 at once (0 left), retry 3 denied.
			{name: "budget", method: "GET", url: "http://a.test/budget", wantStatus: 503, wantReason: ReasonBudgetExhausted},
			// tokens 1.
			{name: "404", method: "GET", url: "http://a.test/404", wantStatus: 404},
			// tokens 2.
			{name: "post", method: "POST", url: "http://a.test/post", body: strings.NewReader("x"), wantStatus: 503, wantReason: ReasonNotReplayable},
			// tokens 3.
			{name: "cert", method: "GET", url: "http://a.test/cert", wantReason: ReasonNotRetryable},
			// tokens 4, then 1: three retries at once, four attempts.
			{name: "used", method: "GET", url: "http://a.test/used", wantStatus: 503, wantReason: ReasonAttemptsUsed},
			// tokens 2.
			{name: "put", method: "PUT", url: "http://a.test/put", body: io.NopCloser(strings.NewReader("x")), wantStatus: 503, wantReason: ReasonNotReplayable},
			// tokens 3: a Retry-After of 1 s does not fit in 0.5 s.
			{name: "deadline", method: "GET", url: "http://a.test/deadline", wantStatus: 503, wantReason: ReasonContextDone,
				ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
					return context.WithTimeout(ctx, 500*time.Millisecond)
				}},
			// tokens 4, then 3: cancelled 0.5 s into the 1 s wait.
			{name: "cancel", method: "GET", url: "http://a.test/cancel", wantReason: ReasonContextDone,
				ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
					ctx, cancel := context.WithCancel(ctx)
					time.AfterFunc(500*time.Millisecond, cancel)
					return ctx, cancel
				}},
			// tokens 4. c.test's failure period starts.
			{name: "trip_1", method: "POST", url: "http://c.test/trip", wantStatus: 503, wantReason: ReasonNotReplayable, after: time.Minute},
			// tokens 5. A minute on: the circuit opens.
			{name: "trip_2", method: "POST", url: "http://c.test/trip", wantStatus: 503, wantReason: ReasonNotReplayable},
			// tokens 6. Refused: no attempt.
			{name: "refused", method: "GET", url: "http://c.test/refused", wantReason: ReasonCircuitOpen},
		}
		for _, c := range calls {
			ctx := t.Context()
			if c.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = c.ctx(ctx)
				defer cancel()
			}
			var reasons []Reason
			ctx = ContextWithOptions(ctx, WithHooks(&Hooks{GiveUp: func(i Event) { reasons = append(reasons, i.Reason) }}))
			req, err := http.NewRequestWithContext(ctx, c.method, c.url, c.body)
			require.NoError(t, err, c.name)
			resp, err := tr.RoundTrip(req)
			if c.wantStatus == 0 {
				require.Error(t, err, c.name)
			} else {
				require.NoError(t, err, c.name)
				assert.Equal(t, c.wantStatus, resp.StatusCode, c.name)
				require.NoError(t, resp.Body.Close())
			}
			if c.wantReason == reasonNone {
				assert.Empty(t, reasons, "%s: GiveUp", c.name)
			} else {
				assert.Equal(t, []Reason{c.wantReason}, reasons, "%s: GiveUp", c.name)
			}
			time.Sleep(c.after)
		}
		assert.Zero(t, next.count("/refused"), "the open circuit let a request through")

		s := tr.Stats()
		delays := s.Delays
		s.Delays = nil
		assert.Equal(t, Stats{
			Requests: 13,
			// 1+2+3+1+1+1+4+1+1+1+1+1+0: the refused request sent none.
			Attempts: 18,
			// ra 1, budget 2, used 3.
			Retries: 6,
			// ra, budget's first response, deadline, cancel. The budget's
			// later responses carried none.
			RetryAfterSeen:    4,
			RetryAfterClamped: 1,
			BudgetDenied:      1,
			CircuitRejected:   1,
			GiveUps: map[Reason]uint64{
				ReasonBudgetExhausted: 1,
				ReasonNotReplayable:   4, // 3 not idempotent, 1 body not replayable
				ReasonNotRetryable:    1,
				ReasonAttemptsUsed:    1,
				ReasonContextDone:     2, // the deadline, and the cancel
				ReasonCircuitOpen:     1,
			},
		}, s)

		// A delay is counted when its retry is scheduled (the RetryScheduled
		// hook), so the wait that cancel's context ended counts under retry
		// 1 although that retry was never sent: retry 1 has 4 delays for 3
		// retries sent.
		require.Len(t, delays, delayRetries)
		want := make([]DelayHistogram, delayRetries)
		for i := range want {
			want[i] = DelayHistogram{Retry: i + 1, Counts: make([]uint64, delayBuckets)}
		}
		for _, d := range []struct {
			retry int
			d     time.Duration
		}{
			{1, time.Second}, // ra
			{1, time.Second}, // budget, clamped
			{2, 0},           // budget
			{1, 0},           // used
			{2, 0},           // used
			{3, 0},           // used
			{1, time.Second}, // cancel
		} {
			h := &want[d.retry-1]
			h.Count++
			h.Sum += d.d
			h.Counts[delayBucket(d.d)]++
		}
		assert.Equal(t, want, delays, "Stats.Delays")
	})
}

// fullJitterBound is the interval bound of retry n under the default
// FullJitter: min(30 s, 200 ms·2^(n−1)).
func fullJitterBound(n int) time.Duration {
	return min(defaultCap, defaultBase<<(n-1))
}

// TestStatsDelayHistogramFullJitter draws 10,000 delays under the default
// FullJitter — 2,500 concurrent requests to an endpoint that always answers
// 503, each making 5 attempts, so 2,500 delays for each of retries 1 to 4 —
// and checks, through Stats, what to verify in production:
// each retry's histogram is roughly uniform from zero to that retry's bound
// (200 ms, 400 ms, 800 ms, 1.6 s), with no spike at zero or at the bound,
// and nothing above it.
func TestStatsDelayHistogramFullJitter(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	const requests, attempts = 2500, 5
	synctest.Test(t, func(t *testing.T) {
		next := newHookFake(map[string][]hookStep{"/": {{status: 503}}})
		tr := New(next, WithPolicy(FullJitter{}), WithMaxAttempts(attempts), WithBudget(nil), WithBreaker(nil))
		sendConcurrently(t, tr, requests, "http://host/")

		s := tr.Stats()
		require.Equal(t, uint64(requests*(attempts-1)), s.Retries, "retries")
		bounds := DelayHistogram{}.Bounds()
		for n := 1; n < attempts; n++ {
			h := s.Delays[n-1]
			bound := fullJitterBound(n)
			require.Equal(t, n, h.Retry)
			require.Equal(t, uint64(requests), h.Count, "retry %d: delays counted", n)
			require.Len(t, h.Counts, len(bounds))

			// The mean of N draws from U(0, bound) has standard deviation
			// bound/sqrt(12N); five of them, over the four
			// retries, is a false alarm a few times in a million runs.
			mean := float64(h.Sum) / float64(h.Count)
			sd := float64(bound) / math.Sqrt(12*requests)
			assert.InDelta(t, float64(bound)/2, mean, 5*sd, "retry %d: mean delay, bound %v", n, bound)

			lo := time.Duration(0)
			for i, hi := range bounds {
				obs := h.Counts[i]
				if lo >= bound {
					assert.Zero(t, obs, "retry %d: bucket [%v, %v) lies above the bound %v", n, lo, hi, bound)
					lo = hi
					continue
				}
				// A bucket's count is Binomial(N, p), p = overlap/bound, with
				// standard deviation sqrt(N·p·(1−p)) <= sqrt(exp). Tolerance:
				// 5·sqrt(exp) is five standard deviations (a two-sided normal
				// tail of 6e-7); +5 covers the heavier Poisson tail of the
				// small buckets below a few ms, where exp is 1 to 12 (the
				// chance of exceeding the tolerance stays below 1e-7 for
				// every exp, computed from the Poisson tail); +2%·exp leaves
				// room for non-uniformity too small to matter, since what
				// this check is for — a spike at zero or at the bound — moves
				// whole multiples of exp. Over the ~300 buckets checked, a
				// false failure is rarer than 1 in 10,000 runs.
				exp := float64(requests) * float64(min(hi, bound)-lo) / float64(bound)
				tol := 5*math.Sqrt(exp) + 0.02*exp + 5
				assert.InDelta(t, exp, float64(obs), tol, "retry %d: bucket %d [%v, %v) of bound %v", n, i, lo, hi, bound)
				lo = hi
			}
		}
		for _, h := range s.Delays[attempts-1:] {
			assert.Zero(t, h.Count, "retry %d: no such retry was made", h.Retry)
		}
	})
}

// TestStatsDelayHistogramRetryAfterZero shows the other signature the
// DelayHistogram doc names: an endpoint answering Retry-After: 0, honoured with no spread, puts
// every delay of every retry in bucket 0, [0, 1 ms) — the spike at zero.
func TestStatsDelayHistogramRetryAfterZero(t *testing.T) {
	const requests, attempts = 1000, 4
	synctest.Test(t, func(t *testing.T) {
		next := newHookFake(map[string][]hookStep{"/": {{status: 503, retryAfter: "0"}}})
		tr := New(next, WithRetryAfterSpread(0), WithMaxAttempts(attempts), WithBudget(nil), WithBreaker(nil))
		start := time.Now()
		sendConcurrently(t, tr, requests, "http://host/")
		assert.Zero(t, time.Since(start), "no request waited")

		s := tr.Stats()
		assert.Equal(t, uint64(requests*attempts), s.RetryAfterSeen, "every response carried a Retry-After, the last attempts' too")
		for n := 1; n < attempts; n++ {
			h := s.Delays[n-1]
			want := make([]uint64, len(DelayHistogram{}.Bounds()))
			want[0] = requests
			assert.Equal(t, uint64(requests), h.Count, "retry %d", n)
			assert.Zero(t, h.Sum, "retry %d", n)
			assert.Equal(t, want, h.Counts, "retry %d: every delay in [0, 1ms)", n)
		}
	})
}

// TestStatsDelayBucket checks delayBucket against DelayHistogram.Bounds: bucket
// i holds [bounds[i-1], bounds[i]), so every bound falls in the next bucket
// and the nanosecond below it in its own.
func TestStatsDelayBucket(t *testing.T) {
	b := DelayHistogram{}.Bounds()
	require.Len(t, b, delayBuckets)
	assert.Equal(t, time.Millisecond, b[0], "bucket 0 is [0, 1ms)")
	assert.Equal(t, 1125*time.Microsecond, b[1], "eight steps per doubling")
	assert.Equal(t, 2*time.Millisecond, b[8])
	assert.Equal(t, 65536*time.Millisecond, b[len(b)-2])
	assert.Equal(t, time.Duration(math.MaxInt64), b[len(b)-1], "the last bucket is unbounded")
	for i := 1; i < len(b); i++ {
		require.Less(t, b[i-1], b[i], "bounds must increase: %d", i)
	}

	assert.Equal(t, 0, delayBucket(0))
	assert.Equal(t, 0, delayBucket(-time.Second), "a negative delay (never drawn) in bucket 0")
	for i, bound := range b {
		assert.Equal(t, i, delayBucket(bound-1), "delayBucket(%v - 1ns)", bound)
		if i < len(b)-1 {
			assert.Equal(t, i+1, delayBucket(bound), "delayBucket(%v)", bound)
		}
	}
	// Every histogram has one count per bound.
	for _, h := range New(newOKNext()).Stats().Delays {
		assert.Len(t, h.Counts, len(b), "retry %d", h.Retry)
	}
}

// TestStatsConcurrent runs requests from many goroutines, in real time so
// that -race sees real interleavings, while another goroutine reads Stats:
// each snapshot's counters only grow, and the final ones are exact. A second
// transport on the same next keeps counts of its own.
func TestStatsConcurrent(t *testing.T) {
	const workers, perWorker = 8, 100 // each worker: half /ok, half /fail
	next := newHookFake(map[string][]hookStep{"/ok": {{status: 200}}, "/fail": {{status: 503}}})
	opts := []Option{WithPolicy(immediate{}), WithMaxAttempts(3), WithBudget(nil), WithBreaker(nil)}
	tr, other := New(next, opts...), New(next, opts...)

	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		var prev Stats
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := tr.Stats()
			// Without a breaker or first-attempt jitter, every request sends
			// its first attempt, so Attempts = Requests + Retries only grows.
			if s.Requests < prev.Requests || s.Attempts < prev.Attempts || s.Retries < prev.Retries ||
				s.GiveUps[ReasonAttemptsUsed] < prev.GiveUps[ReasonAttemptsUsed] ||
				(len(prev.Delays) > 0 && s.Delays[0].Count < prev.Delays[0].Count) {
				t.Errorf("a counter went down:\nbefore %+v\nafter  %+v", prev, s)
				return
			}
			prev = s
		}
	}()

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range perWorker {
				path := "/ok"
				if i%2 == 1 {
					path = "/fail"
				}
				sendGET(t, tr, "http://host"+path)
			}
			sendGET(t, other, "http://host/ok")
		})
	}
	wg.Wait()
	close(stop)
	<-readerDone

	const total, fails = workers * perWorker, workers * perWorker / 2
	s := tr.Stats()
	assert.Equal(t, uint64(total), s.Requests, "Requests")
	assert.Equal(t, uint64(total+2*fails), s.Attempts, "Attempts: 1 per /ok, 3 per /fail")
	assert.Equal(t, uint64(2*fails), s.Retries, "Retries")
	assert.Equal(t, map[Reason]uint64{ReasonAttemptsUsed: fails}, s.GiveUps, "GiveUps")
	for n := 1; n <= 2; n++ {
		assert.Equal(t, uint64(fails), s.Delays[n-1].Count, "retry %d", n)
		assert.Equal(t, uint64(fails), s.Delays[n-1].Counts[0], "retry %d: immediate waits 0", n)
	}

	o := other.Stats()
	assert.Equal(t, uint64(workers), o.Requests, "the other transport's Requests")
	assert.Equal(t, uint64(workers), o.Attempts, "the other transport's Attempts")
	assert.Zero(t, o.Retries, "the other transport's Retries")
	assert.Empty(t, o.GiveUps, "the other transport's GiveUps")
}

// TestStatsAttemptsCountsOnlySent: Attempts counts attempts sent to the next
// RoundTripper, and the counters only grow (stats.go, the Stats doc). A
// request waiting out its first-attempt jitter has sent nothing, and shows
// in Requests once it ends.
func TestStatsAttemptsCountsOnlySent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newHookFake(map[string][]hookStep{"/": {{status: 200}}})
		tr := New(next, WithFirstAttemptJitter(time.Hour), WithBudget(nil), WithBreaker(nil))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://host/", nil)
		require.NoError(t, err)
		done := make(chan error)
		go func() {
			_, err := tr.RoundTrip(req)
			done <- err
		}()
		synctest.Wait() // the request sleeps in its first-attempt jitter

		during := tr.Stats()
		assert.Zero(t, during.Requests, "Requests counts a request once it has sent or ended")
		assert.Equal(t, uint64(next.count("/")), during.Attempts, "Attempts while nothing has been sent")

		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		after := tr.Stats()
		assert.Equal(t, uint64(1), after.Requests, "Requests after the request ended unsent")
		assert.Zero(t, after.Attempts, "Attempts after the request ended unsent")
		assert.GreaterOrEqual(t, after.Attempts, during.Attempts, "Attempts went down")
	})
}

// TestStatsRetryAfterSeenWithoutRetry: RetryAfterSeen counts "retryable
// responses that carried a Retry-After header" (stats.go) — the early
// signal that a tenant is rate-limiting the platform — whether or not a
// retry follows.
func TestStatsRetryAfterSeenWithoutRetry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []Option
		method string
	}{
		{"last_attempt", []Option{WithMaxAttempts(1)}, http.MethodGet},
		{"not_idempotent", nil, http.MethodPost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newHookFake(map[string][]hookStep{"/": {{status: 429, retryAfter: "5"}}})
				tr := New(next, append([]Option{WithBudget(nil), WithBreaker(nil)}, tc.opts...)...)
				req, err := http.NewRequestWithContext(t.Context(), tc.method, "http://host/", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				require.Equal(t, 429, resp.StatusCode)
				assert.Equal(t, uint64(1), tr.Stats().RetryAfterSeen, "RetryAfterSeen")
			})
		})
	}
}

// sendConcurrently sends n GETs for rawURL through rt at once and waits for
// all of them.
func sendConcurrently(t *testing.T, rt http.RoundTripper, n int, rawURL string) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { sendGET(t, rt, rawURL) })
	}
	wg.Wait()
}

// sendGET sends one GET for rawURL through rt; it must return a response,
// whose body it closes.
var sendGET = testhttp.SendGET

// Stats prints readably: each delay histogram as its count and mean, not
// as its buckets.
func TestStatsPrints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newT(newNext(reply{status: 503}, reply{status: 200}), WithPolicy(Exponential{Base: 100 * time.Millisecond}))
		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		out := fmt.Sprintf("%+v", tr.Stats())
		assert.Contains(t, out, "retry 1: 1 delay, mean 100ms")
		assert.Contains(t, out, "retry 2: no delays")
		assert.Less(t, len(out), 2000, "no bucket arrays: %s", out)
	})
}
