// Command herdpeers runs the loopback herd (bench.RunHerd) for every peer
// and prints the table in Markdown, with a line per peer that saw caller
// errors. With -scenario throttled it runs the throttled batch instead
// (bench.RunThrottled): a batch of GETs queued at once against a server
// that admits a fixed rate and answers 429 beyond it. Every request goes to
// a server it starts on 127.0.0.1, and every delivery has a deadline.
//
//	go run ./cmd/herdpeers -n 2000 -outage 3s -base 200ms -cap 2s -attempts 6 -rounds 3
//	go run ./cmd/herdpeers -scenario throttled   # = -requests 10000 -workers 200 -rate 500 -burst 50 -base 200ms -cap 30s -attempts 10 -horizon 120s -rounds 3
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/retryhttp/retryhttp/bench"
)

func main() {
	var (
		c        bench.HerdConfig
		peers    string
		scenario string
		tc       bench.ThrottledConfig
	)
	flag.StringVar(&scenario, "scenario", "herd", "herd: the 503 outage; throttled: the batch against a rate-limited server")
	flag.IntVar(&tc.Requests, "requests", 10_000, "throttled: the batch's GETs, queued at t = 0")
	flag.IntVar(&tc.Workers, "workers", 200, "throttled: workers taking the next request")
	flag.Float64Var(&tc.Rate, "rate", 500, "throttled: requests/s the server admits")
	flag.IntVar(&tc.Burst, "burst", 50, "throttled: the server's burst")
	flag.DurationVar(&tc.Horizon, "horizon", 120*time.Second, "throttled: the batch's give-up horizon from t = 0")
	flag.IntVar(&c.Deliveries, "n", 2000, "deliveries that fan out at once")
	flag.DurationVar(&c.Outage, "outage", 3*time.Second, "how long the server answers 503")
	flag.DurationVar(&c.Schedule.Base, "base", 200*time.Millisecond, "every peer's base")
	flag.DurationVar(&c.Schedule.Cap, "cap", 2*time.Second, "every peer's cap")
	flag.IntVar(&c.Schedule.Attempts, "attempts", 6, "every peer's attempts, the first included")
	flag.IntVar(&c.Rounds, "rounds", 3, "runs of every peer, in rotating order")
	flag.StringVar(&c.RetryAfter, "retryafter", "", "Retry-After sent with every 503")
	flag.DurationVar(&c.Timeout, "timeout", 0, "each delivery's deadline (0: outage + 30 s)")
	flag.IntVar(&c.IdleConnsPerHost, "idle", 0, "idle connections kept per host (0: n; -1: cleanhttp's default)")
	flag.BoolVar(&c.Cold, "cold", false, "do not warm the pool before the outage")
	flag.StringVar(&peers, "peers", "", "comma-separated peer (or throttled: client) keys (default: all)")
	flag.Parse()
	if scenario == "throttled" {
		throttled(tc, peers)
		return
	}
	if scenario != "herd" {
		fmt.Fprintf(os.Stderr, "herdpeers: no scenario %q\n", scenario)
		os.Exit(2)
	}
	c.Peers = append(c.Peers, pick(peers, "peer", bench.PeerByKey)...)

	start := time.Now()
	rows := bench.RunHerd(c)
	fmt.Print(bench.Markdown(c, rows))
	for _, r := range rows {
		if r.ErrorSample != "" {
			fmt.Printf("\n%s: %.0f caller errors, e.g. %s\n", r.Peer, r.Errors, r.ErrorSample)
		}
	}
	fmt.Printf("\nin %v\n", time.Since(start).Round(time.Millisecond))
}

// throttled runs the throttled batch. The schedule flags apply only when
// set: the batch's own defaults are base 200 ms, cap 30 s, 10 attempts.
func throttled(c bench.ThrottledConfig, peers string) {
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "base":
			c.Schedule.Base = f.Value.(flag.Getter).Get().(time.Duration)
		case "cap":
			c.Schedule.Cap = f.Value.(flag.Getter).Get().(time.Duration)
		case "attempts":
			c.Schedule.Attempts = f.Value.(flag.Getter).Get().(int)
		case "rounds":
			c.Rounds = f.Value.(flag.Getter).Get().(int)
		}
	})
	c.Clients = append(c.Clients, pick(peers, "throttled client", bench.ThrottledClientByKey)...)
	start := time.Now()
	runs := bench.RunThrottled(c)
	ms := bench.Medians(c, runs)
	fmt.Print(bench.ThrottledMarkdown(c, ms))
	for i, m := range ms {
		for _, r := range runs[i] {
			if r.ServerThrottled != r.Throttled || r.ServerOK != r.OK {
				fmt.Printf("\n%s: the server answered %d 200s and %d 429s; the client saw %d and %d\n", m.Client, r.ServerOK, r.ServerThrottled, r.OK, r.Throttled)
			}
		}
	}
	fmt.Printf("\nin %v\n", time.Since(start).Round(time.Millisecond))
}

// pick looks up each key of the comma-separated list; an unknown key ends
// the program with a message naming it as what.
func pick[T any](list, what string, byKey func(string) (T, bool)) []T {
	if list == "" {
		return nil
	}
	var out []T
	for _, k := range strings.Split(list, ",") {
		v, ok := byKey(strings.TrimSpace(k))
		if !ok {
			fmt.Fprintf(os.Stderr, "herdpeers: no %s %q\n", what, k)
			os.Exit(2)
		}
		out = append(out, v)
	}
	return out
}
