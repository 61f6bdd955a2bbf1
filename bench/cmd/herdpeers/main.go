// Command herdpeers runs the loopback herd (bench.RunHerd) for every peer
// and prints the table in Markdown, with a line per peer that saw caller
// errors. Every request goes to a server it starts on 127.0.0.1, and every
// delivery has a deadline.
//
//	go run ./cmd/herdpeers -n 2000 -outage 3s -base 200ms -cap 2s -attempts 6 -rounds 3
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
		c     bench.HerdConfig
		peers string
	)
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
	flag.StringVar(&peers, "peers", "", "comma-separated peer keys (default: all)")
	flag.Parse()
	if peers != "" {
		for _, k := range strings.Split(peers, ",") {
			p, ok := bench.PeerByKey(strings.TrimSpace(k))
			if !ok {
				fmt.Fprintf(os.Stderr, "herdpeers: no peer %q\n", k)
				os.Exit(2)
			}
			c.Peers = append(c.Peers, p)
		}
	}

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
