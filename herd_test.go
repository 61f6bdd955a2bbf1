package retryhttp_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/internal/herdsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHerdBudgetAndBreaker runs the webhook herd in virtual time: 2,000
// concurrent GETs to an endpoint that answers 503 for 20 s, then 200. With
// the default budget, breaker and wait, every delivery is made, and the
// endpoint receives at most a tenth of the failed retries it receives with
// the budget and breaker turned off. (The recovery table in
// internal/herdsim runs 10,000; 2,000 keep the ratio the budget sets, a
// tenth of the deposits plus a floor, at a fifth of the cost under -race.)
func TestHerdBudgetAndBreaker(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	const n = 2000
	run := func(name string, opts ...retryhttp.Option) herdsim.Result {
		var r herdsim.Result
		synctest.Test(t, func(t *testing.T) {
			r = herdsim.Run(herdsim.Scenario{Name: name, Deliveries: n, Outage: 20 * time.Second, Deadline: time.Minute, Options: opts})
		})
		t.Logf("%-22s attempts=%6d retries=%6d wasted=%6d delivered=%5d circuit-open=%d last return at %v",
			r.Name, r.Attempts, r.Retries, r.Wasted, r.Delivered, r.CircuitOpen, r.End)
		return r
	}
	off := run("budget+breaker off", retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil))
	on := run("defaults")

	// Without a budget every delivery spends its three retries inside the
	// outage; the default budget banks at most 200 tokens from 2,000
	// deposits, plus the floor's 10 per second, and the rest wait.
	require.Equal(t, 3*n, off.Wasted, "failed retries with budget and breaker off")
	require.LessOrEqual(t, on.Wasted*10, off.Wasted,
		"failed retries with defaults (%d) must be at most 0.1x those without budget and breaker (%d)", on.Wasted, off.Wasted)
	require.Positive(t, on.Wasted, "the budget still lets some retries through")
	require.Equal(t, n, on.Delivered, "deliveries with the defaults")
	require.Zero(t, off.Delivered, "deliveries with budget and breaker off: their retries run out in the outage")
}

// A batch to an API that admits a twentieth of it per second (500 at
// 25/s, burst 2, each attempt answered after 10 ms; internal/herdsim's
// TestThrottledBatch sends 10,000 at 500/s through 200 workers), all sent
// at once. Full jitter alone sends every first attempt before the first
// 429 comes back, so all but 2 are answered 429. The defaults send ten
// before the key's first answer (the key's first wave), so 8 are, and the
// rest go at the rate the answers set. From then on, with the adaptive
// rate, every request is delivered within 1.25x the ideal 20 s, with few
// more 429s; without it, many more. The first wave's 429s must not trip
// the circuit: the host serves every request it admits (tried, counting
// them as failures: the circuit opened, and the batch took 45 s).
func TestPaceThrottledBatch(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	const n = 500
	run := func(name string, opts ...retryhttp.Option) herdsim.ThrottledResult {
		var r herdsim.ThrottledResult
		synctest.Test(t, func(t *testing.T) {
			r = herdsim.RunThrottled(herdsim.Throttled{Name: name, Requests: n, Rate: n / 20, Burst: n / 200,
				Horizon: 60 * time.Second, Latency: 10 * time.Millisecond, Options: opts})
		})
		t.Logf("%s: delivered %d in %v, 429s %d of %d attempts (%d to the first wave)",
			name, r.Delivered, r.Done, r.Throttled, r.Attempts, r.FirstWave)
		return r
	}
	adaptive := run("adaptive rate (the defaults)")
	plain := run("full jitter alone", retryhttp.WithAdaptiveRate(), retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil))
	later := adaptive.Throttled - adaptive.FirstWave
	require.Equal(t, n, adaptive.Delivered)
	assert.Equal(t, 10-2, adaptive.FirstWave, "429s to the first wave: ten sent before any answer")
	assert.Equal(t, n-2, plain.FirstWave, "429s to full jitter's first wave: all sent before any answer")
	assert.LessOrEqual(t, adaptive.Done, 25*time.Second, "time to deliver all")
	assert.LessOrEqual(t, float64(later), 0.05*float64(adaptive.Attempts), "429s after the first wave, among attempts")
	assert.GreaterOrEqual(t, float64(plain.Throttled-plain.FirstWave), 5*float64(later), "full jitter alone's 429s after the first wave")
}
