package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Bounds on retryhttp's hedging, checked in each scenario's "retryhttp
// bounds" subtest (checkRetryhttp). They are the claims of WithHedging;
// tune them here.
const (
	// hedgeP99Cut: under stragglers, p99 at most the unhedged client's
	// divided by this.
	hedgeP99Cut = 5.0
	// hedgeMaxExtra: attempts the server saw beyond one per request, as a
	// share of the requests.
	hedgeMaxExtra = 0.06
	// hedgePeerP99Factor and hedgeP99Jitter: p99 at most the best peer's
	// among those that sent no more extra load, times the factor, plus
	// the jitter (timer and scheduler noise on a loaded runner).
	hedgePeerP99Factor = 1.0
	hedgeP99Jitter     = time.Millisecond
	// Near capacity: goodput at least the unhedged client's times
	// capGoodputFactor, p99 at most its times capP99Factor, and at most
	// capMaxExtraLate extra load in the run's second half, once the queue
	// has grown.
	capGoodputFactor = 0.97
	capP99Factor     = 1.1
	capMaxExtraLate  = 0.01
	// h2CancelWithin: over HTTP/2 the losing copy's handler must see its
	// stream reset (context ended, or a write fail) within this of its
	// start, well before it would have ended on its own.
	h2CancelWithin = 500 * time.Millisecond
)

// Sizes of the scenarios, small enough that TestHedging runs in about a
// minute with -race on two cores. Each client gets its own server and
// base transport, and runs alone, one after another: clients timed side
// by side on two cores would measure each other.
const (
	hedgeRate    = 500.0       // requests a second, straggler scenarios
	hedgeWarm    = 200         // warm-up requests, so that learned delays have data
	hedgeN       = 1_000       // measured requests
	hedgeTimeout = time.Second // each request's deadline
	capLoad      = 0.95        // near capacity: the share of the server's capacity that arrives
	capSpan      = 3 * time.Second
	capWarm      = 300
)

// hedgedhttpPool is the function of hedgedhttp's worker goroutines: its
// RoundTrip runs every copy in a package-level pool whose goroutines stay
// 10 s after their last task, with no way to stop them.
const hedgedhttpPool = "github.com/cristalhq/hedgedhttp.runInPool.func1"

// TestHedging measures, in one run and side by side, a client without
// hedging (retryhttp's defaults), retryhttp.WithHedging(0.05), failsafe-go's
// hedge policy with the p95 of a warm-up round as its delay (with and
// without its budget) and hedgedhttp with a fixed 10 ms delay, under four
// servers: random stragglers (5% of attempts 20x slower), stragglers per
// connection (5% of connections), a server near capacity whose queued
// work is never skipped, so that every hedge costs capacity, and keyless
// POSTs, which must never be sent twice. Load is open loop: requests start
// on a schedule whatever the earlier ones do. Each scenario logs a table;
// retryhttp's own bounds are in its "retryhttp bounds" subtest, the rest
// checks that the harness measures what it claims.
func TestHedging(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		// Registered first, so it runs last. The package's TestMain
		// checks for leaks without ignoring hedgedhttp's pool: wait for
		// it here, where the wait is bounded and explained.
		awaitHedgedhttpPool(t, 12*time.Second)
		goleak.VerifyNone(t, ignore)
	})
	t.Logf("hedging, %s, GOMAXPROCS %d, race %v; each scenario logs its table", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		runtime.GOMAXPROCS(0), raceDetector)
	t.Run("random stragglers", testRandomStragglers)
	t.Run("per-connection stragglers", testConnStragglers)
	t.Run("POST safety", testPostSafety)
	t.Run("near capacity", testNearCapacity)
}

// checkHedgeLeaks registers, as the subtest's first cleanup, a check that
// it left no goroutine behind but hedgedhttp's pool, which outlives every
// request by 10 s by design (TestHedging waits for it at its end).
func checkHedgeLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt, goleak.IgnoreAnyFunction(hedgedhttpPool)) })
}

