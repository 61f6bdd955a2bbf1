package bench

import (
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// Bucket is the width of the time slices that peak rates are measured over.
const Bucket = 100 * time.Millisecond

// deliveryHeader carries a delivery's number, so that the server can tell a
// first attempt from a retry whatever the peer.
const deliveryHeader = "X-Delivery"

// HerdConfig is one loopback herd. Zero fields take the defaults of the
// small herd that TestHerdSmall runs.
type HerdConfig struct {
	// Deliveries is how many GETs fan out at once, one per delivery.
	// 0 means 200.
	Deliveries int
	// Outage is how long the server answers 503 from the fan-out on; then
	// it answers 200. 0 means 1 s.
	Outage time.Duration
	// Schedule is every peer's schedule. Zero fields mean base 50 ms,
	// cap 1 s, 6 attempts.
	Schedule Schedule
	// Rounds is how many times every peer runs; the order of the peers
	// rotates from round to round. 0 means 1.
	Rounds int
	// RetryAfter is sent as the Retry-After header of every 503; "" sends
	// none.
	RetryAfter string
	// Timeout is each delivery's deadline, so that every run ends.
	// 0 means Outage + 30 s.
	Timeout time.Duration
	// IdleConnsPerHost is MaxIdleConnsPerHost of the base transport
	// and its MaxIdleConns (cleanhttp's pooled transport otherwise). 0
	// means Deliveries, so that a peer that drains and closes what it
	// discards can reuse every connection; -1 keeps cleanhttp's defaults,
	// GOMAXPROCS+1 per host and 100 in all.
	IdleConnsPerHost int
	// Cold skips warming the pool. By default, before the outage starts,
	// Deliveries concurrent requests that the server answers 200 (and does
	// not count) open the connections of a dispatcher that was delivering
	// to a healthy tenant, so that the herd measures retries rather than
	// connection set-up.
	Cold bool
	// Peers are the peers to run; nil means Peers().
	Peers []Peer
}

func (c HerdConfig) withDefaults() HerdConfig {
	if c.Deliveries <= 0 {
		c.Deliveries = 200
	}
	if c.Outage <= 0 {
		c.Outage = time.Second
	}
	if c.Schedule.Base <= 0 {
		c.Schedule.Base = 50 * time.Millisecond
	}
	if c.Schedule.Cap <= 0 {
		c.Schedule.Cap = time.Second
	}
	if c.Schedule.Attempts <= 0 {
		c.Schedule.Attempts = 6
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
	if c.Timeout <= 0 {
		c.Timeout = c.Outage + 30*time.Second
	}
	if c.IdleConnsPerHost == 0 {
		c.IdleConnsPerHost = c.Deliveries
	}
	if c.Peers == nil {
		c.Peers = Peers()
	}
	return c
}

// Row is what one peer did, as means over its runs.
type Row struct {
	Peer            string
	Runs            int
	Delivered       float64       // deliveries whose caller got a 200
	Errors          float64       // deliveries whose caller got an error, not a response
	Attempts        float64       // every request the server received
	Retries         float64       // requests after a delivery's first
	Wasted          float64       // retries that were not answered 200
	PeakOutageRPS   float64       // largest 100 ms bucket of retries before recovery, per second
	PeakRecoveryRPS float64       // largest 100 ms bucket of any requests from recovery on, per second
	ConnsOpened     float64       // connections the server accepted from the fan-out on
	PeakOpenConns   float64       // connections open at once, at most
	LastReturn      time.Duration // when the last caller got its answer, from the fan-out
	To99            time.Duration // when 99% of the deliveries had their 200, from the fan-out; -1 if a run never got there
	FirstDone       time.Duration // when the server had received every first attempt, from the fan-out
	ErrorSample     string        // one caller error, if any
}

// RunHerd runs every peer of c through the herd, c.Rounds times each, one
// run at a time and each against a fresh server and a fresh base transport,
// rotating the order of the peers from round to round. It returns one row
// per peer, in the order of c.Peers.
func RunHerd(c HerdConfig) []Row {
	c = c.withDefaults()
	sums := make([]result, len(c.Peers))
	for r := range c.Rounds {
		for j := range c.Peers {
			i := (j + r) % len(c.Peers)
			sums[i].add(runOnce(c.Peers[i], c))
		}
	}
	rows := make([]Row, len(c.Peers))
	for i, p := range c.Peers {
		rows[i] = sums[i].row(p.Name, c.Rounds)
	}
	return rows
}

// result is one run's counts, or the sum of several.
type result struct {
	delivered, errors, attempts, retries, wasted int
	peakOutage, peakRecovery, conns, peakOpen    int
	last, firstDone                              time.Duration
	to99                                         time.Duration
	missed99                                     int // runs in which fewer than 99% were delivered
	errSample                                    string
}

func (s *result) add(r result) {
	s.delivered += r.delivered
	s.errors += r.errors
	s.attempts += r.attempts
	s.retries += r.retries
	s.wasted += r.wasted
	s.peakOutage += r.peakOutage
	s.peakRecovery += r.peakRecovery
	s.conns += r.conns
	s.peakOpen += r.peakOpen
	s.last += r.last
	s.firstDone += r.firstDone
	s.to99 += r.to99
	s.missed99 += r.missed99
	if s.errSample == "" {
		s.errSample = r.errSample
	}
}

func (s result) row(name string, runs int) Row {
	n := float64(runs)
	perSec := float64(time.Second / Bucket)
	to99 := s.to99 / time.Duration(runs)
	if s.missed99 > 0 {
		// A mean over runs some of which never got there means nothing.
		to99 = -1
	}
	return Row{
		Peer:            name,
		Runs:            runs,
		Delivered:       float64(s.delivered) / n,
		Errors:          float64(s.errors) / n,
		Attempts:        float64(s.attempts) / n,
		Retries:         float64(s.retries) / n,
		Wasted:          float64(s.wasted) / n,
		PeakOutageRPS:   float64(s.peakOutage) * perSec / n,
		PeakRecoveryRPS: float64(s.peakRecovery) * perSec / n,
		ConnsOpened:     float64(s.conns) / n,
		PeakOpenConns:   float64(s.peakOpen) / n,
		LastReturn:      s.last / time.Duration(runs),
		FirstDone:       s.firstDone / time.Duration(runs),
		To99:            to99,
		ErrorSample:     s.errSample,
	}
}

// runOnce fans c.Deliveries GETs out at once through the peer, against a
// fresh flaky server, and returns when every caller has its answer.
func runOnce(p Peer, c HerdConfig) result {
	f := newFlaky(c)
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ConnState = f.connState
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // accept errors under load are counted by the client
	srv.Start()
	defer srv.Close()

	base := cleanhttp.DefaultPooledTransport()
	if c.IdleConnsPerHost > 0 {
		// cleanhttp also caps idle connections to all hosts at 100.
		base.MaxIdleConns = c.IdleConnsPerHost
		base.MaxIdleConnsPerHost = c.IdleConnsPerHost
	}
	defer base.CloseIdleConnections()
	if !c.Cold {
		warm(base, srv.URL+warmPath, c.Deliveries)
	}
	f.connsBefore.Store(f.conns.Load())
	client := &http.Client{Transport: p.Wrap(base, c.Schedule)}
	url := srv.URL + "/hook"

	var (
		wg                sync.WaitGroup
		delivered, errors atomic.Int64
		last              atomic.Int64 // nanoseconds from the fan-out
		deliveredAt       = make([]time.Duration, c.Deliveries)
		errOnce           sync.Once
		errSample         string
	)
	start := make(chan struct{})
	for i := range c.Deliveries {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				panic(err) // the URL is ours
			}
			req.Header.Set(deliveryHeader, strconv.Itoa(i))
			resp, err := client.Do(req)
			switch {
			case err != nil:
				errors.Add(1)
				errOnce.Do(func() { errSample = err.Error() })
			default:
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					delivered.Add(1)
					deliveredAt[i] = f.since() // each goroutine writes its own element
				}
			}
			storeMax(&last, int64(f.since()))
		})
	}
	f.begin()
	close(start)
	wg.Wait()

	r := f.result()
	r.delivered = int(delivered.Load())
	r.errors = int(errors.Load())
	r.last = time.Duration(last.Load())
	r.errSample = errSample
	r.to99, r.missed99 = quantileDone(deliveredAt, 0.99)
	return r
}

