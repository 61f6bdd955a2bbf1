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
	a, _ := l.Advertise(now, &qs, true, served, 1)
	return a
}

// A fixed window that admits exactly its limit is never refuted: 100
// answers counted in one window (one Unix reset instant), then the next
// window's. Its 101st answer under one instant is: no window admits more
// than its limit. 429s do not count.
func TestEvidenceInstantResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "window"})
		date := time.Now().Truncate(time.Second)
		reset := strconv.FormatInt(date.Add(time.Second).Unix(), 10)
		var a Advert
		for i := range 100 {
			a = evAdvertise(l, evHeader(date, 100, max(99-i, 1), reset), true)
			require.Equal(t, int64(100), a.Policies[0].Limit, "answer %d", i+1)
		}
		for range 50 {
			evAdvertise(l, evHeader(date, 100, 0, reset), false) // 429s: not counted
		}
		next := strconv.FormatInt(date.Add(2*time.Second).Unix(), 10)
		a = evAdvertise(l, evHeader(date.Add(time.Second), 100, 99, next), true)
		assert.Positive(t, a.Rate, "the next window counts afresh")

		l = NewSet(defaults()).Lane(Key{Host: "over"})
		for range 100 {
			evAdvertise(l, evHeader(date, 100, 1, reset), true)
		}
		a = evAdvertise(l, evHeader(date, 100, 1, reset), true)
		assert.Equal(t, int64(-1), a.Policies[0].Limit, "the 101st answer of one window refutes the limit")
	})
}

// Where the reset is seconds to go, answers of two windows may share an
// end: a fixed window of 10 whose 10 answers (9 to 0 left) and the next
// window's first two (9 and 8 left) all read as ending at one instant is
// not refuted. throttled/throttled's GCRA (a burst of 10 as its limit of
// 11, its reset "1" until the bucket is full) shows 9 left answer after
// answer: the 9th of one second refutes it (9+9 > 11+1+5), and the
// policy, its rate and its holds go for good; the pacer's quota goes with
// it and the rate follows what the server admits, in slow start.
func TestEvidenceDeltaResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		date := time.Now().Truncate(time.Second)
		l := NewSet(defaults()).Lane(Key{Host: "window"})
		var a Advert
		for i := range 10 {
			a = evAdvertise(l, evHeader(date, 10, 9-i, "1"), true)
		}
		for _, left := range []int{9, 8} {
			a = evAdvertise(l, evHeader(date, 10, left, "1"), true)
		}
		assert.Equal(t, int64(10), a.Policies[0].Limit, "two windows sharing an end refute nothing")

		l = NewSet(defaults()).Lane(Key{Host: "gcra"})
		for i := range 8 {
			a = evAdvertise(l, evHeader(date, 11, 9, "1"), true)
			require.Equal(t, int64(11), a.Policies[0].Limit, "answer %d: 9 left after %d can be a window's", i+1, i+1)
			require.Positive(t, a.Rate)
		}
		p := l.pace.Load()
		require.NotNil(t, p, "paced at the quota")
		a = evAdvertise(l, evHeader(date, 11, 9, "1"), true)
		assert.Equal(t, int64(-1), a.Policies[0].Limit, "the 9th answer with 9 left refutes the limit")
		assert.Zero(t, a.Rate)
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

// One limit sent in two header sets is one window: an answer counts in it
// once, so 100 answers under a limit of 100 refute nothing and the 101st
// does. A policy that advertises its window is the server's own
// statement: it stays when the other is refuted, and paces the key.
func TestEvidenceAlikePolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		date := time.Now().Truncate(time.Second)
		reset := strconv.FormatInt(date.Add(time.Second).Unix(), 10)
		h := func(duration bool) http.Header {
			h := http.Header{
				"Date":                  {date.UTC().Format(http.TimeFormat)},
				"X-Ratelimit-Limit":     {"100"},
				"X-Ratelimit-Remaining": {"1"},
				"X-Ratelimit-Reset":     {reset},
				"X-Rate-Limit-Limit":    {"100.00"},
				"X-Rate-Limit-Reset":    {reset},
			}
			if duration {
				h["X-Rate-Limit-Duration"] = []string{"1"}
			}
			return h
		}
		for _, duration := range []bool{false, true} {
			l := NewSet(defaults()).Lane(Key{Host: "k"})
			var a Advert
			for i := range 100 {
				a = evAdvertise(l, h(duration), true)
				require.Equal(t, int64(100), a.Policies[0].Limit, "answer %d", i+1)
			}
			a = evAdvertise(l, h(duration), true)
			require.Equal(t, 2, a.N)
			assert.Equal(t, int64(-1), a.Policies[0].Limit, "the 101st refutes the policy without a window")
			if duration {
				assert.Equal(t, int64(100), a.Policies[1].Limit, "the advertised window stays")
				assert.InDelta(t, 0.95*100, a.Rate, 1e-9, "and paces the key")
			} else {
				assert.Equal(t, int64(-1), a.Policies[1].Limit, "its twin goes with it")
			}
		}
	})
}

// A refutation is not undone by an answer read before it: an advert whose
// check came first applies nothing once another answer has refuted a
// policy.
func TestEvidenceEarlierAdvertAfterARefutation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "k"})
		date := time.Now().Truncate(time.Second)
		early := evAdvertise(l, evHeader(date, 11, 9, "1"), true)
		require.Positive(t, early.Rate)
		for range 8 {
			evAdvertise(l, evHeader(date, 11, 9, "1"), true)
		}
		require.Zero(t, l.advertised().Rate, "refuted")
		l.advertise(early)
		assert.Zero(t, l.advertised().Rate, "the earlier advert is not applied")
		p := l.pace.Load()
		p.mu.Lock()
		defer p.mu.Unlock()
		assert.Zero(t, p.quota)
	})
}

// advertised returns the latest quota the key advertised.
func (l *Lane) advertised() Advert {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.adv
}
