package retryhttp

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tokenDelta is the tolerance of a token count: the floor's tokens are
// float64 arithmetic on durations, so 100 ms at 10/s may be 1.0000000000000002.
const tokenDelta = 1e-6

// budgetKey returns the hostKey that the transport computes for host.
func budgetKey(host string) hostKey {
	return keyOf(&url.URL{Scheme: "http", Host: host})
}

// budgetStep is one row of a budget's history, in the manner of gRPC's
// TestRetryThrottling: what happens, then the tokens the host can spend.
type budgetStep struct {
	sleep    time.Duration // virtual time that passes before the step
	deposits int           // original requests deposited
	retries  int           // withdrawals attempted, after the deposits
	granted  int           // withdrawals that must succeed
	want     float64       // tokens after the step
}

// runBudgetSteps plays steps against host k of b, inside a synctest bubble.
func runBudgetSteps(t *testing.T, b *Budget, k hostKey, steps []budgetStep) {
	t.Helper()
	for i, s := range steps {
		time.Sleep(s.sleep)
		for range s.deposits {
			b.deposit(k)
		}
		granted := 0
		for range s.retries {
			if b.withdraw(k) {
				granted++
			}
		}
		assert.Equalf(t, s.granted, granted, "step %d: withdrawals granted: got %d, want %d", i, granted, s.granted)
		got := b.tokens(k, time.Now())
		assert.InDeltaf(t, s.want, got, tokenDelta, "step %d: tokens: got %v, want %v", i, got, s.want)
	}
}

