package bench

import (
	"fmt"
	"strings"
	"time"
)

// Recovery thresholds: goodput is back once it is at least RecoveredShare
// in every window for RecoveredHold.
const (
	RecoveredShare = 0.95
	RecoveredHold  = time.Second
)

// window returns the index of the window that starts at d.
func (r MetastableRun) window(d time.Duration) int { return int(d / r.Window) }

// Goodput returns the share of the requests that arrived within [from, to)
// of the run (window by window, so from and to are rounded down to
// windows) that were answered 200 within their deadline, and how many
// arrived; 0 and 0 if none did.
func (r MetastableRun) Goodput(from, to time.Duration) (float64, int) {
	var arrived, good int
	for k := max(r.window(from), 0); k < min(r.window(to), len(r.Arrived)); k++ {
		arrived += r.Arrived[k]
		good += r.Good[k]
	}
	if arrived == 0 {
		return 0, 0
	}
	return float64(good) / float64(arrived), arrived
}

// TriggerEnd returns when the capacity was restored, from the run's start.
func (r MetastableRun) TriggerEnd() time.Duration { return r.Warmup + r.Trigger }

// Span returns the time during which requests arrived.
func (r MetastableRun) Span() time.Duration { return time.Duration(len(r.Arrived)) * r.Window }

// Recovery returns how long after the trigger's end goodput was back: the
// start of the first window, from the one that begins at the trigger's end,
// that begins RecoveredHold of windows each with goodput at least
// RecoveredShare, measured from the trigger's end; and false if there was
// no such stretch before arrivals ended.
func (r MetastableRun) Recovery() (time.Duration, bool) {
	hold := int((RecoveredHold + r.Window - 1) / r.Window)
	first := r.window(r.TriggerEnd())
	run := 0
	for k := first; k < len(r.Arrived); k++ {
		if r.Arrived[k] == 0 || float64(r.Good[k]) < RecoveredShare*float64(r.Arrived[k]) {
			run = 0
			continue
		}
		run++
		if run == hold {
			return time.Duration(k-hold+1-first) * r.Window, true
		}
	}
	return 0, false
}

// AttemptsPerRequest returns the attempts the client sent per request.
func (r MetastableRun) AttemptsPerRequest() float64 {
	return float64(r.Attempts) / float64(max(r.Requests, 1))
}

// QueueAtEnd returns the server's queue when the last request arrived.
func (r MetastableRun) QueueAtEnd() int { return r.QueueAt[len(r.QueueAt)-1] }

// recoveryString formats Recovery for a table.
func (r MetastableRun) recoveryString() string {
	d, ok := r.Recovery()
	if !ok {
		return fmt.Sprintf("never (in %v)", r.Span()-r.TriggerEnd())
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// MetastableMarkdown formats the results as a Markdown table, a row per
// case and client, with a line that states the configuration, and then
// each run's goodput window by window.
func MetastableMarkdown(c MetastableConfig, rs []MetastableResult) string {
	c = c.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "%d workers x %v (%.0f req/s), queue of at most %d that serves abandoned requests; %.0f arrivals/s evenly spaced (%.0f%%), "+
		"deadline %v, attempt timeout %v; capacity cut to 1/%d at %v; %v after it; base %v, cap %v, %d attempts; goodput per %v of arrival, "+
		"recovered = >= %.0f%% in every window for %v.\n\n",
		c.Server.Workers, c.Server.Service, c.Server.Capacity(), c.Server.QueueMax, c.Rate(), 100*c.Load,
		c.Deadline, c.AttemptTimeout, c.Server.Slowdown, c.Warmup, c.Tail, c.Schedule.Base, c.Schedule.Cap, c.Schedule.Attempts, c.Window,
		100*RecoveredShare, RecoveredHold)
	b.WriteString("| trigger | client | goodput before | goodput during | goodput after | recovered after | attempts per request | most attempts | peak attempts/s (100 ms) | peak queue | queue at end | served for gone clients | rejected (queue full) | arrivals late by, at most |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, res := range rs {
		for _, r := range res.Runs {
			before, _ := r.Goodput(0, r.Warmup)
			during, _ := r.Goodput(r.Warmup, r.TriggerEnd())
			after, _ := r.Goodput(r.TriggerEnd(), r.Span())
			fmt.Fprintf(&b, "| %v | %s | %.1f%% | %.1f%% | %.1f%% | %s | %.2f | %d | %.0f | %d | %d | %d | %d | %v |\n",
				res.Trigger, r.Client, 100*before, 100*during, 100*after, r.recoveryString(),
				r.AttemptsPerRequest(), r.MaxAttempts, r.PeakSentRPS, r.Server.PeakQueue, r.QueueAtEnd(), r.Server.ServedGone, r.Server.Rejected,
				r.MaxLag.Round(time.Millisecond))
		}
	}
	b.WriteString("\nGoodput per window (%), from the trigger's start:\n\n")
	for _, res := range rs {
		for _, r := range res.Runs {
			fmt.Fprintf(&b, "- %v, %s:", res.Trigger, r.Client)
			for k := r.window(r.Warmup); k < len(r.Arrived); k++ {
				fmt.Fprintf(&b, " %.0f", 100*float64(r.Good[k])/float64(max(r.Arrived[k], 1)))
			}
			b.WriteString("\n")
		}
	}
	for _, res := range rs {
		for _, r := range res.Runs {
			if r.ErrSample != "" {
				fmt.Fprintf(&b, "\n%v, %s: e.g. `%s`\n", res.Trigger, r.Client, r.ErrSample)
			}
		}
	}
	return b.String()
}
