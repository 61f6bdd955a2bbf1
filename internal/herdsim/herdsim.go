// Package herdsim runs the thundering-herd scenario through the real
// retryhttp.Transport against an in-memory endpoint, so that it can run in
// virtual time inside a testing/synctest bubble: N deliveries, one request
// each, to one endpoint that fails completely for an outage and then
// recovers at once. With Scenario.Redrive set, each delivery is instead an
// entry in a dispatcher's queue, sent again at the instant RetryAt advises
// until it is delivered or its give-up horizon passes.
package herdsim

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/retryhttp/retryhttp"
	"golang.org/x/time/rate"
)

// Bucket is the width of the time slices that peaks are measured over.
const Bucket = 100 * time.Millisecond

// Scenario is one run of the herd.
type Scenario struct {
	Name       string             // the row's name in the table
	Deliveries int                // concurrent deliveries, one request each
	Outage     time.Duration      // the endpoint fails every attempt for this long from t = 0
	Status     int                // the failure status; 0 means 503
	RetryAfter string             // Retry-After sent with each failure; "" sends none
	Options    []retryhttp.Option // the transport's options
	// Redrive, when positive, makes every delivery a dispatcher's queue
	// entry rather than a single call: whenever RoundTrip hands back a
	// failure (an error, or a response that is not 2xx), the delivery asks
	// the transport's RetryAt and calls RoundTrip again, with a fresh
	// request, at exactly the instant advised (at once if the instant has
	// passed; never earlier), until it is delivered or the next instant
	// falls after Redrive from t = 0, the give-up horizon. 0: one call.
	Redrive time.Duration
	// Deadline is each delivery's context deadline, from t = 0; 0 means
	// none.
	Deadline time.Duration
	// Capacity, when positive, is what the endpoint serves after the
	// outage: at most Capacity requests per second (a token bucket with a
	// tenth of a second's burst), answering the rest with Status, as a
	// host still short of capacity does while it recovers. 0: it serves
	// everything from recovery on.
	Capacity float64
	// RedriveFallback draws the wait before redrive n (n >= 1: the first
	// redrive of a delivery is n = 1) when RetryAt gives the zero time, as
	// it does for an outcome nothing explains; the prev argument is 0. nil
	// means retryhttp.FullJitter{} (Base 200 ms, Cap 30 s): a dispatcher
	// falls back on the spread its transport's default policy uses.
	RedriveFallback retryhttp.Policy
}

// Result is what the endpoint and the callers saw.
type Result struct {
	Name            string
	PeakOutageRPS   float64        // largest 100 ms bucket of retries (attempt 2 and later) before recovery, per second
	PeakRecoveryRPS float64        // largest 100 ms bucket of any attempts from recovery on, per second
	T99             *time.Duration // when 99% of deliveries had succeeded; nil if never
	Delivered       int            // deliveries whose caller got a 200
	Attempts        int            // every attempt the endpoint received
	Retries         int            // attempts after the first
	Wasted          int            // retries that did not succeed
	PerBucket       []int          // attempts the endpoint received per 100 ms bucket
	FirstAtZero     int            // first attempts that arrived at t = 0
	CircuitOpen     int            // deliveries refused or woken by an open circuit (at least once, with Redrive)
	End             time.Duration  // when the last caller returned
	// From recovery on: attempts the endpoint received, and of those,
	// answered with Status for want of capacity.
	AfterAttempts, AfterRefused int
	// With Redrive: Redrives counts calls to RoundTrip after a delivery's
	// first, Advice what RetryAt answered to each failure (by reason,
	// the zero Reason counting the zero time, which the fallback replaced),
	// AtOnce the advised instants that had already come, and GaveUp the
	// deliveries whose next instant fell past the horizon.
	Redrives int
	Advice   map[retryhttp.Reason]int
	AtOnce   int
	GaveUp   int
}

