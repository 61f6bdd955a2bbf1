package header

// FuzzRetryAfter: the Retry-After parser takes arbitrary input. Its seed
// corpus lives in testdata/fuzz/FuzzRetryAfter/ and runs with every
// `go test`; to search for new failures, run
//
//	go test -run '^$' -fuzz '^FuzzRetryAfter$' -fuzztime 1000000x -parallel 2 ./internal/header
//
// Everything here is self-contained (names start with fz) so that it does
// not depend on the helpers of the other test files.

import (
	"fmt"
	"math"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	fzMinUnix = time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
	fzMaxUnix = time.Date(9999, time.December, 31, 23, 59, 59, 0, time.UTC).Unix()
	fzBigMax  = big.NewInt(math.MaxInt64)
)

// fzNow maps any (seconds, nanoseconds) pair to an instant between the years
// 1 and 9999, where an HTTP-date can fall too.
func fzNow(sec int64, nsec uint32) time.Time {
	if sec < fzMinUnix || sec > fzMaxUnix {
		span := uint64(fzMaxUnix - fzMinUnix + 1)
		sec = fzMinUnix + int64(uint64(sec)%span)
	}
	return time.Unix(sec, int64(nsec%1e9)).UTC()
}

// fzNonNeg maps an int64 onto [0, MaxInt64] without losing either end:
// -1 becomes 0 and MinInt64 becomes MaxInt64.
func fzNonNeg(x int64) time.Duration {
	if x < 0 {
		x = ^x
	}
	return time.Duration(x)
}

// fzSaturate returns n as a Duration, or the largest Duration if n is
// larger.
func fzSaturate(n *big.Int) time.Duration {
	if n.Cmp(fzBigMax) > 0 {
		return math.MaxInt64
	}
	return time.Duration(n.Int64())
}

// fzSatAdd returns a+b for non-negative a and b, saturating at the largest
// Duration.
func fzSatAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// fzAllDigits reports a non-empty string of ASCII digits.
func fzAllDigits(s string) bool {
	return s != "" && strings.TrimLeft(s, "0123456789") == ""
}

// fzDate reads the dates the package documents, each layout tried in
// turn: the three HTTP-date formats; the IMF-fixdate in UTC, as
// time.RFC1123 writes it; with a numeric zone; RFC 3339.
func fzDate(v string) (time.Time, bool) {
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.RFC1123, v); err == nil && strings.HasSuffix(v, " UTC") && t.Location() == time.UTC {
		return t, true
	}
	for _, layout := range []string{time.RFC1123Z, time.RFC3339Nano} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// fzWantRetryAfter is what parseRetryAfter must make of v at now, computed
// independently of it (RFC 9110 §10.2.3 and the package's doc): delta-seconds
// as an exact number of seconds saturating at the largest Duration, an
// HTTP-date as its exact distance in the future, saturating; anything else,
// and a date that is not in the future, is unusable.
func fzWantRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if fzAllDigits(v) {
		digits := strings.TrimLeft(v, "0")
		switch {
		case digits == "":
			return 0, true
		case len(digits) > 20:
			return math.MaxInt64, true // at least 10^20 seconds
		}
		n, _ := new(big.Int).SetString(digits, 10)
		return fzSaturate(n.Mul(n, big.NewInt(int64(time.Second)))), true
	}
	t, ok := fzDate(v)
	if !ok {
		return 0, false
	}
	diff := new(big.Int).Mul(big.NewInt(t.Unix()-now.Unix()), big.NewInt(int64(time.Second)))
	diff.Add(diff, big.NewInt(int64(t.Nanosecond()-now.Nanosecond())))
	if diff.Sign() <= 0 {
		return 0, false // past, or now
	}
	return fzSaturate(diff), true
}

// FuzzRetryAfter checks parseRetryAfter against an independent oracle, and
// the bounds of retryAfterDelay (RetryAfter and WithSpread): never
// negative, never above maxWait+spread (saturating), clamped exactly when
// the server asked for more than maxWait, and the first of repeated header
// values counts.
func FuzzRetryAfter(f *testing.F) {
	day := time.Date(1994, time.November, 6, 8, 49, 7, 0, time.UTC).Unix()
	f.Add("120", "", day, uint32(0), int64(30*time.Second), int64(time.Second))
	f.Add("Sun, 06 Nov 1994 08:49:37 GMT", "5", day, uint32(0), int64(30*time.Second), int64(0))
	f.Add("9223372037", "", day, uint32(0), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add("Sun, 06 Nov 1994 08:49:37 UTC", "", day, uint32(0), int64(30*time.Second), int64(0))
	f.Add("Sun, 06 Nov 1994 09:49:37 +0100", "", day, uint32(0), int64(30*time.Second), int64(0))
	f.Add("1994-11-06T08:49:37.5Z", "", day, uint32(0), int64(30*time.Second), int64(0))
	f.Fuzz(func(t *testing.T, v, v2 string, nowSec int64, nowNsec uint32, maxWait, spread int64) {
		now := fzNow(nowSec, nowNsec)
		mw, sp := fzNonNeg(maxWait), fzNonNeg(spread)
		want, wantOK := fzWantRetryAfter(v, now)

		d, ok := parseRetryAfter(v, now)
		if ok != wantOK || (ok && d != want) {
			t.Fatalf("parseRetryAfter(%q, %v) = %v, %v; want %v, %v", v, now, d, ok, want, wantOK)
		}
		if ok && d < 0 {
			t.Fatalf("parseRetryAfter(%q, %v) = %v: negative", v, now, d)
		}
		if trimmed := strings.TrimSpace(v); ok && d == 0 && !(fzAllDigits(trimmed) && strings.Trim(trimmed, "0") == "") {
			t.Fatalf("parseRetryAfter(%q, %v) = 0, true: only delta-seconds 0 may be an immediate retry", v, now)
		}

		h := http.Header{"Retry-After": {v}}
		if v2 != "" {
			h["Retry-After"] = append(h["Retry-After"], v2)
		}
		hd, hok, clamped := retryAfterDelay(h, now, mw, sp)
		call := func() string {
			return fmt.Sprintf("retryAfterDelay(Retry-After: %q, %v, maxWait %d, spread %d) = %d, %v, %v", h["Retry-After"], now, mw, sp, hd, hok, clamped)
		}
		if hd < 0 {
			t.Fatalf("%s: negative", call())
		}
		if hok != wantOK {
			t.Fatalf("%s: ok want %v (the first value counts)", call(), wantOK)
		}
		if !hok {
			if clamped {
				t.Fatalf("%s: clamped without a usable value", call())
			}
			return
		}
		if clamped != (want > mw) {
			t.Fatalf("%s: clamped want %v (parsed %d)", call(), want > mw, want)
		}
		if hd > fzSatAdd(mw, sp) {
			t.Fatalf("%s: above maxWait+spread", call())
		}
		lo := min(want, mw)
		width := min(sp, math.MaxInt64-lo) // the spread saturates
		if (width == 0 && hd != lo) || (width > 0 && (hd < lo || hd >= lo+width)) {
			t.Fatalf("%s: want in [%d, %d+%d)", call(), lo, lo, width)
		}
		if s := strings.TrimSpace(v); fzAllDigits(s) {
			// delta-seconds n <= maxWait/1s is exactly n seconds, plus the spread.
			n, err := strconv.ParseInt(s, 10, 64)
			if err == nil && n <= int64(mw/time.Second) {
				if hd < time.Duration(n)*time.Second || sp == 0 && hd != time.Duration(n)*time.Second {
					t.Fatalf("%s: want %d s plus a spread below %d", call(), n, sp)
				}
			}
		}
	})
}
