package bench

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// MetastableConfig is the metastable trigger: open-loop load at a fixed
// rate against a Backlog, whose capacity is cut to a fifth for Trigger,
// Warmup into the run, then restored. Zero fields take the defaults below.
type MetastableConfig struct {
	// Server is the server's capacity and queue; its trigger window is
	// set from Warmup and each case's length.
	Server BacklogConfig
	// Load is the share of the server's capacity that arrives, evenly
	// spaced. 0 means 0.55 (880 requests/s against 1,600).
	Load float64
	// Warmup is the time before the trigger, Tail the time after it
	// during which requests keep arriving. 0 means 3 s and 12 s. Both
	// should be multiples of Window.
	Warmup, Tail time.Duration
	// Deadline is each request's own, from its arrival. 0 means 2 s.
	Deadline time.Duration
	// AttemptTimeout bounds each attempt of the clients that have one,
	// and the whole request of the client without retries. 0 means
	// 300 ms.
	AttemptTimeout time.Duration
	// Window is the width of the slices that goodput is measured over,
	// by arrival time. 0 means 250 ms.
	Window time.Duration
	// Schedule is the retrying clients'. Zero fields mean base 50 ms,
	// cap 2 s, 6 attempts.
	Schedule Schedule
	// Triggers are the cases: how long the capacity is cut. nil means
	// 1 s and 3 s.
	Triggers []time.Duration
	// Clients; nil means MetastableClients().
	Clients []MetastableClient
}

func (c MetastableConfig) withDefaults() MetastableConfig {
	c.Server = c.Server.withDefaults()
	if c.Load <= 0 {
		c.Load = 0.55
	}
	if c.Warmup <= 0 {
		c.Warmup = 3 * time.Second
	}
	if c.Tail <= 0 {
		c.Tail = 12 * time.Second
	}
	if c.Deadline <= 0 {
		c.Deadline = 2 * time.Second
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 300 * time.Millisecond
	}
	if c.Window <= 0 {
		c.Window = 250 * time.Millisecond
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
	if c.Triggers == nil {
		c.Triggers = []time.Duration{time.Second, 3 * time.Second}
	}
	if c.Clients == nil {
		c.Clients = MetastableClients()
	}
	return c
}

// Rate returns the arrivals per second.
func (c MetastableConfig) Rate() float64 {
	c = c.withDefaults()
	return c.Load * c.Server.Capacity()
}

// MetastableRun is one client's run of one case.
type MetastableRun struct {
	Client   string
	Trigger  time.Duration // the case: how long the capacity was cut
	Warmup   time.Duration // when the trigger began
	Window   time.Duration
	Requests int
	// Arrived and Good count, per window of arrival time, the requests
	// that arrived in it and those of them answered 200 within their
	// deadline.
	Arrived, Good []int
	// QueueAt is the server's queue at the start of each window.
	QueueAt []int
	// Attempts are every attempt the client sent, counted below it; per
	// request, the largest count; PeakSentRPS the largest 100 ms bucket
	// of them, per second.
	Attempts, MaxAttempts int
	PeakSentRPS           float64
	Server                BacklogCounts
	// MaxLag is how late the generator sent an arrival at worst: a
	// machine that cannot keep up with the load bunches arrivals.
	MaxLag    time.Duration
	ErrSample string // one caller error, if any
}

// MetastableResult is one case: a run per client, in the order of
// MetastableConfig.Clients.
type MetastableResult struct {
	Trigger time.Duration
	Runs    []MetastableRun
}

// RunMetastable runs every case, and in each every client one after
// another, each against a fresh server and a fresh base transport, so that
// every client sees the same trigger at the same instant of its own run.
func RunMetastable(c MetastableConfig) []MetastableResult {
	c = c.withDefaults()
	out := make([]MetastableResult, 0, len(c.Triggers))
	for _, trig := range c.Triggers {
		res := MetastableResult{Trigger: trig}
		for _, cl := range c.Clients {
			res.Runs = append(res.Runs, runMetastableOnce(cl, trig, c))
		}
		out = append(out, res)
	}
	return out
}

// runMetastableOnce sends the load through the client against a fresh
// Backlog and returns when every request has its answer or its deadline.
// Arrival i is due at i/rate from the start; the generator sends every
// arrival that is due, then waits for the next one: that timer is the
// load's pacing, so the count is exact however late a wake-up comes.
func runMetastableOnce(cl MetastableClient, trigger time.Duration, c MetastableConfig) MetastableRun {
	sc := c.Server
	sc.From, sc.To = c.Warmup, c.Warmup+trigger
	span := c.Warmup + trigger + c.Tail
	rate := c.Rate()
	n := int(rate * span.Seconds())
	windows := int((span + c.Window - 1) / c.Window)

	start := time.Now()
	b := NewBacklog(sc, start)
	srv := httptest.NewUnstartedServer(b)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // accept errors under load are counted by the client
	srv.Start()
	base := cleanhttp.DefaultPooledTransport()
	// Enough idle connections for every request in flight at the
	// deadline, so that a connection a client did not abandon is reused.
	idle := int(rate*c.Deadline.Seconds()) + 1
	base.MaxIdleConns, base.MaxIdleConnsPerHost = idle, idle
	w := &wire{
		next:      base,
		start:     start,
		perReq:    make([]atomic.Int32, n),
		perBucket: make([]atomic.Int32, int((span+c.Deadline)/Bucket)+2),
	}
	client := cl.New(w, c.Schedule, c.AttemptTimeout)
	url := srv.URL + "/work"

	run := MetastableRun{
		Client: cl.Name, Trigger: trigger, Warmup: c.Warmup, Window: c.Window, Requests: n,
		Arrived: make([]int, windows), Good: make([]int, windows), QueueAt: make([]int, windows),
	}
	good := make([]bool, n)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
	)
	arrival := func(i int) time.Duration { return time.Duration(float64(i) / rate * float64(time.Second)) }
	pace := time.NewTimer(0)
	<-pace.C
	sampled := 0 // windows whose queue length has been read
	for i := range n {
		at := arrival(i)
		if d := at - time.Since(start); d > 0 {
			pace.Reset(d)
			<-pace.C
		} else {
			run.MaxLag = max(run.MaxLag, -d)
		}
		if k := int(at / c.Window); k >= sampled {
			run.QueueAt[k] = b.Queued()
			sampled = k + 1
		}
		wg.Go(func() {
			due := start.Add(at + c.Deadline)
			ctx, cancel := context.WithDeadline(context.Background(), due)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				panic(err) // the URL is ours
			}
			req.Header.Set(deliveryHeader, strconv.Itoa(i))
			resp, err := client.Do(req)
			inTime := !time.Now().After(due)
			if err != nil {
				errOnce.Do(func() { run.ErrSample = err.Error() })
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			// Each goroutine writes its own element.
			good[i] = resp.StatusCode == http.StatusOK && inTime
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	base.CloseIdleConnections()
	run.Server = b.Counts()
	b.Close()
	srv.Close()

	for i, ok := range good {
		k := int(arrival(i) / c.Window)
		run.Arrived[k]++
		if ok {
			run.Good[k]++
		}
	}
	run.Attempts = int(w.attempts.Load())
	for i := range w.perReq {
		run.MaxAttempts = max(run.MaxAttempts, int(w.perReq[i].Load()))
	}
	for i := range w.perBucket {
		run.PeakSentRPS = max(run.PeakSentRPS, float64(w.perBucket[i].Load())*float64(time.Second/Bucket))
	}
	return run
}
