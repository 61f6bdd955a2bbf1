package retryhttp

import (
	"context"
	"io"
	"net/http"
	"slices"
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

// lagNext answers every attempt 200 after a lag that lag chooses from the
// attempt's number (0-based) and its request; an attempt whose context
// ends first returns the context's error, as a real transport does. It
// counts the attempts per X-Id and keeps every response body it hands out.
type lagNext struct {
	lag func(n int, req *http.Request) time.Duration
	// answerAnyway: the response comes even after the context ends (a
	// server whose answer was already on its way).
	answerAnyway bool

	n      atomic.Int64
	mu     sync.Mutex
	ids    map[string]int  // attempts per X-Id; guarded by mu
	bodies []*countingBody // guarded by mu
}

func (l *lagNext) RoundTrip(req *http.Request) (*http.Response, error) {
	n := int(l.n.Add(1) - 1)
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	l.mu.Lock()
	if l.ids == nil {
		l.ids = map[string]int{}
	}
	l.ids[req.Header.Get("X-Id")]++
	l.mu.Unlock()
	timer := time.NewTimer(l.lag(n, req))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-req.Context().Done():
		if !l.answerAnyway {
			return nil, req.Context().Err()
		}
		<-timer.C
	}
	b := newCountingBody("ok")
	l.mu.Lock()
	l.bodies = append(l.bodies, b)
	l.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: b, Request: req}, nil
}

// twice returns how many X-Ids with the prefix were sent more than once.
func (l *lagNext) twice(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id, c := range l.ids {
		if c > 1 && strings.HasPrefix(id, prefix) {
			n++
		}
	}
	return n
}

// everyTwentieth makes one attempt in twenty a straggler, twenty times
// the usual 5 ms.
func everyTwentieth(n int, _ *http.Request) time.Duration {
	if n%20 == 19 {
		return 100 * time.Millisecond
	}
	return 5 * time.Millisecond
}

// sendAll sends n GETs (or what mk makes) from workers at once and
// returns their latencies, sorted.
func sendAll(t *testing.T, rt http.RoundTripper, n, workers int, mk func(i int) *http.Request) []time.Duration {
	t.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				start := time.Now()
				resp, err := rt.RoundTrip(mk(i))
				if !assert.NoError(t, err) {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(lat)
	return lat
}

func getWithID(i int) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "http://hedge.test/x", nil)
	req.Header.Set("X-Id", "r"+strconv.Itoa(i))
	return req
}

func p99(lat []time.Duration) time.Duration { return lat[len(lat)*99/100] }

// One attempt in twenty takes 100 ms instead of 5 ms: hedging at 5%
// brings the p99 from the stragglers' 100 ms to about two fast answers,
// for at most 6% more attempts, and the hedges go out just after the fast
// answers, not as the stragglers answer.
func TestHedgingCutsTheTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &lagNext{lag: everyTwentieth}
		tr := New(next, WithHedging(0.05))
		sendAll(t, tr, 400, 4, getWithID) // learns the key
		before := tr.Stats()
		lat := sendAll(t, tr, 2000, 4, getWithID)
		s := tr.Stats()
		hedges := s.Hedges - before.Hedges
		t.Logf("p50 %v p99 %v, hedges %d (won %d) of 2000", lat[len(lat)/2], p99(lat), hedges, s.HedgesWon-before.HedgesWon)
		assert.Less(t, p99(lat), 20*time.Millisecond, "the stragglers' 100 ms is cut")
		assert.LessOrEqual(t, float64(hedges), 0.06*2000, "at most 6% more attempts")
		assert.Greater(t, s.HedgesWon-before.HedgesWon, hedges*9/10, "hedges go after the fast answers and win")
		assert.Equal(t, s.Attempts-before.Attempts, 2000+hedges)
		d, ok := tr.lanes.Lane(tr.requestKey(getWithID(0))).Hedger().Delay()
		assert.True(t, ok)
		assert.Less(t, d, 10*time.Millisecond, "the delay sits after the fast answers, not among the stragglers")
	})
}

// With hedging off, nothing is timed or hedged.
func TestHedgingOffSendsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &lagNext{lag: everyTwentieth}
		tr := New(next)
		sendAll(t, tr, 600, 4, getWithID)
		assert.Zero(t, tr.Stats().Hedges)
		assert.Zero(t, next.twice(""))
	})
}

