package retryhttp

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ietf returns the IETF quota fields of one policy.
func ietf(q, w, r, t string) http.Header {
	return http.Header{"Ratelimit-Policy": {`"p";q=` + q + `;w=` + w}, "Ratelimit": {`"p";r=` + r + `;t=` + t}}
}

// What an advertised quota does to its key, and what reports it: the
// breaker's Host, the Quota hook and Stats.
func TestQuotaApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		b := NewBreaker(BreakerConfig{})
		var mu sync.Mutex
		var seen []Event
		hooks := &Hooks{Quota: func(i Event) { mu.Lock(); seen = append(seen, i); mu.Unlock() }}
		next := newNext(
			reply{status: 200, header: ietf("100", "10", "50", "5")},
			reply{status: 200, header: ietf("100", "10", "0", "3")},
			reply{status: 200},
		)
		tr := New(next, WithBreaker(b), WithHooks(hooks))
		key := keyOf(mustParse(t, testURL)).String()

		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		h := b.Host(key)
		require.Equal(t, []quota{{Partition: "", Limit: 100, Window: 10 * time.Second, Remaining: 50, Reset: start.Add(5 * time.Second)}}, quotasOfKey(b, key))
		assert.InDelta(t, 0.95*10, h.Rate, 1e-9, "paced at its share of 100 per 10 s")
		assert.True(t, h.HeldUntil.IsZero())
		require.Len(t, seen, 1)
		assert.Equal(t, Event{Request: seen[0].Request, Key: key, Rate: h.Rate}, seen[0])

		// Nothing left: the key is held until the reset, first attempts
		// included, and the next request goes after it.
		resp, err = tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		assert.Equal(t, start.Add(3*time.Second), b.Host(key).HeldUntil)
		resp, err = tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		assert.GreaterOrEqual(t, time.Since(start), 3*time.Second, "the third request waited for the reset")

		s := tr.Stats()
		assert.Equal(t, uint64(2), s.Quotas, "responses whose quota was applied")
		assert.Equal(t, uint64(1), s.QuotaHeld)
		assert.NotZero(t, s.Paced)
	})
}

// RetryAt gives a held key's reset; Retry-After wins over the quota's
// reset; a cached answer (Age above 0) changes nothing; with the headers
// off, nothing is read.
func TestQuotaRules(t *testing.T) {
	t.Run("RetryAt gives the reset", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			tr := New(newNext(reply{status: 429, header: ietf("10", "60", "0", "20")}), WithMaxAttempts(1), WithMaxWait(0))
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			at, why := tr.RetryAt(resp, nil)
			readBody(t, resp)
			assert.Equal(t, ReasonHeld, why)
			assert.False(t, at.Before(start.Add(20*time.Second)), "at the reset, or spread after it: %v", at.Sub(start))
		})
	})
	t.Run("Retry-After wins", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			h := ietf("10", "60", "0", "20")
			h.Set("Retry-After", "1")
			b := NewBreaker(BreakerConfig{})
			tr := New(newNext(reply{status: 429, header: h}), WithBreaker(b), WithMaxAttempts(1))
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			assert.Equal(t, start.Add(time.Second), b.Host(keyOf(mustParse(t, testURL)).String()).HeldUntil, "held by the Retry-After, not until the quota's reset")
		})
	})
	t.Run("cached answers and pacing off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cached := ietf("10", "60", "0", "20")
			cached.Set("Age", "30")
			for _, c := range []struct {
				name string
				h    http.Header
				opts []Option
			}{
				{"cached", cached, nil},
				{"off", ietf("10", "60", "0", "20"), []Option{WithAdaptiveRate()}},
			} {
				b := NewBreaker(BreakerConfig{})
				tr := New(newNext(reply{status: 200, header: c.h}), append(c.opts, WithBreaker(b))...)
				resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				require.NoError(t, err)
				readBody(t, resp)
				h := b.Host(keyOf(mustParse(t, testURL)).String())
				assert.Zero(t, tr.Stats().Quotas, c.name)
				assert.Nil(t, quotasOfKey(b, keyOf(mustParse(t, testURL)).String()), c.name)
				assert.True(t, h.HeldUntil.IsZero(), c.name)
			}
		})
	})
	t.Run("partitions", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := NewBreaker(BreakerConfig{})
			// A quota per tenant: the tenant's requests are a key of their own.
			byTenant := func(r *http.Request) string {
				k := r.URL.Scheme + "://" + r.URL.Host
				if t := r.Header.Get("X-Tenant"); t != "" {
					k += "/" + t
				}
				return k
			}
			tr := New(newNext(reply{status: 200, header: ietf("10", "60", "0", "20")}, reply{status: 200}),
				WithBreaker(b), WithKey(byTenant))
			req := newReq(t.Context(), http.MethodGet, nil)
			req.Header.Set("X-Tenant", "a")
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			readBody(t, resp)
			key := keyOf(mustParse(t, testURL)).String()
			assert.False(t, b.Host(key+"/a").HeldUntil.IsZero(), "partition a is held")
			assert.True(t, b.Host(key).HeldUntil.IsZero(), "the key's own partition is not")

			start := time.Now()
			other := newReq(t.Context(), http.MethodGet, nil)
			other.Header.Set("X-Tenant", "b")
			resp, err = tr.RoundTrip(other)
			require.NoError(t, err)
			readBody(t, resp)
			assert.Zero(t, time.Since(start), "partition b went at once")
		})
	})
}

