package bench

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deadlineSlack is how far past its deadline a call may return: the time
// for the transport to see the context end and unwind, on a loaded 2-core
// machine under -race. It is a bound on lateness, not a speed claim.
const deadlineSlack = time.Second

// burst is the size of the black-hole burst: workers goroutines, each
// sending each GETs in turn, every GET with its own deadline.
type burst struct {
	workers, each int
	deadline      time.Duration
}

func (b burst) String() string {
	return fmt.Sprintf("%d goroutines x %d GETs, %s deadlines", b.workers, b.each, b.deadline)
}

// burstSize is the full burst with -args -table (100 x 10 GETs with 3 s
// deadlines: about 30 s, as every GET waits out its deadline, sent or
// not), and a tenth of it otherwise (about 10 s), so that CI stays quick.
// Either trips the default breaker with its second round of GETs: the
// first round's attempts, each counted against the host as it waits out
// its deadline (longer than BreakerConfig.SlowAfter's 1 s), start the
// failure period, and the second round's come a deadline later, which
// must be at least the breaker's 2 s span; the rounds after wait for the
// open circuit without being sent, but for its probes.
func burstSize() burst {
	if *table {
		return burst{workers: 100, each: 10, deadline: 3 * time.Second}
	}
	return burst{workers: 20, each: 5, deadline: 2 * time.Second}
}

// testBlackHole: the proxy's timeout toxic with timeout 0 drops everything
// the host sends back and never closes the connection, so the host accepts
// every request and never answers. The burst goes through a transport with
// the defaults (budget, breaker). No GET succeeds, each returns by its
// deadline, each failure is a *retryhttp.Error, and the host received no
// more than was sent; the circuit opens, and at most half the GETs are
// sent: the attempts that waited out their callers' deadlines count
// against a host that never answers.
func testBlackHole(t *testing.T, tp *toxiproxy, b burst) faultRow {
	checkLeaks(t)
	h := newHost(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		// Answered at once; the toxic drops the answer on its way back.
		w.Write([]byte("ok\n"))
	})
	x := tp.newProxy(t, "blackhole", h.addr())
	x.addToxic(t, "blackhole", "timeout", "downstream", map[string]any{"timeout": 0})

	c := newCounted()
	tr := retryhttp.New(nil, retryhttp.WithHooks(c.hooks()), c.breaker())
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	gets := b.workers * b.each
	results := make([]getResult, gets)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range b.workers {
		wg.Go(func() {
			for i := range b.each {
				results[w*b.each+i] = timedGet(client, x.url("/item"), b.deadline)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	attempts := c.attempts.Load()
	received := h.waitReceived(attempts, 5*time.Second)

	for i, r := range results {
		require.Error(t, r.err, "GET %d: the host never answers, so no GET succeeds", i)
		var e *retryhttp.Error
		assert.True(t, errors.As(r.err, &e), "GET %d: a failure is a *retryhttp.Error: %v", i, r.err)
		assert.LessOrEqual(t, r.elapsed, b.deadline+deadlineSlack, "GET %d returns by its deadline", i)
	}
	assert.LessOrEqual(t, received, attempts, "the host cannot receive more than the transport sent")
	assert.GreaterOrEqual(t, attempts, int64(1), "the first GET is sent")
	assert.Zero(t, c.inFlight.cur.Load(), "every attempt has returned")
	_, opened := c.opened()
	assert.True(t, opened, "the circuit opens on a host that never answers within the callers' deadlines")
	assert.LessOrEqual(t, attempts, int64(gets/2), "at most half the GETs are sent into the black-holed host")
	slow := tr.Stats().SlowAttempts
	assert.Positive(t, slow, "the attempts that waited out their deadlines are counted against the host")

	return faultRow{
		Scenario: "black-holed host (timeout toxic, 0), " + b.String(),
		Client:   "retryhttp.New(nil) (defaults)",
		Figures: fmt.Sprintf("%d GETs; %d attempts sent, %d received by the host, %d counted slow; %s; circuit %s; burst %.2f s, slowest GET %.2f s; peak %d attempts in flight",
			gets, attempts, received, slow, tally(results), c.circuit(), wall.Seconds(), slowest(results).Seconds(), c.inFlight.peak.Load()),
	}
}