// A POST with no Idempotency-Key is never sent twice, however late; one
// with a key is hedged, each copy with its whole body.
func TestHedgingNeverCopiesAKeylessPOST(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &lagNext{lag: everyTwentieth}
		tr := New(next, WithHedging(0.05))
		sendAll(t, tr, 400, 4, getWithID)
		before := tr.Stats().Hedges
		post := func(key string) func(int) *http.Request {
			return func(i int) *http.Request {
				req, _ := http.NewRequest(http.MethodPost, "http://hedge.test/x", strings.NewReader("body "+strconv.Itoa(i)))
				req.Header.Set("X-Id", key+strconv.Itoa(i))
				if key == "k" {
					req.Header.Set("Idempotency-Key", key+strconv.Itoa(i))
				}
				return req
			}
		}
		sendAll(t, tr, 1000, 4, post("p"))
		assert.Zero(t, next.twice("p"), "no keyless POST sent twice")
		assert.Equal(t, before, tr.Stats().Hedges)
		sendAll(t, tr, 1000, 4, post("k"))
		assert.Positive(t, next.twice("k"), "a POST with an Idempotency-Key is hedged")
	})
}

// Every losing copy's response is closed unread (an HTTP/2 stream is
// reset, not read to its end), even one that came after its context
// ended.
func TestHedgingClosesTheLoser(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &lagNext{lag: everyTwentieth, answerAnyway: true}
		tr := New(next, WithHedging(0.05))
		sendAll(t, tr, 400, 4, getWithID) // learns the key
		lat := sendAll(t, tr, 1000, 4, getWithID)
		// The losers answer in their own time, after RoundTrip returned.
		time.Sleep(time.Second)
		synctest.Wait()
		require.Positive(t, tr.Stats().HedgesWon)
		assert.Less(t, p99(lat), 20*time.Millisecond)
		next.mu.Lock()
		defer next.mu.Unlock()
		unread := 0
		for i, b := range next.bodies {
			assert.Positive(t, b.closed.Load(), "body %d closed", i)
			if b.read.Load() == 0 {
				unread++
			}
		}
		// Each hedged request had one loser, which answered anyway.
		assert.Equal(t, int(tr.Stats().Hedges), unread, "every loser's body closed unread")
	})
}

// A key whose answers slow as a whole (a server near its capacity, whose
// queue every copy joins) is not hedged: the hedges stop within a few
// dozen answers of the slowdown.
func TestHedgingStopsWhenTheKeySlows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slow atomic.Bool
		next := &lagNext{lag: func(n int, r *http.Request) time.Duration {
			d := everyTwentieth(n, r)
			if slow.Load() {
				d += 30 * time.Millisecond
			}
			return d
		}}
		tr := New(next, WithHedging(0.05))
		sendAll(t, tr, 1000, 4, getWithID)
		require.Positive(t, tr.Stats().Hedges)
		slow.Store(true)
		sendAll(t, tr, 100, 4, getWithID) // the slowdown shows
		before := tr.Stats().Hedges
		sendAll(t, tr, 1000, 4, getWithID)
		assert.LessOrEqual(t, tr.Stats().Hedges-before, uint64(10), "at most 1% hedged once slowed")
	})
}

// A retry budget with nothing banked pays for no hedge (a key's own
// health is perkey's TestHedgePlain).
func TestHedgingNeedsAPlainKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &lagNext{lag: everyTwentieth}
		tr := New(next, WithHedging(0.05), WithBudget(NewBudget(BudgetConfig{Ratio: -1, MinPerSecond: 1000})))
		sendAll(t, tr, 1000, 4, getWithID)
		assert.Zero(t, tr.Stats().Hedges, "a budget with no bank pays no hedge")
	})
}

// A hedge is reported to the hooks as an attempt marked as one.
func TestHedgingHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &lagNext{lag: everyTwentieth}
		var hedgeStarts, hedgeDones atomic.Int64
		h := &Hooks{
			AttemptStart: func(e Event) {
				if e.Hedge {
					hedgeStarts.Add(1)
				}
			},
			AttemptDone: func(e Event) {
				if e.Hedge {
					hedgeDones.Add(1)
				}
			},
		}
		tr := New(next, WithHedging(0.05), WithHooks(h))
		sendAll(t, tr, 1000, 4, getWithID)
		synctest.Wait()
		assert.Positive(t, hedgeStarts.Load())
		assert.Equal(t, int64(tr.Stats().Hedges), hedgeStarts.Load())
		assert.Equal(t, hedgeStarts.Load(), hedgeDones.Load())
	})
}

