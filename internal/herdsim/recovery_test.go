package herdsim

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/require"
)

// The recovery table: the webhook herd (10,000 deliveries at t = 0, the
// endpoint down for 20 s, base 200 ms, cap 30 s), every caller with a
// deadline of 60 s, as a plain caller with no queue of its own sends it:
// one call to RoundTrip each. Once with an endpoint that comes back at
// full capacity, once with one that serves at most 2,000 requests/s
// after the outage and answers 503 beyond that.
const (
	callerDeadline = 60 * time.Second
	capacity       = 2000 // requests/s after the outage, in the capacity-limited rows
)

func recoveryRows() []Scenario {
	full := retryhttp.FullJitter{Base: base, Cap: maxDelay}
	plain := retryhttp.Exponential{Base: base, Cap: maxDelay}
	alone := func(p retryhttp.Policy) []retryhttp.Option {
		return []retryhttp.Option{retryhttp.WithPolicy(p), retryhttp.WithMaxAttempts(attempts),
			retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil)}
	}
	var rows []Scenario
	for _, c := range []float64{0, capacity} {
		suffix := ""
		if c > 0 {
			suffix = fmt.Sprintf(", recovery at %d/s", capacity)
		}
		rows = append(rows,
			// The defaults: budget, breaker, and the wait for the key.
			Scenario{Name: "defaults" + suffix, Capacity: c, Options: []retryhttp.Option{retryhttp.WithPolicy(full)}},
			// The defaults, but a request the budget or the open circuit
			// turns back is handed back at once (WithMaxWait(0)), as a
			// dispatcher with its own queue wants; here nobody redrives it.
			Scenario{Name: "defaults, no wait" + suffix, Capacity: c, Options: []retryhttp.Option{retryhttp.WithPolicy(full), retryhttp.WithMaxWait(0)}},
			Scenario{Name: "full jitter alone, 12 attempts" + suffix, Capacity: c, Options: alone(full)},
			Scenario{Name: "plain exponential, 12 attempts" + suffix, Capacity: c, Options: alone(plain)},
		)
	}
	for i := range rows {
		rows[i].Deliveries, rows[i].Outage, rows[i].Deadline = deliveries, outage, callerDeadline
	}
	return rows
}

// TestRecoveryTable runs the recovery table and checks what the defaults
// must do: deliver, waste little, and come back at the rate the endpoint
// can take.
func TestRecoveryTable(t *testing.T) {
	scenarios := recoveryRows()
	out := make([]Result, len(scenarios))
	t.Run("rows", func(t *testing.T) {
		for i, s := range scenarios {
			t.Run(s.Name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) { out[i] = Run(s) })
			})
		}
	})
	results := map[string]Result{}
	var b strings.Builder
	fmt.Fprintf(&b, "%-52s %9s %9s %9s %14s %12s %14s\n", "policy", "delivered", "sent", "wasted", "t99 delivered", "peak recov.", "503 after rec.")
	for i, s := range scenarios {
		r := out[i]
		results[s.Name] = r
		t99 := fmt.Sprintf("never (%.1f%%)", 100*float64(r.Delivered)/deliveries)
		if r.T99 != nil {
			t99 = fmt.Sprintf("%.1f s", r.T99.Seconds())
		}
		refused := "–"
		if s.Capacity > 0 {
			refused = fmt.Sprintf("%d/%d", r.AfterRefused, r.AfterAttempts)
		}
		fmt.Fprintf(&b, "%-52s %9d %9d %9d %14s %10.0f/s %14s\n", s.Name, r.Delivered, r.Attempts, r.Wasted, t99, r.PeakRecoveryRPS, refused)
	}
	t.Log("\n" + b.String())

	// The full-jitter row of the main table (TestHerdTable), 12 attempts,
	// with budget and breaker off: what every delivery retrying its whole
	// allowance wastes.
	var fullJitter Result
	synctest.Test(t, func(t *testing.T) {
		fullJitter = Run(Scenario{Name: "full jitter", Deliveries: deliveries, Outage: outage, Options: []retryhttp.Option{
			retryhttp.WithPolicy(retryhttp.FullJitter{Base: base, Cap: maxDelay}), retryhttp.WithMaxAttempts(attempts),
			retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil)}})
	})

	d := results["defaults"]
	require.GreaterOrEqual(t, d.Delivered, deliveries*999/1000, "defaults: delivered")
	require.LessOrEqual(t, float64(d.Wasted), 0.02*float64(fullJitter.Wasted),
		"defaults: wasted %d vs full jitter's %d", d.Wasted, fullJitter.Wasted)
	require.NotNil(t, d.T99, "defaults: t99")
	require.LessOrEqual(t, *d.T99, outage+2*time.Second, "defaults: t99")

	c := results["defaults, recovery at 2000/s"]
	require.GreaterOrEqual(t, c.Delivered, deliveries*999/1000, "capacity-limited: delivered")
	require.NotNil(t, c.T99, "capacity-limited: t99")
	ideal := outage + time.Duration(1.25*float64(deliveries)/capacity*float64(time.Second))
	require.LessOrEqual(t, *c.T99, ideal, "capacity-limited: t99")
	require.LessOrEqual(t, 20*c.AfterRefused, c.AfterAttempts,
		"capacity-limited: 503s after recovery (%d) at most 5%% of the attempts after it (%d)", c.AfterRefused, c.AfterAttempts)

	// Without the wait, the defaults hand nearly every delivery back
	// failed: the refusals the wait turns into deliveries.
	require.Less(t, results["defaults, no wait"].Delivered, deliveries/100, "defaults without the wait: delivered")
}
