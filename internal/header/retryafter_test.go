package header

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// raNow is the fixed instant the Retry-After tests measure from: 30 s
// before RFC 9110's example date, Sun, 06 Nov 1994 08:49:37 GMT.
var raNow = time.Date(1994, time.November, 6, 8, 49, 7, 0, time.UTC)

const maxDuration = time.Duration(math.MaxInt64)

var (
	digits64K  = strings.Repeat("9", 64<<10)
	garbage64K = strings.Repeat("\x00xyz!@ ", 8<<10) // 64 KiB, starts with a non-digit
)

// retryAfterValues are Retry-After values with what parseRetryAfter must
// make of them at raNow.
var retryAfterValues = []struct {
	name string
	v    string
	want time.Duration
	ok   bool
}{
	// delta-seconds
	{"seconds/0", "0", 0, true},
	{"seconds/5", "5", 5 * time.Second, true},
	{"seconds/spaces_trimmed", " 7 ", 7 * time.Second, true},
	{"seconds/tabs_trimmed", "\t7\t", 7 * time.Second, true},
	{"seconds/leading_zeros", "007", 7 * time.Second, true},
	{"seconds/120", "120", 2 * time.Minute, true},
	{"seconds/largest_exact", "9223372036", 9223372036 * time.Second, true},
	{"seconds/first_saturated", "9223372037", maxDuration, true},
	{"seconds/20_digits_saturated", "99999999999999999999", maxDuration, true},
	{"seconds/64KiB_digits_saturated", digits64K, maxDuration, true},

	// HTTP-date, the three formats of RFC 9110 §5.6.7, 30 s after raNow
	{"date/IMF-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT", 30 * time.Second, true},
	{"date/RFC850", "Sunday, 06-Nov-94 08:49:37 GMT", 30 * time.Second, true},
	{"date/asctime", "Sun Nov  6 08:49:37 1994", 30 * time.Second, true},
	{"date/2999_saturated", "Tue, 01 Jan 2999 00:00:00 GMT", maxDuration, true},
	// what real servers send in its place, where the instant is still clear
	{"date/UTC_for_GMT", "Sun, 06 Nov 1994 08:49:37 UTC", 30 * time.Second, true},
	{"date/RFC850_UTC", "Sunday, 06-Nov-94 08:49:37 UTC", 30 * time.Second, true},
	{"date/numeric_zone", "Sun, 06 Nov 1994 09:49:37 +0100", 30 * time.Second, true},
	{"date/RFC3339", "1994-11-06T08:49:37Z", 30 * time.Second, true},
	{"date/RFC3339_fraction", "1994-11-06T08:49:37.5Z", 30*time.Second + 500*time.Millisecond, true},
	{"date/other_zone_name", "Sun, 06 Nov 1994 08:49:37 EST", 0, false},
	{"date/UTC_past", "Sun, 06 Nov 1994 08:49:00 UTC", 0, false},

	// unusable: the policy decides
	{"empty", "", 0, false},
	{"blank", "   ", 0, false},
	{"negative", "-1", 0, false},
	{"negative_zero", "-0", 0, false},
	{"plus_sign", "+5", 0, false},
	{"letters", "abc", 0, false},
	{"fraction", "1.5", 0, false},
	{"unit", "5s", 0, false},
	{"exponent", "1e3", 0, false},
	{"hex", "0x10", 0, false},
	{"inner_space", "5 5", 0, false},
	{"fullwidth_digit", "５", 0, false},
	{"64KiB_digits_then_letter", digits64K + "x", 0, false},
	{"64KiB_garbage", garbage64K, 0, false},
	{"date/now", "Sun, 06 Nov 1994 08:49:07 GMT", 0, false},
	{"date/past_1970", "Thu, 01 Jan 1970 00:00:00 GMT", 0, false},
	{"date/trailing_garbage", "Sun, 06 Nov 1994 08:49:37 GMT junk", 0, false},
	{"date/no_zone", "Sun, 06 Nov 1994 08:49:37", 0, false},
}

