package retryhttp

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// Defaults for a server's Retry-After header.
const (
	// DefaultMaxRetryAfter clamps a server's Retry-After: the same bound as
	// DefaultCap, so a hostile or broken header cannot park a request for
	// longer than the policy's longest delay plus the spread.
	DefaultMaxRetryAfter = 30 * time.Second
	// DefaultRetryAfterSpread is the width of the random spread added above a
	// Retry-After wait. Retry-After has a resolution of one second, so a
	// spread of up to one second never delays a client by more than the
	// smallest step the server could have asked for, and it turns 10,000
	// clients told the same instant into ten 100 ms slices of 1,000 instead
	// of one slice of 10,000.
	DefaultRetryAfterSpread = time.Second
)

// parseRetryAfter returns the wait that a Retry-After value (RFC 9110
// §10.2.3) asks for, measured from now. It accepts delta-seconds and the
// three HTTP-date formats that http.ParseTime reads. ok is false for an
// empty, negative, unparsable or past value, so that the policy decides
// instead. A number of seconds too large for a time.Duration yields the
// largest Duration, never an overflow.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		return parseDeltaSeconds(v)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d = t.Sub(now)
	if d <= 0 {
		// The instant has passed (or is now): nothing to honour.
		return 0, false
	}
	return d, true
}

// parseDeltaSeconds reads 1*DIGIT as seconds, saturating at the largest
// Duration. Anything but digits (a sign, a fraction, a unit) is unparsable.
func parseDeltaSeconds(v string) (time.Duration, bool) {
	const maxSeconds = int64(math.MaxInt64 / int64(time.Second))
	var secs int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if secs > maxSeconds {
			// Keep scanning so trailing garbage still fails, but stop growing.
			continue
		}
		secs = secs*10 + int64(c-'0')
	}
	if secs > maxSeconds {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(secs) * time.Second, true
}

// retryAfterDelay turns a retryable response's Retry-After header into the
// wait before the next attempt: the server's value clamped to maxWait, plus a
// spread drawn from [0, spread). ok is false when the header is absent or
// unusable. clamped reports that the server asked for more than maxWait.
func retryAfterDelay(h http.Header, now time.Time, maxWait, spread time.Duration) (d time.Duration, ok, clamped bool) {
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false, false
	}
	d, ok = parseRetryAfter(v, now)
	if !ok {
		return 0, false, false
	}
	if d > maxWait {
		d, clamped = maxWait, true
	}
	// Saturate rather than wrap when the clamp is near the largest Duration.
	return d + uniform(0, min(spread, math.MaxInt64-d)), true, clamped
}
