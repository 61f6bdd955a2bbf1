package herdsim

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestThrottledBatch: 10,000 requests queued at t = 0, sent by 200
// workers (as the loopback comparison in bench/ sends them) to an API that
// admits 500/s (burst 50), answers each attempt 10 ms after it arrives,
// and answers 429 without Retry-After beyond its rate. With the adaptive
// rate every request is delivered within 1.25x the ideal 20 s, with 429s
// at most 5% of attempts; full jitter alone gets at least 5x as many 429s.
func TestThrottledBatch(t *testing.T) {
	const n = 10_000
	full := retryhttp.FullJitter{}
	rows := []Throttled{
		{Name: "full jitter alone", Options: []retryhttp.Option{retryhttp.WithAdaptiveRate(),
			retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil), retryhttp.WithMaxAttempts(10), retryhttp.WithPolicy(full)}},
		{Name: "full jitter + budget + breaker", Options: []retryhttp.Option{retryhttp.WithAdaptiveRate(), retryhttp.WithPolicy(full)}},
		{Name: "adaptive rate (the defaults)"},
	}
	results := make([]ThrottledResult, len(rows))
	for i, s := range rows {
		s.Requests, s.Rate, s.Burst, s.Horizon = n, 500, 50, 120*time.Second
		s.Workers, s.Latency = 200, 10*time.Millisecond
		synctest.Test(t, func(t *testing.T) { results[i] = RunThrottled(s) })
	}
	t.Logf("%-32s %10s %10s %10s %10s %12s", "policy", "delivered", "all by", "attempts", "429s", "peak offered")
	for _, r := range results {
		t.Logf("%-32s %10d %10s %10d %10d %10.0f/s", r.Name, r.Delivered, fmt.Sprintf("%.1f s", r.Done.Seconds()), r.Attempts, r.Throttled, r.PeakRPS)
	}
	plain, adaptive := results[0], results[2]
	require.Equal(t, n, adaptive.Delivered, "adaptive rate: every request delivered")
	assert.LessOrEqual(t, adaptive.Done, 25*time.Second, "adaptive rate: time to deliver all, against the ideal 20 s")
	assert.LessOrEqual(t, float64(adaptive.Throttled), 0.05*float64(adaptive.Attempts), "adaptive rate: 429s among attempts")
	assert.GreaterOrEqual(t, float64(plain.Throttled), 5*float64(adaptive.Throttled), "full jitter alone: 429s")
}
