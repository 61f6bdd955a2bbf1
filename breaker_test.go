package retryhttp

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/fleetlink"
	"github.com/retryhttp/retryhttp/internal/perkey"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// breakerFake is the in-memory next RoundTripper of the breaker tests.
// answer decides each attempt's outcome, and may block (a latency, a gate
// the test opens); a non-zero status makes a response, otherwise the error
// is returned. The fake reads and closes every request body, as
// http.Transport does, counts attempts per URL host and keeps their virtual
// arrival times. It is safe for concurrent use.
type breakerFake struct {
	answer func(req *http.Request) (int, error)

	total atomic.Int64
	mu    sync.Mutex
	calls map[string]int         // attempts per URL host; guarded by mu
	at    map[string][]time.Time // arrival of each attempt per URL host; guarded by mu
}

func newBreakerFake(answer func(req *http.Request) (int, error)) *breakerFake {
	return &breakerFake{answer: answer, calls: map[string]int{}, at: map[string][]time.Time{}}
}

// statusFake answers every attempt with status.
func statusFake(status int) *breakerFake {
	return newBreakerFake(func(*http.Request) (int, error) { return status, nil })
}

func (f *breakerFake) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	f.total.Add(1)
	f.mu.Lock()
	f.calls[req.URL.Host]++
	f.at[req.URL.Host] = append(f.at[req.URL.Host], time.Now())
	f.mu.Unlock()
	status, err := f.answer(req)
	if status == 0 {
		return nil, err
	}
	return newResponse(req, status, http.NoBody), nil
}

// callsTo returns how many attempts reached host.
func (f *breakerFake) callsTo(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[host]
}

// arrivals returns when each attempt to host arrived.
func (f *breakerFake) arrivals(host string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.at[host])
}

// bkConfig is the breaker configuration of most tests: the defaults, with
// the open time's jitter turned off so that half-open instants are exact.
func bkConfig() BreakerConfig {
	return BreakerConfig{
		Span:         2 * time.Second,
		MinFailures:  5,
		FailureRatio: 0.5,
		OpenFor:      5 * time.Second,
		OpenJitter:   -1,
		Probes:       1,
	}
}

// bkTransport builds the transports of these tests: the given breaker, no
// budget (it would cut retries short and hide what the breaker does), no
// wait for an open circuit (these tests are of the circuit itself, as a
// dispatcher that keeps its own queue meets it; waits are wait_test.go's),
// and opts after.
func bkTransport(next http.RoundTripper, b *Breaker, opts ...Option) *Transport {
	return New(next, append([]Option{WithBudget(nil), WithBreaker(b), WithMaxWait(0)}, opts...)...)
}

// bkLane returns the lane of rawURL's host.
func bkLane(b *Breaker, rawURL string) *perkey.Lane {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	return b.set.Lane(perkey.KeyOf(u))
}

// bkState returns the state of a lane's circuit.
func bkState(l *perkey.Lane) State {
	return State(l.View(time.Now()).State)
}

// bkPeriod returns the lane's failure period: failures, successes, and
// whether one is under way.
func bkPeriod(l *perkey.Lane) (fails int, succ int64, failing bool) {
	v := l.View(time.Now())
	return v.Failures, v.Successes, v.Failing
}

// bkOpenUntil returns when an open lane may half-open.
func bkOpenUntil(l *perkey.Lane) time.Time {
	return l.View(time.Now()).OpenUntil
}

// bkFeed offers one attempt to the lane and, if it is admitted, records o
// as its outcome. It reports whether the attempt was admitted.
func bkFeed(l *perkey.Lane, o outcome) bool {
	tk, _, err := l.Admit(context.Background(), perkey.Limits{})
	if err != nil {
		return false
	}
	l.Done(tk, perkey.Outcome{Kind: o})
	return true
}

// bkTrip trips a closed lane by its own rule: MinFailures failures now and
// one more a Span later. It sleeps for the Span, so it must run inside a
// bubble.
func bkTrip(t *testing.T, l *perkey.Lane) {
	t.Helper()
	c := l.Config()
	for range c.MinFailures {
		require.True(t, bkFeed(l, outcomeFailure), "a closed circuit admits")
	}
	time.Sleep(c.Span)
	require.True(t, bkFeed(l, outcomeFailure), "a closed circuit admits")
	require.Equal(t, StateOpen, bkState(l), "state after failures over the span")
}

