package retryhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/internal/recipe"
	"github.com/retryhttp/retryhttp/retryhttptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// Every Go block of README.md and docs/ has exactly one copy in a test,
// equal to it: the recipes a user copies are the ones the tests run.
func TestRecipesAreRun(t *testing.T) {
	blocks, err := recipe.Blocks(".")
	require.NoError(t, err)
	copies, err := recipe.Copies(".")
	require.NoError(t, err)
	require.NotEmpty(t, blocks)
	named := map[string]bool{}
	for _, b := range blocks {
		named[b.String()] = true
		cs := copies[b.String()]
		if !assert.Len(t, cs, 1, "%s (line %d): copies in the tests, as a // recipe: %s region", b, b.Line, b) {
			continue
		}
		assert.Equal(t, b.Code, cs[0].Code, "%s (line %d) and its copy at %s differ", b, b.Line, cs[0].Where)
	}
	for name, cs := range copies {
		assert.True(t, named[name], "%s names no block of the docs", cs[0].Where)
	}
}

// README.md's quick start, through a server that fails twice.
func TestRecipeQuickStart(t *testing.T) {
	h, srv := retryhttptest.Start(t, retryhttptest.FailN(2, http.StatusServiceUnavailable))
	hookURL := srv.URL
	status := 0
	err := func() error {
		// recipe: README.md 1
		client := &http.Client{Transport: retryhttp.New(nil)} // the defaults: see the table below
		resp, err := client.Get(hookURL)
		if err != nil {
			return err // wraps a *retryhttp.Error: key, attempts, reason; errors.Is/As reach the cause
		}
		defer resp.Body.Close() // when retries end on a 503, this is that 503, body intact
		// end recipe
		status = resp.StatusCode
		client.CloseIdleConnections()
		return nil
	}()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, 3, h.Count(), "attempts")
}

// README.md's plain client with a deadline, through a host whose first
// answer hangs: the attempt timeout ends it, and the retry is answered.
func TestRecipeDeadline(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			<-r.Context().Done() // hangs until the client gives the attempt up
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	// recipe: README.md 2
	client := &http.Client{
		Timeout:   10 * time.Second, // or a context deadline per request
		Transport: retryhttp.New(nil, retryhttp.WithAttemptTimeout(2*time.Second)),
	}
	// end recipe
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(2), n.Load(), "the hung attempt, then the retry")
}

// dispatch is what README.md's dispatcher recipe did with a delivery.
type dispatch struct {
	delivered, dead bool
	requeueAt       time.Time
	took            time.Duration
}

// README.md's dispatcher: a 400 is dead-lettered at once; a keyed POST
// answered 503 with Retry-After: 7 comes back at once, requeued about 7 s
// ahead; a delivery the server takes is marked delivered.
func TestRecipeDispatcher(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply func(w http.ResponseWriter)
		check func(t *testing.T, d dispatch)
	}{
		{"400", func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadRequest) }, func(t *testing.T, d dispatch) {
			assert.True(t, d.dead, "dead-lettered")
		}},
		{"503 Retry-After 7", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
		}, func(t *testing.T, d dispatch) {
			assert.Less(t, d.took, 100*time.Millisecond, "handed back at once")
			ahead := time.Until(d.requeueAt)
			assert.True(t, ahead > 6*time.Second && ahead < 9*time.Second, "requeued about 7 s ahead: %v", ahead)
		}},
		{"200", func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }, func(t *testing.T, d dispatch) {
			assert.True(t, d.delivered)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { c.reply(w) }))
			defer srv.Close()
			var d dispatch
			markDelivered := func(d *dispatch) error { d.delivered = true; return nil }
			deadLetter := func(d *dispatch) error { d.dead = true; return nil }
			requeue := func(d *dispatch, at time.Time) error { d.requeueAt = at; return nil }
			ownBackoff := func(*dispatch) time.Duration { return time.Minute }
			deliver := func(d *dispatch, req *http.Request) error {
				// recipe: README.md 3
				tr := retryhttp.New(nil, retryhttp.WithMaxWait(0), retryhttp.WithFailingHorizon(72*time.Hour))
				client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

				resp, err := client.Do(req)
				if err == nil {
					defer resp.Body.Close()
				}
				if err == nil && resp.StatusCode < 300 {
					return markDelivered(d)
				}
				switch at, why := tr.RetryAt(resp, err); {
				case why == retryhttp.ReasonNotRetryable:
					return deadLetter(d) // a 400, 404 or 410, or failing for longer than 72 h: sending it again changes nothing
				case at.IsZero():
					return requeue(d, time.Now().Add(ownBackoff(d))) // nothing known: your own backoff
				default:
					return requeue(d, at) // Retry-After, hold, circuit, send rate or budget, spread
				}
				// end recipe
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/hook", strings.NewReader(`{"event":1}`))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "delivery-1")
			start := time.Now()
			require.NoError(t, deliver(&d, req))
			d.took = time.Since(start)
			c.check(t, d)
		})
	}
}

