package herdsim

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestFixedWindow: 2,000 GETs from 200 workers against a fixed window of
// 100 requests per second that answers 429 with Retry-After: 1. The
// defaults deliver at least 99%, with 429s at most 3% of the attempts (none
// with the quota headers) and the batch done within 1.15x the 20 s of a client sending exactly the
// quota: with the quota headers, by reading them; without, by what the
// first burst and its Retry-After tell of the quota, then the adaptive
// rate.
//
// The limiter stands in front of the handler, as rate limiters do, and
// refuses in 1 ms an attempt the handler would take 10 ms to answer; or,
// in the second setup, as late as the handler answers its 200. Each setup
// runs three times, as the order the scheduler runs the workers in
// varies. 200 workers meet a window of 100: a client that sent them all
// at once would have 100 answered 429. The key's first wave (ten, then
// two more per answer) lets the first answers tell the quota before the
// rest go: with the headers, none is refused; without them, the wave
// doubles each round trip until the window refuses about 50.
func TestFixedWindow(t *testing.T) {
	for _, refuse := range []time.Duration{time.Millisecond, 0} {
		for _, headers := range []bool{true, false} {
			w := Window{Name: "defaults, quota headers", Requests: 2_000, Workers: 200, Limit: 100, Span: time.Second,
				Headers: headers, Latency: 10 * time.Millisecond, RefuseLatency: refuse}
			if !headers {
				w.Name = "defaults, no quota headers"
			}
			if refuse == 0 {
				w.Name += ", 429 as slow as 200"
			}
			for range 3 {
				var r WindowResult
				synctest.Test(t, func(t *testing.T) { r = RunWindow(w) })
				t.Log(r)
				t.Logf("admitted per second: %v", perSecond(r.PerBucket))
				t.Logf("429s per second: %v", perSecond(r.Refused))
				t.Logf("stats: quotas %d held %d paced %d waits %d budget denied %d give-ups %v",
					r.Stats.Quotas, r.Stats.QuotaHeld, r.Stats.Paced, r.Stats.Waits, r.Stats.BudgetDenied, r.Stats.GiveUps)
				assert.GreaterOrEqual(t, r.Delivered, 1_980, "%s: delivered", w.Name)
				assert.LessOrEqual(t, r.Done, time.Duration(1.15*float64(w.Ideal())), "%s: done, against the ideal %v", w.Name, w.Ideal())
				assert.LessOrEqual(t, float64(r.Throttled), 0.03*float64(r.Attempts), "%s: 429s among attempts", w.Name)
				if headers {
					assert.Zero(t, r.Throttled, "%s: 429s, the first answers telling the quota", w.Name)
				}
			}
		}
	}
}

// perSecond sums per-Bucket counts per second.
func perSecond(per []int) []int {
	var out []int
	for i, n := range per {
		if k := i / int(time.Second/Bucket); k >= len(out) {
			out = append(out, 0)
		}
		out[len(out)-1] += n
	}
	return out
}

// TestQuotaWindowResets: 10,000 requests from 200 workers, each with a 60 s
// deadline, against a quota of 1,000 per 10 s window that the API
// advertises. Requests go in the window that admits them (no 429 past the
// first wave), do not pile up when a window resets (the busiest 100 ms
// after a reset at most twice the mean), and none returns after its
// deadline.
func TestQuotaWindowResets(t *testing.T) {
	w := Window{Name: "defaults, 1,000 per 10 s", Requests: 10_000, Workers: 200, Limit: 1_000, Span: 10 * time.Second,
		Headers: true, Latency: 10 * time.Millisecond, Deadline: time.Minute}
	var r WindowResult
	synctest.Test(t, func(t *testing.T) { r = RunWindow(w) })
	t.Log(r)
	t.Logf("admitted per second: %v", perSecond(r.PerBucket))
	busiest, mean := r.BusiestAfterReset(w.Span)
	t.Logf("busiest 100 ms after a reset: %d, mean %.1f", busiest, mean)
	assert.Equal(t, w.Requests, r.Delivered, "delivered")
	assert.Zero(t, r.Throttled, "429s: every request went in a window that admitted it")
	assert.LessOrEqual(t, float64(busiest), 2*mean, "the busiest 100 ms after a reset, against the mean")
	assert.Zero(t, r.Late, "requests that returned after their deadline")
}
