package retryhttp

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A host that answers 429 with Retry-After: 30 holds its key: at 200
// requests/s, at most a few attempts reach it in the 30 s it asked for, and
// the requests that waited are delivered after the hold, spread over the
// Retry-After spread rather than in one 100 ms slice.
func TestHoldObeysRetryAfter(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	synctest.Test(t, func(t *testing.T) {
		const (
			rate     = 200 // requests/s
			sendFor  = 60 * time.Second
			limitFor = 30 * time.Second // the server answers 429 until then
		)
		start := time.Now()
		var (
			mu       sync.Mutex
			arrivals []time.Duration
			first429 = time.Duration(-1)
		)
		next := newBreakerFake(func(*http.Request) (int, error) {
			at := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			arrivals = append(arrivals, at)
			if at < limitFor {
				if first429 < 0 {
					first429 = at
				}
				return 0, nil // answered below with its header
			}
			return http.StatusOK, nil
		})
		tr := New(rateLimited{next}) // every default
		var wg sync.WaitGroup
		var delivered, failed atomic.Int64
		for i := range int(sendFor / time.Second * rate) {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
			wg.Go(func() {
				resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				if err == nil && resp.StatusCode == http.StatusOK {
					delivered.Add(1)
				} else {
					failed.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()

		mu.Lock()
		defer mu.Unlock()
		require.GreaterOrEqual(t, first429, time.Duration(0), "no 429 answered")
		var inHold int
		buckets := map[time.Duration]int{}
		var after int
		for _, a := range arrivals {
			if a >= first429 && a < first429+30*time.Second {
				inHold++
			}
			if a >= limitFor && a < limitFor+2*defaultRetryAfterSpread {
				buckets[a.Truncate(100*time.Millisecond)]++
				after++
			}
		}
		busiest := 0
		for _, n := range buckets {
			busiest = max(busiest, n)
		}
		t.Logf("attempts in the 30 s after the first 429: %d; delivered %d, failed %d; %d attempts in the 2 s after the hold, busiest 100 ms: %d",
			inHold, delivered.Load(), failed.Load(), after, busiest)
		assert.LessOrEqual(t, inHold, 10, "attempts reaching the host while it asked for none")
		assert.Equal(t, int64(sendFor/time.Second*rate), delivered.Load(), "every request delivered")
		assert.Greater(t, after, 1000, "the held requests went after the hold")
		assert.Less(t, float64(busiest), 0.2*float64(after), "the held requests came back in one slice")
	})
}

// rateLimited turns the breaker fake's 0 status into a 429 with
// Retry-After: 30.
type rateLimited struct{ f *breakerFake }

func (r rateLimited) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.f.RoundTrip(req)
	if resp == nil && err == nil {
		resp = newResponse(req, http.StatusTooManyRequests, http.NoBody)
		resp.Header.Set("Retry-After", "30")
	}
	return resp, err
}

// A hold never shortens, never outlasts the clamp, and a request that
// cannot wait for it returns at once with errHeld and the hold's end.
func TestHoldRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		b := NewBreaker(BreakerConfig{})
		l := bkLane(b, testURL)
		script := []reply{
			{status: 429, header: http.Header{"Retry-After": {"3600"}}}, // clamped to 30 s
		}
		tr := New(newNext(script...), WithBreaker(b), WithMaxAttempts(1))
		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		s := b.Host(keyOf(mustParse(t, testURL)).String())
		assert.Equal(t, StateClosed, s.State, "a hold is not a state of the circuit")
		assert.Equal(t, start.Add(defaultMaxRetryAfter), s.HeldUntil, "a hold never outlasts the clamp")

		// A shorter hold, and a success, leave it as it was.
		assert.False(t, l.Hold(start.Add(10*time.Second)).Any(), "a shorter hold changes nothing")
		bkFeed(l, outcomeSuccess)
		assert.Equal(t, start.Add(defaultMaxRetryAfter), b.Host(s.Key).HeldUntil)

		// A request whose deadline comes first returns at once.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		next := newNext(reply{status: 200})
		tr2 := New(next, WithBreaker(b))
		_, err = tr2.RoundTrip(newReq(ctx, http.MethodGet, nil))
		require.ErrorIs(t, err, errHeld)
		e := asError(t, err)
		assert.Equal(t, ReasonHeld, e.Reason)
		assert.Equal(t, start.Add(defaultMaxRetryAfter), e.Until)
		assert.Zero(t, time.Since(start), "returned at once")
		assert.Zero(t, next.calls())

		// One without a deadline waits for the end, then goes.
		resp, err = tr2.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		waited := time.Since(start)
		assert.GreaterOrEqual(t, waited, defaultMaxRetryAfter)
		assert.Less(t, waited, defaultMaxRetryAfter+defaultRetryAfterSpread)
		assert.Equal(t, 1, next.calls())
		assert.Equal(t, StateClosed, b.Host(s.Key).State, "the hold is over")
		assert.Equal(t, uint64(2), tr2.Stats().Held, "admissions a hold stopped")
	})
}

