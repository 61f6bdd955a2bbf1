package header

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuotasExhausted(t *testing.T) {
	list := func(qs ...Policy) Quotas {
		var out Quotas
		out.n, out.clamp = copy(out.list[:], qs), qtMax
		return out
	}
	for _, c := range []struct {
		name      string
		qs        Quotas
		reset     time.Duration
		partition string
		ok        bool
	}{
		{"none", list(), 0, "", false},
		{"remaining_left", list(qtQ(10, 0, 1, 20*qtS)), 0, "", false},
		{"exhausted", list(qtQ(10, 0, 0, 20*qtS).qtIn("core")), 20 * qtS, "core", true},
		{"clamped", list(qtQ(10, 0, 0, time.Hour)), qtMax, "", true},
		{"reset_now_is_no_wait", list(qtQ(10, 0, 0, 0)), 0, "", false},
		{"reset_unknown", list(qtQ(10, 0, 0, -1)), 0, "", false},
		{"remaining_unknown", list(qtQ(10, 0, -1, 5*qtS)), 0, "", false},
		{"longest_of_two", list(qtQ(10, 0, 0, 5*qtS).qtIn("a"), qtQ(10, 0, 0, 9*qtS).qtIn("b"), qtQ(10, 0, 3, 20*qtS).qtIn("c")), 9 * qtS, "b", true},
		// A bucket refills one request in reset/limit: 60 s for 60, 1 s.
		{"bucket_one_request", list(qtQ(60, 0, 0, 60*qtS).qtBucket()), 1 * qtS, "", true},
		{"bucket_rounds_up", list(qtQ(3, 0, 0, 10*qtS).qtBucket()), 3333333334 * time.Nanosecond, "", true},
		{"bucket_limit_unknown", list(qtQ(-1, 0, 0, 10*qtS).qtBucket()), 10 * qtS, "", true},
		{"bucket_huge_limit", list(qtQ(math.MaxInt64, 0, 0, 10*qtS).qtBucket()), 1, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			reset, partition, ok := c.qs.Exhausted()
			require.Equal(t, c.ok, ok)
			require.Equal(t, c.reset, reset)
			require.Equal(t, c.partition, partition)
		})
	}
}

func TestQuotasRate(t *testing.T) {
	list := func(qs ...Policy) Quotas {
		var out Quotas
		out.n, out.clamp = copy(out.list[:], qs), qtMax
		return out
	}
	floor := 1 / qtMax.Seconds()
	for _, c := range []struct {
		name  string
		qs    Quotas
		rate  float64
		burst int
		ok    bool
	}{
		{"none", list(), 0, 0, false},
		{"quota_per_window", list(qtQ(100, 50*qtS, -1, -1)), 2, 1, true},
		{"remaining_per_reset", list(qtQ(-1, 0, 50, 25*qtS)), 2, 50, true},
		// With its window known, a policy's rate is its quota over its
		// window: the remaining over a reset in whole seconds reads low.
		{"window_over_remaining", list(qtQ(100, 10*qtS, 50, 25*qtS)), 10, 50, true},
		{"least_of_policies", list(qtQ(100, 10*qtS, 90, -1), qtQ(-1, 0, 40, 20*qtS)), 2, 40, true},
		// The reset before the clamp: 4,000 left for 3,000 s is 4/3 a second.
		{"clamped_reset_uses_asked", list(qtQ(5000, 0, 4000, 3000*qtS)), 4.0 / 3, 4000, true},
		{"floor_one_per_clamp", list(qtQ(1, 86400*qtS, 1, time.Hour)), floor, 1, true},
		{"hyperate_never_zero", list(qtQ(1, math.MaxInt64, -1, -1)), floor, 1, true},
		{"reset_now_no_division", list(qtQ(-1, 0, 50, 0)), 0, 0, false},
		{"window_unknown_no_division", list(qtQ(100, 0, -1, -1)), 0, 0, false},
		{"zero_quota_no_rate", list(qtQ(0, 60*qtS, -1, -1)), 0, 0, false},
		{"none_left_is_exhausted_not_rate", list(qtQ(-1, 0, 0, 10*qtS)), 0, 0, false},
		{"none_left_burst_one", list(qtQ(-1, 0, 0, 10*qtS), qtQ(100, 50*qtS, -1, -1)), 2, 1, true},
		{"burst_least_remaining", list(qtQ(-1, 0, 100, 100*qtS), qtQ(-1, 0, 5, 0)), 1, 5, true},
		// A bucket refills at (limit-remaining)/reset: 1 request in 1 s.
		{"bucket_refill_rate", list(qtQ(60, 0, 59, 1*qtS).qtBucket()), 1, 59, true},
		{"bucket_empty", list(qtQ(60, 0, 0, 30*qtS).qtBucket()), 2, 1, true},
		{"bucket_full_no_rate", list(qtQ(60, 0, 60, 0).qtBucket()), 0, 0, false},
		{"bucket_limit_unknown", list(qtQ(-1, 0, 5, 10*qtS).qtBucket()), 0, 0, false},
		{"huge_numbers_finite", list(qtQ(math.MaxInt64, 1*qtS, math.MaxInt64, 1)), math.MaxInt64, math.MaxInt, true},
		{"clamp_zero_no_pacing", Quotas{n: 1, list: [MaxPolicies]Policy{qtQ(100, 50*qtS, -1, -1)}}, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rate, burst, ok := c.qs.Rate()
			require.Equal(t, c.ok, ok)
			require.InDelta(t, c.rate, rate, c.rate*1e-12)
			require.Equal(t, c.burst, burst)
			qtCheck(t, c.qs, c.qs.clamp)
		})
	}
}

// qtCheck asserts what holds for any quotas: resets within the clamp or
// unknown, counts unknown or non-negative, a positive finite rate, and an
// exhausted wait within the clamp.
func qtCheck(t testing.TB, qs Quotas, maxReset time.Duration) {
	t.Helper()
	maxReset = max(maxReset, 0)
	require.True(t, qs.n >= 0 && qs.n <= MaxPolicies, "n %d", qs.n)
	for _, q := range qs.list[:qs.n] {
		require.True(t, q.Reset == -1 || q.Reset >= 0 && q.Reset <= maxReset, "reset %v", q.Reset)
		require.True(t, q.Asked == -1 && q.Reset == -1 || q.Asked >= q.Reset && q.Reset >= 0, "asked %v reset %v", q.Asked, q.Reset)
		require.Equal(t, q.Asked > maxReset, q.Clamped, "asked %v clamped %v", q.Asked, q.Clamped)
		require.True(t, q.Limit >= -1 && q.Remaining >= -1 && q.Window >= 0, "%+v", q)
		require.True(t, q.Limit >= 0 || q.Remaining >= 0 || q.Reset >= 0, "empty quota kept: %+v", q)
	}
	if rate, burst, ok := qs.Rate(); ok {
		require.True(t, rate > 0 && !math.IsInf(rate, 0) && !math.IsNaN(rate), "rate %v", rate)
		require.GreaterOrEqual(t, burst, 1)
	}
	if reset, _, ok := qs.Exhausted(); ok {
		require.True(t, reset > 0 && reset <= maxReset, "exhausted for %v", reset)
	}
}