func TestBudgetTokens(t *testing.T) {
	cases := []struct {
		name  string
		cfg   BudgetConfig
		steps []budgetStep
	}{
		{
			name: "zero config starts with the floor's burst",
			cfg:  BudgetConfig{},
			steps: []budgetStep{
				{want: 10},                               // 10 tokens: one second of the default floor, banked
				{retries: 10, granted: 10, want: 0},      // 0 tokens: a new client can retry at once, 10 times
				{retries: 1, granted: 0, want: 0},        // 0 tokens: an empty budget denies
				{sleep: time.Second, want: 10},           // 10 tokens: the floor refilled
				{retries: 11, granted: 10, want: 0},      // 0 tokens
				{sleep: 100 * time.Millisecond, want: 1}, // 1 token: 100 ms of 10/s
			},
		},
		{
			name: "ten deposits make one token",
			cfg:  BudgetConfig{Ratio: 0.1, MinPerSecond: -1},
			steps: []budgetStep{
				{want: 0},                           // 0 tokens: no floor, nothing deposited
				{deposits: 9, want: 0.9},            // 0.9 tokens
				{retries: 1, granted: 0, want: 0.9}, // 0.9 tokens: a retry needs a whole token
				{deposits: 1, want: 1},              // 1 token: the tenth deposit
				{retries: 1, granted: 1, want: 0},   // 0 tokens: one retry withdraws one token
				{retries: 1, granted: 0, want: 0},   // 0 tokens: an empty budget denies
				{deposits: 25, want: 2.5},           // 2.5 tokens
				{retries: 3, granted: 2, want: 0.5}, // 0.5 tokens
			},
		},
		{
			name: "withdrawal costs one token",
			cfg:  BudgetConfig{Ratio: 0.5, MinPerSecond: -1},
			steps: []budgetStep{
				{deposits: 4, want: 2},            // 2 tokens: four deposits of 0.5
				{retries: 1, granted: 1, want: 1}, // 1 token
				{retries: 1, granted: 1, want: 0}, // 0 tokens
				{retries: 1, granted: 0, want: 0}, // 0 tokens: denied
			},
		},
		{
			name: "floor refills over virtual time",
			cfg:  BudgetConfig{Ratio: -1, MinPerSecond: 10},
			steps: []budgetStep{
				{want: 10},                                // 10 tokens: the burst
				{retries: 10, granted: 10, want: 0},       // 0 tokens: drained
				{retries: 1, granted: 0, want: 0},         // 0 tokens: denied
				{sleep: 100 * time.Millisecond, want: 1},  // 1 token: 100 ms of 10/s
				{retries: 2, granted: 1, want: 0},         // 0 tokens: that one token, no more
				{sleep: 500 * time.Millisecond, want: 5},  // 5 tokens
				{sleep: 500 * time.Millisecond, want: 10}, // 10 tokens: 1 s refills the burst
				{sleep: time.Hour, want: 10},              // 10 tokens: the floor never banks more than its burst
				{retries: 11, granted: 10, want: 0},       // 0 tokens
			},
		},
		{
			name: "fractional floor",
			cfg:  BudgetConfig{Ratio: -1, MinPerSecond: 0.5},
			steps: []budgetStep{
				{want: 1},                           // 1 token: the burst is ceil(0.5)
				{retries: 1, granted: 1, want: 0},   // 0 tokens
				{sleep: time.Second, want: 0.5},     // 0.5 tokens
				{retries: 1, granted: 0, want: 0.5}, // 0.5 tokens: half a token is no retry
				{sleep: time.Second, want: 1},       // 1 token
				{retries: 1, granted: 1, want: 0},   // 0 tokens
			},
		},
		{
			name: "bank is spent before the floor",
			cfg:  BudgetConfig{},
			steps: []budgetStep{
				{deposits: 10, want: 11},           // 11 tokens: 1 banked + 10 of floor
				{retries: 1, granted: 1, want: 10}, // 10 tokens
				// 10 tokens: had the floor paid, it would have refilled to
				// 10 beside the banked token, 11 in all.
				{sleep: time.Second, want: 10},
			},
		},
		{
			name: "cap banks exactly MaxTokens",
			cfg:  BudgetConfig{Ratio: 0.1, MinPerSecond: -1, MaxTokens: 5},
			steps: []budgetStep{
				{deposits: 1000, want: 5},         // 5 tokens: 100 earned, 5 banked
				{deposits: 1000, want: 5},         // 5 tokens: a full bank takes no more
				{retries: 6, granted: 5, want: 0}, // 0 tokens
				{deposits: 10, want: 1},           // 1 token: deposits bank again below the cap
			},
		},
		{
			name: "default cap is 1000 beside the floor",
			cfg:  BudgetConfig{},
			steps: []budgetStep{
				{deposits: 100_000, want: 1010},         // 1010 tokens: 1000 banked (10,000 earned) + 10 of floor
				{retries: 1011, granted: 1010, want: 0}, // 0 tokens
			},
		},
		{
			name: "negative Ratio deposits nothing",
			cfg:  BudgetConfig{Ratio: -1, MinPerSecond: -1},
			steps: []budgetStep{
				{want: 0},                         // 0 tokens
				{deposits: 1000, want: 0},         // 0 tokens: deposits earn nothing
				{retries: 1, granted: 0, want: 0}, // 0 tokens: denied
				{sleep: time.Hour, want: 0},       // 0 tokens: and no floor
			},
		},
		{
			name: "negative Ratio keeps the floor",
			cfg:  BudgetConfig{Ratio: -1},
			steps: []budgetStep{
				{deposits: 1000, want: 10},          // 10 tokens: the floor only
				{retries: 11, granted: 10, want: 0}, // 0 tokens
			},
		},
		{
			name: "negative MinPerSecond means no floor",
			cfg:  BudgetConfig{MinPerSecond: -1},
			steps: []budgetStep{
				{want: 0},                         // 0 tokens: nothing banked at the start
				{retries: 1, granted: 0, want: 0}, // 0 tokens: denied
				{sleep: time.Hour, want: 0},       // 0 tokens: time adds nothing
				{deposits: 10, want: 1},           // 1 token: the default ratio still deposits
				{retries: 2, granted: 1, want: 0}, // 0 tokens
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The limiter must be made inside the bubble.
				b := NewBudget(c.cfg)
				runBudgetSteps(t, b, budgetKey("a.test"), c.steps)
			})
		})
	}
}