// A key that never advertised a quota has only a sample of its successes
// read, past its first few (perkey.Lane.ReadsQuota): one first attempt in quotaSample per
// stripe of the requests counter, and every response that is not a
// success.
func TestQuotaSampled(t *testing.T) {
	tr := New(newNext())
	r := retrier{t: tr, s: &tr.s}
	ok := &http.Response{StatusCode: 200}
	assert.False(t, r.readsQuota(ok), "a success, not sampled")
	assert.True(t, r.readsQuota(&http.Response{StatusCode: 429}), "a 429")
	r.sampled = true
	assert.True(t, r.readsQuota(ok), "a sampled success")
	sampled := 0
	for range 10 * quotaSample {
		if tr.stats.first.add()%quotaSample == 1 {
			sampled++
		}
	}
	assert.Equal(t, 10, sampled, "one in quotaSample, on this goroutine's stripe")

	r.sampled = false
	r.lane = tr.lanes.Lane(perkey.Key{Host: "api.test"})
	assert.True(t, r.readsQuota(ok), "a new key's success: its lane reads its first successes")
}

// A window the server does not advertise (X-RateLimit-* say nothing of it)
// is learned from how far its reset moves, on the server's clock, when a
// window ends; the key is then paced at the window's rate, not at its
// remaining over a reset in whole seconds.
func TestQuotaLearnsWindow(t *testing.T) {
	at := func(date time.Time, remaining string) http.Header {
		return http.Header{
			"Date":                  {date.UTC().Format(http.TimeFormat)},
			"X-Ratelimit-Limit":     {"500"},
			"X-Ratelimit-Remaining": {remaining},
			"X-Ratelimit-Reset":     {strconv.FormatInt(date.Truncate(time.Second).Add(time.Second).Unix(), 10)},
		}
	}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		b := NewBreaker(BreakerConfig{})
		tr := New(newNext(reply{status: 200, header: at(start, "400")}, reply{status: 200, header: at(start.Add(time.Second), "450")}),
			WithBreaker(b))
		key := keyOf(mustParse(t, testURL)).String()
		send := func() {
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
		}
		send()
		h, q := b.Host(key), quotasOfKey(b, key)
		require.Len(t, q, 1)
		assert.Zero(t, q[0].Window, "not advertised, not learned yet")
		assert.InDelta(t, 0.95*400, h.Rate, 1e-9, "its remaining over its reset")

		time.Sleep(time.Second)
		send()
		h, q = b.Host(key), quotasOfKey(b, key)
		require.Len(t, q, 1)
		assert.Equal(t, time.Second, q[0].Window, "learned: the reset moved by a second")
		assert.InDelta(t, 0.95*500, h.Rate, 1e-9, "the window's rate")
	})
}

// Only answers a limiter counts check its quota: GitHub does not count a
// 304 to a conditional request, and 150 of them under one window, its
// remaining unmoved at 4,900 of 5,000, do not refute the quota.
func TestQuotaNotModifiedIsNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		h := http.Header{
			"Date":                  {start.UTC().Format(http.TimeFormat)},
			"X-Ratelimit-Limit":     {"5000"},
			"X-Ratelimit-Remaining": {"4900"},
			"X-Ratelimit-Reset":     {strconv.FormatInt(start.Add(time.Hour).Unix(), 10)},
			"X-Ratelimit-Resource":  {"core"},
		}
		script := []reply{{status: http.StatusOK, header: h}}
		for range 150 {
			script = append(script, reply{status: http.StatusNotModified, header: h})
		}
		b := NewBreaker(BreakerConfig{})
		tr := New(newNext(script...), WithBreaker(b))
		for range len(script) {
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
		}
		q := quotasOfKey(b, keyOf(mustParse(t, testURL)).String())
		require.Len(t, q, 1)
		assert.Equal(t, int64(5000), q[0].Limit, "the quota stands")
	})
}

// quota is one policy a key's server last advertised, as its lane keeps it.
type quota struct {
	Partition string
	Limit     int64
	Window    time.Duration
	Remaining int64
	Reset     time.Time
}

// quotasOfKey returns the policies the key's server last advertised; nil
// for none.
func quotasOfKey(b *Breaker, key string) []quota {
	l := b.set.Peek(perkey.ParseKey(key))
	if l == nil {
		return nil
	}
	a := l.View(time.Now()).Quota
	var out []quota
	for _, p := range a.Policies[:a.N] {
		out = append(out, quota{Partition: p.Partition, Limit: p.Limit, Window: p.Window, Remaining: p.Remaining, Reset: p.Reset})
	}
	return out
}
