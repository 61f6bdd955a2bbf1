package otelretry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/otelretry"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// ExampleNewHooks wires the hooks into a client, sends one request that a
// loopback server fails once with 503, and prints the counters.
func ExampleNewHooks() {
	var calls atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer server.Close()

	// A real program passes the MeterProvider its exporter is set up with.
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	hooks, err := otelretry.NewHooks(provider)
	if err != nil {
		panic(err)
	}
	onChange, err := otelretry.OnStateChange(provider)
	if err != nil {
		panic(err)
	}
	breaker := retryhttp.NewBreaker(retryhttp.BreakerConfig{OnStateChange: onChange})
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithHooks(hooks), retryhttp.WithBreaker(breaker))}
	defer client.CloseIdleConnections()

	resp, err := client.Get(server.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// retryhttp.attempts{http.request.method=GET,http.response.status_code=200} 1
	// retryhttp.attempts{http.request.method=GET,http.response.status_code=503} 1
	// retryhttp.retries{http.request.method=GET} 1
}
