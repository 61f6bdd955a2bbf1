package herdsim

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp"
)

// Window is a batch against an API whose rate limiter is a fixed window,
// as most API rate limiters are: at most Limit requests in each window of
// length Span, counted from the start; beyond that a 429 with
// Retry-After: 1. With Headers, every answer advertises the quota in the
// IETF fields, RateLimit-Policy: "fixed";q=Limit;w=Span and RateLimit:
// "fixed";r=<left>;t=<seconds to the reset, rounded up>, as a server
// speaking draft-ietf-httpapi-ratelimit-headers does.
type Window struct {
	Name     string
	Requests int
	Workers  int // each takes the next request when its last has returned
	Limit    int
	Span     time.Duration
	Headers  bool
	Latency  time.Duration // how long after an attempt arrives it is answered
	// RefuseLatency, when set, is how long a 429 takes instead: a rate
	// limiter that stands in front of the handler refuses without the
	// handler's work.
	RefuseLatency time.Duration
	// Deadline is each request's, from when its worker takes it; 0 for
	// none.
	Deadline time.Duration
	Options  []retryhttp.Option
}

// Ideal is the time a client sending exactly the quota takes for the batch.
func (w Window) Ideal() time.Duration {
	return time.Duration(float64(w.Requests) / float64(w.Limit) * float64(w.Span))
}

// WindowResult is what the server and the workers saw.
type WindowResult struct {
	Name      string
	Delivered int
	Done      time.Duration // when the last request returned
	Attempts  int           // attempts the server received
	Throttled int           // of those, answered 429
	// Late counts the requests that returned after their deadline.
	Late int
	// PerBucket counts the attempts admitted per Bucket, and Refused
	// those answered 429.
	PerBucket, Refused []int
	Stats              retryhttp.Stats
}

// BusiestAfterReset returns, over the windows after the first, the most
// attempts admitted in the Bucket that follows a reset, against the mean
// per Bucket over the batch.
func (r WindowResult) BusiestAfterReset(span time.Duration) (busiest int, mean float64) {
	per := int(span / Bucket)
	total := 0
	for i, n := range r.PerBucket {
		total += n
		if i >= per && i%per == 0 {
			busiest = max(busiest, n)
		}
	}
	return busiest, float64(total) / float64(len(r.PerBucket))
}

// String is one row of a table.
func (r WindowResult) String() string {
	return fmt.Sprintf("%-44s %6d delivered %6d attempts %5d 429s (%.1f%%) done %.1f s late %d",
		r.Name, r.Delivered, r.Attempts, r.Throttled, 100*float64(r.Throttled)/math.Max(float64(r.Attempts), 1), r.Done.Seconds(), r.Late)
}

// Server returns w's API, its windows counted from now: the server
// RunWindow sends to, for a caller that serves it over a network. It
// answers in the RoundTrip goroutine, after w's latencies.
func (w Window) Server() http.RoundTripper { return &windowServer{w: w, start: time.Now()} }

// RunWindow runs w inside a synctest bubble: each request is sent once
// through the transport, as a caller without a queue of its own sends it.
func RunWindow(w Window) WindowResult {
	srv := w.Server().(*windowServer)
	tr := retryhttp.New(srv, w.Options...)
	var (
		wg        sync.WaitGroup
		next      atomic.Int64
		delivered atomic.Int64
		late      atomic.Int64
		last      atomic.Int64
	)
	for range w.Workers {
		wg.Go(func() {
			for next.Add(1) <= int64(w.Requests) {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				due := time.Time{}
				if w.Deadline > 0 {
					due = time.Now().Add(w.Deadline)
					ctx, cancel = context.WithDeadline(ctx, due)
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/item", nil)
				if err != nil {
					panic(err)
				}
				resp, err := tr.RoundTrip(req)
				if err == nil {
					if resp.StatusCode == http.StatusOK {
						delivered.Add(1)
					}
					resp.Body.Close()
				}
				cancel()
				if !due.IsZero() && time.Now().After(due) {
					late.Add(1)
				}
				last.Store(int64(time.Since(srv.start)))
			}
		})
	}
	wg.Wait()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return WindowResult{Name: w.Name, Delivered: int(delivered.Load()), Done: time.Duration(last.Load()),
		Attempts: srv.attempts, Throttled: srv.throttled, Late: int(late.Load()), PerBucket: srv.admitted, Refused: srv.refused, Stats: tr.Stats()}
}

// windowServer is Window's API.
type windowServer struct {
	w     Window
	start time.Time

	mu                  sync.Mutex
	window, used        int   // the current window's index, and what it has admitted; guarded by mu
	attempts, throttled int   // guarded by mu
	admitted, refused   []int // per Bucket; guarded by mu
}

func (s *windowServer) RoundTrip(req *http.Request) (*http.Response, error) {
	since := time.Since(s.start)
	s.mu.Lock()
	s.attempts++
	if k := int(since / s.w.Span); k != s.window {
		s.window, s.used = k, 0
	}
	status := http.StatusOK
	b := int(since / Bucket)
	for len(s.admitted) <= b {
		s.admitted, s.refused = append(s.admitted, 0), append(s.refused, 0)
	}
	if s.used < s.w.Limit {
		s.used++
		s.admitted[b]++
	} else {
		s.throttled++
		s.refused[b]++
		status = http.StatusTooManyRequests
	}
	left, window := s.w.Limit-s.used, s.window
	s.mu.Unlock()
	h := http.Header{}
	if status == http.StatusTooManyRequests {
		h.Set("Retry-After", "1")
	}
	if s.w.Headers {
		reset := time.Duration(window+1)*s.w.Span - since
		t := int(math.Ceil(reset.Seconds()))
		h.Set("RateLimit-Policy", fmt.Sprintf(`"fixed";q=%d;w=%d`, s.w.Limit, int(s.w.Span.Seconds())))
		h.Set("RateLimit", fmt.Sprintf(`"fixed";r=%d;t=%d`, left, t))
	}
	if status == http.StatusTooManyRequests && s.w.RefuseLatency > 0 {
		time.Sleep(s.w.RefuseLatency)
	} else {
		time.Sleep(s.w.Latency)
	}
	return &http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: req}, nil
}