// RetryAt's answer for each reason, and a dispatcher loop that honours it
// never sends to a held or open host.
func TestHoldRetryAt(t *testing.T) {
	t.Run("each reason", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			now := time.Now()
			tr := newT(newNext(reply{status: 200}))
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			at, why := tr.RetryAt(resp, nil)
			assert.Equal(t, reasonNone, why, "a success")
			assert.True(t, at.IsZero())

			tr = newT(newNext(reply{status: 503, header: http.Header{"Retry-After": {"2"}}}), WithMaxAttempts(1))
			resp, err = tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			at, why = tr.RetryAt(resp, nil)
			assert.Equal(t, ReasonHeld, why)
			assert.True(t, !at.Before(now.Add(2*time.Second)) && at.Before(now.Add(3*time.Second)), "server: %v", at.Sub(now))

			b := NewBreaker(bkConfig())
			bkTrip(t, bkLane(b, testURL))
			tripped := time.Now()
			tr = New(newNext(reply{status: 200}), WithBreaker(b), WithBudget(nil), WithMaxWait(0))
			_, err = tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.ErrorIs(t, err, ErrCircuitOpen)
			at, why = tr.RetryAt(nil, err)
			assert.Equal(t, ReasonCircuitOpen, why)
			open := tripped.Add(bkConfig().OpenFor)
			assert.True(t, !at.Before(open) && at.Before(open.Add(30*time.Second)), "circuit: %v", at.Sub(open))

			b = NewBreaker(BreakerConfig{})
			bkLane(b, testURL).Hold(time.Now().Add(20 * time.Second))
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			tr = New(newNext(reply{status: 200}), WithBreaker(b), WithMaxWait(0))
			_, err = tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
			require.ErrorIs(t, err, errHeld)
			at, why = tr.RetryAt(nil, err)
			assert.Equal(t, ReasonHeld, why)
			held := time.Now().Add(20 * time.Second)
			assert.True(t, !at.Before(held) && at.Before(held.Add(defaultRetryAfterSpread)), "held: %v", at.Sub(held))

			budget := NewBudget(BudgetConfig{Ratio: -1, MinPerSecond: 10})
			tr = New(newNext(reply{status: 503}), WithBreaker(nil), WithBudget(budget), WithMaxAttempts(100), WithPolicy(immediate{}), WithMaxWait(0))
			resp, err = tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			at, why = tr.RetryAt(resp, nil)
			assert.Equal(t, ReasonBudgetExhausted, why, "the floor's 10 tokens are spent")
			assert.True(t, at.After(time.Now()) && !at.After(time.Now().Add(100*time.Millisecond+30*time.Second)), "budget: %v", time.Until(at))
		})
	})

	t.Run("a dispatcher that honours it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			var seen sync.Map // State -> true: the states the key went through
			b := NewBreaker(BreakerConfig{Span: time.Second, OpenJitter: -1,
				OnStateChange: func(i Event) { seen.Store(i.To, true) }})
			key := keyOf(mustParse(t, testURL)).String()
			var violations atomic.Int64
			next := newBreakerFake(func(*http.Request) (int, error) {
				if h := b.Host(key); h.State == StateOpen || !h.HeldUntil.IsZero() {
					violations.Add(1)
				}
				switch since := time.Since(start); {
				case since < 10*time.Second:
					return 0, errReset() // down: the circuit opens
				case since < 20*time.Second:
					return http.StatusServiceUnavailable, nil // then a hold
				}
				return http.StatusOK, nil
			})
			tr := New(heldAfter{next, 10 * time.Second, start}, WithBreaker(b), WithMaxWait(0))
			var wg sync.WaitGroup
			var delivered atomic.Int64
			for i := range 200 {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 50 * time.Millisecond)
					sends := 0
					if redrive(t.Context(), tr, func() bool { sends++; return sends <= 50 }) {
						delivered.Add(1)
					}
				})
			}
			wg.Wait()
			assert.Equal(t, int64(200), delivered.Load())
			assert.Zero(t, violations.Load(), "attempts that reached a held or open host")
			_, ok := seen.Load(StateOpen)
			assert.True(t, ok, "the circuit never opened")
			assert.NotZero(t, tr.Stats().Held, "the key was never held")
		})
	})
}

