package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// metastableTestConfig is TestMetastable's configuration. By default it
// runs the client without retries, go-retryablehttp and retryhttp, with a
// 1 s warm-up and a 4 s tail, so that CI runs both cases in under a
// minute; with -args -table, every client, with a 3 s warm-up and a 12 s
// tail. Under the race detector the server and the load are scaled down
// by four (8 workers, 220 arrivals/s, a queue of 2,500): every time in the
// scenario (service, trigger, timeouts, the time the full queue takes to
// drain) stays the same, and the machine keeps up with the load, which at
// full scale it does not when every request costs several times more CPU.
func metastableTestConfig(table bool) MetastableConfig {
	c := MetastableConfig{Warmup: time.Second, Tail: 4 * time.Second}
	if raceDetector {
		c.Server = BacklogConfig{Workers: 8, QueueMax: 2_500}
	}
	if table {
		c.Warmup, c.Tail = 3*time.Second, 12*time.Second
		return c
	}
	for _, k := range []string{"none", "retryablehttp", "retryhttp"} {
		cl, _ := MetastableClientByKey(k)
		c.Clients = append(c.Clients, cl)
	}
	return c
}

// TestMetastable cuts a loopback server's capacity to a fifth for 1 s and,
// separately, 3 s, under open-loop load at 55% of its capacity, through
// each client in turn against a fresh server, and logs the table. The
// client without retries must recover within the tail, and go-retryablehttp
// later or never: its retries of what timed out keep the queue of a
// server that serves abandoned requests full after the trigger.
// retryhttp's defaults must recover within 0.5 s of the client without
// retries in both cases.
func TestMetastable(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := metastableTestConfig(*table).withDefaults()
	start := time.Now()
	rs := RunMetastable(c)
	t.Logf("in %v:\n%s", time.Since(start).Round(time.Millisecond), MetastableMarkdown(c, rs))

	require.Len(t, rs, len(c.Triggers))
	for _, res := range rs {
		require.Len(t, res.Runs, len(c.Clients))
		byKey := map[string]MetastableRun{}
		for i, r := range res.Runs {
			byKey[c.Clients[i].Key] = r
			good := 0
			for k := range r.Good {
				good += r.Good[k]
			}
			before, _ := r.Goodput(0, r.Warmup)
			assert.GreaterOrEqual(t, before, RecoveredShare, "%v, %s: goodput before the trigger", res.Trigger, r.Client)
			assert.LessOrEqual(t, r.Server.Received, r.Attempts, "%v, %s: the server receives at most what the client sent", res.Trigger, r.Client)
			assert.LessOrEqual(t, r.Server.Served+r.Server.Rejected, r.Server.Received, "%v, %s: the server answers at most what it received", res.Trigger, r.Client)
			assert.LessOrEqual(t, good, r.Server.Served-r.Server.ServedGone, "%v, %s: every success was served to a client still waiting", res.Trigger, r.Client)
			assert.LessOrEqual(t, r.MaxAttempts, c.Schedule.Attempts, "%v, %s: attempts per request", res.Trigger, r.Client)
		}

		none, peer := byKey["none"], byKey["retryablehttp"]
		assert.Equal(t, none.Requests, none.Attempts, "%v: the client without retries sends each request once", res.Trigger)
		dNone, ok := none.Recovery()
		require.True(t, ok, "%v: the client without retries recovers within the tail", res.Trigger)
		if d, ok := peer.Recovery(); ok {
			assert.Greater(t, d, dNone, "%v: go-retryablehttp recovers later than the client without retries, or never", res.Trigger)
		}
		if cl, ok := byKey["failsafe"]; ok {
			if d, ok := cl.Recovery(); ok {
				assert.Greater(t, d, dNone, "%v: failsafe-go's retry recovers later than the client without retries, or never", res.Trigger)
			}
		}

		d, ok := byKey["retryhttp"].Recovery()
		if assert.True(t, ok, "%v: retryhttp recovers within the tail", res.Trigger) {
			assert.LessOrEqual(t, d, dNone+500*time.Millisecond, "%v: retryhttp recovers within 0.5 s of the client without retries (%v)", res.Trigger, dNone)
		}
	}
}
