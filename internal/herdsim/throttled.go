package herdsim

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp"
	"golang.org/x/time/rate"
)

// Throttled is the throttled-batch scenario: a batch of requests issued at
// t = 0 to an API that admits Rate requests per second (a server-side
// token bucket of Burst) and answers 429, without Retry-After, beyond it.
// Every request is a queue entry that a batch loop sends again, at the
// instant the transport's RetryAt advises (or, when it gives none, after a
// draw of Fallback), until it is delivered or Horizon passes.
type Throttled struct {
	Name     string
	Requests int
	Rate     float64
	Burst    int
	Horizon  time.Duration
	Fallback retryhttp.Policy // nil: FullJitter{}
	Options  []retryhttp.Option
	// Workers, when positive, sends the batch through that many workers,
	// each taking the next request when it has delivered its last (or
	// given it up), as a dispatcher's pool does; 0 sends every request
	// from a goroutine of its own.
	Workers int
	// Latency is how long after an attempt arrives the API answers it. With
	// none, how many attempts are in flight before the first answer comes
	// back depends on goroutine scheduling.
	Latency time.Duration
}

// ThrottledResult is what the server and the batch loop saw.
type ThrottledResult struct {
	Name      string
	Delivered int
	Done      time.Duration // when the last request was delivered
	Attempts  int           // attempts the server received
	Throttled int           // of those, answered 429
	FirstWave int           // of those, answered to attempts that arrived at t = 0
	PeakRPS   float64       // largest 100 ms bucket of attempts, per second
}

// RunThrottled runs s inside a synctest bubble.
func RunThrottled(s Throttled) ThrottledResult {
	srv := &admitter{lim: rate.NewLimiter(rate.Limit(s.Rate), s.Burst), start: time.Now(), latency: s.Latency}
	tr := retryhttp.New(srv, s.Options...)
	fallback := s.Fallback
	if fallback == nil {
		fallback = retryhttp.FullJitter{}
	}
	var (
		wg        sync.WaitGroup
		delivered atomic.Int64
		last      atomic.Int64
	)
	// send delivers one request, sending it again at the instant RetryAt
	// advises, until it is delivered or the horizon passes.
	send := func() {
		for n := 1; ; n++ {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://api.test/item", nil)
			if err != nil {
				panic(err)
			}
			resp, err := tr.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusOK {
				resp.Body.Close()
				delivered.Add(1)
				last.Store(int64(time.Since(srv.start)))
				return
			}
			at, _ := tr.RetryAt(resp, err)
			if resp != nil {
				resp.Body.Close()
			}
			if at.IsZero() {
				at = time.Now().Add(fallback.Delay(n, 0))
			}
			if at.Sub(srv.start) > s.Horizon {
				return
			}
			time.Sleep(time.Until(at))
		}
	}
	if s.Workers > 0 {
		var next atomic.Int64
		for range s.Workers {
			wg.Go(func() {
				for next.Add(1) <= int64(s.Requests) {
					send()
				}
			})
		}
	} else {
		for range s.Requests {
			wg.Go(send)
		}
	}
	wg.Wait()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	peak := 0
	for _, n := range srv.perBucket {
		peak = max(peak, n)
	}
	return ThrottledResult{Name: s.Name, Delivered: int(delivered.Load()), Done: time.Duration(last.Load()),
		Attempts: srv.attempts, Throttled: srv.throttled, FirstWave: srv.firstWave, PeakRPS: float64(peak) * float64(time.Second/Bucket)}
}

// admitter answers 200 within its token bucket and 429 beyond it, latency
// after the attempt arrived.
type admitter struct {
	lim     *rate.Limiter
	start   time.Time
	latency time.Duration

	mu                  sync.Mutex
	attempts, throttled int                   // guarded by mu
	firstWave           int                   // 429s to attempts at t = 0; guarded by mu
	perBucket           map[time.Duration]int // guarded by mu
}

func (a *admitter) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	if a.perBucket == nil {
		a.perBucket = map[time.Duration]int{}
	}
	a.attempts++
	a.perBucket[time.Since(a.start).Truncate(Bucket)]++
	status := http.StatusOK
	if !a.lim.Allow() {
		a.throttled++
		if time.Since(a.start) == 0 {
			a.firstWave++
		}
		status = http.StatusTooManyRequests
	}
	a.mu.Unlock()
	time.Sleep(a.latency)
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}
