package retryhttp

import (
	"net/http"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/internal/header"
	"github.com/stretchr/testify/require"
)

// raNow is the instant the spread test measures from: 30 s before RFC
// 9110's example date, Sun, 06 Nov 1994 08:49:37 GMT.
var raNow = time.Date(1994, time.November, 6, 8, 49, 7, 0, time.UTC)

// TestRetryAfterDelaySpread checks that a spread S puts the wait uniformly
// in [d, d+S), above the server's value and never below it.
func TestRetryAfterDelaySpread(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	cases := []struct {
		name    string
		v       string
		maxWait time.Duration
		spread  time.Duration
		want    time.Duration // the wait before the spread
		clamped bool
	}{
		{"seconds/spread_1s", "5", 30 * time.Second, time.Second, 5 * time.Second, false},
		{"seconds/spread_200ms", "1", 2 * time.Second, 200 * time.Millisecond, time.Second, false},
		{"zero/spread_1s", "0", 30 * time.Second, time.Second, 0, false},
		{"date/spread_1s", "Sun, 06 Nov 1994 08:49:37 GMT", 30 * time.Second, time.Second, 30 * time.Second, false},
		{"clamped/spread_1s", "3600", 30 * time.Second, time.Second, 30 * time.Second, true},
		{"max_0/spread_only", "3600", 0, time.Second, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := header.RetryAfter(http.Header{"Retry-After": {c.v}}, raNow, c.maxWait)
			if !w.OK || w.Clamped != c.clamped {
				t.Fatalf("RetryAfter(%q) = %+v, want OK clamped=%v", c.v, w, c.clamped)
			}
			// requireUniform (policy_test.go) draws 100,000 times, checks
			// every draw is in [d, d+S), and checks 10 buckets.
			requireUniform(t, halfOpen(c.want, c.want+c.spread), func() time.Duration {
				return w.WithSpread(c.spread)
			})
		})
	}
	t.Run("spread_1ns/exact", func(t *testing.T) {
		// [d, d+1ns) holds only d.
		w := header.RetryAfter(http.Header{"Retry-After": {"5"}}, raNow, 30*time.Second)
		require.True(t, w.OK)
		for range 1000 {
			require.Equal(t, 5*time.Second, w.WithSpread(1))
		}
	})
}
