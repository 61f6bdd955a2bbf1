// Command herd is the thundering herd in real time, on loopback: a local
// tenant endpoint goes down for a few seconds, a few thousand deliveries fan
// out to it through retryhttp under each retry policy in turn, and the
// server's own counts make the table and the chart (herd.svg).
//
//	go run ./examples/herd
//	go run ./examples/herd -clients 500 -outage 2s -base 50ms -cap 2s -attempts 8
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
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
	svg      string
	progress io.Writer // nil: no progress line
}

func main() {
	var c config
	flag.IntVar(&c.clients, "clients", 1000, "concurrent deliveries per policy")
	flag.DurationVar(&c.outage, "outage", 3*time.Second, "how long the endpoint is down at the start of each run")
	flag.DurationVar(&c.base, "base", 75*time.Millisecond, "policy base: bound of the first retry")
	flag.DurationVar(&c.cap, "cap", 3*time.Second, "policy cap")
	flag.IntVar(&c.attempts, "attempts", 10, "attempts per delivery, the first included")
	flag.StringVar(&c.svg, "svg", "herd.svg", "where to write the chart")
	flag.Parse()
	c.progress = os.Stderr
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "herd:", err)
		os.Exit(1)
	}
}

// policy is one run: a name and the transport's options.
type policy struct {
	name string
	opts []retryhttp.Option
}

func policies(c config) []policy {
	alone := func(p retryhttp.Policy, more ...retryhttp.Option) []retryhttp.Option {
		return append([]retryhttp.Option{retryhttp.WithPolicy(p), retryhttp.WithMaxAttempts(c.attempts),
			retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil)}, more...)
	}
	full := retryhttp.FullJitter{Base: c.base, Cap: c.cap}
	return []policy{
		{"no backoff", alone(retryhttp.Immediate{})},
		{"plain exponential", alone(retryhttp.Exponential{Base: c.base, Cap: c.cap})},
		{"equal jitter", alone(retryhttp.EqualJitter{Base: c.base, Cap: c.cap})},
		{"full jitter", alone(full)},
		{"decorrelated jitter", alone(retryhttp.DecorrelatedJitter{Base: c.base, Cap: c.cap})},
		{"full jitter + budget + breaker", alone(full,
			retryhttp.WithBudget(retryhttp.NewBudget(retryhttp.BudgetConfig{})),
			retryhttp.WithBreaker(retryhttp.NewBreaker(retryhttp.BreakerConfig{})))},
	}
}

func run(c config, w io.Writer) error {
	if c.clients < 1 || c.attempts < 1 || c.outage < 0 || c.base <= 0 || c.cap <= 0 {
		return fmt.Errorf("need clients >= 1, attempts >= 1, outage >= 0, base > 0, cap > 0")
	}
	ep := newEndpoint(c.outage)
	defer ep.srv.Close()
	var results []result
	for _, p := range policies(c) {
		r, err := runPolicy(c, ep, p)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	fmt.Fprintf(w, "%d deliveries per policy, endpoint down %v, base %v, cap %v, %d attempts; counts are the server's\n\n",
		c.clients, c.outage, c.base, c.cap, c.attempts)
	printTable(w, results, c.clients)
	if c.svg != "" {
		f, err := os.Create(c.svg)
		if err != nil {
			return err
		}
		writeSVG(f, results, c.outage)
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nchart: %s\n", c.svg)
	}
	return nil
}

// runPolicy sends c.clients deliveries at once through a client using the
// policy and waits for every one to end. Each delivery is bounded by its
// attempts and by a context deadline, so the run stops by itself.
func runPolicy(c config, ep *endpoint, p policy) (result, error) {
	next := &http.Transport{MaxIdleConnsPerHost: c.clients, IdleConnTimeout: 10 * time.Second}
	defer next.CloseIdleConnections()
	client := &http.Client{Transport: retryhttp.New(next, p.opts...)}
	deadline := c.outage + time.Duration(c.attempts)*c.cap + 10*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	if err := warm(ctx, next, ep.srv.URL, c.clients); err != nil {
		return result{}, err
	}
	ep.reset()
	var wg sync.WaitGroup
	var done, failed atomic.Int64
	for i := range c.clients {
		wg.Go(func() {
			defer done.Add(1)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.srv.URL+"/hook", nil)
			if err != nil {
				failed.Add(1)
				return
			}
			req.Header.Set("X-Delivery", strconv.Itoa(i))
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	stop := make(chan struct{})
	var progress sync.WaitGroup
	if c.progress != nil {
		progress.Go(func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					fmt.Fprintf(c.progress, "\r%-32s done %d/%d          \n", p.name, done.Load(), c.clients)
					return
				case <-tick.C:
					fmt.Fprintf(c.progress, "\r%-32s done %d/%d", p.name, done.Load(), c.clients)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	progress.Wait()
	return ep.result(p.name, c.clients), nil
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

func printTable(w io.Writer, rs []result, deliveries int) {
	fmt.Fprintf(w, "%-32s %12s %12s %14s %9s %8s %8s %6s\n",
		"policy", "peak outage", "peak recov.", "t99 delivered", "delivered", "attempts", "wasted", "conns")
	for _, r := range rs {
		t99 := fmt.Sprintf("never (%.0f%%)", 100*float64(r.delivered)/float64(deliveries))
		if r.t99 >= 0 {
			t99 = fmt.Sprintf("%.2f s", r.t99.Seconds())
		}
		fmt.Fprintf(w, "%-32s %10.0f/s %10.0f/s %14s %9d %8d %8d %6d\n",
			r.name, r.peakOutageRPS, r.peakRecoveryRPS, t99, r.delivered, r.attempts, r.wasted, r.conns)
	}
}