// bkDo sends a GET for rawURL through rt with ctx and closes the response
// body. It returns the status (0 on error) and the error. A panic in
// RoundTrip comes back as an error, so that it fails the test that met it
// rather than the whole test binary.
func bkDo(ctx context.Context, rt http.RoundTripper, rawURL string) (status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if p := recover(); p != nil {
			status, err = 0, fmt.Errorf("RoundTrip panicked: %v", p)
		}
	}()
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// TestBreakerTrips feeds a lane outcomes over virtual time and checks the
// instant it trips: only when failure has lasted the span, the period holds
// MinFailures failures and the failures are at least FailureRatio of its
// outcomes.
func TestBreakerTrips(t *testing.T) {
	const never = time.Duration(-1)
	cases := []struct {
		name     string
		cfg      BreakerConfig
		events   []bkEvent
		wantTrip time.Duration // since the start; never: stays closed
	}{
		{
			name:     "failures every 500ms trip at the span",
			events:   bkEvery(0, 4*time.Second, 500*time.Millisecond, outcomeFailure, 1),
			wantTrip: 2 * time.Second,
		},
		{
			name: "the span alone is not enough: MinFailures must be held",
			events: []bkEvent{
				{0, outcomeFailure, 1},
				{2 * time.Second, outcomeFailure, 1},
				{2500 * time.Millisecond, outcomeFailure, 1},
				{3 * time.Second, outcomeFailure, 1},
				{3500 * time.Millisecond, outcomeFailure, 1}, // the fifth
			},
			wantTrip: 3500 * time.Millisecond,
		},
		{
			// 20 failures in each millisecond of [0, 100ms): 2,000 failures
			// in the same 100 ms are one event.
			name:     "a burst of 2,000 failures within 100ms does not trip",
			events:   bkEvery(0, 99*time.Millisecond, time.Millisecond, outcomeFailure, 20),
			wantTrip: never,
		},
		{
			name: "a burst then a success does not trip",
			events: append(bkEvery(0, 99*time.Millisecond, time.Millisecond, outcomeFailure, 20),
				bkEvent{3 * time.Second, outcomeSuccess, 1}),
			wantTrip: never,
		},
		{
			// One failure and two successes every 100 ms for 6 s: failure
			// persists, but the host answers twice as often as it fails.
			name: "ratio below FailureRatio does not trip",
			events: bkInterleave(
				bkEvery(0, 6*time.Second, 100*time.Millisecond, outcomeFailure, 1),
				bkEvery(0, 6*time.Second, 100*time.Millisecond, outcomeSuccess, 2)),
			wantTrip: never,
		},
		{
			// One failure then one success every 100 ms: at 2 s the period
			// holds 21 failures and 20 successes.
			name: "ratio at FailureRatio trips",
			events: bkInterleave(
				bkEvery(0, 4*time.Second, 100*time.Millisecond, outcomeFailure, 1),
				bkEvery(0, 4*time.Second, 100*time.Millisecond, outcomeSuccess, 1)),
			wantTrip: 2 * time.Second,
		},
		{
			// Successes before the first failure belong to no period.
			name: "successes before the period do not dilute it",
			events: append([]bkEvent{{0, outcomeSuccess, 100}},
				bkEvery(time.Second, 4*time.Second, 500*time.Millisecond, outcomeFailure, 1)...),
			wantTrip: 3 * time.Second,
		},
		{
			// Four failures at 0, the fifth at 3.9 s: within twice the span,
			// the period goes on and trips.
			name: "a period younger than 2×Span goes on",
			events: []bkEvent{
				{0, outcomeFailure, 4},
				{3900 * time.Millisecond, outcomeFailure, 1},
			},
			wantTrip: 3900 * time.Millisecond,
		},
		{
			// Four failures at 0, then failures every 500 ms from 4.1 s: at
			// 4.1 s the old period (which would trip now) starts afresh, and
			// the new one trips a span later, at 6.1 s.
			name: "a period older than 2×Span starts afresh",
			events: append([]bkEvent{{0, outcomeFailure, 4}},
				bkEvery(4100*time.Millisecond, 7*time.Second, 500*time.Millisecond, outcomeFailure, 1)...),
			wantTrip: 6100 * time.Millisecond,
		},
		{
			name: "custom span, MinFailures and FailureRatio",
			cfg:  BreakerConfig{Span: 10 * time.Second, MinFailures: 2, FailureRatio: 0.9, OpenJitter: -1},
			events: []bkEvent{
				{0, outcomeFailure, 1},
				{5 * time.Second, outcomeFailure, 1},
				{10 * time.Second, outcomeFailure, 1},
			},
			wantTrip: 10 * time.Second,
		},
		{
			name: "custom FailureRatio: one success in four holds it",
			cfg:  BreakerConfig{Span: 10 * time.Second, MinFailures: 2, FailureRatio: 0.9, OpenJitter: -1},
			events: []bkEvent{
				{0, outcomeFailure, 1},
				{5 * time.Second, outcomeSuccess, 1},
				{6 * time.Second, outcomeFailure, 1},
				{10 * time.Second, outcomeFailure, 1},
			},
			wantTrip: never,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := c.cfg
				if reflect.ValueOf(cfg).IsZero() {
					cfg = bkConfig()
				}
				l := bkLane(NewBreaker(cfg), "http://tenant.test")
				start := time.Now()
				got := never
				for _, ev := range c.events {
					time.Sleep(time.Until(start.Add(ev.at)))
					for range ev.n {
						if !bkFeed(l, ev.o) {
							break
						}
						if got == never && bkState(l) == StateOpen {
							got = time.Since(start)
						}
					}
				}
				assert.Equal(t, c.wantTrip, got, "trip instant: got %v, want %v (-1ns: never)", got, c.wantTrip)
			})
		})
	}
}