// redrive sends a GET through tr as a dispatcher does, until it is answered
// 200 or more reports false: after each failure it waits for the instant
// RetryAt advises (at least 100 ms, for a zero instant). It reports whether
// the GET was delivered.
func redrive(ctx context.Context, tr *Transport, more func() bool) bool {
	for more() {
		resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
		if err == nil && resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			return true
		}
		at, _ := tr.RetryAt(resp, err)
		if resp != nil {
			resp.Body.Close()
		}
		time.Sleep(max(time.Until(at), 100*time.Millisecond))
	}
	return false
}

// heldAfter adds Retry-After: 10 to the 503s answered from its instant on.
type heldAfter struct {
	f     *breakerFake
	from  time.Duration
	start time.Time
}

func (h heldAfter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := h.f.RoundTrip(req)
	if resp != nil && resp.StatusCode == http.StatusServiceUnavailable && time.Since(h.start) >= h.from {
		resp.Header.Set("Retry-After", "10")
	}
	return resp, err
}

// An operator isolates a key, sees it in the snapshot, and resets it; the
// changes are reported; all of it is safe beside running requests.
func TestHoldOperatorControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			changes []Event
		)
		b := NewBreaker(BreakerConfig{OnStateChange: func(i Event) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, i)
		}})
		next := newNext(reply{status: 200})
		tr := New(next, WithBreaker(b), WithMaxWait(0))
		key := "http://example.test"

		b.Isolate(key)
		_, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.ErrorIs(t, err, ErrCircuitOpen)
		assert.Contains(t, err.Error(), "isolated")
		assert.Zero(t, next.calls())
		snap := b.Snapshot()
		require.Len(t, snap, 1)
		assert.Equal(t, HostState{Key: key, State: StateOpen, Since: time.Now(), Isolated: true}, snap[0])

		b.Reset(key)
		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		assert.Empty(t, b.Snapshot())
		assert.Equal(t, StateClosed, b.Host(key).State)
		mu.Lock()
		assert.Equal(t, []Event{
			{Key: key, From: StateClosed, To: StateOpen},
			{Key: key, From: StateOpen, To: StateClosed},
		}, changes)
		mu.Unlock()

		// Concurrent use: requests, isolations, resets and snapshots.
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 200 {
					switch (w + i) % 4 {
					case 0:
						b.Isolate(key)
					case 1:
						b.Reset(key)
					case 2:
						_ = b.Snapshot()
					}
					resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
					if err == nil {
						resp.Body.Close()
					} else if !errors.Is(err, ErrCircuitOpen) || !strings.Contains(err.Error(), "isolated") {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		b.Reset(key)
		probes, sleepers := bkHeld(bkLane(b, key+"/"))
		assert.Zero(t, probes+sleepers)
	})
}

