package retryhttp

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// Defaults for a server's Retry-After header.
const (
	// defaultMaxRetryAfter clamps a server's Retry-After: the same bound as
	// defaultCap, so a hostile or broken header cannot park a request for
	// longer than the policy's longest delay plus the spread.
	defaultMaxRetryAfter = 30 * time.Second
	// defaultRetryAfterSpread is the width of the random spread added above a
	// Retry-After wait. Retry-After has a resolution of one second, so a
	// spread of up to one second never delays a client by more than the
	// smallest step the server could have asked for, and it turns 10,000
	// clients told the same instant into ten 100 ms slices of 1,000 instead
	// of one slice of 10,000.
	defaultRetryAfterSpread = time.Second
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

// serverWait is the wait that a retryable response asks for through its
// headers, read once per response.
type serverWait struct {
	d       time.Duration // the wait, clamped, before the spread
	asked   time.Duration // the wait the server asked for, before the clamp
	seen    bool          // a Retry-After or Retry-After-Ms header was present
	ok      bool          // and gave a usable wait
	clamped bool          // the server asked for more than the clamp
}

// parseServerWait reads the wait a response asks for: Retry-After-Ms
// (milliseconds, sent by OpenAI and Azure) when it holds a usable value, as
// it is the more precise, else Retry-After. The wait is clamped to maxWait.
func parseServerWait(h http.Header, now time.Time, maxWait time.Duration) serverWait {
	var w serverWait
	if v := h.Get("Retry-After-Ms"); v != "" {
		w.seen = true
		w.d, w.ok = parseMillis(v)
	}
	if v := h.Get("Retry-After"); !w.ok && v != "" {
		w.seen = true
		w.d, w.ok = parseRetryAfter(v, serverNow(h, now))
	}
	w.asked = w.d
	if w.ok && w.d > maxWait {
		w.d, w.clamped = maxWait, true
	}
	return w
}

// serverNow returns the response's Date when it has a valid one, else now.
// A Retry-After date is the server's clock; measured from the server's own
// Date, the wait does not depend on how far the two clocks disagree, as
// HTTP caches correct for skew with Date (RFC 9111 §4.2.3).
func serverNow(h http.Header, now time.Time) time.Time {
	if v := h.Get("Date"); v != "" {
		if d, err := http.ParseTime(v); err == nil {
			return d
		}
	}
	return now
}

// withSpread returns the wait plus a spread drawn from [0, spread), so that
// clients told the same instant do not return at the same instant; it
// saturates rather than wraps near the largest Duration.
func (w serverWait) withSpread(spread time.Duration) time.Duration {
	return w.d + uniform(0, min(spread, math.MaxInt64-w.d))
}

// parseMillis reads a Retry-After-Ms value: a non-negative decimal number of
// milliseconds, with an optional fraction, saturating at the largest
// Duration. Anything else is unusable.
func parseMillis(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	whole, frac, _ := strings.Cut(v, ".")
	if whole == "" || !allDigits(whole) || !allDigits(frac) {
		return 0, false
	}
	const maxMillis = int64(math.MaxInt64 / int64(time.Millisecond))
	var ms int64
	for i := 0; i < len(whole); i++ {
		ms = ms*10 + int64(whole[i]-'0')
		if ms > maxMillis {
			return time.Duration(math.MaxInt64), true
		}
	}
	d := time.Duration(ms) * time.Millisecond
	// The fraction, down to the nanosecond.
	scale := time.Duration(100 * time.Microsecond)
	for i := 0; i < len(frac) && scale > 0; i++ {
		d += time.Duration(frac[i]-'0') * scale
		scale /= 10
	}
	return d, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
