package otelretry_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/otelretry"
	"github.com/retryhttp/retryhttp/retryhttptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// docs/observability.md's OpenTelemetry set-up, as written, through a
// server that fails once: the attempts and the retry are recorded.
func TestRecipeMetrics(t *testing.T) {
	_, srv := retryhttptest.Start(t, retryhttptest.FailN(1, http.StatusServiceUnavailable))
	reader := sdkmetric.NewManualReader()
	err := func() error {
		// recipe: docs/observability.md 1
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)) // or your exporter's
		hooks, err := otelretry.NewHooks(provider)                           // otelretry.WithHostAttribute() to add the host
		if err != nil {
			return err
		}
		onChange, err := otelretry.OnStateChange(provider) // circuit changes, once per Breaker however many transports share it
		if err != nil {
			return err
		}
		breaker := retryhttp.NewBreaker(retryhttp.BreakerConfig{OnStateChange: onChange})
		client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithHooks(hooks), retryhttp.WithBreaker(breaker))}
		// end recipe
		defer client.CloseIdleConnections()
		t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
		resp, err := client.Get(srv.URL)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}()
	require.NoError(t, err)
	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"http.request.method=GET,http.response.status_code=200": 1,
		"http.request.method=GET,http.response.status_code=503": 1,
	}, got.sums["retryhttp.attempts"], "attempts by status")
}