// budgetReqID is the header by which budgetFake tells one request's
// attempts from another's.
const budgetReqID = "X-Budget-Request"

// budgetFake is a scripted in-memory next RoundTripper. For each host,
// fails says how many attempts of each request are answered 503 before one
// is answered 200 (a negative count: every attempt is answered 503). It
// closes the request body it receives and counts attempts per host and per
// request. It is safe for concurrent use.
type budgetFake struct {
	fails map[string]int // host -> failing attempts per request
	body  string         // body of every response

	mu    sync.Mutex
	hosts map[string]int // attempts per host; guarded by mu
	reqs  map[string]int // attempts per request id; guarded by mu
}

func newBudgetFake(body string, fails map[string]int) *budgetFake {
	return &budgetFake{fails: fails, body: body, hosts: map[string]int{}, reqs: map[string]int{}}
}

func (f *budgetFake) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	host := req.URL.Host
	f.mu.Lock()
	f.hosts[host]++
	id := host + "/" + req.Header.Get(budgetReqID)
	f.reqs[id]++
	n := f.reqs[id]
	f.mu.Unlock()

	status := http.StatusOK
	if fails := f.fails[host]; fails < 0 || n <= fails {
		status = http.StatusServiceUnavailable
	}
	return newResponse(req, status, io.NopCloser(strings.NewReader(f.body))), nil
}

// attempts returns how many attempts reached host.
func (f *budgetFake) attempts(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hosts[host]
}

// budgetGet sends one GET to host through rt, as request id, and returns
// the status; the body is read and closed.
func budgetGet(t *testing.T, rt http.RoundTripper, host string, id int) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+host+"/", nil)
	require.NoError(t, err)
	req.Header.Set(budgetReqID, strconv.Itoa(id))
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// newBudgetTransport returns a transport whose only limit on retries is the
// budget: no breaker, no waiting, the default 4 attempts.
// newBudgetTransport builds the transports of these tests: the given
// budget, no breaker, no delay, and no wait for a key whose budget is
// empty (these tests are of the budget itself, as a dispatcher that keeps
// its own queue meets it; waits are wait_test.go's).
func newBudgetTransport(next http.RoundTripper, b *Budget) *Transport {
	return New(next, WithBudget(b), WithBreaker(nil), WithPolicy(immediate{}), WithMaxWait(0))
}

func TestBudgetPerHost(t *testing.T) {
	dead, live := budgetKey("dead.test"), budgetKey("live.test")
	t.Run("dead host leaves another host's tokens", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBudget(BudgetConfig{PerHost: true})
			runBudgetSteps(t, b, dead, []budgetStep{
				{retries: 100, granted: 10, want: 0}, // dead: 0 tokens, its own floor spent
			})
			runBudgetSteps(t, b, live, []budgetStep{
				{want: 10},                        // live: 10 tokens, untouched
				{retries: 3, granted: 3, want: 7}, // live: 7 tokens
			})
			runBudgetSteps(t, b, dead, []budgetStep{
				{deposits: 10, want: 1},           // dead: 1 token, its own deposits
				{retries: 2, granted: 1, want: 0}, // dead: 0 tokens
			})
			runBudgetSteps(t, b, live, []budgetStep{
				{want: 7}, // live: 7 tokens, dead's deposits were not its
			})
		})
	})
	t.Run("one budget for every host without PerHost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBudget(BudgetConfig{})
			runBudgetSteps(t, b, dead, []budgetStep{
				{retries: 100, granted: 10, want: 0}, // dead: 0 tokens
			})
			runBudgetSteps(t, b, live, []budgetStep{
				{want: 0},                         // live: 0 tokens, dead spent them
				{retries: 1, granted: 0, want: 0}, // live: denied
			})
		})
	})
}