// bkEvent is n outcomes fed to a lane at one instant, at since the start.
type bkEvent struct {
	at time.Duration
	o  outcome
	n  int
}

// bkEvery returns one event of n outcomes at each step in [from, to].
func bkEvery(from, to, step time.Duration, o outcome, n int) []bkEvent {
	var evs []bkEvent
	for at := from; at <= to; at += step {
		evs = append(evs, bkEvent{at, o, n})
	}
	return evs
}

// bkInterleave merges event lists sorted by time into one, a's first at
// equal instants.
func bkInterleave(a, b []bkEvent) []bkEvent {
	out := make([]bkEvent, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		if len(b) == 0 || len(a) > 0 && a[0].at <= b[0].at {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// TestCircuitOpenFailsFast checks what a request to a host whose circuit is
// open gets: an *Error wrapping ErrCircuitOpen that names the host, at once,
// without an attempt, and with the caller's body closed.
func TestCircuitOpenFailsFast(t *testing.T) {
	cases := []struct {
		name    string
		tripURL string // the URL whose host's circuit is tripped
		method  string
		url     string
		getBody bool   // the body can be replayed
		wantKey string // the key Error names
	}{
		{name: "GET without body", tripURL: "https://api.example.test:8443", method: http.MethodGet,
			url: "https://api.example.test:8443/hook", wantKey: "https://api.example.test:8443"},
		{name: "PUT whose body cannot be replayed", tripURL: "https://api.example.test:8443", method: http.MethodPut,
			url: "https://api.example.test:8443/hook", wantKey: "https://api.example.test:8443"},
		{name: "PUT whose body has GetBody", tripURL: "https://api.example.test:8443", method: http.MethodPut,
			url: "https://api.example.test:8443/hook", getBody: true, wantKey: "https://api.example.test:8443"},
		{name: "POST that may not be retried", tripURL: "http://api.example.test", method: http.MethodPost,
			url: "http://api.example.test/hook", wantKey: "http://api.example.test"},
		{name: "same host spelled with case and default port", tripURL: "http://api.example.test", method: http.MethodGet,
			url: "http://API.Example.test:80/hook", wantKey: "http://api.example.test"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBreaker(bkConfig())
				bkTrip(t, bkLane(b, c.tripURL))
				fake := statusFake(http.StatusOK)
				tr := bkTransport(fake, b)

				var body *trackedBody
				var rd io.Reader
				if c.method != http.MethodGet {
					body = newTrackedBody("payload")
					rd = body
				}
				req, err := http.NewRequestWithContext(t.Context(), c.method, c.url, rd)
				require.NoError(t, err)
				if c.getBody {
					req.GetBody = func() (io.ReadCloser, error) { return newTrackedBody("payload"), nil }
				}
				start := time.Now()
				resp, err := tr.RoundTrip(req)

				assert.Nil(t, resp, "response: got %v, want nil", resp)
				require.ErrorIs(t, err, ErrCircuitOpen, "got %v, want an error wrapping ErrCircuitOpen", err)
				var e *Error
				require.ErrorAs(t, err, &e, "got %T, want *Error", err)
				assert.Equal(t, c.wantKey, e.Key, "Error.Key")
				assert.Contains(t, err.Error(), c.wantKey, "the message names the key")
				assert.Equal(t, ReasonCircuitOpen, e.Reason, "Error.Reason")
				assert.Equal(t, 0, e.Attempts, "Error.Attempts")
				assert.Equal(t, int64(0), fake.total.Load(), "attempts that reached next: got %d, want 0", fake.total.Load())
				assert.Zero(t, time.Since(start), "virtual time spent")
				if body != nil {
					assert.Equal(t, int32(1), body.closed.Load(), "caller's body closed: got %d times, want 1", body.closed.Load())
				}

				// Another host's circuit is its own.
				status, err := bkDo(t.Context(), tr, "http://other.example.test/hook")
				require.NoError(t, err, "request to another host")
				assert.Equal(t, http.StatusOK, status, "another host's status")
				assert.Equal(t, 1, fake.callsTo("other.example.test"), "attempts to the other host")
			})
		})
	}
}

