package retryhttp

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ietfServer is a loopback API that speaks the current IETF form
// (draft-ietf-httpapi-ratelimit-headers-12): for each API key (the
// Authorization header), a per-second burst and a per-minute quota, both
// fixed windows, advertised in RateLimit-Policy and RateLimit with the
// key's partition as pk; 429 with Retry-After beyond either.
type ietfServer struct {
	burst, minute int // requests per 1 s and per 60 s window

	mu        sync.Mutex
	start     time.Time
	used      map[string]*[2]int // per API key: this second's and this minute's count; guarded by mu
	at        map[string]*[2]int // the windows those counts are for; guarded by mu
	served    map[string]int     // guarded by mu
	throttled atomic.Int64
}

func (s *ietfServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Authorization")
	s.mu.Lock()
	since := time.Since(s.start)
	if s.used[key] == nil {
		s.used[key], s.at[key] = &[2]int{}, &[2]int{}
	}
	used, at := s.used[key], s.at[key]
	spans := [2]time.Duration{time.Second, time.Minute}
	limits := [2]int{s.burst, s.minute}
	ok := true
	for i, span := range spans {
		if k := int(since / span); k != at[i] {
			at[i], used[i] = k, 0
		}
		ok = ok && used[i] < limits[i]
	}
	if ok {
		used[0]++
		used[1]++
		s.served[key]++
	}
	var left, reset [2]int
	for i, span := range spans {
		left[i] = limits[i] - used[i]
		reset[i] = int(math.Ceil((time.Duration(at[i]+1)*span - since).Seconds()))
	}
	s.mu.Unlock()
	pk := ":" + key + ":" // a Byte Sequence of the key's bytes, as the draft's examples carry pk
	w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"burst";q=%d;w=1;pk=%s, "minute";q=%d;w=60;pk=%s`, s.burst, pk, s.minute, pk))
	w.Header().Set("RateLimit", fmt.Sprintf(`"burst";r=%d;t=%d;pk=%s, "minute";r=%d;t=%d;pk=%s`, left[0], reset[0], pk, left[1], reset[1], pk))
	if !ok {
		s.throttled.Add(1)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// Two API keys share one host, each with a burst of 20 a second and a
// quota of 600 a minute (10 a second, the tighter rate). With each key its
// own quota partition, 40 GETs per key from 4 workers per key finish with
// no 429 within 1.1x the 4 s the tighter policy sets, and neither key's
// quota slows the other.
func TestQuotaPartitionsIETF(t *testing.T) {
	srv := &ietfServer{burst: 20, minute: 600, start: time.Now(), used: map[string]*[2]int{}, at: map[string]*[2]int{}, served: map[string]int{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	tr := New(ts.Client().Transport, WithKey(func(r *http.Request) string {
		return r.URL.Scheme + "://" + r.URL.Host + "/" + r.Header.Get("Authorization")
	}))
	defer tr.CloseIdleConnections()

	const perKey, workers = 40, 4
	keys := []string{"a2V5LWE=", "a2V5LWI="}
	took := make([]time.Duration, len(keys))
	var wg sync.WaitGroup
	start := time.Now()
	for i, key := range keys {
		var next atomic.Int64
		var done sync.WaitGroup
		for range workers {
			done.Go(func() {
				for next.Add(1) <= perKey {
					req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/item", nil)
					if !assert.NoError(t, err) {
						return
					}
					req.Header.Set("Authorization", key)
					resp, err := tr.RoundTrip(req)
					if assert.NoError(t, err) {
						assert.Equal(t, http.StatusOK, resp.StatusCode)
						resp.Body.Close()
					}
				}
			})
		}
		wg.Go(func() {
			done.Wait()
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	ideal := time.Duration(perKey) * time.Second / 10
	t.Logf("key a done in %v, key b in %v; ideal %v; 429s %d; stats: quotas %d, paced %d",
		took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), ideal, srv.throttled.Load(), tr.Stats().Quotas, tr.Stats().Paced)
	require.Zero(t, srv.throttled.Load(), "429s")
	for i, key := range keys {
		assert.Equal(t, perKey, srv.served[key], "served for key %d", i)
		assert.LessOrEqual(t, took[i], ideal*11/10, "key %d: done within 1.1x the tighter policy's time", i)
	}
}
