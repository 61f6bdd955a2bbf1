// Command herd is the thundering herd in real time, on loopback: a local
// tenant endpoint goes down for a few seconds, a few thousand deliveries fan
// out to it through retryhttp under each retry policy in turn, and the
// server's own counts make the table and the chart (herd.svg).
//
//	go run ./examples/herd
//	go run ./examples/herd -clients 500 -outage 2s -base 50ms -cap 2s -attempts 8
//
// The last row puts a dispatcher above the transport: every failure that
// RoundTrip hands back is sent again at the instant the transport's RetryAt
// advises, until it is delivered or the give-up horizon (-redrive) passes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp"
)

type config struct {
	clients  int
	outage   time.Duration
	base     time.Duration
	cap      time.Duration
	attempts int
	redrive  time.Duration // the redrive row's give-up horizon; 0 leaves the row out
	svg      string
	progress io.Writer // where progress goes (stderr); nil: none
	live     bool      // redraw one progress line in place (progress is a terminal)
}

func main() {
	var c config
	flag.IntVar(&c.clients, "clients", 1000, "concurrent deliveries per policy")
	flag.DurationVar(&c.outage, "outage", 3*time.Second, "how long the endpoint is down at the start of each run")
	flag.DurationVar(&c.base, "base", 75*time.Millisecond, "policy base: bound of the first retry")
	flag.DurationVar(&c.cap, "cap", 3*time.Second, "policy cap")
	flag.IntVar(&c.attempts, "attempts", 10, "attempts per delivery, the first included")
	flag.DurationVar(&c.redrive, "redrive", 20*time.Second, "give-up horizon of the redrive row, from the run's start; 0 leaves the row out")
	flag.StringVar(&c.svg, "svg", "herd.svg", "where to write the chart")
	flag.Parse()
	// The table is the result and goes to stdout, so that it can be piped
	// into a file; progress goes to stderr, redrawn in place only on a
	// terminal, where a carriage return overwrites the line instead of
	// piling up in a log.
	c.progress, c.live = os.Stderr, terminal(os.Stderr)
	if _, err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "herd:", err)
		os.Exit(1)
	}
}

// terminal reports whether f is a terminal (a character device), where a
// progress line can be redrawn in place; a file or a pipe is not.
// /dev/null is a character device too, and discards the redraws.
func terminal(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// policy is one run: a name, the transport's options, and, for a
// dispatcher that redrives failures at the instant RetryAt advises, the
// give-up horizon (0: each delivery is one call).
type policy struct {
	name    string
	opts    []retryhttp.Option
	redrive time.Duration
}

func policies(c config) []policy {
	alone := func(p retryhttp.Policy, more ...retryhttp.Option) []retryhttp.Option {
		return append([]retryhttp.Option{retryhttp.WithPolicy(p), retryhttp.WithMaxAttempts(c.attempts),
			retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil)}, more...)
	}
	full := retryhttp.FullJitter{Base: c.base, Cap: c.cap}
	guarded := func(more ...retryhttp.Option) []retryhttp.Option {
		return alone(full, append([]retryhttp.Option{
			retryhttp.WithBudget(retryhttp.NewBudget(retryhttp.BudgetConfig{})),
			retryhttp.WithBreaker(retryhttp.NewBreaker(retryhttp.BreakerConfig{}))}, more...)...)
	}
	noWait := retryhttp.WithMaxWait(0)
	ps := []policy{
		{name: "no backoff", opts: alone(noBackoff{})},
		{name: "plain exponential", opts: alone(retryhttp.Exponential{Base: c.base, Cap: c.cap})},
		{name: "equal jitter", opts: alone(retryhttp.EqualJitter{Base: c.base, Cap: c.cap})},
		{name: "full jitter", opts: alone(full)},
		{name: "decorrelated jitter", opts: alone(retryhttp.DecorrelatedJitter{Base: c.base, Cap: c.cap})},
		// The budget and breaker alone: what they refuse is handed back.
		{name: "full jitter + budget + breaker, no wait", opts: guarded(noWait)},
		// The library's default set-up at the demo's base, cap and
		// attempts: what the budget and the breaker would refuse waits for
		// the server to recover instead.
		{name: waitName, opts: guarded()},
	}
	if c.redrive > 0 {
		// A dispatcher with its own queue: refusals come back at once, and
		// it sends them again at the instant RetryAt advises.
		ps = append(ps, policy{name: redriveName, opts: guarded(noWait), redrive: c.redrive})
	}
	return ps
}

// The names of the row of the library's default set-up (full jitter, the
// default budget, breaker and wait, here at the demo's base, cap and
// attempts), and of a dispatcher that redrives failures.
const (
	waitName    = "full jitter + budget + breaker + wait (default set-up)"
	redriveName = "full jitter + budget + breaker + redrive, no wait"
)