// awaitHedgedhttpPool waits, at most d, until no goroutine of hedgedhttp's
// pool is left. The pool offers neither a way to stop it nor an event to
// wait on, so this polls the goroutine stacks.
func awaitHedgedhttpPool(t *testing.T, d time.Duration) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte(hedgedhttpPool)) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Errorf("hedgedhttp's pool goroutines still running after %v", d)
			return
		}
	}
}

// checkRetryhttp runs retryhttp's own bounds as one subtest, so that they
// pass or fail apart from the harness's checks.
func checkRetryhttp(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	t.Run("retryhttp bounds", f)
}

// hedgeRun is one client's measured round in one scenario.
type hedgeRun struct {
	client                  string
	delay                   string // the hedge delay it was given, for the table
	outs                    []Outcome
	lag                     time.Duration // how late the generator started a request at worst
	ownHedges               uint64        // hedges the client counted itself, in the measured round
	attempts                []int         // attempts the server saw per measured request
	slow                    int           // per connection: requests whose first copy was on a slow connection
	hedged                  int           // per connection: requests the server saw more than once
	onOther                 int           // of those, requests whose copies came on more than one connection
	slowHedged, slowOnOther int           // the same, for requests whose first copy was on a slow connection
	twice                   int           // POST: bodies executed more than once
	badBodies               int           // POST: bodies the server could not read
	cancelled               int           // attempts of measured requests whose client went before their answer
	noID                    int           // attempts without a valid request id
	server                  QueueCounts   // near capacity
}

// p returns the run's q quantile.
func (r hedgeRun) p(q float64) time.Duration { return Quantile(r.outs, q) }

// extra returns the extra load of the requests whose index (in the
// measured round) is in [from, to): attempts the server saw beyond one
// per request, per request.
func (r hedgeRun) extra(from, to int) float64 {
	if to <= from {
		return 0
	}
	sent := 0
	for _, a := range r.attempts[from:to] {
		sent += a
	}
	return float64(sent-(to-from)) / float64(to-from)
}

// extraAll is the extra load of the whole measured round.
func (r hedgeRun) extraAll() float64 { return r.extra(0, len(r.attempts)) }

// failed counts the requests that did not succeed within their deadline.
func (r hedgeRun) failed() int {
	n := 0
	for _, o := range r.outs {
		if !o.OK {
			n++
		}
	}
	return n
}

// wonByHedge counts the requests answered by a later copy than the first
// to arrive.
func (r hedgeRun) wonByHedge() int {
	n := 0
	for _, o := range r.outs {
		if o.Copy > 1 {
			n++
		}
	}
	return n
}

// errSample is one failure's reason, if any.
func (r hedgeRun) errSample() string {
	for _, o := range r.outs {
		if !o.OK {
			return o.Err
		}
	}
	return ""
}

// Orders the clients run in (the tables keep hedgeClients' order).
// Straggler scenarios run hedgedhttp first, so that its pool's goroutines
// (see hedgedhttpPool) end while the others run. Near capacity runs the
// clients that may flood the server last, so that the baseline and
// retryhttp never run in a flood's aftermath (thousands of connections
// closing, a large heap to collect); TestHedging then waits out the rest
// of hedgedhttp's pool, about 5 s.
var (
	stragglerOrder = []string{"hedgedhttp", "none", "retryhttp", "failsafe-p95", "failsafe-budget"}
	capacityOrder  = []string{"none", "retryhttp", "failsafe-budget", "hedgedhttp", "failsafe-p95"}
)

// runOrder returns the indexes in cls of the clients named in order, in
// that order.
func runOrder(cls []hedgeClient, order []string) []int {
	out := make([]int, 0, len(cls))
	for _, name := range order {
		i := slices.IndexFunc(cls, func(cl hedgeClient) bool { return cl.name == name })
		if i < 0 {
			panic("no client " + name)
		}
		out = append(out, i)
	}
	if len(out) != len(cls) {
		panic("the order does not name every client")
	}
	return out
}

