package bench

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/internal/herdsim"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

// TestFixedWindowLoopback runs the batch of the fixed-window test in
// internal/herdsim on loopback, in real time, against the same API
// (herdsim.Window's server) put on the network: 2,000 GETs from 200
// workers through retryhttp's defaults, against a fixed window of 100
// requests a second (windows counted from the server's start) that answers
// 429 with Retry-After: 1, with and without the IETF quota fields, its
// handler taking 10 ms; the limiter either stands in front of the handler
// and refuses at once, or refuses after the same 10 ms. Every batch must
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
			api := herdsim.Window{Limit: limit, Span: time.Second, Headers: headers, Latency: handler, RefuseLatency: refuse}.Server()
			srv := httptest.NewServer(served(api))
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

// served answers HTTP requests with api's responses: a RoundTripper
// that plays a server, put on the network.
func served(api http.RoundTripper) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := api.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})
}
