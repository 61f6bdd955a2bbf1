package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// warmPath is answered 200 at any time, and not counted.
const warmPath = "/warm"

// warm sends n concurrent GETs to url through tr, to fill its pool.
func warm(tr http.RoundTripper, url string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				panic(err) // the URL is ours
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				return // the herd's counts do not depend on a warm pool
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	wg.Wait()
}

// flaky is the herd's server: 503 for the outage from begin on, then 200.
// It counts what it receives; it is safe for concurrent use.
type flaky struct {
	epoch      time.Time
	began      atomic.Int64 // nanoseconds from epoch to the fan-out
	outage     time.Duration
	retryAfter string

	seen        []atomic.Int32 // attempts per delivery
	perBucket   []atomic.Int32 // every request, per bucket
	retryBkt    []atomic.Int32 // retries, per bucket
	attempts    atomic.Int64
	retries     atomic.Int64
	retriesOK   atomic.Int64 // retries answered 200
	firstLast   atomic.Int64 // nanoseconds from the fan-out to the latest first attempt
	conns       atomic.Int64 // connections accepted
	connsBefore atomic.Int64 // connections accepted before the fan-out
	open        atomic.Int64 // connections open now
	peakOpen    atomic.Int64
}

func newFlaky(c HerdConfig) *flaky {
	n := int((c.Outage+c.Timeout)/Bucket) + 2
	return &flaky{
		epoch:      time.Now(),
		outage:     c.Outage,
		retryAfter: c.RetryAfter,
		seen:       make([]atomic.Int32, c.Deliveries),
		perBucket:  make([]atomic.Int32, n),
		retryBkt:   make([]atomic.Int32, n),
	}
}

// begin starts the outage's clock: the fan-out starts now.
func (f *flaky) begin() { f.began.Store(int64(time.Since(f.epoch))) }

// since returns the time from the fan-out.
func (f *flaky) since() time.Duration {
	return time.Since(f.epoch) - time.Duration(f.began.Load())
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == warmPath {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	at := f.since()
	b := min(max(int(at/Bucket), 0), len(f.perBucket)-1)
	f.attempts.Add(1)
	f.perBucket[b].Add(1)
	retry := false
	if id, err := strconv.Atoi(r.Header.Get(deliveryHeader)); err == nil && id >= 0 && id < len(f.seen) {
		retry = f.seen[id].Add(1) > 1
	}
	if retry {
		f.retries.Add(1)
		f.retryBkt[b].Add(1)
	} else {
		storeMax(&f.firstLast, int64(at))
	}
	if at < f.outage {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	if retry {
		f.retriesOK.Add(1)
	}
	_, _ = io.WriteString(w, "ok\n")
}

func (f *flaky) connState(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		f.conns.Add(1)
		storeMax(&f.peakOpen, f.open.Add(1))
	case http.StateClosed, http.StateHijacked:
		f.open.Add(-1)
	}
}

// result returns the server's counts. Buckets that start before the end of
// the outage are the outage's (retries only: every peer sends the same
// first attempts at t = 0); the others are the recovery's (every request).
func (f *flaky) result() result {
	r := result{
		attempts:  int(f.attempts.Load()),
		retries:   int(f.retries.Load()),
		conns:     int(f.conns.Load() - f.connsBefore.Load()),
		peakOpen:  int(f.peakOpen.Load()),
		firstDone: time.Duration(f.firstLast.Load()),
	}
	r.wasted = r.retries - int(f.retriesOK.Load())
	for b := range f.perBucket {
		if time.Duration(b)*Bucket < f.outage {
			r.peakOutage = max(r.peakOutage, int(f.retryBkt[b].Load()))
		} else {
			r.peakRecovery = max(r.peakRecovery, int(f.perBucket[b].Load()))
		}
	}
	return r
}

func storeMax(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}