// runHedgeClient sends the warm-up round, then the measured round, through
// cl over a fresh base transport, and returns the measured round. A client
// whose delay comes from the warm-up gets the warm-up's p95 (sent through
// the base transport alone).
func runHedgeClient(cl hedgeClient, warm, measure OpenLoop) hedgeRun {
	base := newHedgeBase()
	defer base.CloseIdleConnections()
	r := hedgeRun{client: cl.name}
	var (
		rt     http.RoundTripper
		hedges func() uint64
	)
	if cl.fromWarmup {
		outs, _ := warm.Run(&http.Client{Transport: base})
		d := min(Quantile(outs, 0.95), warm.Timeout)
		r.delay = "p95 " + fmtLatency(d)
		rt, hedges = cl.build(base, d)
	} else {
		rt, hedges = cl.build(base, 0)
		_, _ = warm.Run(&http.Client{Transport: rt})
		r.delay = cl.delay
	}
	if th, ok := rt.(*timedHedges); ok {
		th.learnedDelay() // the warm-up's
	}
	before := hedges()
	r.outs, r.lag = measure.Run(&http.Client{Transport: rt})
	r.ownHedges = hedges() - before
	if th, ok := rt.(*timedHedges); ok {
		if d, ok := th.learnedDelay(); ok {
			r.delay = "learned: median " + fmtLatency(d)
		}
	}
	return r
}

// runStragglers runs every client against its own Stragglers server of c
// and returns the runs in the order of cls; post makes the measured round
// keyless POSTs.
func runStragglers(cls []hedgeClient, c StragglerConfig, post bool) []hedgeRun {
	c.IDs = hedgeWarm + hedgeN
	runs := make([]hedgeRun, len(cls))
	for _, i := range runOrder(cls, stragglerOrder) {
		s := NewStragglers(c)
		url := s.URL() + "/item"
		warm := OpenLoop{URL: url, Rate: hedgeRate, FirstID: 0, N: hedgeWarm, Timeout: hedgeTimeout}
		measure := OpenLoop{URL: url, Rate: hedgeRate, FirstID: hedgeWarm, N: hedgeN, Timeout: hedgeTimeout, Post: post}
		r := runHedgeClient(cls[i], warm, measure)
		s.Close() // every copy has arrived, or never will
		for _, as := range s.Attempts(hedgeWarm, hedgeWarm+hedgeN) {
			r.attempts = append(r.attempts, len(as))
			if len(as) > 0 && as[0].Slow {
				r.slow++
			}
			for _, a := range as {
				if a.Cancelled {
					r.cancelled++
				}
			}
			if len(as) > 1 {
				r.hedged++
				other := slices.ContainsFunc(as[1:], func(a StragglerAttempt) bool { return a.Conn != as[0].Conn })
				if other {
					r.onOther++
				}
				if as[0].Slow {
					r.slowHedged++
					if other {
						r.slowOnOther++
					}
				}
			}
		}
		r.twice, r.badBodies = s.PostsTwice(hedgeWarm, hedgeWarm+hedgeN)
		r.noID = s.Unidentified()
		runs[i] = r
	}
	return runs
}

// writeErrSamples adds, below a table, one failure's reason for each
// client that had any.
func writeErrSamples(b *strings.Builder, runs []hedgeRun) {
	for _, r := range runs {
		if e := r.errSample(); e != "" {
			fmt.Fprintf(b, "\n%s, %d failed, e.g.: %s\n", r.client, r.failed(), e)
		}
	}
}

