package retryhttp_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/internal/herdsim"
	"github.com/stretchr/testify/require"
)

// TestHerdBudgetAndBreaker runs the webhook herd in virtual time: 2,000
// concurrent GETs to an endpoint that answers 503 for 20 s, then 200. With
// the default budget and breaker, the endpoint must receive at most a tenth
// of the retries it receives with both turned off. (The herd table in
// internal/herdsim runs 10,000; 2,000 keep the ratio the budget sets, a
// tenth of the deposits plus a floor, at a fifth of the cost under -race.)
func TestHerdBudgetAndBreaker(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	const n = 2000
	run := func(name string, opts ...retryhttp.Option) herdsim.Result {
		var r herdsim.Result
		synctest.Test(t, func(t *testing.T) {
			r = herdsim.Run(herdsim.Scenario{Name: name, Deliveries: n, Outage: 20 * time.Second, Options: opts})
		})
		t.Logf("%-22s attempts=%6d retries=%6d delivered=%5d circuit-open=%d last return at %v",
			r.Name, r.Attempts, r.Retries, r.Delivered, r.CircuitOpen, r.End)
		return r
	}
	off := run("budget+breaker off", retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil))
	on := run("defaults")

	// Without a budget every delivery spends its three retries inside the
	// outage; the default budget banks at most 200 tokens from 2,000
	// deposits, plus the floor's 10 per second.
	require.Equal(t, 3*n, off.Retries, "retries with budget and breaker off")
	require.LessOrEqual(t, on.Retries*10, off.Retries,
		"retries with defaults (%d) must be at most 0.1x those without budget and breaker (%d)", on.Retries, off.Retries)
	require.Positive(t, on.Retries, "the budget still lets some retries through")
}
