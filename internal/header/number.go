package header

import (
	"math"
	"strings"
	"time"
)

// isDigit reports an ASCII digit.
//
// The numbers of these headers are decimal digits, some with a fraction.
// The parsers share the helpers below, which saturate at the largest value
// rather than fail or wrap: a number too large for an int64 or a
// time.Duration asks for longer than any clamp, and is clamped.
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// allDigits reports whether s holds ASCII digits only; "" does.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// parseCount reads 1*DIGIT, saturating at the largest int64. A sign, a
// fraction or anything else is malformed.
func parseCount(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return 0, false
		}
		if d := int64(v[i] - '0'); n <= (math.MaxInt64-d)/10 {
			n = n*10 + d
		} else {
			n = math.MaxInt64 // and stays there, while the rest is checked
		}
	}
	return n, true
}

// parseWhole reads a count written as a decimal whose fraction is zero
// ("100", "100.00": didip/tollbooth v7 formats its X-Rate-Limit-Limit with
// %.2f), saturating. A fraction that is not zero is malformed: a count of
// requests has none, and rounding it would be a guess.
func parseWhole(v string) (int64, bool) {
	n, frac, ok := parseDecimal(v)
	if !ok || strings.Trim(frac, "0") != "" {
		return 0, false
	}
	return n, true
}

// parseDecimal reads 1*DIGIT ["." *DIGIT]: the whole part, saturating at
// the largest int64, and the digits of the fraction.
func parseDecimal(v string) (whole int64, frac string, ok bool) {
	w, frac, _ := strings.Cut(v, ".")
	whole, ok = parseCount(w)
	if !ok || !allDigits(frac) {
		return 0, "", false
	}
	return whole, frac, true
}

// fraction returns the decimal fraction frac (its digits, after the dot)
// of unit, truncated to the nanosecond: less than one unit.
func fraction(frac string, unit time.Duration) time.Duration {
	var d time.Duration
	for i, scale := 0, unit/10; i < len(frac) && scale > 0; i, scale = i+1, scale/10 {
		d += time.Duration(frac[i]-'0') * scale
	}
	return d
}

// parseSeconds reads seconds with an optional fraction ("1470173023.123",
// as Discord sends them), saturating.
func parseSeconds(v string) (sec, nsec int64, ok bool) {
	sec, frac, ok := parseDecimal(v)
	if !ok {
		return 0, 0, false
	}
	return sec, int64(fraction(frac, time.Second)), true
}

// satMul returns n units, saturating at the largest Duration; n and unit
// are not negative.
func satMul(n int64, unit time.Duration) time.Duration {
	if n > math.MaxInt64/int64(unit) {
		return math.MaxInt64
	}
	return time.Duration(n) * unit
}

// satAdd returns a+b for non-negative a and b, saturating.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satSeconds returns sec seconds plus nsec nanoseconds (|nsec| < 2e9),
// saturating at the largest Duration; the result may be negative.
func satSeconds(sec, nsec int64) time.Duration {
	const maxSec = math.MaxInt64/int64(time.Second) - 2
	switch {
	case sec > maxSec:
		return math.MaxInt64
	case sec < -maxSec:
		return math.MinInt64 / 2
	}
	return time.Duration(sec)*time.Second + time.Duration(nsec)
}

// seconds is n seconds, saturating.
func seconds(n int64) time.Duration { return satSeconds(n, 0) }