// fmtLatency formats a latency for the tables.
func fmtLatency(d time.Duration) string {
	if d == Failed {
		return "failed"
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// pct formats a share as a percentage.
func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// runByName returns the run of the client.
func runByName(t *testing.T, runs []hedgeRun, name string) hedgeRun {
	t.Helper()
	for _, r := range runs {
		if r.client == name {
			return r
		}
	}
	require.Failf(t, "no run", "client %s", name)
	return hedgeRun{}
}

// hedgePeers are the peers retryhttp's p99 is compared with.
var hedgePeers = []string{"failsafe-p95", "failsafe-budget", "hedgedhttp"}

// bestPeerAtLoad returns the peer with the lowest p99 among those whose
// extra load is at most extra, and whether there is one: the p99 that
// retryhttp, at extra, must match.
func bestPeerAtLoad(t *testing.T, runs []hedgeRun, extra float64) (hedgeRun, bool) {
	var best hedgeRun
	found := false
	for _, name := range hedgePeers {
		r := runByName(t, runs, name)
		if r.extraAll() <= extra && (!found || r.p(0.99) < best.p(0.99)) {
			best, found = r, true
		}
	}
	return best, found
}

// maxLag is how late the generator may start a request of the unhedged
// client: later, the machine could not keep up with the load, and the
// baseline every bound is set against measures the machine instead.
// (A client that floods the server may make the machine lag too: that is
// its own figure, in the table.)
const maxLag = 250 * time.Millisecond

// checkHarness checks what every run must show whatever the clients do:
// every request has an outcome, and the unhedged client's generator kept
// its schedule and sent (almost) no extra load.
func checkHarness(t *testing.T, runs []hedgeRun, n int) {
	for _, r := range runs {
		assert.Len(t, r.outs, n, r.client)
		assert.Len(t, r.attempts, n, r.client)
		assert.Zero(t, r.noID, "%s: attempts without a request id", r.client)
	}
	none := runByName(t, runs, "none")
	assert.Less(t, none.lag, maxLag, "the generator fell behind its schedule with the unhedged client")
	assert.LessOrEqual(t, none.extraAll(), 0.005, "the unhedged client sends one attempt per request")
	assert.Zero(t, none.ownHedges, "the unhedged client hedges")
}

// testRandomStragglers: 5 ms attempts, 5% of them 100 ms, chosen at
// random. A hedge sent once an attempt is later than the usual ones lands,
// 95 times in 100, on a fast attempt.
func testRandomStragglers(t *testing.T) {
	checkHedgeLeaks(t)
	cls := hedgeClients()
	runs := runStragglers(cls, StragglerConfig{}, false)
	var b strings.Builder
	fmt.Fprintf(&b, "### random stragglers: 5 ms, 5%% of attempts 100 ms; %d GETs at %.0f/s after %d warm-up\n\n", hedgeN, hedgeRate, hedgeWarm)
	b.WriteString("| client | hedge delay | p50 | p99 | p99.9 | extra load | hedges (own count) | won by a later copy | copies cancelled | failed |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d | %d | %d | %d |\n", r.client, r.delay,
			fmtLatency(r.p(0.5)), fmtLatency(r.p(0.99)), fmtLatency(r.p(0.999)), pct(r.extraAll()),
			r.ownHedges, r.wonByHedge(), r.cancelled, r.failed())
	}
	writeErrSamples(&b, runs)
	t.Log("\n" + b.String())

	checkHarness(t, runs, hedgeN)
	none, hh := runByName(t, runs, "none"), runByName(t, runs, "hedgedhttp")
	for _, r := range runs {
		assert.Zero(t, r.failed(), "%s: failed requests (%s)", r.client, r.errSample())
	}
	// The harness sees hedging when there is some: hedgedhttp's fixed
	// 10 ms delay cuts every straggler short.
	assert.Less(t, hh.p(0.99), none.p(0.99)/2, "hedgedhttp's p99 against the unhedged one")
	assert.Positive(t, hh.extraAll(), "hedgedhttp's extra load")

	checkRetryhttp(t, func(t *testing.T) {
		r := runByName(t, runs, "retryhttp")
		assertP99Cut(t, r, none)
		assert.LessOrEqual(t, r.extraAll(), hedgeMaxExtra, "extra load")
		assertP99AgainstPeers(t, r, runs)
	})
}

// assertP99Cut checks that r's p99 is at most the unhedged client's
// divided by hedgeP99Cut.
func assertP99Cut(t *testing.T, r, none hedgeRun) {
	t.Helper()
	assert.LessOrEqual(t, r.p(0.99), time.Duration(float64(none.p(0.99))/hedgeP99Cut),
		"p99 %s against the unhedged %s / %.0f", fmtLatency(r.p(0.99)), fmtLatency(none.p(0.99)), hedgeP99Cut)
}

// assertP99AgainstPeers checks that no peer that sent no more extra load
// than r had a better p99: r's p99 is no worse than the best peer's at
// no more extra load.
func assertP99AgainstPeers(t *testing.T, r hedgeRun, runs []hedgeRun) {
	t.Helper()
	if best, ok := bestPeerAtLoad(t, runs, r.extraAll()); ok {
		bound := time.Duration(float64(best.p(0.99))*hedgePeerP99Factor) + hedgeP99Jitter
		assert.LessOrEqual(t, r.p(0.99), bound, "p99 %s at %s extra load against %s's %s at %s",
			fmtLatency(r.p(0.99)), pct(r.extraAll()), best.client, fmtLatency(best.p(0.99)), pct(best.extraAll()))
	}
}

// connMaxRequests is the per-connection scenario's cap on the requests a
// connection answers. A hedging client closes a slow connection as soon
// as it cancels the copy that waits on it (HTTP/1.1 cannot cancel a
// request otherwise), so without new connections coming it would meet
// the first slow one only, during its warm-up.
const connMaxRequests = 5

// testConnStragglers: every 20th connection, the first included, serves
// every request 100 ms slow, the others 5 ms, and every connection is
// closed after connMaxRequests answers. A hedge helps only on another
// connection (over HTTP/1.1 it cannot be sent on the busy one; the count
// shows it).
func testConnStragglers(t *testing.T) {
	checkHedgeLeaks(t)
	cls := hedgeClients()
	runs := runStragglers(cls, StragglerConfig{PerConn: true, MaxPerConn: connMaxRequests}, false)
	var b strings.Builder
	fmt.Fprintf(&b, "### per-connection stragglers: every 20th connection 100 ms, others 5 ms, %d requests per connection at most; %d GETs at %.0f/s after %d warm-up\n\n",
		connMaxRequests, hedgeN, hedgeRate, hedgeWarm)
	b.WriteString("| client | hedge delay | p50 | p99 | extra load | first copy on a slow connection | hedges on another connection / hedged requests | failed |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d / %d | %d |\n", r.client, r.delay,
			fmtLatency(r.p(0.5)), fmtLatency(r.p(0.99)), pct(r.extraAll()),
			pct(float64(r.slow)/float64(hedgeN)), r.onOther, r.hedged, r.failed())
	}
	writeErrSamples(&b, runs)
	t.Log("\n" + b.String())

	checkHarness(t, runs, hedgeN)
	none := runByName(t, runs, "none")
	// Without hedging the slow connection keeps serving: its share of
	// requests must put the unhedged p99 among them, or the scenario
	// measures nothing.
	assert.Greater(t, float64(none.slow)/float64(hedgeN), 0.01, "the unhedged client's requests on a slow connection")

	checkRetryhttp(t, func(t *testing.T) {
		r := runByName(t, runs, "retryhttp")
		assertP99Cut(t, r, none)
		assert.LessOrEqual(t, r.extraAll(), hedgeMaxExtra, "extra load")
		// Not set against the peers here: with about 1% of requests on a
		// slow connection, each client's p99 falls among its fast answers
		// or its hedged ones by the luck of that share.
		assert.Positive(t, r.hedged, "hedged requests")
		// A hedge of a fast answer may take the connection that answer
		// freed as it went; a hedge of a straggler never shares its
		// connection, which is busy.
		assert.Positive(t, r.slowHedged, "requests on a slow connection hedged")
		assert.Equal(t, r.slowHedged, r.slowOnOther, "hedges of requests on a slow connection that went out on another")
	})
}