// TestBreakerHalfOpenSpread trips 1,000 circuits (1,000 hosts behind one
// Breaker with the default open time, 250 ms plus up to 250 ms of jitter)
// at one virtual instant, then polls every host every 5 ms from just before
// the open time ends, and records when each first lets a probe through:
// the first probes must spread over the jitter window instead of arriving
// together.
func TestBreakerHalfOpenSpread(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	synctest.Test(t, func(t *testing.T) {
		const (
			hosts = 1000
			poll  = defaultBreakerOpenFor / 50 // 5 ms: 50 polls over the jitter's width
		)
		var down atomic.Bool
		down.Store(true)
		fake := newBreakerFake(func(*http.Request) (int, error) {
			if down.Load() {
				return http.StatusServiceUnavailable, nil
			}
			return http.StatusOK, nil
		})
		b := NewBreaker(BreakerConfig{}) // the defaults: open for [250 ms, 500 ms)
		tr := bkTransport(fake, b, WithMaxAttempts(1))
		reqs := make([]*http.Request, hosts)
		for i := range reqs {
			var err error
			reqs[i], err = http.NewRequestWithContext(t.Context(), http.MethodGet, "http://h"+strconv.Itoa(i)+".test/", nil)
			require.NoError(t, err)
		}
		send := func(i int) (int, error) {
			resp, err := tr.RoundTrip(reqs[i])
			if err != nil {
				return 0, err
			}
			_ = resp.Body.Close()
			return resp.StatusCode, nil
		}

		// Five failures per host now, one more a span later: every circuit
		// trips at the same instant.
		for i := range hosts {
			for range defaultBreakerMinFailures {
				status, err := send(i)
				require.NoError(t, err)
				require.Equal(t, http.StatusServiceUnavailable, status)
			}
		}
		time.Sleep(defaultBreakerSpan)
		for i := range hosts {
			_, _ = send(i)
			require.Equal(t, StateOpen, bkState(bkLane(b, "http://h"+strconv.Itoa(i)+".test/")), "host %d after failing over the span", i)
		}
		tripped := time.Now()
		callsAtTrip := fake.total.Load()
		down.Store(false)

		first := make([]time.Duration, hosts) // when each host first admitted a probe; 0: not yet
		left := hosts
		for left > 0 && time.Since(tripped) <= 2*defaultBreakerOpenFor+10*poll {
			for i := range hosts {
				if first[i] != 0 {
					continue
				}
				status, err := send(i)
				if errors.Is(err, ErrCircuitOpen) {
					continue
				}
				require.NoError(t, err, "host %d", i)
				require.Equal(t, http.StatusOK, status, "host %d's probe", i)
				first[i] = time.Since(tripped)
				left--
			}
			if since := time.Since(tripped); since < defaultBreakerOpenFor-poll {
				// Nothing half-opens before OpenFor: one poll just before
				// it finds a host that did, as a failure, and the polls
				// that matter begin there.
				time.Sleep(defaultBreakerOpenFor - poll - since)
			} else {
				time.Sleep(poll)
			}
		}
		require.Zero(t, left, "hosts that never half-opened within twice the open time")
		assert.Equal(t, int64(hosts), fake.total.Load()-callsAtTrip,
			"attempts after the trip: one probe per host, none while open")

		const window = defaultBreakerOpenFor // the jitter's width
		counts := make([]int, window/poll)
		for i, d := range first {
			require.GreaterOrEqual(t, d, defaultBreakerOpenFor, "host %d half-opened before OpenFor", i)
			require.LessOrEqual(t, d, 2*defaultBreakerOpenFor, "host %d half-opened after OpenFor+OpenJitter", i)
			// Polls are 5 ms apart: a probe at (250 ms, 255 ms] falls in
			// bucket 0, one at (495 ms, 500 ms] in the last.
			counts[max(0, int((d-defaultBreakerOpenFor-1)/poll))]++
		}
		busiest, empty := slices.Max(counts), 0
		for _, n := range counts {
			if n == 0 {
				empty++
			}
		}
		t.Logf("first probes per 5 ms over [250 ms, 500 ms]: busiest %d (%.1f%%), quietest %d, empty buckets %d of %d; first %v, last %v",
			busiest, 100*float64(busiest)/hosts, slices.Min(counts), empty, len(counts), slices.Min(first), slices.Max(first))
		// Uniform over 50 buckets: 20 (2%) each; 50 (5%) is ~7 standard
		// deviations away.
		assert.LessOrEqual(t, busiest, hosts/20, "busiest 5 ms bucket: got %d probes, want at most 5%% of %d", busiest, hosts)
		assert.LessOrEqual(t, empty, 5, "empty 5 ms buckets: got %d of %d, want the window covered", empty, len(counts))
	})
}

// gatedFake answers attempts whose path is "/fail" with 503 at once, and
// holds an attempt whose path is a gate's name until the test closes that
// gate, then answers the gate's status.
type gatedFake struct {
	*breakerFake
	gates map[string]chan struct{}
}