// Run runs s and returns what was seen. It must be called inside a
// synctest bubble (it creates the transport there, so that the budget's
// limiter runs on the bubble's clock), and it returns when every delivery's
// RoundTrip has returned.
func Run(s Scenario) Result {
	if s.Status == 0 {
		s.Status = http.StatusServiceUnavailable
	}
	ep := &endpoint{
		start:      time.Now(),
		outage:     s.Outage,
		status:     s.Status,
		retryAfter: s.RetryAfter,
		seen:       make([]int, s.Deliveries),
	}
	if s.Capacity > 0 {
		ep.capacity = rate.NewLimiter(rate.Limit(s.Capacity), max(int(s.Capacity/10), 1))
	}
	tr := retryhttp.New(ep, s.Options...)
	done := make([]time.Duration, s.Deliveries) // when delivery i succeeded; -1 if it did not
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		opened int
		end    time.Duration
	)
	var (
		redrives, atOnce, gaveUp int
		advice                   = map[retryhttp.Reason]int{}
	)
	fallback := s.RedriveFallback
	if fallback == nil {
		fallback = retryhttp.FullJitter{}
	}
	horizon := ep.start.Add(s.Redrive)
	for i := range s.Deliveries {
		wg.Go(func() {
			ctx := context.WithValue(context.Background(), deliveryKey{}, i)
			if s.Deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, ep.start.Add(s.Deadline))
				defer cancel()
			}
			done[i] = -1
			refused := false
			// Each pass is one call to RoundTrip. Without Redrive there is
			// one; with it, the next instant is RetryAt's, which is never
			// before now, and the loop ends when an instant falls past the
			// horizon. An instant that is now takes no virtual time, so
			// the passes are also bounded by count, at a number no run
			// reaches (Redrives tells how many there were).
			for pass := 0; pass <= maxRedrives; pass++ {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://tenant.test/hook", nil)
				if err != nil {
					panic(err)
				}
				resp, err := tr.RoundTrip(req)
				at := time.Since(ep.start)
				ok := err == nil && resp.StatusCode/100 == 2
				if err != nil && errors.Is(err, retryhttp.ErrCircuitOpen) {
					refused = true
				}
				var next time.Time
				var why retryhttp.Reason
				if !ok && s.Redrive > 0 {
					// Asked when the failure comes back, before the body is
					// closed, as RetryAt's documentation says.
					next, why = tr.RetryAt(resp, err)
					if next.IsZero() {
						next = time.Now().Add(fallback.Delay(pass+1, 0))
					}
				}
				if err == nil {
					resp.Body.Close()
				}
				mu.Lock()
				end = max(end, at)
				if s.Redrive > 0 && !ok {
					advice[why]++
				}
				mu.Unlock()
				if ok {
					done[i] = at
					break
				}
				if s.Redrive <= 0 {
					break
				}
				wait := time.Until(next)
				late := next.After(horizon) || pass == maxRedrives
				mu.Lock()
				switch {
				case late:
					gaveUp++
				case wait <= 0:
					atOnce++
					redrives++
				default:
					redrives++
				}
				mu.Unlock()
				if late {
					break
				}
				if wait > 0 {
					time.Sleep(wait) // virtual time: wakes at exactly next
				}
			}
			if refused {
				mu.Lock()
				opened++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r := ep.result(s, done, opened, end)
	if s.Redrive > 0 {
		r.Redrives, r.Advice, r.AtOnce, r.GaveUp = redrives, advice, atOnce, gaveUp
	}
	return r
}

// maxRedrives bounds the calls to RoundTrip one delivery makes after its
// first, whatever RetryAt answers.
const maxRedrives = 100_000

type deliveryKey struct{}

// endpoint is the tenant: it fails every attempt until the outage ends,
// then answers 200, and counts what it received per 100 ms bucket.
type endpoint struct {
	start      time.Time
	outage     time.Duration
	status     int
	retryAfter string
	capacity   *rate.Limiter // after the outage; nil: unlimited

	mu       sync.Mutex
	seen     []int // attempts received per delivery; guarded by mu
	attempts []int // per bucket; guarded by mu
	retries  []int // attempts after the first, per bucket, before recovery; guarded by mu
	wasted   int   // guarded by mu
	atZero   int   // first attempts at t = 0; guarded by mu
	after    int   // attempts from recovery on; guarded by mu
	refused  int   // of those, refused for want of capacity; guarded by mu
}

func (e *endpoint) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Since(e.start)
	down := at < e.outage
	i := req.Context().Value(deliveryKey{}).(int)
	b := int(at / Bucket)

	e.mu.Lock()
	if !down {
		e.after++
		if e.capacity != nil && !e.capacity.Allow() {
			down = true
			e.refused++
		}
	}
	e.seen[i]++
	n := e.seen[i]
	for len(e.attempts) <= b {
		e.attempts = append(e.attempts, 0)
		e.retries = append(e.retries, 0)
	}
	e.attempts[b]++
	if n == 1 && at == 0 {
		e.atZero++
	}
	if n > 1 && down {
		if at < e.outage {
			e.retries[b]++
		}
		e.wasted++
	}
	e.mu.Unlock()

	resp := &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{},
		Body:       http.NoBody,
		Request:    req,
	}
	if down {
		resp.StatusCode = e.status
		if e.retryAfter != "" {
			resp.Header.Set("Retry-After", e.retryAfter)
		}
	}
	return resp, nil
}

func (e *endpoint) result(s Scenario, done []time.Duration, opened int, end time.Duration) Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := Result{Name: s.Name, Wasted: e.wasted, FirstAtZero: e.atZero, CircuitOpen: opened, End: end,
		AfterAttempts: e.after, AfterRefused: e.refused}
	r.PerBucket = append([]int(nil), e.attempts...)
	r.PeakOutageRPS, r.PeakRecoveryRPS, r.Attempts = Peaks(e.attempts, e.retries, e.outage)
	for _, n := range e.seen {
		r.Retries += max(n-1, 0)
	}
	var times []time.Duration
	for _, d := range done {
		if d >= 0 {
			times = append(times, d)
		}
	}
	r.Delivered = len(times)
	if need := Need99(s.Deliveries); len(times) >= need && need > 0 {
		t := nth(times, need-1)
		r.T99 = &t
	}
	return r
}

// Peaks measures a run from the endpoint's counts per Bucket: attempts
// (all) and retries (attempt 2 and later) in each bucket, recovery coming
// at outage. The peak during the outage is the largest bucket of retries
// before recovery, the peak at recovery the largest bucket of any attempts
// from recovery on, both as requests per second; total is every attempt.
func Peaks(attempts, retries []int, outage time.Duration) (outageRPS, recoveryRPS float64, total int) {
	recovery := int(outage / Bucket)
	perSecond := float64(time.Second / Bucket)
	for b, n := range attempts {
		total += n
		if b < recovery {
			outageRPS = max(outageRPS, float64(retries[b])*perSecond)
		} else {
			recoveryRPS = max(recoveryRPS, float64(n)*perSecond)
		}
	}
	return outageRPS, recoveryRPS, total
}

// Need99 is how many of n deliveries make 99%, rounded up.
func Need99(n int) int { return (99*n + 99) / 100 }

// nth returns the k-th smallest of ds (0-based).
func nth(ds []time.Duration, k int) time.Duration {
	c := append([]time.Duration(nil), ds...)
	slices.Sort(c)
	return c[k]
}