// README.md's batch against a rate-limited API: 500 requests from 50
// workers against a loopback limiter of 500 a second with a burst of 20,
// which answers 429 beyond it. Every request is delivered; none refused.
func TestRecipeBatch(t *testing.T) {
	lim := rate.NewLimiter(500, 20)
	var served, refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !lim.Allow() {
			refused.Add(1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		served.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	// recipe: README.md 6
	tr := retryhttp.New(nil,
		retryhttp.WithKey(func(r *http.Request) string { // one quota per API key
			return r.URL.Scheme + "://" + r.URL.Host + "/" + r.Header.Get("X-Api-Key")
		}),
		retryhttp.WithAdaptiveRate(429, 503), // S3's "503 SlowDown" is throttling too
		retryhttp.WithConcurrencyLimit(20),   // at most 20 in flight per key; the rest wait their turn
	)
	// end recipe
	defer tr.CloseIdleConnections()
	const requests, workers = 500, 50
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var delivered atomic.Int64
	var mu sync.Mutex
	var failures []string
	jobs := make(chan int, requests)
	for i := range requests {
		jobs <- i
	}
	close(jobs)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/item/"+strconv.Itoa(i), nil)
				if err != nil {
					panic(err)
				}
				req.Header.Set("X-Api-Key", "key-a")
				resp, err := tr.RoundTrip(req)
				switch {
				case err != nil:
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				case resp.StatusCode == http.StatusOK:
					delivered.Add(1)
					resp.Body.Close()
				default:
					mu.Lock()
					failures = append(failures, resp.Status)
					mu.Unlock()
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("delivered %d of %d; the server served %d and answered 429 to %d", delivered.Load(), requests, served.Load(), refused.Load())
	assert.Equal(t, int64(requests), delivered.Load(), "delivered; failures: %v", failures)
}

// docs/observability.md's test with retryhttptest.
func TestRecipeRetryhttptest(t *testing.T) {
	// recipe: docs/observability.md 2
	h, srv := retryhttptest.Start(t, retryhttptest.FailN(2, http.StatusServiceUnavailable))
	client := &http.Client{Transport: retryhttp.New(nil)}
	resp, err := client.Get(srv.URL)
	// resp.StatusCode == 200, h.Count() == 3
	// end recipe
	require.NoError(t, err)
	resp.Body.Close()
	client.CloseIdleConnections()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 3, h.Count())
}

// docs/sdks.md's wrapping of a client's existing transport, through a host
// that fails once.
func TestRecipeWrapExisting(t *testing.T) {
	h, srv := retryhttptest.Start(t, retryhttptest.FailN(1, http.StatusServiceUnavailable))
	existing := &http.Client{}
	// recipe: docs/sdks.md 1
	base := existing.Transport // nil means go-cleanhttp's pooled transport
	existing.Transport = retryhttp.New(base,
		retryhttp.WithMaxAttempts(6),
		retryhttp.WithFirstAttemptJitter(50*time.Millisecond), // bulk senders
	)
	// end recipe
	defer existing.CloseIdleConnections()
	resp, err := existing.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, h.Count())
}

// docs/sdks.md's key by bucket: once the failing bucket's circuit opens,
// the other bucket on the same host is still served.
func TestRecipeKeyByBucket(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/bad/") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	// recipe: docs/sdks.md 8
	tr := retryhttp.New(nil, retryhttp.WithKey(func(r *http.Request) string {
		seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		return r.URL.Scheme + "://" + r.URL.Host + "/" + seg
	}))
	// end recipe
	defer tr.CloseIdleConnections()
	get := func(path string) (*http.Response, error) {
		ctx := retryhttp.ContextWithOptions(t.Context(), retryhttp.WithMaxWait(0))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	// The breaker trips on failure that lasts its 2 s span: fail "bad"
	// until its circuit refuses, at most 10 s.
	var err error
	for start := time.Now(); time.Since(start) < 10*time.Second; {
		if _, err = get("/bad/x"); errors.Is(err, retryhttp.ErrCircuitOpen) {
			break
		}
	}
	require.ErrorIs(t, err, retryhttp.ErrCircuitOpen, "the bad bucket's circuit opened")
	var e *retryhttp.Error
	require.ErrorAs(t, err, &e)
	assert.True(t, strings.HasSuffix(e.Key, "/bad"), "keyed by bucket: %s", e.Key)
	resp, err := get("/good/x")
	require.NoError(t, err, "the good bucket is served")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// docs/hedging.md's client, against a loopback server where one answer in
// twenty takes 50 ms instead of 1 ms: past the key's young phase, its
// slow answers are hedged, and the hedges win.
func TestRecipeHedging(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lag := time.Millisecond
		if n.Add(1)%20 == 0 {
			lag = 50 * time.Millisecond
		}
		select {
		case <-time.After(lag):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	// recipe: docs/hedging.md 1
	tr := retryhttp.New(nil, retryhttp.WithHedging(0.05)) // at most 5% more attempts
	client := &http.Client{Transport: tr}
	// end recipe
	defer client.CloseIdleConnections()
	const requests = 600
	for range requests {
		resp, err := client.Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
	}
	s := tr.Stats()
	assert.Positive(t, s.HedgesWon)
	assert.LessOrEqual(t, s.Hedges, uint64(requests*5/100+10), "at most 5% more, and the ten saved up")
}