// testPostSafety sends keyless POSTs, each body a unique id, to the random
// straggler server after a warm-up of GETs: a POST without an
// Idempotency-Key may not be safe to run twice, so hedging one is a bug
// whatever it saves.
func testPostSafety(t *testing.T) {
	checkHedgeLeaks(t)
	cls := hedgeClients()
	runs := runStragglers(cls, StragglerConfig{}, true)
	var b strings.Builder
	fmt.Fprintf(&b, "### POST safety: %d keyless POSTs at %.0f/s to the random-straggler server, after %d warm-up GETs\n\n", hedgeN, hedgeRate, hedgeWarm)
	b.WriteString("| client | hedge delay | POSTs executed twice | bodies the server could not read | p99 | extra load | failed |\n|---|---|--:|--:|--:|--:|--:|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %d |\n", r.client, r.delay, r.twice, r.badBodies,
			fmtLatency(r.p(0.99)), pct(r.extraAll()), r.failed())
	}
	writeErrSamples(&b, runs)
	t.Log("\n" + b.String())

	checkHarness(t, runs, hedgeN)
	none := runByName(t, runs, "none")
	assert.Zero(t, none.twice, "the unhedged client's POSTs executed twice")
	assert.Zero(t, none.failed(), "the unhedged client's failed POSTs (%s)", none.errSample())
	// The peers hedge whatever they are given: the harness sees a POST run
	// twice when one is. (failsafe-go's delay may land beyond most
	// stragglers, see the table, so the check takes the three together.)
	twice := 0
	for _, name := range hedgePeers {
		twice += runByName(t, runs, name).twice
	}
	assert.Positive(t, twice, "the peers' POSTs executed twice")

	checkRetryhttp(t, func(t *testing.T) {
		r := runByName(t, runs, "retryhttp")
		assert.Zero(t, r.twice, "keyless POSTs executed twice")
		assert.Zero(t, r.failed(), "failed POSTs (%s)", r.errSample())
	})
}