// A Breaker shared by two transports reports each change once to its own
// callback, whichever transport's request made it.
func TestHoldSharedBreakerReportsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var changes []State
		b := NewBreaker(BreakerConfig{Span: time.Second, MinFailures: 1, OpenFor: time.Second, OpenJitter: -1,
			OnStateChange: func(i Event) {
				mu.Lock()
				defer mu.Unlock()
				changes = append(changes, i.To)
			}})
		next := newNext(reply{status: 503}, reply{status: 503}, reply{status: 200})
		a := New(next, WithBreaker(b), WithBudget(nil), WithMaxAttempts(1))
		bb := New(next, WithBreaker(b), WithBudget(nil), WithMaxAttempts(1))
		sendGET(t, a, testURL) // the failure period begins
		time.Sleep(time.Second)
		sendGET(t, a, testURL) // trips: closed -> open
		time.Sleep(time.Second)
		sendGET(t, bb, testURL) // probes: open -> half-open -> closed
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []State{StateOpen, StateHalfOpen, StateClosed}, changes)
	})
}

// Names of what RetryAt and hooks report.
func TestHoldNames(t *testing.T) {
	var names []string
	for r := range ReasonConcurrencyLimit + 2 {
		names = append(names, r.String())
	}
	assert.Equal(t, []string{"none", "not retryable", "not replayable", "attempts used", "budget exhausted",
		"circuit open", "context done", "held", "concurrency limit", "Reason(9)"}, names)
	assert.Equal(t, "Reason(-1)", Reason(-1).String())
	assert.Equal(t, []string{"closed", "open", "half-open", "State(?)"},
		[]string{StateClosed.String(), StateOpen.String(), StateHalfOpen.String(), State(3).String()})
	err := (&heldError{until: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}).Error()
	assert.Equal(t, "retryhttp: held by the server until 2030-01-02T03:04:05Z", err)
}

// RetryAt on what needs no advice, on an isolated key, and on a budget
// whose bank refills only from new requests.
func TestHoldRetryAtEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newT(newNext(reply{status: 503}))
		at, why := tr.RetryAt(nil, context.Canceled)
		assert.True(t, at.IsZero())
		assert.Equal(t, reasonNone, why, "an error that is not an Error")
		at, why = tr.RetryAt(&http.Response{StatusCode: 503}, nil)
		assert.True(t, at.IsZero())
		assert.Equal(t, reasonNone, why, "a response without its request")

		b := NewBreaker(BreakerConfig{})
		b.Isolate("http://example.test")
		tr = New(newNext(reply{status: 200}), WithBreaker(b))
		_, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		at, why = tr.RetryAt(nil, err)
		assert.True(t, at.IsZero())
		assert.Equal(t, ReasonCircuitOpen, why, "an isolated key: no instant")
		assert.True(t, b.Host("http://example.test").Isolated)
		assert.Equal(t, HostState{Key: "http://other.test", State: StateClosed}, b.Host("http://other.test"))
		b.Reset("http://never.test") // nothing to reset

		// Half-open with its probe in flight: still advice from the circuit.
		hb := NewBreaker(bkConfig())
		hl := bkLane(hb, testURL)
		bkTrip(t, hl)
		time.Sleep(bkConfig().OpenFor)
		_, _, err = hl.Admit(t.Context(), perkey.Limits{}) // the probe
		require.NoError(t, err)
		tr = New(newNext(reply{status: 200}), WithBreaker(hb))
		_, err = tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.ErrorIs(t, err, ErrCircuitOpen)
		at, why = tr.RetryAt(nil, err)
		assert.Equal(t, ReasonCircuitOpen, why, "refused while half-open")
		assert.False(t, at.Before(time.Now()))

		noFloor := NewBudget(BudgetConfig{MinPerSecond: -1, Ratio: -1})
		tr = New(newNext(reply{status: 503}), WithBreaker(nil), WithBudget(noFloor), WithPolicy(immediate{}))
		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		at, why = tr.RetryAt(resp, nil)
		assert.True(t, at.IsZero(), "no floor: no instant the budget knows")
		assert.Equal(t, reasonNone, why)

		perHost := NewBudget(BudgetConfig{PerHost: true})
		at, _ = perHost.tokenAt(hostKey{Host: "fresh"}, time.Now())
		assert.Equal(t, time.Now(), at, "a key the budget has not seen has its floor")
	})
}