func TestParseRetryAfter(t *testing.T) {
	for _, c := range retryAfterValues {
		t.Run(c.name, func(t *testing.T) {
			got, ok := parseRetryAfter(c.v, raNow)
			require.Equal(t, c.ok, ok, "ok")
			require.Equal(t, c.want, got, "duration")
			require.GreaterOrEqual(t, got, time.Duration(0), "negative duration")
		})
	}
}

// TestParseMillis reads Retry-After-Ms values, up to the largest
// Duration: a whole number of milliseconds just below it still takes its
// fraction, and saturates rather than wraps when the fraction passes it.
func TestParseMillis(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"300", 300 * time.Millisecond, true},
		{" 2.5 ", 2500 * time.Microsecond, true},
		{"0.0000019", 1 * time.Nanosecond, true},
		{"7.", 7 * time.Millisecond, true},
		{"9223372036854", 9223372036854 * time.Millisecond, true},
		{"9223372036854.775807", maxDuration, true},
		{"9223372036854.999", maxDuration, true},
		{"9223372036855", maxDuration, true},
		{digits64K + ".5", maxDuration, true},
		{"", 0, false},
		{".5", 0, false},
		{"-1", 0, false},
		{"1.2.3", 0, false},
		{"1e3", 0, false},
	} {
		got, ok := parseMillis(c.v)
		require.Equal(t, c.ok, ok, "%.40q", c.v)
		require.Equal(t, c.want, got, "%.40q", c.v)
	}
}

func retryAfterHeader(vs ...string) http.Header {
	h := http.Header{}
	for _, v := range vs {
		h.Add("Retry-After", v)
	}
	return h
}

func TestRetryAfterDelay(t *testing.T) {
	const maxWait = 30 * time.Second
	cases := []struct {
		name        string
		h           http.Header
		maxWait     time.Duration
		want        time.Duration
		ok, clamped bool
	}{
		{"absent", http.Header{}, maxWait, 0, false, false},
		{"nil_header", nil, maxWait, 0, false, false},
		{"empty_value", retryAfterHeader(""), maxWait, 0, false, false},
		{"zero", retryAfterHeader("0"), maxWait, 0, true, false},
		{"seconds", retryAfterHeader("5"), maxWait, 5 * time.Second, true, false},
		{"seconds_trimmed", retryAfterHeader(" 7 "), maxWait, 7 * time.Second, true, false},
		{"equal_to_max/not_clamped", retryAfterHeader("30"), maxWait, maxWait, true, false},
		{"above_max/clamped", retryAfterHeader("31"), maxWait, maxWait, true, true},
		{"overflowing_number/clamped", retryAfterHeader("99999999999999999999"), maxWait, maxWait, true, true},
		{"64KiB_digits/clamped", retryAfterHeader(digits64K), maxWait, maxWait, true, true},
		{"date", retryAfterHeader("Sun, 06 Nov 1994 08:49:37 GMT"), maxWait, 30 * time.Second, true, false},
		{"date_RFC850/clamped_to_10s", retryAfterHeader("Sunday, 06-Nov-94 08:49:37 GMT"), 10 * time.Second, 10 * time.Second, true, true},
		{"date_asctime", retryAfterHeader("Sun Nov  6 08:49:37 1994"), maxWait, 30 * time.Second, true, false},
		{"date_2999/clamped", retryAfterHeader("Tue, 01 Jan 2999 00:00:00 GMT"), maxWait, maxWait, true, true},
		{"date_past", retryAfterHeader("Thu, 01 Jan 1970 00:00:00 GMT"), maxWait, 0, false, false},
		{"negative", retryAfterHeader("-1"), maxWait, 0, false, false},
		{"garbage", retryAfterHeader("abc"), maxWait, 0, false, false},
		{"64KiB_garbage", retryAfterHeader(garbage64K), maxWait, 0, false, false},
		{"max_0/clamped", retryAfterHeader("5"), 0, 0, true, true},
		{"max_0/zero_not_clamped", retryAfterHeader("0"), 0, 0, true, false},

		// Repeated header: the first value counts, as Header.Get reads it.
		{"repeated/first_smaller", retryAfterHeader("3", "20"), maxWait, 3 * time.Second, true, false},
		{"repeated/first_larger", retryAfterHeader("20", "3"), maxWait, 20 * time.Second, true, false},
		{"repeated/first_clamped", retryAfterHeader("60", "3"), maxWait, maxWait, true, true},
		{"repeated/first_invalid", retryAfterHeader("abc", "5"), maxWait, 0, false, false},
		{"repeated/first_empty", retryAfterHeader("", "5"), maxWait, 0, false, false},
		{"repeated/first_past_date", retryAfterHeader("Thu, 01 Jan 1970 00:00:00 GMT", "5"), maxWait, 0, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Spread 0 means none: the result is exact.
			got, ok, clamped := retryAfterDelay(c.h, raNow, c.maxWait, 0)
			require.Equal(t, c.ok, ok, "ok")
			require.Equal(t, c.clamped, clamped, "clamped")
			require.Equal(t, c.want, got, "delay")
		})
	}
}

