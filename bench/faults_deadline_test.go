package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
)

// Scenario 2's shape: 25 goroutines x 8 GETs, each with a 300 ms deadline,
// is 200 GETs over about 2.4 s, against a host that answers every request
// and whose answers the proxy delays by 500 ms.
const (
	slowWorkers, slowEach = 25, 8
	slowDeadline          = 300 * time.Millisecond
	slowLatencyMS         = 500
)

// testShortDeadline: a healthy host that is slower than the callers will
// wait. The callers' deadlines say nothing about the host, so its circuit
// must never open; every GET ends with the context's deadline error. The
// breaker is the test's own, so that OnStateChange sees every change and
// Host reports the key's state at the end.
func testShortDeadline(t *testing.T, tp *toxiproxy) faultRow {
	checkLeaks(t)
	h := newHost(t, func(w http.ResponseWriter, _ *http.Request, _ int64) { w.Write([]byte("ok\n")) })
	x := tp.newProxy(t, "slowhost", h.addr())
	x.addToxic(t, "latency", "latency", "downstream", map[string]any{"latency": slowLatencyMS})

	c := newCounted()
	br := retryhttp.NewBreaker(retryhttp.BreakerConfig{OnStateChange: c.changed})
	tr := retryhttp.New(nil, retryhttp.WithBreaker(br), retryhttp.WithHooks(c.hooks()))
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	key := "http://" + x.addr

	gets := slowWorkers * slowEach
	results := make([]getResult, gets)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range slowWorkers {
		wg.Go(func() {
			for i := range slowEach {
				results[w*slowEach+i] = timedGet(client, x.url("/item"), slowDeadline)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	attempts := c.attempts.Load()
	received := h.waitReceived(attempts, 5*time.Second)

	for i, r := range results {
		var e *retryhttp.Error
		if assert.True(t, errors.As(r.err, &e), "GET %d: ends with a *retryhttp.Error: %v", i, r.err) {
			assert.ErrorIs(t, r.err, context.DeadlineExceeded, "GET %d: ends with the context's deadline error", i)
		}
		assert.LessOrEqual(t, r.elapsed, slowDeadline+deadlineSlack, "GET %d returns by its deadline", i)
	}
	_, opened := c.opened()
	assert.False(t, opened, "a healthy host slower than the callers' deadlines never has its circuit opened")
	assert.Equal(t, retryhttp.StateClosed, br.Host(key).State, "the host's circuit is closed at the end")
	assert.Equal(t, attempts, received, "the host received every attempt: it is healthy, only slow")

	return faultRow{
		Scenario: fmt.Sprintf("healthy host +%d ms (latency toxic), %d goroutines x %d GETs, %s deadlines", slowLatencyMS, slowWorkers, slowEach, slowDeadline),
		Client:   "retryhttp.New(nil, WithBreaker(own))",
		Figures: fmt.Sprintf("%d GETs; %d attempts sent, %d received by the host; %s; circuit %s, %s at the end; %.2f s, slowest GET %.2f s; peak %d attempts in flight",
			gets, attempts, received, tally(results), c.circuit(), br.Host(key).State, wall.Seconds(), slowest(results).Seconds(), c.inFlight.peak.Load()),
	}
}