// newGatedFake returns a gatedFake with a gate for each path, which answers
// that path's status once it is open.
func newGatedFake(status map[string]int) *gatedFake {
	g := &gatedFake{gates: map[string]chan struct{}{}}
	for p := range status {
		g.gates[p] = make(chan struct{})
	}
	g.breakerFake = newBreakerFake(func(req *http.Request) (int, error) {
		gate, ok := g.gates[req.URL.Path]
		if !ok {
			return http.StatusServiceUnavailable, nil
		}
		select {
		case <-gate:
			return status[req.URL.Path], nil
		case <-req.Context().Done():
			return 0, req.Context().Err()
		}
	})
	return g
}

// bkResult is what a request sent in the background got.
type bkResult struct {
	status int
	err    error
}

// bkGo sends a GET for rawURL through rt in a new goroutine of the bubble;
// its result arrives on the returned channel.
func bkGo(ctx context.Context, rt http.RoundTripper, rawURL string) <-chan bkResult {
	ch := make(chan bkResult, 1)
	go func() {
		status, err := bkDo(ctx, rt, rawURL)
		ch <- bkResult{status, err}
	}()
	return ch
}

// TestBreakerHalfOpenProbes checks the half-open state: at most Probes
// requests at once, closed by a probe's success, opened again (for a new
// jittered time) by a probe's failure, and outcomes of an earlier state
// ignored.
func TestBreakerHalfOpenProbes(t *testing.T) {
	const host = "http://probe.test"

	t.Run("admits at most Probes at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := bkConfig()
			cfg.Probes = 3
			b := NewBreaker(cfg)
			l := bkLane(b, host)
			bkTrip(t, l)
			time.Sleep(cfg.OpenFor)

			fake := newGatedFake(map[string]int{"/a": http.StatusOK})
			tr := bkTransport(fake, b, WithMaxAttempts(1))
			var probes []<-chan bkResult
			for range 4 {
				probes = append(probes, bkGo(t.Context(), tr, host+"/a"))
				synctest.Wait()
			}
			assert.Equal(t, StateHalfOpen, bkState(l), "state with probes in flight")
			assert.Equal(t, int64(3), fake.total.Load(), "probes that reached next: got %d, want 3", fake.total.Load())
			// The fourth was refused at once, without waiting for the gate.
			select {
			case r := <-probes[3]:
				assert.ErrorIs(t, r.err, ErrCircuitOpen, "the fourth concurrent request: got %v, want ErrCircuitOpen", r.err)
			default:
				t.Errorf("the fourth concurrent request is still in flight, want it refused")
			}

			close(fake.gates["/a"])
			for i, ch := range probes[:3] {
				r := <-ch
				assert.NoError(t, r.err, "probe %d", i)
				assert.Equal(t, http.StatusOK, r.status, "probe %d", i)
			}
			assert.Equal(t, StateClosed, bkState(l), "state after successful probes")
			_, _, failing := bkPeriod(l)
			assert.False(t, failing, "failure period after the circuit closed")
		})
	})

	t.Run("a probe success closes the circuit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBreaker(bkConfig())
			l := bkLane(b, host)
			bkTrip(t, l)
			fake := statusFake(http.StatusOK)
			tr := bkTransport(fake, b)

			time.Sleep(5*time.Second - time.Millisecond)
			_, err := bkDo(t.Context(), tr, host)
			require.ErrorIs(t, err, ErrCircuitOpen, "1 ms before OpenFor ends")
			require.Zero(t, fake.total.Load(), "attempts while open")
			time.Sleep(time.Millisecond)

			status, err := bkDo(t.Context(), tr, host)
			require.NoError(t, err, "the probe")
			assert.Equal(t, http.StatusOK, status, "the probe's status")
			assert.Equal(t, StateClosed, bkState(l), "state after the probe's success")
			for i := range 10 {
				status, err := bkDo(t.Context(), tr, host)
				require.NoError(t, err, "request %d after closing", i)
				require.Equal(t, http.StatusOK, status)
			}
			assert.Equal(t, int64(11), fake.total.Load(), "attempts: the probe and 10 more")
		})
	})

	t.Run("a probe failure reopens with a new jittered open time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := bkConfig()
			cfg.OpenJitter = 5 * time.Second
			b := NewBreaker(cfg)
			l := bkLane(b, host)
			bkTrip(t, l)
			fake := statusFake(http.StatusServiceUnavailable)
			tr := bkTransport(fake, b, WithMaxAttempts(1))

			var opens []time.Duration
			for i := range 20 {
				time.Sleep(time.Until(bkOpenUntil(l)))
				status, err := bkDo(t.Context(), tr, host)
				require.NoError(t, err, "probe %d", i)
				require.Equal(t, http.StatusServiceUnavailable, status, "probe %d", i)
				require.Equal(t, StateOpen, bkState(l), "state after probe %d failed", i)
				openFor := time.Until(bkOpenUntil(l))
				require.GreaterOrEqual(t, openFor, cfg.OpenFor, "open time after probe %d", i)
				require.Less(t, openFor, cfg.OpenFor+cfg.OpenJitter, "open time after probe %d", i)
				opens = append(opens, openFor)

				// The reopened circuit refuses at once, off the network.
				calls := fake.total.Load()
				_, err = bkDo(t.Context(), tr, host)
				require.ErrorIs(t, err, ErrCircuitOpen, "right after probe %d failed", i)
				require.Equal(t, calls, fake.total.Load(), "attempts while reopened")
			}
			slices.Sort(opens)
			distinct := len(slices.Compact(opens))
			assert.GreaterOrEqual(t, distinct, 15, "distinct open times in 20 reopenings: got %d", distinct)
		})
	})

	// Probes: 3. Probes p1 and p2 hang; p3 fails and reopens the circuit.
	// When it half-opens again, q1 is admitted; then p1 and p2 end. Their
	// outcomes belong to the earlier state and must change nothing, but
	// each also gives back a probe slot that the new half-open period never
	// handed out, so the lane would admit five probes at once.
	t.Run("probes of an earlier half-open period do not widen the next", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := bkConfig()
			cfg.Probes = 3
			b := NewBreaker(cfg)
			l := bkLane(b, host)
			bkTrip(t, l)
			time.Sleep(cfg.OpenFor)

			fake := newGatedFake(map[string]int{"/p": http.StatusOK, "/q": http.StatusOK})
			tr := bkTransport(fake, b, WithMaxAttempts(1))
			p1 := bkGo(t.Context(), tr, host+"/p")
			p2 := bkGo(t.Context(), tr, host+"/p")
			synctest.Wait()
			status, err := bkDo(t.Context(), tr, host+"/fail")
			require.NoError(t, err, "p3")
			require.Equal(t, http.StatusServiceUnavailable, status, "p3")
			require.Equal(t, StateOpen, bkState(l), "state after p3 failed")

			time.Sleep(cfg.OpenFor)
			var qs []<-chan bkResult
			qs = append(qs, bkGo(t.Context(), tr, host+"/q"))
			synctest.Wait()
			require.Equal(t, StateHalfOpen, bkState(l), "state with q1 in flight")
			close(fake.gates["/p"])
			for _, ch := range []<-chan bkResult{p1, p2} {
				r := <-ch
				require.NoError(t, r.err, "p1, p2")
			}
			require.Equal(t, StateHalfOpen, bkState(l), "state after the earlier probes ended")

			before := fake.callsTo("probe.test")
			for range 3 {
				qs = append(qs, bkGo(t.Context(), tr, host+"/q"))
				synctest.Wait()
			}
			admitted := fake.callsTo("probe.test") - before + 1 // q1 too
			assert.Equal(t, cfg.Probes, admitted,
				"probes in flight at once: got %d, want at most Probes = %d (breaker.go: allow resets probes to 0 on half-opening while record still decrements it for probes of the earlier period)",
				admitted, cfg.Probes)
			close(fake.gates["/q"])
			for _, ch := range qs {
				<-ch
			}
		})
	})

	t.Run("an outcome from an earlier state is ignored", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBreaker(bkConfig())
			l := bkLane(b, host)
			fake := newGatedFake(map[string]int{"/late": http.StatusServiceUnavailable})
			tr := bkTransport(fake, b, WithMaxAttempts(1))

			// Admitted while closed; it fails only after the circuit has
			// opened, half-opened and closed again.
			late := bkGo(t.Context(), tr, host+"/late")
			synctest.Wait()
			bkTrip(t, l)
			time.Sleep(5 * time.Second)
			require.True(t, bkFeed(l, outcomeSuccess), "the probe")
			require.Equal(t, StateClosed, bkState(l), "state after the probe")

			close(fake.gates["/late"])
			r := <-late
			require.NoError(t, r.err, "the late request")
			require.Equal(t, http.StatusServiceUnavailable, r.status, "the late request's status")
			fails, _, failing := bkPeriod(l)
			assert.Equal(t, 0, fails, "failures counted from an earlier state")
			assert.False(t, failing, "failure period started by an earlier state's outcome")
		})
	})
}

