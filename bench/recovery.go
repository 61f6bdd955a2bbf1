package bench

import (
	"fmt"
	"strings"
	"time"
)

// RecoveryCase is one shape of failure for the recovery herd: the server
// answers 503 for Outage from the fan-out on, then 200.
type RecoveryCase struct {
	Name   string
	Outage time.Duration
}

// RecoveryCases are the blip (1 s), which the shared schedule outlasts,
// and the outage (3 s), which it does not: its bounds sum to
// 50+100+200+400+800 ms = 1.55 s, so a client that only retries on that
// schedule has given up before the outage ends, whatever it draws.
func RecoveryCases() []RecoveryCase {
	return []RecoveryCase{
		{"blip", time.Second},
		{"outage", 3 * time.Second},
	}
}

// RecoveryConfig is the recovery herd: the herd of RunHerd at full size,
// for each case in turn. Zero fields take the defaults below.
type RecoveryConfig struct {
	// Deliveries fan out at once, one GET each. 0 means 2,000.
	Deliveries int
	// Schedule is every client's. Zero fields mean base 50 ms, cap 2 s,
	// 6 attempts.
	Schedule Schedule
	// Timeout is each delivery's deadline. 0 means 30 s: long enough for
	// a client that waits for the host to recover, short enough that
	// every run ends.
	Timeout time.Duration
	// Rounds of every client per case, in rotating order. 0 means 1.
	Rounds int
	// Cases are the failures to run; nil means RecoveryCases().
	Cases []RecoveryCase
	// Peers are the clients; nil means RecoveryPeers().
	Peers []Peer
}

func (c RecoveryConfig) withDefaults() RecoveryConfig {
	if c.Deliveries <= 0 {
		c.Deliveries = 2_000
	}
	if c.Schedule.Base <= 0 {
		c.Schedule.Base = 50 * time.Millisecond
	}
	if c.Schedule.Cap <= 0 {
		c.Schedule.Cap = 2 * time.Second
	}
	if c.Schedule.Attempts <= 0 {
		c.Schedule.Attempts = 6
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
	if c.Cases == nil {
		c.Cases = RecoveryCases()
	}
	if c.Peers == nil {
		c.Peers = RecoveryPeers()
	}
	return c
}

// herd returns the HerdConfig of one case.
func (c RecoveryConfig) herd(k RecoveryCase) HerdConfig {
	return HerdConfig{
		Deliveries: c.Deliveries,
		Outage:     k.Outage,
		Schedule:   c.Schedule,
		Rounds:     c.Rounds,
		Timeout:    c.Timeout,
		Peers:      c.Peers,
	}
}

// RecoveryPeers are the recovery herd's clients: retryhttp with its
// defaults but the shared schedule (so whatever its defaults do when the
// budget, the breaker or a key's isolation would refuse, they do here),
// go-retryablehttp drawing the same full jitter, go-retryablehttp with its
// own default backoff (no jitter), and failsafe-go drawing the same full
// jitter.
func RecoveryPeers() []Peer {
	var ps []Peer
	for _, k := range []string{"retryhttp", "retryablehttp", "retryablehttp-plain", "failsafe-full"} {
		p, _ := PeerByKey(k)
		ps = append(ps, p)
	}
	return ps
}

// RecoveryResult is one case's rows, one per peer in the order of
// RecoveryConfig.Peers.
type RecoveryResult struct {
	Case RecoveryCase
	Rows []Row
}

// RunRecovery runs the recovery herd: for each case, RunHerd with every
// peer.
func RunRecovery(c RecoveryConfig) []RecoveryResult {
	c = c.withDefaults()
	out := make([]RecoveryResult, 0, len(c.Cases))
	for _, k := range c.Cases {
		out = append(out, RecoveryResult{Case: k, Rows: RunHerd(c.herd(k))})
	}
	return out
}

// RecoveryMarkdown formats the results as one Markdown table, a row per
// case and peer, with a line that states the configuration.
func RecoveryMarkdown(c RecoveryConfig, rs []RecoveryResult) string {
	c = c.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "%d GETs at once, 503 then 200, base %v, cap %v, %d attempts, deadline %v, warm pool; %d round(s), means per run.\n\n",
		c.Deliveries, c.Schedule.Base, c.Schedule.Cap, c.Schedule.Attempts, c.Timeout, c.Rounds)
	b.WriteString("| case | client | delivered | errors | attempts | peak req/s outage (retries) | peak req/s recovery | 99% delivered by | last answer |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rs {
		for _, row := range r.Rows {
			to99 := "never"
			if row.To99 >= 0 {
				to99 = fmt.Sprintf("%.2f s", row.To99.Seconds())
			}
			fmt.Fprintf(&b, "| %s %v | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %.2f s |\n",
				r.Case.Name, r.Case.Outage, row.Peer, row.Delivered, row.Errors, row.Attempts, row.PeakOutageRPS, row.PeakRecoveryRPS, to99, row.LastReturn.Seconds())
		}
	}
	for _, r := range rs {
		for _, row := range r.Rows {
			if row.ErrorSample != "" {
				fmt.Fprintf(&b, "\n%s %v, %s: %.0f caller errors, e.g. `%s`\n", r.Case.Name, r.Case.Outage, row.Peer, row.Errors, row.ErrorSample)
			}
		}
	}
	return b.String()
}
