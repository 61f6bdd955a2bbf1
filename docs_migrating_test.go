package retryhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retryhttptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/migrating.md's retelling of go-retryablehttp's defaults: 5 attempts,
// the first retry drawn below 1 s. The 5 attempts are counted with the
// policy shortened through the request's context (and no waiting for the
// key, which would add attempts to ride the failure out).
func TestRecipeMigratingDefaults(t *testing.T) {
	// recipe: docs/migrating.md 1
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithMaxAttempts(5), // RetryMax 4: the first attempt and 4 retries
		retryhttp.WithPolicy(retryhttp.FullJitter{Base: time.Second, Cap: 30 * time.Second}),
	)}
	// end recipe
	defer client.CloseIdleConnections()

	// One failure: one retry, its delay drawn from [0, 1 s).
	h, srv := retryhttptest.Start(t, retryhttptest.FailN(1, http.StatusServiceUnavailable))
	var delays []time.Duration
	ctx := retryhttp.ContextWithOptions(t.Context(), retryhttp.WithHooks(&retryhttp.Hooks{
		RetryScheduled: func(e retryhttp.Event) { delays = append(delays, e.Delay) },
	}))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, h.Count())
	require.Len(t, delays, 1)
	assert.Less(t, delays[0], time.Second, "the first retry is drawn below the base")

	// Four failures: the fifth attempt is answered.
	h, srv = retryhttptest.Start(t, retryhttptest.FailN(4, http.StatusServiceUnavailable))
	ctx = retryhttp.ContextWithOptions(t.Context(),
		retryhttp.WithPolicy(retryhttp.FullJitter{Base: time.Millisecond}), retryhttp.WithMaxWait(0))
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 5, h.Count(), "WithMaxAttempts(5): the first attempt and 4 retries")
}

// docs/migrating.md's retrying of every 5xx but 501: a 507 is retried, a
// 501 and a 404 are not, and a 503 still is.
func TestRecipeMigratingRetryIf(t *testing.T) {
	for _, c := range []struct {
		status, attempts int
	}{
		{http.StatusInsufficientStorage, 2},
		{http.StatusServiceUnavailable, 2},
		{http.StatusNotImplemented, 1},
		{http.StatusNotFound, 1},
	} {
		var n atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if n.Add(1) == 1 {
				w.WriteHeader(c.status)
				return
			}
			w.WriteHeader(http.StatusOK)
		}))
		// recipe: docs/migrating.md 2
		tr := retryhttp.New(nil, retryhttp.WithRetryIf(func(resp *http.Response, err error) bool {
			if err == nil && resp.StatusCode > 504 && resp.StatusCode <= 599 {
				return true // 505 to 599, which go-retryablehttp retries too
			}
			return retryhttp.DefaultRetryIf(resp, err)
		}))
		// end recipe
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		cancel()
		tr.CloseIdleConnections()
		srv.Close()
		assert.Equal(t, int64(c.attempts), n.Load(), "%d", c.status)
		want := http.StatusOK
		if c.attempts == 1 {
			want = c.status
		}
		assert.Equal(t, want, resp.StatusCode, "%d", c.status)
	}
}