// TestCircuitOpenWakesSleepers checks that a request sleeping before a retry
// to a host returns at the instant that host's circuit opens, tripped by
// other requests, and that a request sleeping toward another host sleeps on.
func TestCircuitOpenWakesSleepers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := bkConfig()
		cfg.MinFailures = 3
		b := NewBreaker(cfg)
		var yCalls atomic.Int32
		fake := newBreakerFake(func(req *http.Request) (int, error) {
			if req.URL.Host == "y.test" && yCalls.Add(1) > 1 {
				return http.StatusOK, nil
			}
			return http.StatusServiceUnavailable, nil
		})
		// The sleepers wait 30 s before their first retry.
		slow := bkTransport(fake, b, WithPolicy(Exponential{Base: 30 * time.Second}))
		// The others fail once and return.
		once := bkTransport(fake, b, WithMaxAttempts(1))

		start := time.Now()
		type done struct {
			bkResult
			elapsed time.Duration
		}
		sleep := func(rawURL string) <-chan done {
			ch := make(chan done, 1)
			go func() {
				status, err := bkDo(t.Context(), slow, rawURL)
				ch <- done{bkResult{status, err}, time.Since(start)}
			}()
			return ch
		}
		onX, onY := sleep("http://x.test/hook"), sleep("http://y.test/hook")
		synctest.Wait() // both failed their first attempt and sleep

		time.Sleep(time.Second)
		_, err := bkDo(t.Context(), once, "http://x.test/other")
		require.NoError(t, err)
		synctest.Wait()
		require.Empty(t, onX, "the sleeper toward x returned before x's circuit opened")

		// The third failure, 2.5 s after the first: x's circuit opens now.
		const trip = 2500 * time.Millisecond
		time.Sleep(trip - time.Since(start))
		_, err = bkDo(t.Context(), once, "http://x.test/other")
		require.NoError(t, err)
		require.Equal(t, StateOpen, bkState(bkLane(b, "http://x.test")), "x's circuit after the third failure")
		synctest.Wait()

		var x done
		select {
		case x = <-onX:
		default:
			require.Fail(t, "the sleeper toward x still sleeps after x's circuit opened")
		}
		assert.Equal(t, trip, x.elapsed, "the sleeper toward x returned after %v, want %v: the trip instant", x.elapsed, trip)
		require.ErrorIs(t, x.err, ErrCircuitOpen, "the sleeper toward x")
		var e *Error
		require.ErrorAs(t, x.err, &e)
		assert.Equal(t, "http://x.test", e.Key, "Error.Key")
		assert.Equal(t, ReasonCircuitOpen, e.Reason, "Error.Reason")
		assert.Equal(t, 1, e.Attempts, "Error.Attempts: the sleeper made no attempt after waking")
		assert.Equal(t, 3, fake.callsTo("x.test"), "attempts to x: the sleeper's first and the other two")
		require.Empty(t, onY, "the sleeper toward y woke when x's circuit opened")

		y := <-onY
		require.NoError(t, y.err, "the sleeper toward y")
		assert.Equal(t, http.StatusOK, y.status, "the sleeper toward y: its retry succeeds")
		assert.Equal(t, 30*time.Second, y.elapsed, "the sleeper toward y returned after %v, want its full 30 s wait", y.elapsed)
	})
}