func TestBudgetPerHostTransport(t *testing.T) {
	const deadRequests, liveRequests = 50, 5
	cases := []struct {
		name    string
		perHost bool
		// Attempts that reached the dead host: every request's first,
		// plus 10 retries of the floor's burst and one per 10 deposits.
		wantDead int
		// Tokens of the dead host at the end: none.
		wantDeadTokens float64
		wantLive       int     // attempts that reached the live host
		wantLiveStatus int     // status of each live request
		wantLiveTokens float64 // tokens of the live host at the end
	}{
		{
			name:           "PerHost: live host still retries",
			perHost:        true,
			wantDead:       deadRequests + 10 + deadRequests/10, // 65
			wantDeadTokens: 0,                                   // 0 tokens
			wantLive:       2 * liveRequests,                    // each request: a 503, then a 200
			wantLiveStatus: http.StatusOK,
			wantLiveTokens: 10 - liveRequests + 0.1*liveRequests, // 5.5 tokens: 5 of floor, 0.5 banked
		},
		{
			name:           "shared: dead host spent the live host's retries",
			perHost:        false,
			wantDead:       deadRequests + 10 + deadRequests/10, // 65
			wantDeadTokens: 0.1 * liveRequests,                  // 0.5 tokens: the live host's deposits
			wantLive:       liveRequests,                        // no retry at all
			wantLiveStatus: http.StatusServiceUnavailable,
			wantLiveTokens: 0.1 * liveRequests, // 0.5 tokens
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newBudgetFake("", map[string]int{"dead.test": -1, "live.test": 1})
				b := NewBudget(BudgetConfig{PerHost: c.perHost})
				tr := newBudgetTransport(next, b)
				for i := range deadRequests {
					assert.Equal(t, http.StatusServiceUnavailable, budgetGet(t, tr, "dead.test", i))
				}
				require.Equal(t, c.wantDead, next.attempts("dead.test"), "attempts at the dead host")
				require.InDelta(t, 0, b.tokens(budgetKey("dead.test"), time.Now()), tokenDelta, "dead host's budget exhausted")

				for i := range liveRequests {
					assert.Equalf(t, c.wantLiveStatus, budgetGet(t, tr, "live.test", i), "live request %d", i)
				}
				assert.Equal(t, c.wantLive, next.attempts("live.test"), "attempts at the live host")
				assert.InDelta(t, c.wantLiveTokens, b.tokens(budgetKey("live.test"), time.Now()), tokenDelta, "live host's tokens")
				assert.InDelta(t, c.wantDeadTokens, b.tokens(budgetKey("dead.test"), time.Now()), tokenDelta, "dead host's tokens")
			})
		})
	}
}

