package header

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// parseRetryAfter returns the wait that a Retry-After value (RFC 9110
// §10.2.3) asks for, measured from now. It accepts delta-seconds and the
// dates parseDate reads. ok is false for an
// empty, negative, unparsable or past value, so that the policy decides
// instead. A number of seconds too large for a time.Duration yields the
// largest Duration, never an overflow.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if d, ok := parseDeltaSeconds(v); ok {
		return d, true
	}
	t, ok := parseDate(v)
	if !ok {
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
	n, ok := parseCount(v)
	return satMul(n, time.Second), ok
}

// Wait is the wait that a retryable response asks for through its
// headers, read once per response.
type Wait struct {
	Duration time.Duration // the wait, clamped, before the spread
	Asked    time.Duration // the wait the server asked for, before the clamp
	Seen     bool          // a Retry-After or Retry-After-Ms header was present
	OK       bool          // and gave a usable wait
	Clamped  bool          // the server asked for more than the clamp
}

// RetryAfter reads the wait a response asks for: Retry-After-Ms
// (milliseconds, sent by OpenAI and Azure) when it holds a usable value, as
// it is the more precise, else Retry-After (RFC 9110 §10.2.3), whose
// HTTP-date is measured from the response's Date when it has a valid one,
// else from now. The wait is clamped to maxWait. A repeated header counts
// by its first value, as Header.Get reads it.
func RetryAfter(h http.Header, now time.Time, maxWait time.Duration) Wait {
	var w Wait
	if v := h.Get("Retry-After-Ms"); v != "" {
		w.Seen = true
		w.Duration, w.OK = parseMillis(v)
	}
	if v := h.Get("Retry-After"); !w.OK && v != "" {
		w.Seen = true
		w.Duration, w.OK = parseRetryAfter(v, serverNow(h, now))
	}
	w.Asked = w.Duration
	if w.OK && w.Duration > maxWait {
		w.Duration, w.Clamped = maxWait, true
	}
	return w
}

// serverNow returns the response's Date when it has a valid one, else now.
// A Retry-After date is the server's clock; measured from the server's own
// Date, the wait does not depend on how far the two clocks disagree, as
// HTTP caches correct for skew with Date (RFC 9111 §4.2.3).
func serverNow(h http.Header, now time.Time) time.Time {
	if v := h.Get("Date"); v != "" {
		if d, ok := parseDate(v); ok {
			return d
		}
	}
	return now
}

// parseDate reads an HTTP date (the three formats http.ParseTime reads,
// RFC 9110 §5.6.7), and, leniently where the instant is still
// unambiguous, the forms real servers send in its place: the IMF-fixdate
// with "UTC" for "GMT" (sethvargo/go-limiter v0.7.1 formats its
// X-RateLimit-Reset and Retry-After with time.RFC1123 in UTC), with a
// numeric zone (time.RFC1123Z), and RFC 3339. The IMF-fixdate with a zone
// of any other name is refused: time.Parse would read an abbreviation it
// does not know as UTC, whatever the zone meant. (http.ParseTime reads
// RFC 850's obsolete form with any zone name, as UTC, and that is kept.)
func parseDate(v string) (t time.Time, ok bool) {
	var err error
	switch {
	case v == "":
		return time.Time{}, false
	case isDigit(v[0]):
		// No HTTP date starts with a digit.
		t, err = time.Parse(time.RFC3339Nano, v)
	case strings.HasSuffix(v, " UTC"):
		if t, err = time.Parse(imfFixdateUTC, v); err != nil {
			t, err = http.ParseTime(v) // RFC 850's form reads any zone name
		}
	case len(v) > 5 && (v[len(v)-5] == '+' || v[len(v)-5] == '-'):
		t, err = time.Parse(time.RFC1123Z, v)
	default:
		t, err = http.ParseTime(v)
	}
	return t, err == nil
}

// imfFixdateUTC is http.TimeFormat with "UTC" for "GMT", as time.RFC1123
// formats a time in UTC; the zone is matched literally.
const imfFixdateUTC = "Mon, 02 Jan 2006 15:04:05 UTC"

// WithSpread returns the wait plus a spread drawn uniformly from
// [0, spread), so that clients told the same instant do not return at the
// same instant; it saturates rather than wraps near the largest Duration.
// The generator is math/rand/v2's, seeded per process and safe for
// concurrent use.
func (w Wait) WithSpread(spread time.Duration) time.Duration {
	width := min(spread, math.MaxInt64-w.Duration)
	if width <= 0 {
		return w.Duration
	}
	return w.Duration + time.Duration(rand.Int64N(int64(width)))
}

// parseMillis reads a Retry-After-Ms value: a non-negative decimal number of
// milliseconds, with an optional fraction, down to the nanosecond,
// saturating at the largest Duration. Anything else is unusable.
func parseMillis(v string) (time.Duration, bool) {
	ms, frac, ok := parseDecimal(strings.TrimSpace(v))
	if !ok {
		return 0, false
	}
	return satAdd(satMul(ms, time.Millisecond), fraction(frac, time.Millisecond)), true
}
