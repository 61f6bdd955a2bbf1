package perkey

import (
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/header"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// evHeader is a response of a limiter that sends X-RateLimit-* with no
// window, dated at date, its reset given in resetField.
func evHeader(date time.Time, limit, remaining int, reset string) http.Header {
	return http.Header{
		"Date":                  {date.UTC().Format(http.TimeFormat)},
		"X-Ratelimit-Limit":     {strconv.Itoa(limit)},
		"X-Ratelimit-Remaining": {strconv.Itoa(remaining)},
		"X-Ratelimit-Reset":     {reset},
	}
}

func evAdvertise(l *Lane, h http.Header, served bool) Advert {
	now := time.Now()
	qs := header.ReadQuotas(h, now, 30*time.Second)
	a, _ := l.Advertise(now, &qs, true, served)
	return a
}

// A fixed window that admits exactly its limit is never refuted: 100
// answers let through in one window (one reset instant), then the next
// window's. A "limit" the server exceeds within one window is: the 12th
// answer let through under a limit of 11 (throttled/throttled's burst,
// its reset the time until the bucket is full) drops the policy, its rate
// and its holds, for good; the pacer's quota goes with it and the rate
// follows what the server admits, in slow start. 429s do not count.
func TestEvidenceRefutesALimitTheServerExceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "window"})
		date := time.Now().Truncate(time.Second)
		reset := strconv.FormatInt(date.Add(time.Second).Unix(), 10)
		var a Advert
		for i := range 100 {
			a = evAdvertise(l, evHeader(date, 100, max(99-i, 1), reset), true)
		}
		for range 50 {
			evAdvertise(l, evHeader(date, 100, 0, reset), false) // refused: not counted
		}
		assert.Positive(t, a.Rate, "a window that admitted its limit keeps its quota")
		next := strconv.FormatInt(date.Add(2*time.Second).Unix(), 10)
		a = evAdvertise(l, evHeader(date.Add(time.Second), 100, 99, next), true)
		assert.Positive(t, a.Rate, "the next window counts afresh")

		l = NewSet(defaults()).Lane(Key{Host: "gcra"})
		for i := range 11 {
			a = evAdvertise(l, evHeader(date, 11, max(10-i, 1), "1"), true)
			require.Positive(t, a.Rate, "answer %d: the headers read as a quota", i+1)
		}
		p := l.pace.Load()
		require.NotNil(t, p, "paced at the quota")
		for range 20 {
			evAdvertise(l, evHeader(date, 11, 0, "1"), false) // 429s do not count
		}
		a = evAdvertise(l, evHeader(date, 11, 9, "1"), true)
		assert.Zero(t, a.Rate, "the 12th answer let through in one window refutes the limit")
		assert.True(t, a.HoldUntil.IsZero(), "and its holds")
		a = evAdvertise(l, evHeader(date.Add(5*time.Second), 11, 0, "1"), true)
		assert.Zero(t, a.Rate, "for good")
		assert.True(t, a.HoldUntil.IsZero(), "a refuted policy with nothing left holds nothing")
		p.mu.Lock()
		defer p.mu.Unlock()
		assert.Zero(t, p.quota, "the pacer's quota is dropped")
		assert.Equal(t, uint64(1), p.throttles, "and its rate follows the server, in slow start")
		assert.Zero(t, p.wmax)
	})
}

// One limit sent in two header sets is one window: a response counts in
// it once, so 100 answers under a limit of 100, their remaining falling
// as a window's does, refute nothing, and the 101st does. didip/tollbooth
// sends its bucket's tokens as RateLimit-Remaining beside a limit that is
// a rate: 100 a second with 9 left, answer after answer, refutes that
// reading at the 93rd answer of one window (93+9 > 100+1), and the policy goes, with the hold its
// "none left" would put on the key; the same limit with its window
// advertised in X-Rate-Limit-Duration stays, and paces the key.
func TestEvidenceAlikePoliciesAndABucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		date := time.Now().Truncate(time.Second)
		tollbooth := func(remaining int, duration bool) http.Header {
			h := http.Header{
				"Date":                {date.UTC().Format(http.TimeFormat)},
				"Ratelimit-Limit":     {"100"},
				"Ratelimit-Remaining": {strconv.Itoa(remaining)},
				"Ratelimit-Reset":     {"1"},
				"X-Rate-Limit-Limit":  {"100.00"},
				"X-Rate-Limit-Reset":  {"1"},
			}
			if duration {
				h["X-Rate-Limit-Duration"] = []string{"1"}
			}
			return h
		}
		l := NewSet(defaults()).Lane(Key{Host: "window"})
		var a Advert
		for i := range 100 {
			a = evAdvertise(l, tollbooth(max(99-i, 1), false), true)
		}
		assert.Positive(t, a.Rate, "100 answers under a limit of 100")
		a = evAdvertise(l, tollbooth(1, false), true)
		assert.Zero(t, a.Rate, "the 101st refutes it")

		l = NewSet(defaults()).Lane(Key{Host: "bucket"})
		for i := range 93 {
			a = evAdvertise(l, tollbooth(9, true), true)
			if i < 92 {
				require.Equal(t, int64(100), a.Policies[0].Limit, "answer %d: 9 left after %d can be a window's", i+1, i+1)
			}
		}
		require.Equal(t, 2, a.N)
		assert.Equal(t, int64(-1), a.Policies[0].Limit, "the bucket's tokens are no window's remaining")
		assert.InDelta(t, 0.95*100, a.Rate, 1e-9, "the advertised window paces the key")
		a = evAdvertise(l, tollbooth(0, true), true)
		assert.True(t, a.HoldUntil.IsZero(), "an empty bucket holds nothing for a second")
	})
}