func TestBudgetSharedBetweenTransports(t *testing.T) {
	const host = "shared.test"
	k := budgetKey(host)
	steps := []struct {
		name  string
		sleep time.Duration // virtual time before the request
		via   int           // which transport sends it
		want  int           // attempts that reached that transport's next
		// tokens after the request, as both transports see them
		tokens float64
	}{
		{name: "first via one", via: 0, want: 4, tokens: 7.1},                            // 7.1 tokens: 3 of floor spent, 0.1 banked
		{name: "first via two", via: 1, want: 4, tokens: 4.2},                            // 4.2 tokens
		{name: "second via one", via: 0, want: 4, tokens: 1.3},                           // 1.3 tokens
		{name: "second via two", via: 1, want: 2, tokens: 0.4},                           // 0.4 tokens: the last floor token, then denied
		{name: "third via one", via: 0, want: 1, tokens: 0.5},                            // 0.5 tokens: denied at once
		{name: "third via two", via: 1, want: 1, tokens: 0.6},                            // 0.6 tokens: denied at once
		{name: "after refill via two", sleep: time.Second, via: 1, want: 4, tokens: 7.7}, // 7.7 tokens: 10 of floor back, 3 spent
		{name: "after refill via one", via: 0, want: 4, tokens: 4.8},                     // 4.8 tokens
	}
	// The rows share one bubble and one budget, so they are not t.Run
	// cases (a bubble's T must not call Run); each message names its row.
	t.Run("one budget, two transports", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBudget(BudgetConfig{})
			nexts := []*budgetFake{
				newBudgetFake("", map[string]int{host: -1}),
				newBudgetFake("", map[string]int{host: -1}),
			}
			trs := []*Transport{newBudgetTransport(nexts[0], b), newBudgetTransport(nexts[1], b)}
			require.Same(t, trs[0].budget, trs[1].budget)
			for i, s := range steps {
				time.Sleep(s.sleep)
				before := nexts[s.via].attempts(host)
				assert.Equalf(t, http.StatusServiceUnavailable, budgetGet(t, trs[s.via], host, i), "%s: status", s.name)
				got := nexts[s.via].attempts(host) - before
				assert.Equalf(t, s.want, got, "%s: attempts: got %d, want %d", s.name, got, s.want)
				for j, tr := range trs {
					got := tr.budget.tokens(k, time.Now())
					assert.InDeltaf(t, s.tokens, got, tokenDelta, "%s: tokens seen by transport %d: got %v, want %v", s.name, j+1, got, s.tokens)
				}
			}
		})
	})

	t.Run("separate budgets do not share", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newBudgetFake("", map[string]int{host: -1})
			one, two := newBudgetTransport(next, NewBudget(BudgetConfig{})), newBudgetTransport(next, NewBudget(BudgetConfig{}))
			for i := range 4 {
				budgetGet(t, one, host, i)
			}
			assert.InDelta(t, 0.4, one.budget.tokens(k, time.Now()), tokenDelta) // 0.4 tokens: one is exhausted
			assert.InDelta(t, 10, two.budget.tokens(k, time.Now()), tokenDelta)  // 10 tokens: two is untouched
			before := next.attempts(host)
			budgetGet(t, two, host, 100)
			assert.Equal(t, 4, next.attempts(host)-before, "two still retries")
		})
	})
}

func TestBudgetExhaustedReturnsAtOnce(t *testing.T) {
	const host, body = "down.test", "down for maintenance"
	// Any sleep would show: the first retry waits up to an hour.
	policy := FullJitter{Base: time.Hour, Cap: 4 * time.Hour}
	cases := []struct {
		name      string
		cfg       BudgetConfig
		wantCalls int
		wantSlept bool
		tokens    float64 // tokens after the request
	}{
		{
			name:      "empty budget: no sleep",
			cfg:       BudgetConfig{Ratio: -1, MinPerSecond: -1},
			wantCalls: 1,
			tokens:    0, // 0 tokens
		},
		{
			// The contrast: with one token the same request sleeps, then
			// retries once.
			name:      "one token: sleeps, then retries",
			cfg:       BudgetConfig{Ratio: 1, MinPerSecond: -1},
			wantCalls: 2,
			wantSlept: true,
			tokens:    0, // 0 tokens: the deposit paid the one retry
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newBudgetFake(body, map[string]int{host: -1})
				b := NewBudget(c.cfg)
				tr := New(next, WithBudget(b), WithBreaker(nil), WithPolicy(policy), WithMaxWait(0))
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+host+"/x", strings.NewReader("payload"))
				require.NoError(t, err)

				start := time.Now()
				resp, err := tr.RoundTrip(req)
				elapsed := time.Since(start)
				require.NoError(t, err, "retries ending on a status return the response and no error")
				require.NotNil(t, resp)
				defer resp.Body.Close()

				if c.wantSlept {
					assert.Positive(t, elapsed, "slept before the retry")
				} else {
					assert.Zero(t, elapsed, "returned at the virtual instant the attempt failed")
				}
				assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
				got, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				assert.Equal(t, body, string(got), "the last response's body is intact")
				assert.Equal(t, c.wantCalls, next.attempts(host), "attempts")
				assert.InDelta(t, c.tokens, b.tokens(budgetKey(host), time.Now()), tokenDelta)
			})
		})
	}
}