// testNearCapacity drives a Queue of 15 workers (5 ms service, 5% of
// requests 100 ms: about 1,540 a second) open loop at 95% of its capacity
// for capSpan, each request with a 1 s deadline. The server serves every
// copy it queued, cancelled or not, so each hedge takes capacity from the
// others: at 95% there is little to spare, and as the queue grows the
// requests that would be hedged are those slowed by the queue, not by a
// straggler. Goodput counts 2xx answers within the deadline per second;
// the second half is the requests scheduled after capSpan/2, once the
// queue has grown. The stragglers are drawn from one seed for every
// client (QueueConfig.Seed): the p99 at 95% varied by 2x from run to run
// without it, more than the bound it is checked against.
func testNearCapacity(t *testing.T) {
	checkHedgeLeaks(t)
	cls := hedgeClients()
	qc := QueueConfig{}
	rate := capLoad * qc.Capacity()
	n := int(rate * capSpan.Seconds())
	qc.IDs = capWarm + n
	runs := make([]hedgeRun, len(cls))
	for _, i := range runOrder(cls, capacityOrder) {
		q := NewQueue(qc)
		url := q.URL() + "/work"
		warm := OpenLoop{URL: url, Rate: rate, FirstID: 0, N: capWarm, Timeout: hedgeTimeout}
		measure := OpenLoop{URL: url, Rate: rate, FirstID: capWarm, N: n, Timeout: hedgeTimeout}
		r := runHedgeClient(cls[i], warm, measure)
		r.server = q.Counts()
		r.noID = r.server.Unidentified
		q.Close()
		r.attempts = q.Attempts(capWarm, capWarm+n)
		runs[i] = r
	}
	half := n / 2
	late := func(r hedgeRun) hedgeRun { r.outs = r.outs[half:]; return r }
	goodput := func(outs []Outcome, span time.Duration) float64 {
		ok := 0
		for _, o := range outs {
			if o.OK {
				ok++
			}
		}
		return float64(ok) / span.Seconds()
	}
	span := time.Duration(float64(n) / rate * float64(time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "### near capacity: 15 workers, 5 ms service, 5%% of requests 100 ms (%.0f/s), queued copies always served; %d GETs at %.0f/s (%.0f%%) after %d warm-up, 1 s deadline\n\n",
		qc.Capacity(), n, rate, 100*capLoad, capWarm)
	b.WriteString("| client | hedge delay | goodput | p99 | extra load | goodput, 2nd half | p99, 2nd half | extra load, 2nd half | failed | served after the client left | peak queue | generator lag |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %.0f/s | %s | %s | %.0f/s | %s | %s | %d | %d | %d | %s |\n", r.client, r.delay,
			goodput(r.outs, span), fmtLatency(r.p(0.99)), pct(r.extraAll()),
			goodput(r.outs[half:], span-r.outs[half].At), fmtLatency(late(r).p(0.99)), pct(r.extra(half, n)),
			r.failed(), r.server.ServedGone, r.server.PeakQueue, fmtLatency(r.lag))
	}
	b.WriteString("\nA negative extra load counts requests that never reached the server: their deadline passed before a connection was free.\n")
	writeErrSamples(&b, runs)
	t.Log("\n" + b.String())

	checkHarness(t, runs, n)
	none := runByName(t, runs, "none")
	assert.Greater(t, goodput(none.outs, span), 0.8*rate, "the unhedged client's goodput: the server keeps up at %.0f%%", 100*capLoad)

	checkRetryhttp(t, func(t *testing.T) {
		r := runByName(t, runs, "retryhttp")
		assert.GreaterOrEqual(t, goodput(r.outs, span), capGoodputFactor*goodput(none.outs, span), "goodput against the unhedged client's")
		assert.LessOrEqual(t, r.p(0.99), time.Duration(capP99Factor*float64(none.p(0.99))),
			"p99 %s against the unhedged %s", fmtLatency(r.p(0.99)), fmtLatency(none.p(0.99)))
		assert.LessOrEqual(t, r.extra(half, n), capMaxExtraLate, "extra load in the second half")
	})
}

