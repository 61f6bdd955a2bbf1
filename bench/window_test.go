package bench

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

// TestFixedWindowLoopback runs the batch of the fixed-window test in
// internal/herdsim on loopback, in real time: 2,000 GETs from 200 workers
// through retryhttp's defaults, against a fixed window of 100 requests a
// second (windows counted from the server's start) that answers 429 with
// Retry-After: 1, with and without the IETF quota fields, its handler
// taking 10 ms; the limiter either stands in front of the handler and
// refuses at once, or refuses after the same 10 ms. Every batch must
// deliver every request; the table shows what each cost. Here the first
// wave is not one instant: 200 new connections reach the server over tens
// of milliseconds, and the workers whose first answer comes back before
// the window is full send again, which no client can know to hold back
// without the quota fields.
func TestFixedWindowLoopback(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const (
		requests, workers = 2_000, 200
		limit             = 100
		handler           = 10 * time.Millisecond
	)
	ideal := time.Duration(requests/limit) * time.Second
	cl, _ := ThrottledClientByKey("retryhttp")
	var results []BatchResult
	for _, refuse := range []time.Duration{0, handler} {
		for _, headers := range []bool{true, false} {
			srv := httptest.NewServer(&fixedWindow{limit: limit, headers: headers, handler: handler, refuse: refuse, start: time.Now()})
			base := NewBatchBase(workers)
			r := RunBatch(cl, base, srv.URL+"/item", BatchConfig{Requests: requests, Workers: workers, Horizon: time.Minute})
			base.CloseIdleConnections()
			srv.Close()
			r.Client = fmt.Sprintf("429 after %v, quota fields %v", refuse, map[bool]string{true: "on", false: "off"}[headers])
			assert.Equal(t, requests, r.Delivered, "%s: delivered", r.Client)
			assert.Zero(t, r.CallErrors, "%s: calls that returned an error", r.Client)
			results = append(results, r)
		}
	}
	t.Logf("fixed window of %d a second, Retry-After: 1, handler %v; %d GETs from %d workers through retryhttp's defaults, %s:\n%s",
		limit, handler, requests, workers, time.Now().UTC().Format("2006-01-02 15:04 UTC"), httprateMarkdown(results, ideal))
}

// fixedWindow is an API behind a fixed-window rate limiter: at most limit
// requests in each second since start, the rest answered 429 with
// Retry-After: 1 after refuse; admitted requests are answered 200 after
// handler. With headers, every answer carries RateLimit-Policy and
// RateLimit in the IETF form.
type fixedWindow struct {
	limit            int
	headers          bool
	handler, refuse  time.Duration
	start            time.Time
	mu               sync.Mutex
	window, admitted int // the current window's index and what it has admitted; guarded by mu
}

func (s *fixedWindow) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	since := time.Since(s.start)
	s.mu.Lock()
	if k := int(since / time.Second); k != s.window {
		s.window, s.admitted = k, 0
	}
	ok := s.admitted < s.limit
	if ok {
		s.admitted++
	}
	left, window := s.limit-s.admitted, s.window
	s.mu.Unlock()
	if s.headers {
		reset := time.Duration(window+1)*time.Second - since
		w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"fixed";q=%d;w=1`, s.limit))
		w.Header().Set("RateLimit", fmt.Sprintf(`"fixed";r=%d;t=%d`, left, int(math.Ceil(reset.Seconds()))))
	}
	if !ok {
		w.Header().Set("Retry-After", "1")
		time.Sleep(s.refuse)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	time.Sleep(s.handler)
	w.WriteHeader(http.StatusOK)
}