// TestRetryAfterDelayBounds runs every value of the parse table through
// retryAfterDelay with several clamps and spreads: the wait is never
// negative, never above maxWait+spread, zero when unusable, and clamped
// exactly when the server asked for more than maxWait.
func TestRetryAfterDelayBounds(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	maxWaits := []time.Duration{0, time.Second, 30 * time.Second, time.Hour}
	spreads := []time.Duration{0, 1, 200 * time.Millisecond, time.Second}
	for _, c := range retryAfterValues {
		t.Run(c.name, func(t *testing.T) {
			h := retryAfterHeader(c.v)
			for _, maxWait := range maxWaits {
				for _, spread := range spreads {
					limit := maxWait + spread // exclusive, or inclusive when spread is 0
					// Draw many times only where there is a spread to draw.
					reps := 1
					if spread > 1 {
						reps = 100
					}
					for range reps {
						got, ok, clamped := retryAfterDelay(h, raNow, maxWait, spread)
						// Checked by hand and reported with a message built
						// only on failure: the values include 64 KiB strings.
						var bad []string
						if got < 0 {
							bad = append(bad, "negative")
						}
						if got > limit || (spread > 0 && got == limit) {
							bad = append(bad, "above maxWait+spread")
						}
						if ok != c.ok {
							bad = append(bad, fmt.Sprintf("ok, want %v", c.ok))
						}
						if !ok && got != 0 {
							bad = append(bad, "nonzero without ok")
						}
						if want := c.ok && c.want > maxWait; clamped != want {
							bad = append(bad, fmt.Sprintf("clamped, want %v", want))
						}
						if bad != nil {
							t.Fatalf("retryAfterDelay(%.40q, maxWait %v, spread %v) = %v, %v, %v: %s",
								c.v, maxWait, spread, got, ok, clamped, strings.Join(bad, "; "))
						}
					}
				}
			}
		})
	}
}

// TestRetryAfterDelayHugeMax checks the one clamp that can overflow: a
// maxWait so large that maxWait+spread passes the largest Duration.
func TestRetryAfterDelayHugeMax(t *testing.T) {
	for range 1000 {
		got, ok, _ := retryAfterDelay(retryAfterHeader("99999999999999999999"), raNow, maxDuration, time.Second)
		require.True(t, ok)
		require.GreaterOrEqual(t, got, time.Duration(0), "wait wrapped negative: the retry would go at once")
	}
}

// retryAfterDelay turns a retryable response's headers into the wait before
// the next attempt, as the transport does with RetryAfter and WithSpread:
// the server's value clamped to maxWait, plus a spread drawn from
// [0, spread). ok is false when the headers give no usable wait.
// clamped reports that the server asked for more than maxWait.
func retryAfterDelay(h http.Header, now time.Time, maxWait, spread time.Duration) (d time.Duration, ok, clamped bool) {
	w := RetryAfter(h, now, maxWait)
	if !w.OK {
		return 0, false, false
	}
	return w.WithSpread(spread), true, w.Clamped
}
