// Command herdpeers runs the loopback herd (bench.RunHerd) for every peer
// and prints the table in Markdown, with a line per peer that saw caller
// errors. With -scenario throttled it runs the throttled batch instead
// (bench.RunThrottled): a batch of GETs queued at once against a server
// that admits a fixed rate and answers 429 beyond it. With -scenario
// recovery it runs the recovery herd (bench.RunRecovery): the herd through
// a 1 s blip and a 3 s outage, with the time to 99% delivered. With
// -scenario metastable it runs the metastable trigger (bench.RunMetastable):
// open-loop load against a server of fixed capacity, cut to a fifth for
// 1 s and 3 s. Every request goes to a server it starts on 127.0.0.1, and
// every delivery has a deadline.
//
//	go run ./cmd/herdpeers -n 2000 -outage 3s -base 200ms -cap 2s -attempts 6 -rounds 3
//	go run ./cmd/herdpeers -scenario throttled   # = -requests 10000 -workers 200 -rate 500 -burst 50 -base 200ms -cap 30s -attempts 10 -horizon 120s -rounds 3
//	go run ./cmd/herdpeers -scenario recovery    # = -n 2000 -base 50ms -cap 2s -attempts 6 -timeout 30s -rounds 1
//	go run ./cmd/herdpeers -scenario metastable  # = -warmup 3s -tail 12s -base 50ms -cap 2s -attempts 6
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
		mc       bench.MetastableConfig
	)
	flag.StringVar(&scenario, "scenario", "herd", "herd: the 503 outage; throttled: the batch against a rate-limited server; recovery: the herd through a 1 s blip and a 3 s outage; metastable: a server's capacity cut to a fifth under open-loop load")
	flag.DurationVar(&mc.Warmup, "warmup", 3*time.Second, "metastable: time before the trigger")
	flag.DurationVar(&mc.Tail, "tail", 12*time.Second, "metastable: time after the trigger")
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
	flag.StringVar(&peers, "peers", "", "comma-separated peer (throttled, metastable: client) keys (default: all)")
	flag.Parse()
	switch scenario {
	case "throttled":
		throttled(tc, peers)
		return
	case "recovery":
		recovery(peers)
		return
	case "metastable":
		metastable(mc, peers)
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

// recovery runs the recovery herd. The herd's flags apply only when set:
// its own defaults are 2,000 deliveries, base 50 ms, cap 2 s, 6 attempts,
// a 30 s deadline and one round.
func recovery(peers string) {
	var c bench.RecoveryConfig
	flag.Visit(func(f *flag.Flag) {
		switch v := f.Value.(flag.Getter).Get(); f.Name {
		case "n":
			c.Deliveries = v.(int)
		case "base":
			c.Schedule.Base = v.(time.Duration)
		case "cap":
			c.Schedule.Cap = v.(time.Duration)
		case "attempts":
			c.Schedule.Attempts = v.(int)
		case "timeout":
			c.Timeout = v.(time.Duration)
		case "rounds":
			c.Rounds = v.(int)
		}
	})
	c.Peers = append(c.Peers, pick(peers, "peer", bench.PeerByKey)...)
	start := time.Now()
	rs := bench.RunRecovery(c)
	fmt.Print(bench.RecoveryMarkdown(c, rs))
	fmt.Printf("\nin %v\n", time.Since(start).Round(time.Millisecond))
}

// metastable runs the metastable trigger. The schedule flags apply only
// when set: its own defaults are base 50 ms, cap 2 s, 6 attempts.
func metastable(c bench.MetastableConfig, peers string) {
	flag.Visit(func(f *flag.Flag) {
		switch v := f.Value.(flag.Getter).Get(); f.Name {
		case "base":
			c.Schedule.Base = v.(time.Duration)
		case "cap":
			c.Schedule.Cap = v.(time.Duration)
		case "attempts":
			c.Schedule.Attempts = v.(int)
		}
	})
	c.Clients = append(c.Clients, pick(peers, "metastable client", bench.MetastableClientByKey)...)
	start := time.Now()
	rs := bench.RunMetastable(c)
	fmt.Print(bench.MetastableMarkdown(c, rs))
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