// Shape of TestHedgingHTTP2's slow copy.
const (
	h2Warm      = 300                    // fast requests before the race: past the key's young phase (256 answers), with a learned delay
	h2Slow      = 200 * time.Millisecond // the slow copy's wait before its headers
	h2StreamFor = 2 * time.Second        // the streaming copy's body lasts this long
	h2Chunk     = 1 << 10                // it writes this much ...
	h2Every     = 10 * time.Millisecond  // ... this often
	// h2HeadersAfter: the streaming copy's headers follow the other
	// copy's answer by this much.
	h2HeadersAfter = 20 * time.Millisecond
)

// h2Race is TestHedgingHTTP2's server. /warm answers at once. On /race the
// first copy of each request id is slow and every later copy answers at
// once; the first copy reports how it ended on losers.
type h2Race struct {
	// streaming: the slow copy sends its headers once the other copy has
	// been answered, then a slow body, so that it loses either before its
	// headers reach the client or after, with its stream open.
	streaming bool
	losers    chan h2Loser
	answered  chan struct{} // closed when a later copy of /race has been answered
	once      sync.Once

	mu   sync.Mutex
	seen map[string]int // guarded by mu
}

// h2Loser is how a slow copy ended.
type h2Loser struct {
	proto     int           // its request's HTTP major version
	cancelled bool          // its context ended before it was done
	writeErr  bool          // a write or flush of its body failed
	ranFor    time.Duration // from its start to its end
	wrote     int           // body bytes it wrote
}

func (h *h2Race) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/race" {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	id := r.Header.Get(reqIDHeader)
	h.mu.Lock()
	h.seen[id]++
	nth := h.seen[id]
	h.mu.Unlock()
	w.Header().Set(copyHeader, strconv.Itoa(nth))
	if nth > 1 {
		_, _ = io.WriteString(w, "ok\n")
		_ = http.NewResponseController(w).Flush()
		h.once.Do(func() { close(h.answered) })
		return
	}
	start := time.Now()
	l := h2Loser{proto: r.ProtoMajor}
	defer func() { l.ranFor = time.Since(start); h.losers <- l }()
	if !h.streaming {
		t := time.NewTimer(h2Slow)
		defer t.Stop()
		select {
		case <-t.C:
			_, _ = io.WriteString(w, "ok\n")
		case <-r.Context().Done():
			l.cancelled = true
		}
		return
	}
	bound := time.NewTimer(h2Slow)
	defer bound.Stop()
	select {
	case <-h.answered:
		// A little after the other copy's answer, so that the client
		// has it first, however loaded the machine.
		after := time.NewTimer(h2HeadersAfter)
		defer after.Stop()
		select {
		case <-after.C:
		case <-r.Context().Done():
			l.cancelled = true
			return
		}
	case <-r.Context().Done():
		l.cancelled = true
		return
	case <-bound.C:
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		l.writeErr = true
		return
	}
	chunk := bytes.Repeat([]byte("x"), h2Chunk)
	tick := time.NewTicker(h2Every)
	defer tick.Stop()
	end := time.NewTimer(h2StreamFor)
	defer end.Stop()
	for {
		select {
		case <-r.Context().Done():
			l.cancelled = true
			return
		case <-end.C:
			return
		case <-tick.C:
			if _, err := w.Write(chunk); err != nil || rc.Flush() != nil {
				l.writeErr = true
				return
			}
			l.wrote += h2Chunk
		}
	}
}

