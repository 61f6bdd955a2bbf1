package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestThrottledSmall runs a small throttled batch on loopback (1,000 GETs
// from 100 workers against 500/s, burst 50, a 6 s horizon) through
// retryhttp's defaults and both peers (10 attempts, full jitter): retryhttp
// with its adaptive rate answers fewer 429s per delivered request than
// either peer. The server's own counts must match what the clients saw.
func TestThrottledSmall(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := ThrottledConfig{
		BatchConfig: BatchConfig{Requests: 1_000, Workers: 100, Horizon: 6 * time.Second},
		Rounds:      1,
	}
	for _, k := range []string{"retryhttp", "retryablehttp", "failsafe"} {
		cl, ok := ThrottledClientByKey(k)
		require.True(t, ok, k)
		c.Clients = append(c.Clients, cl)
	}
	start := time.Now()
	runs := RunThrottled(c)
	t.Logf("in %v:\n%s", time.Since(start).Round(time.Millisecond), ThrottledMarkdown(c, Medians(c, runs)))

	require.Len(t, runs, 3)
	for _, rs := range runs {
		require.Len(t, rs, 1)
		r := rs[0]
		assert.Equal(t, r.ServerThrottled, r.Throttled, "%s: 429s, server vs client", r.Client)
		assert.Equal(t, r.ServerOK, r.OK, "%s: 200s, server vs client", r.Client)
		assert.Equal(t, r.Attempts, r.OK+r.Throttled+r.Other+r.Errors, "%s: attempts", r.Client)
		assert.LessOrEqual(t, r.Delivered, r.OK, "%s: a delivery is an attempt answered 200", r.Client)
		assert.Equal(t, r.Requests, r.Delivered+r.GaveUp, "%s: every request ends", r.Client)
		assert.Positive(t, r.Delivered, r.Client)
	}
	adaptive, retryable, failsafe := runs[0][0], runs[1][0], runs[2][0]
	assert.Equal(t, c.Requests, adaptive.Delivered, "retryhttp delivers the batch within the horizon")
	assert.Less(t, adaptive.ThrottledPerDelivered(), retryable.ThrottledPerDelivered(), "429s per delivered: retryhttp vs go-retryablehttp")
	assert.Less(t, adaptive.ThrottledPerDelivered(), failsafe.ThrottledPerDelivered(), "429s per delivered: retryhttp vs failsafe-go")
}