// Without a breaker, a key's lane is looked up only once some key has been
// held or paced: the first long Retry-After still holds the key, and the
// next request, which must now look its lane up, waits for the hold rather
// than reaching the server.
func TestHoldWithoutBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newNext(reply{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"30"}}}, reply{status: http.StatusOK})
		tr := New(next, WithBreaker(nil), WithBudget(nil), WithMaxAttempts(1))
		require.False(t, tr.lanes.Flagged(), "no key held or paced yet")
		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
		require.ErrorIs(t, err, errHeld, "a request whose deadline ends within the hold")
		start := time.Now()
		resp, err = tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.GreaterOrEqual(t, time.Since(start), 29*time.Second, "sent after the hold")
		assert.Equal(t, 2, next.calls(), "attempts that reached the server")
	})

	// A request already under way when the first hold comes, in its
	// first-attempt jitter and with no lane of its own yet, is held too:
	// its first attempt, due by 10 s, waits for the hold that a 429 at 0 s
	// asked for until 30 s.
	synctest.Test(t, func(t *testing.T) {
		next := newNext(reply{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"30"}}}, reply{status: http.StatusOK})
		tr := New(next, WithBreaker(nil), WithBudget(nil), WithMaxAttempts(1))
		start := time.Now()
		done := make(chan time.Duration)
		go func() {
			ctx := ContextWithOptions(t.Context(), WithFirstAttemptJitter(10*time.Second))
			resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
			assert.NoError(t, err)
			readBody(t, resp)
			done <- time.Since(start)
		}()
		synctest.Wait() // in its jitter
		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.GreaterOrEqual(t, <-done, 30*time.Second, "its attempt waited for the hold")
		assert.Equal(t, 2, next.calls(), "attempts that reached the server")
	})
}

// A limiter that answers 429 with Retry-After: 1 while it has a token
// again in 10 ms (a token bucket rounding its wait up to whole seconds):
// the key's first short hold is tested a tenth of the way in, the test is
// admitted, and the requests it held go at the send rate the 429 cut to
// rather than at the end of the second; later 429s cut the send rate
// without holding the key.
// Against a limiter that refuses until the second is over, the test is
// refused and the hold stands: every request waits the second out.
func TestShortHoldIsTested(t *testing.T) {
	for _, c := range []struct {
		name   string
		bucket bool // the limiter admits again 10 ms after a 429
	}{{"a bucket", true}, {"a window", false}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var mu sync.Mutex
				var refusedAt time.Duration = -1
				next := peerRT(func(req *http.Request) (*http.Response, error) {
					mu.Lock()
					defer mu.Unlock()
					now := time.Since(start)
					admit := refusedAt >= 0 && (c.bucket && now >= refusedAt+10*time.Millisecond || now >= time.Second)
					if refusedAt < 0 || !admit {
						if refusedAt < 0 {
							refusedAt = now
						}
						resp := newResponse(req, http.StatusTooManyRequests, http.NoBody)
						resp.Header.Set("Retry-After", "1")
						return resp, nil
					}
					return newResponse(req, http.StatusOK, http.NoBody), nil
				})
				tr := New(next)
				first := make(chan error, 1)
				go func() {
					resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
					if err == nil {
						resp.Body.Close()
					}
					first <- err
				}()
				synctest.Wait() // the first is answered 429: the key is held
				var wg sync.WaitGroup
				done := make([]time.Duration, 5)
				for i := range done {
					wg.Go(func() {
						resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
						assert.NoError(t, err)
						readBody(t, resp)
						done[i] = time.Since(start)
					})
				}
				wg.Wait()
				require.NoError(t, <-first)
				for _, d := range done {
					if c.bucket {
						// Paced from then on at the rate the 429 cut to
						// (10/s, doubling every 200 ms), not held to 1 s.
						assert.Less(t, d, 500*time.Millisecond, "held requests go when the test is admitted")
					} else {
						assert.GreaterOrEqual(t, d, time.Second, "a proven hold is waited out")
					}
				}
			})
		})
	}
}