// The library's defaults, which the labels set beside the demo's own
// settings: the demo shortens base and cap and raises the attempts so that
// a few seconds' outage shows every policy's shape in well under a minute.
// TestLibraryDefaults holds them to the library's.
const (
	libBase     = 200 * time.Millisecond
	libCap      = 30 * time.Second
	libAttempts = 4
)

// settingsLine says what every row ran with, beside the library's
// defaults, for the table and the chart alike.
func settingsLine(c config) string {
	return fmt.Sprintf("%s deliveries per policy, endpoint down %s; policies with base %s, cap %s, %d attempts (the library's defaults: base %s, cap %s, %d attempts)",
		thousands(c.clients), span(c.outage), span(c.base), span(c.cap), c.attempts, span(libBase), span(libCap), libAttempts)
}

// The legend's definitions, shared by the table and the chart so that both
// say the same.
const (
	// layersLine says which rows have which of the library's layers: the
	// single-policy rows turn the budget and the breaker off.
	layersLine = "Budget, breaker and wait, where a row names them, are the library's defaults; the other rows run with neither budget nor breaker."
	// wastedDef is what the server counts as wasted (see endpoint.serve):
	// a retry that arrived while the endpoint was down, and so could only
	// fail. A retry the budget or the breaker refused never arrives, and
	// nothing after the recovery fails.
	wastedDef = "retries (attempts after a delivery's first) that reached the endpoint while it was down"
)

// span formats a duration as the labels do: "75 ms", "3 s", "1.5 s".
func span(d time.Duration) string {
	switch {
	case d == 0:
		return "0 s"
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + " ms"
	}
	return d.String()
}

// run runs every policy in turn, prints the table to w, writes the chart,
// and returns the rows.
func run(c config, w io.Writer) ([]result, error) {
	if c.clients < 1 || c.attempts < 1 || c.outage < 0 || c.base <= 0 || c.cap <= 0 || c.redrive < 0 {
		return nil, fmt.Errorf("need clients >= 1, attempts >= 1, outage >= 0, base > 0, cap > 0, redrive >= 0")
	}
	ep := newEndpoint(c.outage)
	defer ep.srv.Close()
	var results []result
	for _, p := range policies(c) {
		r, err := runPolicy(c, ep, p)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	fmt.Fprintf(w, "%s.\n%s\nCounts are the server's.\n\n", settingsLine(c), layersLine)
	printTable(w, results, c.clients)
	for _, r := range results {
		if r.redrive != nil {
			rd := r.redrive
			fmt.Fprintf(w, "\n%s: redriven %d times (%d at once: RetryAt's instant had come), horizon %s, %d gave up; RetryAt advised %v\n",
				r.name, rd.redrives, rd.atOnce, span(rd.horizon), rd.gaveUp, rd.advice)
		}
	}
	if c.svg != "" {
		f, err := os.Create(c.svg)
		if err != nil {
			return nil, err
		}
		writeSVG(f, results, c)
		if err := f.Close(); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "\nchart: %s\n", c.svg)
	}
	return results, nil
}