// TestHedgingHTTP2 checks, over HTTP/2, that the copy that loses a hedge
// race is cancelled, not left to run: its stream is reset, so its handler
// sees its context end. Once before the slow copy sent its headers (it
// waits 200 ms, the hedge answers at once); once while it streams a long
// body slowly (headers at once, then 1 KiB every 10 ms for 2 s), with
// WithResponseBuffer so that the slow body makes a slow answer, and the
// client must not read it to its end. Both after a warm-up of fast
// requests, so that the transport has learned a delay.
func TestHedgingHTTP2(t *testing.T) {
	checkLeaks(t)
	var rows []string
	t.Cleanup(func() {
		t.Logf("hedging over HTTP/2:\n\n%s%s", "| variant | answered in | answered by copy | proto | loser cancelled | loser ran for | loser wrote | hedges / won (Stats) |\n|---|--:|--:|--:|---|--:|--:|--:|\n",
			strings.Join(rows, ""))
	})
	for _, v := range []struct {
		name      string
		streaming bool
	}{{"slow headers", false}, {"slow body", true}} {
		t.Run(v.name, func(t *testing.T) { rows = append(rows, runH2Race(t, v.name, v.streaming)) })
	}
}

// runH2Race runs one variant of TestHedgingHTTP2 and returns its table
// row.
func runH2Race(t *testing.T, name string, streaming bool) string {
	h := &h2Race{streaming: streaming, losers: make(chan h2Loser, 4), seen: map[string]int{}, answered: make(chan struct{})}
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // reset streams make the server log
	srv.StartTLS()
	defer srv.Close()
	base, ok := srv.Client().Transport.(*http.Transport)
	require.True(t, ok, "httptest's client transport")
	defer base.CloseIdleConnections()
	rt := retryhttp.New(base, retryhttp.WithHedging(hedgeMaxExtraLoad))
	c := &http.Client{Transport: rt}

	get := func(path, id string) (*http.Response, []byte, time.Duration) {
		// Longer than the streaming copy's body, so that a client that
		// reads it to its end does, and the caller's own deadline cancels
		// nothing.
		ctx, cancel := context.WithTimeout(context.Background(), h2StreamFor+3*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set(reqIDHeader, id)
		start := time.Now()
		resp, err := c.Do(req)
		require.NoError(t, err, path)
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err, path)
		return resp, body, time.Since(start)
	}
	for i := range h2Warm {
		resp, _, _ := get("/warm", strconv.Itoa(i))
		require.Equal(t, 2, resp.ProtoMajor, "the warm-up's protocol")
	}
	resp, _, took := get("/race", "race")
	require.Equal(t, 2, resp.ProtoMajor, "the race's protocol")
	var l h2Loser
	wait := time.NewTimer(h2StreamFor + 5*time.Second)
	defer wait.Stop()
	select {
	case l = <-h.losers:
	case <-wait.C:
		require.FailNow(t, "the slow copy never ended")
	}
	require.Equal(t, 2, l.proto, "the slow copy's protocol")
	st := rt.Stats()
	row := fmt.Sprintf("| %s | %s | %s | %d | %v | %s | %d B | %d / %d |\n", name, fmtLatency(took), resp.Header.Get(copyHeader),
		resp.ProtoMajor, l.cancelled || l.writeErr, fmtLatency(l.ranFor), l.wrote, st.Hedges, st.HedgesWon)

	checkRetryhttp(t, func(t *testing.T) {
		assert.True(t, l.cancelled || l.writeErr, "the losing copy's stream was reset (ran for %v, wrote %d B)", l.ranFor, l.wrote)
		assert.Less(t, l.ranFor, h2CancelWithin, "the losing copy ran for")
		assert.Equal(t, "2", resp.Header.Get(copyHeader), "the answer came from the hedge")
	})
	return row
}