// RetryAt's "never": an answer retrying cannot change (a 400, 401 or 404,
// a certificate error) gives ReasonNotRetryable, which a dispatcher can
// switch on rather than requeue it for ever. Its instant is bounded: a
// broken Retry-After of 99999999999 s is at most the failing horizon
// ahead, or at most maxRetryAt without one.
func TestRetryAtNeverAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, status := range []int{400, 401, 404} {
			tr := New(newNext(reply{status: status}))
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			at, why := tr.RetryAt(resp, nil)
			assert.True(t, at.IsZero())
			assert.Equal(t, ReasonNotRetryable, why, "%d: never", status)
		}
		at, why := newT(newNext()).RetryAt(nil, &Error{Reason: ReasonNotRetryable, key: hostKey{Host: "h"}})
		assert.True(t, at.IsZero())
		assert.Equal(t, ReasonNotRetryable, why, "an error retrying cannot mend")

		broken := http.Header{"Retry-After": {"99999999999"}}
		for _, c := range []struct {
			opts  []Option
			limit time.Duration
		}{
			{[]Option{WithMaxWait(0), WithFailingHorizon(72 * time.Hour)}, 72 * time.Hour},
			{[]Option{WithMaxWait(0)}, maxRetryAt},
		} {
			tr := New(newNext(reply{status: 503, header: broken}), append(c.opts, WithMaxAttempts(1))...)
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			at, why := tr.RetryAt(resp, nil)
			assert.Equal(t, ReasonHeld, why)
			assert.LessOrEqual(t, time.Until(at), c.limit, "bounded")
			assert.Greater(t, time.Until(at), c.limit/2, "the server's wait, as far as the bound allows")
		}
	})
}

// WithMaxWait(0) waits for nothing on the request's behalf: a keyed POST
// answered 503 with Retry-After: 7 comes back at once with that answer,
// and RetryAt says when (about 7 s ahead); the next request to the route
// the answer held comes back at once too, held. A short Retry-After is
// still slept in the request.
func TestNoWaitHandsBackServerWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newNext(reply{status: 503, header: http.Header{"Retry-After": {"7"}}})
		tr := New(next, WithMaxWait(0))
		post := func() (*http.Response, error) {
			req := newReq(t.Context(), http.MethodPost, strings.NewReader("order"))
			req.Header.Set("Idempotency-Key", "k1")
			return tr.RoundTrip(req)
		}
		start := time.Now()
		resp, err := post()
		require.NoError(t, err)
		readBody(t, resp)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Zero(t, time.Since(start), "handed back at once")
		assert.Equal(t, 1, next.calls())
		at, why := tr.RetryAt(resp, nil)
		assert.Contains(t, []Reason{ReasonHeld, ReasonHeld}, why)
		assert.GreaterOrEqual(t, time.Until(at), 7*time.Second)
		assert.LessOrEqual(t, time.Until(at), 8*time.Second)

		_, err = post()
		require.ErrorIs(t, err, errHeld, "the route is held: back at once")
		assert.Zero(t, time.Since(start))
		assert.Equal(t, 1, next.calls())

		short := newNext(reply{status: 503, header: http.Header{"Retry-After": {"1"}}}, reply{status: 200})
		resp, err = New(short, WithMaxWait(0)).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		assert.Equal(t, 200, resp.StatusCode, "a wait of a second is slept")
	})
}
