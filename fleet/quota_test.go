package fleet_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/retryhttp/retryhttp/internal/testhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// windowQuota is a server's fixed window of limit requests a second,
// advertised in the IETF RateLimit fields, and answered 429 with
// Retry-After beyond it. It counts the requests that arrive in each window.
type windowQuota struct {
	limit int
	start time.Time

	mu       sync.Mutex
	arrivals []int // per window
	refused  int
}

func (q *windowQuota) RoundTrip(req *http.Request) (*http.Response, error) {
	q.mu.Lock()
	at := time.Since(q.start)
	w := int(at / time.Second)
	for len(q.arrivals) <= w {
		q.arrivals = append(q.arrivals, 0)
	}
	q.arrivals[w]++
	n := q.arrivals[w]
	reset := strconv.Itoa(int((time.Duration(w+1)*time.Second - at + time.Second - 1) / time.Second))
	if n > q.limit {
		q.refused++
	}
	q.mu.Unlock()
	status := http.StatusOK
	if n > q.limit {
		status = http.StatusTooManyRequests
	}
	resp := testhttp.Response(req, status, http.NoBody)
	resp.Header.Set("RateLimit-Policy", `"w";q=`+strconv.Itoa(q.limit)+`;w=1`)
	resp.Header.Set("RateLimit", `"w";r=`+strconv.Itoa(max(q.limit-n, 0))+`;t=`+reset)
	if status != http.StatusOK {
		resp.Header.Set("Retry-After", reset)
	}
	return resp, nil
}

// counts returns the arrivals of each window and the 429s so far.
func (q *windowQuota) counts() ([]int, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]int(nil), q.arrivals...), q.refused
}

// A quota's pace is divided between the processes that spend it: two
// processes sending as fast as they may each pace to half of it, and no
// window gets more than about the quota, from the first on; a store that
// dies leaves each at its last share, and coming back changes nothing
// while they say their demand again; and when one stops, the other takes
// the whole once the stopped one's demand has lapsed.
func TestFleetSharesQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := &windowQuota{limit: 100, start: time.Now()}
		store := newMemStore(time.Millisecond)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		type process struct {
			f  *fleet.Fleet
			b  *retryhttp.Breaker
			tr *retryhttp.Transport
		}
		procs := make([]process, 2)
		var running sync.WaitGroup
		for i := range procs {
			f := fleet.New(store, fleet.Config{Instance: "p" + strconv.Itoa(i), Heartbeat: time.Second})
			b := retryhttp.NewBreaker(retryhttp.BreakerConfig{})
			procs[i] = process{f, b, retryhttp.New(q, retryhttp.WithBreaker(b), retryhttp.WithFleet(f))}
			running.Go(func() { _ = f.Run(ctx) })
		}
		time.Sleep(100 * time.Millisecond)
		for _, p := range procs {
			require.Equal(t, 2, p.f.Stats().Size, "each counts the other")
		}
		key := "http://example.test"
		// send has each of procs' transports send from 20 workers until
		// for has passed.
		send := func(procs []process, d time.Duration) {
			var wg sync.WaitGroup
			end := time.Now().Add(d)
			for _, p := range procs {
				for range 20 {
					wg.Go(func() {
						for time.Now().Before(end) {
							rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
							if resp, err := p.tr.RoundTrip(newGET(rctx)); err == nil {
								resp.Body.Close()
							}
							rcancel()
						}
					})
				}
			}
			wg.Wait()
		}
		rate := func(p process) float64 { return p.b.Host(key).Rate }

		send(procs, 5*time.Second)
		arrivals, refused := q.counts()
		t.Logf("two processes: arrivals per window %v, 429s %d; rates %.1f and %.1f", arrivals, refused, rate(procs[0]), rate(procs[1]))
		for _, p := range procs {
			assert.InDelta(t, 0.95*100/2, rate(p), 1, "each paces to half the quota")
		}
		total := 0
		for w, n := range arrivals[:5] {
			assert.LessOrEqual(t, n, 105, "window %d: the quota, within the rounding of the first answers", w)
			total += n
		}
		assert.LessOrEqual(t, refused, total*2/100, "429s: at most 2%% of attempts")

		// The store dies: each goes on at its last share.
		store.setDown(true)
		time.Sleep(10 * time.Second)
		before := len(arrivals)
		send(procs, 5*time.Second)
		arrivals, refused2 := q.counts()
		t.Logf("store down: arrivals per window %v, 429s %d; rates %.1f and %.1f", arrivals[before:], refused2-refused, rate(procs[0]), rate(procs[1]))
		for _, p := range procs {
			assert.InDelta(t, 0.95*100/2, rate(p), 1, "each at its last share")
		}
		assert.LessOrEqual(t, refused2-refused, 10, "429s with the store down")

		// The store is back: the demand kept lasts until the processes
		// have said it again, and neither takes the whole quota meanwhile.
		store.setDown(false)
		before = len(arrivals)
		send(procs, 4*time.Second)
		arrivals, refused3 := q.counts()
		t.Logf("store back: arrivals per window %v, 429s %d", arrivals[before:], refused3-refused2)
		for w, n := range arrivals[before:] {
			assert.LessOrEqual(t, n, 105, "window %d after the store came back", w)
		}
		for _, p := range procs {
			assert.InDelta(t, 0.95*100/2, rate(p), 1, "each still at half once the store is back")
		}

		// The second stops: once its demand lapses, the first takes all.
		time.Sleep(10 * time.Second)
		send(procs[:1], 8*time.Second)
		t.Logf("one process: rate %.1f", rate(procs[0]))
		assert.InDelta(t, 0.95*100, rate(procs[0]), 1, "the whole quota, once the other's demand lapsed")

		cancel()
		running.Wait()
	})
}