// TestBreakerOutcomes checks what an attempt's outcome tells a circuit: a
// response that is not a retryable failure (a 404) is a success; a 503 is a
// failure; a certificate error and the caller's own context ending tell
// nothing.
func TestBreakerOutcomes(t *testing.T) {
	certErr := &url.Error{Op: "Get", URL: "https://host.test/", Err: x509.UnknownAuthorityError{}}
	cases := []struct {
		name      string
		answer    func(req *http.Request) (int, error)
		cancel    bool // the caller cancels its context during the attempt
		wantFails int  // failures added to a failure period under way
		wantSucc  int64
		wantAfter State // the state after a half-open circuit's probe with this outcome
	}{
		{
			name:      "404 is a success",
			answer:    func(*http.Request) (int, error) { return http.StatusNotFound, nil },
			wantSucc:  1,
			wantAfter: StateClosed,
		},
		{
			name:      "503 is a failure",
			answer:    func(*http.Request) (int, error) { return http.StatusServiceUnavailable, nil },
			wantFails: 1,
			wantAfter: StateOpen,
		},
		{
			name:      "certificate error is neither",
			answer:    func(*http.Request) (int, error) { return 0, certErr },
			wantAfter: StateHalfOpen,
		},
		{
			name: "caller's cancelled context is neither",
			answer: func(req *http.Request) (int, error) {
				<-req.Context().Done()
				return 0, req.Context().Err()
			},
			cancel:    true,
			wantAfter: StateHalfOpen,
		},
	}
	const host = "https://host.test/"
	for _, c := range cases {
		// send makes one request whose attempt has this case's outcome.
		send := func(t *testing.T, b *Breaker) {
			t.Helper()
			fake := newBreakerFake(c.answer)
			tr := bkTransport(fake, b, WithMaxAttempts(1))
			ctx := t.Context()
			if c.cancel {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				time.AfterFunc(time.Second, cancel)
			}
			status, err := bkDo(ctx, tr, host)
			switch {
			case c.cancel:
				require.ErrorIs(t, err, context.Canceled)
			case status == 0:
				require.ErrorIs(t, err, certErr)
			}
			require.Equal(t, int64(1), fake.total.Load(), "attempts")
		}
		t.Run(c.name+"/closed", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBreaker(bkConfig())
				l := bkLane(b, host)
				require.True(t, bkFeed(l, outcomeFailure), "the failure that starts a period")
				send(t, b)
				fails, succ, failing := bkPeriod(l)
				assert.Equal(t, 1+c.wantFails, fails, "failures in the period")
				assert.Equal(t, c.wantSucc, succ, "successes in the period")
				assert.True(t, failing, "period under way")
				assert.Equal(t, StateClosed, bkState(l), "state")
			})
		})
		t.Run(c.name+"/half-open", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBreaker(bkConfig())
				l := bkLane(b, host)
				bkTrip(t, l)
				time.Sleep(b.cfg.OpenFor)
				send(t, b)
				assert.Equal(t, c.wantAfter, bkState(l), "state after the probe")
				if c.wantAfter == StateHalfOpen {
					// The probe gave its slot back: the next request is the
					// next probe, and its success closes the circuit.
					status, err := bkDo(t.Context(), bkTransport(statusFake(http.StatusOK), b), host)
					require.NoError(t, err, "the next probe")
					assert.Equal(t, http.StatusOK, status)
					assert.Equal(t, StateClosed, bkState(l), "state after the next probe's success")
				}
			})
		})
	}
}