// runPolicy sends c.clients deliveries at once through a client using the
// policy and waits for every one to end. Each delivery is bounded by its
// attempts, by its redrive horizon, and by a context deadline, so the run
// stops by itself.
func runPolicy(c config, ep *endpoint, p policy) (result, error) {
	next := &http.Transport{MaxIdleConnsPerHost: c.clients, IdleConnTimeout: 10 * time.Second}
	defer next.CloseIdleConnections()
	tr := retryhttp.New(next, p.opts...)
	client := &http.Client{Transport: tr}
	deadline := max(c.outage+time.Duration(c.attempts)*c.cap, p.redrive) + 10*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	if err := warm(ctx, next, ep.srv.URL, c.clients); err != nil {
		return result{}, err
	}
	ep.reset()
	d := &dispatcher{tr: tr, horizon: time.Now().Add(p.redrive), fallback: retryhttp.FullJitter{Base: c.base, Cap: c.cap}, advice: map[string]int{}}
	var wg sync.WaitGroup
	var done, failed atomic.Int64
	for i := range c.clients {
		wg.Go(func() {
			defer done.Add(1)
			if !d.deliver(ctx, client, ep.srv.URL+"/hook", i, p.redrive > 0) {
				failed.Add(1)
			}
		})
	}
	stop := make(chan struct{})
	var progress sync.WaitGroup
	if c.progress != nil && c.live {
		progress.Go(func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					fmt.Fprintf(c.progress, "\r%-50s done %d/%d          \n", p.name, done.Load(), c.clients)
					return
				case <-tick.C:
					fmt.Fprintf(c.progress, "\r%-50s done %d/%d", p.name, done.Load(), c.clients)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	progress.Wait()
	if c.progress != nil && !c.live {
		// Not a terminal: one plain line per policy, when it is done.
		fmt.Fprintf(c.progress, "%s: done %d/%d\n", p.name, done.Load(), c.clients)
	}
	r := ep.result(p.name, c.clients)
	if p.redrive > 0 {
		d.mu.Lock()
		r.redrive = &redriveStats{horizon: p.redrive, redrives: d.redrives, atOnce: d.atOnce, gaveUp: d.gaveUp, advice: d.advice}
		d.mu.Unlock()
	}
	return r, nil
}

// dispatcher is what sits above the transport: it sends each delivery and,
// when redriving, sends a failed one again at the instant the transport's
// RetryAt advises.
type dispatcher struct {
	tr       *retryhttp.Transport
	horizon  time.Time        // no redrive is scheduled after it
	fallback retryhttp.Policy // draws the wait when RetryAt gives the zero time

	mu       sync.Mutex
	redrives int            // guarded by mu
	atOnce   int            // redrives whose advised instant had already come; guarded by mu
	gaveUp   int            // deliveries whose next instant fell past the horizon; guarded by mu
	advice   map[string]int // RetryAt's reasons, per failure; guarded by mu
}

// maxRedrives bounds the calls one delivery makes after its first: RetryAt
// may advise "now" again and again, and only the horizon bounds time.
const maxRedrives = 100_000

// deliver makes delivery i: one call through the client, or, with redrive,
// calls until one gets a 200, each after the instant RetryAt advised for
// the failure before (never earlier). When RetryAt gives the zero time (an
// outcome nothing explains), the wait is the fallback's draw for the n-th
// redrive: full jitter with the run's base and cap. It reports whether the
// delivery got a 200.
func (d *dispatcher) deliver(ctx context.Context, client *http.Client, url string, i int, redrive bool) bool {
	for pass := 0; pass <= maxRedrives; pass++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		req.Header.Set("X-Delivery", strconv.Itoa(i))
		resp, err := client.Do(req)
		ok := err == nil && resp.StatusCode == http.StatusOK
		var at time.Time
		var why retryhttp.Reason
		if !ok && redrive {
			at, why = d.tr.RetryAt(resp, err)
			if at.IsZero() {
				at = time.Now().Add(d.fallback.Delay(pass+1, 0))
			}
		}
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if ok || !redrive {
			return ok
		}
		d.mu.Lock()
		d.advice[why.String()]++
		late := at.After(d.horizon)
		if late {
			d.gaveUp++
		}
		d.mu.Unlock()
		if late || ctx.Err() != nil {
			return false
		}
		wait := time.Until(at)
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false
			}
		}
		d.mu.Lock()
		d.redrives++
		if wait <= 0 {
			d.atOnce++
		}
		d.mu.Unlock()
	}
	return false
}

// warm opens n keep-alive connections to the endpoint before a run, so that
// the run measures the herd, not the cost of dialling n connections at once
// on a small machine.
func warm(ctx context.Context, next http.RoundTripper, url string, n int) error {
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/warm", nil)
			if err == nil {
				var resp *http.Response
				if resp, err = next.RoundTrip(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					err = resp.Body.Close()
				}
			}
			if err != nil {
				failed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("warming %d connections: %d failed", n, f)
	}
	return nil
}

// printTable writes one row per policy and, under them, what each column
// counts, in the chart's words.
func printTable(w io.Writer, rs []result, deliveries int) {
	name := len("policy")
	for _, r := range rs {
		name = max(name, len(r.name))
	}
	fmt.Fprintf(w, "%-*s %12s %12s %14s %9s %8s %8s %9s\n",
		name, "policy", "peak outage", "peak recov.", "t99 delivered", "delivered", "attempts", "wasted", "new conns")
	for _, r := range rs {
		t99 := fmt.Sprintf("never (%.0f%%)", 100*float64(r.delivered)/float64(deliveries))
		if r.t99 >= 0 {
			t99 = fmt.Sprintf("%.2f s", r.t99.Seconds())
		}
		fmt.Fprintf(w, "%-*s %10.0f/s %10.0f/s %14s %9d %8d %8d %9d\n",
			name, r.name, r.peakOutageRPS, r.peakRecoveryRPS, t99, r.delivered, r.attempts, r.wasted, r.conns)
	}
	fmt.Fprintf(w, "\n%s\n", strings.Join([]string{
		"peak outage    the busiest 100 ms of retries while the endpoint was down, in requests per second",
		"peak recov.    the busiest 100 ms of all attempts from its recovery on, in requests per second",
		"               (the chart counts attempts per 100 ms: a tenth of these)",
		"t99 delivered  when 99% of the deliveries had their 200, in seconds since the outage began",
		"               (the chart's dashed line)",
		"attempts       every attempt that reached the endpoint",
		"wasted         " + wastedDef,
		"new conns      connections opened during the run (the pool is warmed before it)",
	}, "\n"))
}

// noBackoff retries at once, as a retry loop without backoff does: the
// row that shows what that does to a failing endpoint. Any type with a
// Delay method is a retryhttp.Policy.
type noBackoff struct{}

func (noBackoff) Delay(int, time.Duration) time.Duration { return 0 }