func TestBudgetConcurrent(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	const goroutines, ops = 8, 10_000
	const deposits = goroutines * ops

	// Inside a bubble virtual time stands still while the goroutines run, so
	// the floor grants exactly its burst and no more: the bound is exact.
	t.Run("deposit and withdraw", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBudget(BudgetConfig{}) // ratio 0.1, floor 10/s, cap 1000
			k := budgetKey("a.test")
			const bound = deposits/10 + 10 // 8010 tokens: 80,000 deposits of 0.1, plus the floor's burst
			const limit = 1000 + 10        // the cap beside the floor's burst
			var granted, bad atomic.Int64
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range ops {
						b.deposit(k)
						if b.withdraw(k) {
							granted.Add(1)
						}
						if v := b.tokens(k, time.Now()); v < 0 || v > limit {
							bad.Add(1)
						}
					}
				})
			}
			wg.Wait()
			left := b.tokens(k, time.Now())
			assert.Zero(t, bad.Load(), "tokens seen outside [0, %d]", limit)
			assert.LessOrEqual(t, granted.Load(), int64(bound), "withdrawals granted")
			// Nothing reached the cap, so nothing was lost: every token
			// deposited or granted by the floor was withdrawn or is left.
			assert.InDelta(t, float64(bound), float64(granted.Load())+left, tokenDelta,
				"granted %d + left %v", granted.Load(), left)
			assert.GreaterOrEqual(t, left, 0.0)
		})
	})

	t.Run("at the cap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const maxTokens = 5
			b := NewBudget(BudgetConfig{MinPerSecond: -1, MaxTokens: maxTokens})
			k := budgetKey("a.test")
			var granted, low, high atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range ops {
						b.deposit(k)
						// Half the goroutines withdraw at every deposit, half
						// at every 20th, so the bank fills to its cap and
						// drains again, over and over.
						if (g%2 == 0 || i%20 == 0) && b.withdraw(k) {
							granted.Add(1)
						}
						v := b.tokens(k, time.Now())
						if v < 0 {
							low.Add(1)
						}
						if v > maxTokens {
							high.Add(1)
						}
					}
				})
			}
			wg.Wait()
			left := b.tokens(k, time.Now())
			assert.Zero(t, low.Load(), "times the bank was seen negative")
			assert.Zero(t, high.Load(), "times the bank was seen above its cap")
			assert.LessOrEqual(t, granted.Load(), int64(deposits/10), "withdrawals granted") // no floor: deposits only
			assert.GreaterOrEqual(t, left, 0.0)
			assert.LessOrEqual(t, left, float64(maxTokens))
		})
	})
}

// TestBudgetContendedDepositNeverNegative checks the bank's invariant
// (0 <= banked <= max) under contention: with every deposit overflowing the
// cap, a deposit that gave back its own overflow after an Add (rather than
// a compare-and-swap) let concurrent deposits and withdrawals drive the bank
// below zero. The window is a few instructions wide; the race detector's
// scheduling opens it often enough: with that deposit, 50 runs saw the bank
// negative within 11 to 6,235 operations of a goroutine, so 40,000 each
// leave a wide margin.
func TestBudgetContendedDepositNeverNegative(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	const goroutines, ops = 8, 40_000
	// Ratio 2 with a cap of 1 token: every deposit overflows.
	b := NewBudget(BudgetConfig{Ratio: 2, MinPerSecond: -1, MaxTokens: 1})
	k := budgetKey("a.test")
	var lowest atomic.Int64 // micro-tokens
	var seen atomic.Bool
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := 0; i < ops && !seen.Load(); i++ {
				b.deposit(k)
				b.withdraw(k)
				if v := int64(b.tokens(k, time.Time{}) * unit); v < 0 {
					seen.Store(true)
					for {
						lo := lowest.Load()
						if v >= lo || lowest.CompareAndSwap(lo, v) {
							break
						}
					}
				}
			}
		})
	}
	wg.Wait()
	assert.False(t, seen.Load(), "bank went negative under contention: lowest %d micro-tokens", lowest.Load())
}