// TestCircuitOpenedDuringAttempt: the host's circuit opens, by other
// requests' failures, while this request's attempt is in flight. No retry
// can follow, so the request returns its real 503 untouched, schedules no
// retry and spends no budget token.
func TestCircuitOpenedDuringAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newGatedFake(map[string]int{"/slow": http.StatusServiceUnavailable})
		b := NewBreaker(bkConfig())
		budget := NewBudget(BudgetConfig{})
		var scheduled atomic.Int64
		tr := New(next, WithBreaker(b), WithBudget(budget), WithMaxWait(0),
			WithHooks(&Hooks{RetryScheduled: func(Event) { scheduled.Add(1) }}))
		got := bkGo(t.Context(), tr, "http://host.test/slow")
		synctest.Wait() // the attempt is in flight
		bkTrip(t, bkLane(b, "http://host.test/"))
		k := keyOf(mustParse(t, "http://host.test/"))
		before := budget.tokens(k, time.Now())

		close(next.gates["/slow"])
		r := <-got
		require.NoError(t, r.err)
		require.Equal(t, http.StatusServiceUnavailable, r.status, "the real response goes back")
		require.Zero(t, scheduled.Load(), "retries scheduled")
		require.Equal(t, before, budget.tokens(k, time.Now()), "tokens: none spent")
		require.Equal(t, 1, next.callsTo("host.test"), "attempts")
	})
}

// A circuit closes by one rule, however it closes: a probe's success, an
// operator's Reset, or a close adopted from another process that saw the
// key answer. Each forgets the failure period and clears the policy's
// memory of the outage, so that DecorrelatedJitter starts again from Base.
func TestBreakerCloseRule(t *testing.T) {
	const key = "http://host.test"
	ways := []struct {
		name  string
		close func(t *testing.T, b *Breaker, next *breakerFake)
	}{
		{"a probe's success", func(t *testing.T, b *Breaker, _ *breakerFake) {
			time.Sleep(b.cfg.OpenFor)
			status, err := bkDo(t.Context(), bkTransport(statusFake(http.StatusOK), b), key+"/")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
		}},
		{"an operator's Reset", func(t *testing.T, b *Breaker, _ *breakerFake) { b.Reset(key) }},
		{"a close adopted from the fleet", func(t *testing.T, b *Breaker, _ *breakerFake) {
			time.Sleep(time.Second) // the other process's success came after this one's open
			require.True(t, b.adopt(fleetlink.Change{Kind: fleetlink.Close, Key: key}, false, time.Now()))
		}},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBreaker(bkConfig())
				next := statusFake(http.StatusServiceUnavailable)
				tr := bkTransport(next, b, WithPolicy(DecorrelatedJitter{}), WithMaxAttempts(2))
				l := bkLane(b, key+"/")
				// Failures over the span trip the circuit; the retries have
				// grown the key's previous delay.
				for bkState(l) != StateOpen {
					_, err := bkDo(t.Context(), tr, key+"/")
					require.NoError(t, err)
				}
				require.NotZero(t, l.Prev(), "the policy's memory before the close")

				w.close(t, b, next)
				assert.Equal(t, StateClosed, bkState(l), "state after the close")
				assert.Zero(t, l.Prev(), "the policy's memory after the close")
				fails, succ, failing := bkPeriod(l)
				assert.False(t, failing, "a failure period after the close")
				assert.Zero(t, fails+int(succ), "outcomes counted after the close")
			})
		})
	}
}
