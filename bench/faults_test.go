package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"go.uber.org/goleak"
)

// TestToxiproxyFaults puts a real fault proxy, toxiproxy, between a
// retryhttp transport and a loopback server, and checks what callers see
// when the proxy black-holes the host, delays a healthy host past the
// callers' deadlines, cuts a 200's body mid-read, and slows an upload that
// the host answers early. The test builds the server from the module's tool
// directive and owns its process. With -v or -args -table it logs a table
// of each scenario's figures; -args -table also makes the black-hole burst
// full size (100 goroutines x 10 GETs, 3 s deadlines).
func TestToxiproxyFaults(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs after toxiproxy has been stopped
	tp := startToxiproxy(t, buildToxiproxy(t, t.TempDir()))
	var rows []faultRow
	t.Run("black-holed host", func(t *testing.T) { rows = append(rows, testBlackHole(t, tp, burstSize())) })
	t.Run("short deadline, slow host", func(t *testing.T) { rows = append(rows, testShortDeadline(t, tp)) })
	t.Run("body cut mid-read", func(t *testing.T) { rows = append(rows, testCutBody(t, tp)...) })
	t.Run("upload answered early", func(t *testing.T) { rows = append(rows, testEarlyAnswer(t, tp)...) })
	t.Run("lossy link", func(t *testing.T) { rows = append(rows, testLossyLink(t, tp)) })
	figures := faultsMarkdown(rows)
	if *table && !testing.Verbose() {
		fmt.Print(figures)
	}
	t.Logf("toxiproxy faults, %s:\n%s", time.Now().UTC().Format("2006-01-02 15:04 UTC"), figures)
}

// checkLeaks registers, as the subtest's first cleanup (so it runs after
// every other), a check that the subtest left no goroutine behind: the
// toxiproxy process's waiter and whatever ran before are ignored.
func checkLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// faultRow is one line of the figures table.
type faultRow struct {
	Scenario, Client, Figures string
}

// faultsMarkdown is the figures table, one row per scenario and client.
func faultsMarkdown(rows []faultRow) string {
	var b strings.Builder
	b.WriteString("| scenario | client | figures |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Scenario, r.Client, r.Figures)
	}
	return b.String()
}

// host is a loopback server behind the proxy that counts the requests it
// receives and signals each arrival, so that a test can wait for the
// count without sleeping.
type host struct {
	srv      *httptest.Server
	received atomic.Int64
	arrived  chan struct{}
}

// newHost starts h on 127.0.0.1 and closes it when the test ends. h is
// told which request, counting from 1, it is answering.
func newHost(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int64)) *host {
	o := &host{arrived: make(chan struct{}, 1<<16)}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := o.received.Add(1)
		select {
		case o.arrived <- struct{}{}:
		default: // the count is what matters; a full channel still wakes the waiter
		}
		h(w, r, n)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// addr is the host's host:port, the proxy's upstream.
func (o *host) addr() string { return o.srv.Listener.Addr().String() }

// waitReceived waits until the host has received want requests or, at
// most, d has passed, and returns the count. The requests were sent before
// the call; waiting covers only their way through the proxy.
func (o *host) waitReceived(want int64, d time.Duration) int64 {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for o.received.Load() < want {
		select {
		case <-o.arrived:
		case <-timer.C:
			return o.received.Load()
		}
	}
	return o.received.Load()
}

// inFlight counts attempts in flight and keeps the peak.
type inFlight struct{ cur, peak atomic.Int64 }

func (f *inFlight) start() {
	n := f.cur.Add(1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (f *inFlight) done() { f.cur.Add(-1) }

// counted is a transport's hooks that count attempts, attempts in flight
// and circuit changes, with the instant of each change.
type counted struct {
	attempts atomic.Int64
	inFlight inFlight
	start    time.Time
	mu       sync.Mutex
	changes  []circuitChange
}

type circuitChange struct {
	at time.Duration // since start
	retryhttp.Event
}

func newCounted() *counted { return &counted{start: time.Now()} }

func (c *counted) hooks() *retryhttp.Hooks {
	return &retryhttp.Hooks{
		AttemptStart: func(retryhttp.Event) { c.attempts.Add(1); c.inFlight.start() },
		AttemptDone:  func(retryhttp.Event) { c.inFlight.done() },
	}
}

// breaker returns the default breaker, its changes recorded by c.
func (c *counted) breaker() retryhttp.Option {
	return retryhttp.WithBreaker(retryhttp.NewBreaker(retryhttp.BreakerConfig{OnStateChange: c.changed}))
}

// changed records a circuit change: a BreakerConfig.OnStateChange.
func (c *counted) changed(i retryhttp.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changes = append(c.changes, circuitChange{time.Since(c.start), i})
}

// opened returns when the circuit first opened, if it did.
func (c *counted) opened() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.changes {
		if ch.To == retryhttp.StateOpen {
			return ch.at, true
		}
	}
	return 0, false
}

// circuit describes the changes for the table.
func (c *counted) circuit() string {
	c.mu.Lock()
	n := len(c.changes)
	c.mu.Unlock()
	if at, ok := c.opened(); ok {
		return fmt.Sprintf("opened at %.2f s (%d changes)", at.Seconds(), n)
	}
	if n == 0 {
		return "closed throughout"
	}
	return fmt.Sprintf("never open (%d changes)", n)
}

// getResult is what one GET through the transport came to.
type getResult struct {
	status  int
	err     error
	elapsed time.Duration // from the call to its return, body read
}

// timedGet sends one GET with a deadline d and reads the body.
func timedGet(c *http.Client, url string, d time.Duration) getResult {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return getResult{err: err}
	}
	resp, err := c.Do(req)
	if err != nil {
		return getResult{err: err, elapsed: time.Since(start)}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return getResult{status: resp.StatusCode, err: err, elapsed: time.Since(start)}
}

// outcome names what a call ended with: "200", or the Error's reason and
// cause, or the type of an error that is not a *retryhttp.Error.
func outcome(r getResult) string {
	if r.err == nil {
		return fmt.Sprint(r.status)
	}
	var e *retryhttp.Error
	if !errors.As(r.err, &e) {
		return fmt.Sprintf("not a *retryhttp.Error: %T %v", r.err, r.err)
	}
	cause := e.Err.Error()
	switch {
	case errors.Is(e.Err, context.DeadlineExceeded):
		cause = "deadline exceeded"
	case errors.Is(e.Err, retryhttp.ErrCircuitOpen):
		cause = "circuit open"
	}
	return fmt.Sprintf("%s (%s)", e.Reason, cause)
}

// tally counts the outcomes, most frequent first.
func tally(rs []getResult) string {
	counts := map[string]int{}
	for _, r := range rs {
		counts[outcome(r)]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := counts[b] - counts[a]; c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	return strings.Join(parts, ", ")
}

// slowest is the longest call.
func slowest(rs []getResult) time.Duration {
	var m time.Duration
	for _, r := range rs {
		m = max(m, r.elapsed)
	}
	return m
}