// TestBudgetSmallRatio checks that a small positive Ratio is kept, not
// rounded away: a fan-out of millions of requests that wants one retry per
// 10,000 must get it, not only the floor (with milli-token fixed point,
// 0.0001 deposited nothing and 0.0015 deposited 0.002).
func TestBudgetSmallRatio(t *testing.T) {
	cases := []struct {
		name  string
		ratio float64
		steps []budgetStep
	}{
		{
			name:  "Ratio 0.0001",
			ratio: 0.0001,
			steps: []budgetStep{
				{deposits: 10_000, want: 1},       // 1 token: 10,000 deposits of 0.0001
				{retries: 1, granted: 1, want: 0}, // 0 tokens
			},
		},
		{
			name:  "Ratio 0.0015",
			ratio: 0.0015,
			steps: []budgetStep{
				{deposits: 1000, want: 1.5},         // 1.5 tokens
				{retries: 2, granted: 1, want: 0.5}, // 0.5 tokens
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBudget(BudgetConfig{Ratio: c.ratio, MinPerSecond: -1})
				runBudgetSteps(t, b, budgetKey("a.test"), c.steps)
			})
		})
	}
}

// TestBudgetRetryNotMadeCostsNothing checks the order of the checks before
// a retry: the budget's token is taken last, after the next request's body
// is ready, so a retry that GetBody's failure stops costs no token.
func TestBudgetRetryNotMadeCostsNothing(t *testing.T) {
	const host = "a.test"
	synctest.Test(t, func(t *testing.T) {
		next := newBudgetFake("", map[string]int{host: -1})
		b := NewBudget(BudgetConfig{})
		tr := newBudgetTransport(next, b)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+host+"/", strings.NewReader("payload"))
		require.NoError(t, err)
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body gone") }

		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, 1, next.attempts(host), "attempts: the retry could not be made")
		// 10.1 tokens: the floor's 10 untouched, the request's 0.1 banked.
		assert.InDelta(t, 10.1, b.tokens(budgetKey(host), time.Now()), tokenDelta, "tokens")
	})
}

// budgetTableSize returns how many per-host buckets b holds.
func budgetTableSize(b *Budget) int { return b.hosts.Len() }

// smallTable is the MaxHosts of the host-table tests.
const smallTable = 1024

// budgetHosts returns n distinct hosts named by prefix.
func budgetHosts(prefix string, n int) []hostKey {
	ks := make([]hostKey, n)
	for i := range ks {
		ks[i] = budgetKey(fmt.Sprintf("%s%d.test", prefix, i))
	}
	return ks
}