// A hedge and a retry never run at once: a first attempt that fails while
// its hedge is out waits for the hedge, whose answer wins; when both
// fail, the retry goes only once both have ended.
func TestHedgeAndRetryNeverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inFlight, most atomic.Int64
		var fail atomic.Bool // the race: the first copy fails, the hedge as told
		var hedgeFails atomic.Bool
		var copies atomic.Int64
		var firstBody *countingBody
		next := &lagNext{lag: func(n int, r *http.Request) time.Duration { return everyTwentieth(n, r) }}
		rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if !fail.Load() {
				return next.RoundTrip(req)
			}
			now := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			switch copies.Add(1) {
			case 1: // the first attempt: slow, then a 503
				time.Sleep(30 * time.Millisecond)
				firstBody = newCountingBody("busy")
				return &http.Response{StatusCode: 503, Header: http.Header{}, Body: firstBody, Request: req}, nil
			case 2: // the hedge
				time.Sleep(40 * time.Millisecond)
				if hedgeFails.Load() {
					return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
				}
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		tr := New(rt, WithHedging(0.05))
		sendAll(t, tr, 600, 4, getWithID)
		for _, hedgeFailsToo := range []bool{false, true} {
			hedgeFails.Store(hedgeFailsToo)
			copies.Store(0)
			most.Store(0)
			fail.Store(true)
			before := tr.Stats()
			resp, err := tr.RoundTrip(getWithID(-1))
			require.NoError(t, err)
			resp.Body.Close()
			fail.Store(false)
			s := tr.Stats()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, uint64(1), s.Hedges-before.Hedges)
			assert.Equal(t, int64(2), most.Load(), "never more than the attempt and its hedge at once")
			if hedgeFailsToo {
				assert.Equal(t, uint64(1), s.Retries-before.Retries, "the retry after both failed")
				assert.Equal(t, int64(3), copies.Load())
			} else {
				assert.Equal(t, uint64(0), s.Retries-before.Retries)
				assert.Equal(t, uint64(1), s.HedgesWon-before.HedgesWon)
				assert.Positive(t, firstBody.closed.Load(), "the first copy's 503 is closed")
			}
		}
	})
}

// roundTripFunc is a RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Hedging keeps the slow-call rule: a host that answered, then hangs,
// opens its circuit as its callers' deadlines pass, though every request
// races a hedge (a share of 1, no budget: a hedge is always at hand).
func TestHedgingKeepsTheSlowCallRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &slowHost{latency: 5 * time.Millisecond}
		o, cfg := opened()
		tr := New(host, WithBreaker(NewBreaker(cfg)), WithHedging(1), WithBudget(nil))
		burstOf(tr, 4, 100, 2*time.Second) // learns the key
		_, ok := tr.lanes.Lane(tr.requestKey(newReq(context.Background(), http.MethodGet, nil))).Hedger().Delay()
		require.True(t, ok, "a delay is learned")
		host.hung.Store(true)
		burstOf(tr, 20, 5, 2*time.Second)
		assert.True(t, o.Load(), "the circuit opens")
		assert.NotZero(t, tr.Stats().SlowAttempts)
	})
}

// A panic in the next RoundTripper, in a copy's goroutine, reaches the
// caller of RoundTrip as it would without hedging, and leaves nothing
// running.
func TestHedgingPanicReachesTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var boom atomic.Bool
		next := &lagNext{lag: everyTwentieth}
		rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if boom.Load() {
				time.Sleep(50 * time.Millisecond) // late enough to be hedged
				panic("next RoundTripper")
			}
			return next.RoundTrip(req)
		})
		tr := New(rt, WithHedging(0.05))
		sendAll(t, tr, 600, 4, getWithID)
		boom.Store(true)
		assert.PanicsWithValue(t, "next RoundTripper", func() { tr.RoundTrip(getWithID(-1)) })
		time.Sleep(time.Second)
		synctest.Wait() // every copy's goroutine has ended: the bubble would not end otherwise
	})
}

// WithHedging through a request's context hedges that request only.
func TestHedgingPerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &lagNext{lag: everyTwentieth}
		tr := New(next)
		hedged := func(i int) *http.Request {
			req := getWithID(i)
			return req.WithContext(ContextWithOptions(req.Context(), WithHedging(0.05)))
		}
		sendAll(t, tr, 1000, 4, getWithID)
		assert.Zero(t, tr.Stats().Hedges, "the transport's requests are not hedged")
		lat := sendAll(t, tr, 1000, 4, hedged)
		assert.Positive(t, tr.Stats().HedgesWon)
		assert.Less(t, p99(lat), 20*time.Millisecond)
	})
}