// quantileDone returns when the share q of the deliveries had their 200,
// given when each did (0: never), and 0; or 0 and 1 if fewer than that
// share ever did.
func quantileDone(at []time.Duration, q float64) (time.Duration, int) {
	var done []time.Duration
	for _, d := range at {
		if d > 0 {
			done = append(done, d)
		}
	}
	need := int(math.Ceil(q * float64(len(at))))
	if need == 0 || len(done) < need {
		return 0, 1
	}
	slices.Sort(done)
	return done[need-1], 0
}

// Markdown formats rows as a Markdown table, with a line that states the
// configuration.
func Markdown(c HerdConfig, rows []Row) string {
	c = c.withDefaults()
	var b strings.Builder
	pool := "warm"
	if c.Cold {
		pool = "cold"
	}
	fmt.Fprintf(&b, "%d deliveries, 503 for %v then 200, base %v, cap %v, %d attempts, %d round(s), Retry-After %q, %s pool of %d idle conns per host; means per run.\n\n",
		c.Deliveries, c.Outage, c.Schedule.Base, c.Schedule.Cap, c.Schedule.Attempts, c.Rounds, c.RetryAfter, pool, c.IdleConnsPerHost)
	b.WriteString("| peer | delivered | errors | attempts | wasted | peak req/s outage (retries) | peak req/s recovery | conns opened | peak open conns | first attempts in by | last answer |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f s | %.2f s |\n",
			r.Peer, r.Delivered, r.Errors, r.Attempts, r.Wasted, r.PeakOutageRPS, r.PeakRecoveryRPS,
			r.ConnsOpened, r.PeakOpenConns, r.FirstDone.Seconds(), r.LastReturn.Seconds())
	}
	return b.String()
}