func TestBudgetHostTable(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	t.Run("idle hosts are swept", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBudget(BudgetConfig{PerHost: true, MaxHosts: smallTable})
			most := 0
			for _, k := range budgetHosts("idle", 3*smallTable+100) {
				b.deposit(k) // a fresh bucket: floor full, so idle
				most = max(most, budgetTableSize(b))
			}
			assert.Equal(t, smallTable, most, "largest size: the cap, never more")
		})
	})

	t.Run("drained host survives a sweep", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBudget(BudgetConfig{PerHost: true, MaxHosts: smallTable})
			dead := budgetKey("dead.test")
			runBudgetSteps(t, b, dead, []budgetStep{
				{retries: 10, granted: 10, want: 0}, // dead: 0 tokens, floor drained, not idle
			})
			bucket := b.bucketFor(dead)
			most := 0
			for _, k := range budgetHosts("idle", 3*smallTable) {
				b.deposit(k)
				most = max(most, budgetTableSize(b))
			}
			assert.LessOrEqual(t, most, smallTable, "largest size")
			assert.Same(t, bucket, b.bucketFor(dead), "the drained bucket is kept, not replaced")
			runBudgetSteps(t, b, dead, []budgetStep{
				{want: 0},                         // dead: 0 tokens, where a fresh bucket would hold 10
				{retries: 1, granted: 0, want: 0}, // dead: still denied
			})
		})
	})

	t.Run("refilled host leaves without loss", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBudget(BudgetConfig{PerHost: true, MaxHosts: smallTable})
			dead := budgetKey("dead.test")
			runBudgetSteps(t, b, dead, []budgetStep{
				{retries: 10, granted: 10, want: 0}, // dead: 0 tokens
				{sleep: time.Second, want: 10},      // dead: 10 tokens, floor full again: idle
			})
			bucket := b.bucketFor(dead)
			for _, k := range budgetHosts("idle", 2*smallTable) {
				b.deposit(k) // the table fills, then evicts
			}
			assert.NotSame(t, bucket, b.bucketFor(dead), "the idle bucket was dropped")
			runBudgetSteps(t, b, dead, []budgetStep{
				{want: 10}, // dead: 10 tokens, as many as it had
			})
		})
	})

	t.Run("failing hosts stay until their floors refill", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const failing = 2000
			b := NewBudget(BudgetConfig{PerHost: true, MaxHosts: smallTable})
			for _, k := range budgetHosts("dead", failing) {
				for range 10 {
					require.True(t, b.withdraw(k)) // drain the floor: not idle
				}
			}
			assert.Equal(t, failing, budgetTableSize(b), "no failing host dropped, though above the cap")
			time.Sleep(time.Second) // every floor refills: all idle
			for _, k := range budgetHosts("new", 2*failing) {
				b.deposit(k)
			}
			assert.Equal(t, smallTable, budgetTableSize(b), "refilled hosts evicted, two per insertion, down to the cap")
		})
	})
}

func TestBudgetDepositAllocs(t *testing.T) {
	for _, perHost := range []bool{false, true} {
		t.Run("PerHost="+strconv.FormatBool(perHost), func(t *testing.T) {
			b := NewBudget(BudgetConfig{PerHost: perHost})
			k := budgetKey("a.test")
			b.deposit(k) // create the host's bucket
			allocs := testing.AllocsPerRun(1000, func() { b.deposit(k) })
			assert.Zero(t, allocs, "allocations per deposit")
		})
	}
}

// BenchmarkBudgetDeposit measures what every original request pays: a
// deposit. "full" is the steady state of a healthy client, whose bank sits
// at its cap (one load); "filling" keeps the bank below a cap it never
// reaches (one add).
func BenchmarkBudgetDeposit(b *testing.B) {
	for _, scope := range []struct {
		name    string
		perHost bool
	}{{"global", false}, {"perhost", true}} {
		for _, bank := range []struct {
			name      string
			maxTokens float64
		}{{"full", 0}, {"filling", 1e15}} {
			cfg := BudgetConfig{PerHost: scope.perHost, MaxTokens: bank.maxTokens}
			name := scope.name + "/" + bank.name
			b.Run(name, func(b *testing.B) {
				bud := NewBudget(cfg)
				k := budgetKey("a.test")
				for range 100_000 {
					bud.deposit(k) // fill the default bank to its cap
				}
				b.ReportAllocs()
				for b.Loop() {
					bud.deposit(k)
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				bud := NewBudget(cfg)
				k := budgetKey("a.test")
				for range 100_000 {
					bud.deposit(k)
				}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						bud.deposit(k)
					}
				})
			})
		}
	}
}
