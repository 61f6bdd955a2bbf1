package bench

import (
	"context"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cristalhq/hedgedhttp"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp"
)

// Headers of the hedging scenarios. reqIDHeader is set by the load
// generator on the caller's request, so that every copy of it, hedge or
// retry, carries it: the servers count the copies of each request by it.
// copyHeader is set by the servers on their answer: which arrival of the
// request answered (1 for the first copy to arrive), so that the caller
// can tell a hedge that won whatever library sent it.
const (
	reqIDHeader = "X-Req-Id"
	copyHeader  = "X-Copy"
)

// StragglerConfig is a server whose attempts are fast except a share of
// stragglers: chosen at random among attempts, or fixed per connection.
// Zero fields take the defaults below.
type StragglerConfig struct {
	// Fast is an attempt's usual service time. 0 means 5 ms.
	Fast time.Duration
	// Factor multiplies Fast for a straggler. 0 means 20 (100 ms).
	Factor int
	// Share of stragglers. 0 means 0.05.
	Share float64
	// PerConn makes slowness a property of the connection instead of the
	// attempt: every 1/Share-th connection the server accepts, its first
	// included, serves every request Factor times slower, as a backend
	// pinned behind one connection of a load balancer does. A hedge helps
	// only if it goes out on another connection.
	PerConn bool
	// MaxPerConn closes a connection once it has answered this many
	// requests (Connection: close), as servers and balancers that cap
	// requests per connection do, so that new connections, slow ones
	// among them, keep coming. 0 means no cap.
	MaxPerConn int
	// IDs bounds the request ids (reqIDHeader, and the body of a POST)
	// the server tallies: 0 to IDs-1.
	IDs int
	// Seed seeds the draw of random stragglers, in the order attempts
	// arrive, so that every client meets about the same number of them
	// (common random numbers): with 5% of 1,000 the count alone moves by
	// a seventh from one draw to the next, and p99 with it. 0 means 1.
	Seed uint64
}

func (c StragglerConfig) withDefaults() StragglerConfig {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Fast <= 0 {
		c.Fast = 5 * time.Millisecond
	}
	if c.Factor <= 0 {
		c.Factor = 20
	}
	if c.Share <= 0 {
		c.Share = 0.05
	}
	return c
}

// StragglerAttempt is one attempt a Stragglers server received.
type StragglerAttempt struct {
	Conn int64 // the connection it came on, numbered from 0 in accept order
	Slow bool  // whether it was given a straggler's service time
	// Cancelled: its client went before the answer (a copy that lost a
	// race, or a request past its deadline).
	Cancelled bool
}

// Stragglers is the server of StragglerConfig, on 127.0.0.1. Its handler
// returns as soon as the request's context ends, so that a copy its
// client cancelled frees its connection (HTTP/1.1 closes it) at once. It
// records, per request id, every attempt in arrival order, and per POST
// id the bodies it executed. Safe for concurrent use; Close stops it.
type Stragglers struct {
	c     StragglerConfig
	srv   *httptest.Server
	conns atomic.Int64 // connections accepted

	mu       sync.Mutex
	attempts [][]StragglerAttempt // per id, guarded by mu

	posts     []atomic.Int32 // per id: POST bodies read whole
	noID      atomic.Int64   // attempts without a valid reqIDHeader
	badBodies atomic.Int64   // POSTs whose body could not be read or was no id

	rngMu sync.Mutex
	rng   *rand.Rand // guarded by rngMu
}

// stragglerConnKey keys a connection's stragglerConn in its context.
type stragglerConnKey struct{}

// stragglerConn is what the server knows of one connection.
type stragglerConn struct {
	id       int64
	slow     bool
	answered atomic.Int32 // requests answered on it
}

// NewStragglers starts the server.
func NewStragglers(c StragglerConfig) *Stragglers {
	c = c.withDefaults()
	s := &Stragglers{
		c:        c,
		attempts: make([][]StragglerAttempt, c.IDs),
		posts:    make([]atomic.Int32, c.IDs),
		rng:      rand.New(rand.NewPCG(c.Seed, c.Seed)),
	}
	every := max(int64(math.Round(1/c.Share)), 1)
	s.srv = httptest.NewUnstartedServer(s)
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // cancelled copies make the server log; they are counted instead
	s.srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		n := s.conns.Add(1) - 1
		return context.WithValue(ctx, stragglerConnKey{}, &stragglerConn{id: n, slow: c.PerConn && n%every == 0})
	}
	s.srv.Start()
	return s
}

// URL is the server's base URL.
func (s *Stragglers) URL() string { return s.srv.URL }

// Close closes the server and every connection to it.
func (s *Stragglers) Close() { s.srv.Close() }

func (s *Stragglers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	conn, ok := r.Context().Value(stragglerConnKey{}).(*stragglerConn)
	if !ok {
		panic("no connection in the request's context") // set by ConnContext
	}
	slow := conn.slow
	if !s.c.PerConn {
		s.rngMu.Lock()
		slow = s.rng.Float64() < s.c.Share
		s.rngMu.Unlock()
	}
	nth := 0
	id, err := strconv.Atoi(r.Header.Get(reqIDHeader))
	if err == nil && id >= 0 && id < len(s.attempts) {
		s.mu.Lock()
		s.attempts[id] = append(s.attempts[id], StragglerAttempt{Conn: conn.id, Slow: slow})
		nth = len(s.attempts[id])
		s.mu.Unlock()
	} else {
		s.noID.Add(1)
	}
	if r.Method == http.MethodPost {
		// Executing a POST is reading its body: a copy whose body arrived
		// whole has been acted on, whatever its client does next.
		body, err := io.ReadAll(r.Body)
		n, perr := strconv.Atoi(string(body))
		if err != nil || perr != nil || n < 0 || n >= len(s.posts) {
			s.badBodies.Add(1)
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		s.posts[n].Add(1)
	}
	d := s.c.Fast
	if slow {
		d *= time.Duration(s.c.Factor)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		if nth > 0 {
			s.mu.Lock()
			s.attempts[id][nth-1].Cancelled = true
			s.mu.Unlock()
		}
		return
	}
	w.Header().Set(copyHeader, strconv.Itoa(nth))
	if s.c.MaxPerConn > 0 && int(conn.answered.Add(1)) >= s.c.MaxPerConn {
		w.Header().Set("Connection", "close")
	}
	_, _ = io.WriteString(w, "ok\n")
}

// Attempts returns a copy of the attempts of ids from to to-1, in arrival
// order per id.
func (s *Stragglers) Attempts(from, to int) [][]StragglerAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]StragglerAttempt, 0, to-from)
	for _, a := range s.attempts[from:to] {
		out = append(out, slices.Clone(a))
	}
	return out
}

// Unidentified returns the attempts that carried no valid request id.
func (s *Stragglers) Unidentified() int { return int(s.noID.Load()) }

// PostsTwice returns how many POST ids from from to to-1 the server
// executed more than once, and how many POSTs it could not read.
func (s *Stragglers) PostsTwice(from, to int) (twice, bad int) {
	for i := from; i < to; i++ {
		if s.posts[i].Load() > 1 {
			twice++
		}
	}
	return twice, int(s.badBodies.Load())
}

// QueueConfig is a server of fixed capacity with stragglers: Workers
// workers take requests in arrival order from one queue, and spend
// Service on each, Factor times that on a random Share of them. As
// Backlog, it serves abandoned requests: a copy whose client has gone
// stays queued and costs a worker its service time when its turn comes,
// as a server that never checks for cancellation does, so that every
// hedge costs capacity even when it loses. Zero fields take the defaults
// below.
type QueueConfig struct {
	// Workers serve at once. 0 means 15.
	Workers int
	// Service is a request's usual service time. 0 means 5 ms.
	Service time.Duration
	// Factor multiplies Service for a straggler. 0 means 20.
	Factor int
	// Share of stragglers. 0 means 0.05.
	Share float64
	// QueueMax bounds the queue: a request that finds it full is answered
	// 503 at once. 0 means 10,000.
	QueueMax int
	// Seed seeds the draw of stragglers, in the order the workers take
	// requests, so that every client meets the same sequence of service
	// times (common random numbers): at 95% of capacity the tail depends
	// on where the stragglers fall more than on the client. 0 means 1.
	Seed uint64
	// IDs bounds the request ids the server tallies: 0 to IDs-1.
	IDs int
}

func (c QueueConfig) withDefaults() QueueConfig {
	if c.Workers <= 0 {
		c.Workers = 15
	}
	if c.Service <= 0 {
		c.Service = 5 * time.Millisecond
	}
	if c.Factor <= 0 {
		c.Factor = 20
	}
	if c.Share <= 0 {
		c.Share = 0.05
	}
	if c.QueueMax <= 0 {
		c.QueueMax = 10_000
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// Capacity returns the requests a second the workers serve, stragglers
// included: the defaults' mean service is 5 ms × (0.95 + 0.05 × 20) =
// 9.75 ms, so 15 workers serve about 1,540 a second.
func (c QueueConfig) Capacity() float64 {
	c = c.withDefaults()
	mean := c.Service.Seconds() * (1 - c.Share + c.Share*float64(c.Factor))
	return float64(c.Workers) / mean
}

// Queue is the server of QueueConfig, on 127.0.0.1: a Backlog whose
// service times are drawn with stragglers, which tallies each request
// id's attempts. Safe for concurrent use; Close stops its workers and the
// server.
type Queue struct {
	*Backlog
	c   QueueConfig
	srv *httptest.Server

	rngMu sync.Mutex
	rng   *rand.Rand // guarded by rngMu

	attempts []atomic.Int32 // per id
	noID     atomic.Int64
}

// NewQueue starts the workers and the server.
func NewQueue(c QueueConfig) *Queue {
	c = c.withDefaults()
	q := &Queue{
		c:        c,
		attempts: make([]atomic.Int32, c.IDs),
		rng:      rand.New(rand.NewPCG(c.Seed, c.Seed)),
	}
	q.Backlog = NewBacklog(BacklogConfig{Workers: c.Workers, Service: c.Service, QueueMax: c.QueueMax, ServiceOf: q.serviceTime}, time.Now())
	q.srv = httptest.NewUnstartedServer(q)
	q.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	q.srv.Start()
	return q
}

// URL is the server's base URL.
func (q *Queue) URL() string { return q.srv.URL }

// serviceTime draws the next request's service time: Factor times
// Service for a Share of them.
func (q *Queue) serviceTime() time.Duration {
	q.rngMu.Lock()
	defer q.rngMu.Unlock()
	if q.rng.Float64() < q.c.Share {
		return q.c.Service * time.Duration(q.c.Factor)
	}
	return q.c.Service
}

func (q *Queue) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, err := strconv.Atoi(r.Header.Get(reqIDHeader)); err == nil && id >= 0 && id < len(q.attempts) {
		q.attempts[id].Add(1)
	} else {
		q.noID.Add(1)
	}
	q.Backlog.ServeHTTP(w, r)
}

// Attempts returns the attempts the server received for each id from
// from to to-1.
func (q *Queue) Attempts(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, int(q.attempts[i].Load()))
	}
	return out
}

// QueueCounts are a Queue's own counts.
type QueueCounts struct {
	BacklogCounts
	Unidentified int // requests without a valid request id
}

// Counts returns the server's counts so far.
func (q *Queue) Counts() QueueCounts {
	return QueueCounts{BacklogCounts: q.Backlog.Counts(), Unidentified: int(q.noID.Load())}
}

// Close stops the workers, dropping what is still queued, then the
// server; waiting handlers return at once.
func (q *Queue) Close() {
	q.Backlog.Close()
	q.srv.Close()
}

// OpenLoop is one round of open-loop load: request i (0 to N-1) is
// started at i/Rate from the round's start whether or not the earlier ones
// have answered, as independent callers do, so that a client that slows
// down meets the same arrivals instead of sending fewer.
type OpenLoop struct {
	URL     string
	Rate    float64       // requests a second
	FirstID int           // reqIDHeader of request i is FirstID+i
	N       int           // requests
	Timeout time.Duration // each request's deadline, from its scheduled start
	// Post sends keyless POSTs whose body is the request's id, built by
	// http.NewRequest from a strings.Reader (so with GetBody), instead of
	// GETs.
	Post bool
}

// Outcome is one request of an OpenLoop.
type Outcome struct {
	At      time.Duration // its scheduled start, from the round's start
	Latency time.Duration // from its scheduled start to its body read and closed, or to its failure
	OK      bool          // answered 2xx, body read whole, within its deadline
	Copy    int           // the server's copyHeader: which arrival answered; 0 if none
	Err     string        // why not OK
}

// Run sends the round through c and returns once every request has its
// answer or its deadline, with each request's outcome in order and how
// late the generator started a request at worst. Request i is due at
// i/Rate; the generator starts every request that is due, then waits for
// the next one, so that the count is exact however late a wake-up comes.
func (o OpenLoop) Run(c *http.Client) ([]Outcome, time.Duration) {
	outs := make([]Outcome, o.N)
	var (
		wg     sync.WaitGroup
		maxLag time.Duration
	)
	at := func(i int) time.Duration { return time.Duration(float64(i) / o.Rate * float64(time.Second)) }
	pace := time.NewTimer(time.Hour)
	pace.Stop()
	start := time.Now()
	for i := range o.N {
		due := at(i)
		if d := due - time.Since(start); d > 0 {
			pace.Reset(d)
			<-pace.C
		} else {
			maxLag = max(maxLag, -d)
		}
		wg.Go(func() {
			// Each goroutine writes its own element.
			outs[i] = o.one(c, start.Add(due), o.FirstID+i)
			outs[i].At = due
		})
	}
	wg.Wait()
	return outs, maxLag
}

// one sends request id, scheduled at sched, and reads its answer.
func (o OpenLoop) one(c *http.Client, sched time.Time, id int) Outcome {
	ctx, cancel := context.WithDeadline(context.Background(), sched.Add(o.Timeout))
	defer cancel()
	method, body := http.MethodGet, io.Reader(nil)
	if o.Post {
		method, body = http.MethodPost, strings.NewReader(strconv.Itoa(id))
	}
	req, err := http.NewRequestWithContext(ctx, method, o.URL, body)
	if err != nil {
		panic(err) // the URL is ours
	}
	req.Header.Set(reqIDHeader, strconv.Itoa(id))
	resp, err := c.Do(req)
	if err != nil {
		return Outcome{Latency: time.Since(sched), Err: err.Error()}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	out := Outcome{Latency: time.Since(sched)}
	out.Copy, _ = strconv.Atoi(resp.Header.Get(copyHeader))
	switch {
	case err != nil:
		out.Err = "body: " + err.Error()
	case resp.StatusCode/100 != 2:
		out.Err = resp.Status
	default:
		out.OK = true
	}
	return out
}

// Failed stands, among latencies, for a request that never succeeded: it
// sorts after every answer, so that a quantile that lands on one reads
// "failed" instead of the short time a quick error took.
const Failed = time.Duration(math.MaxInt64)

// Quantile returns the latency below which the share q of outs
// succeeded (the nearest rank), Failed if that rank is a failure.
func Quantile(outs []Outcome, q float64) time.Duration {
	if len(outs) == 0 {
		return 0
	}
	lat := make([]time.Duration, 0, len(outs))
	for _, o := range outs {
		if o.OK {
			lat = append(lat, o.Latency)
		} else {
			lat = append(lat, Failed)
		}
	}
	slices.Sort(lat)
	k := min(max(int(math.Ceil(q*float64(len(lat))))-1, 0), len(lat)-1)
	return lat[k]
}

// hedgeClient is one client of the hedging scenarios. build wraps base,
// given the hedge delay the client was configured with (if fromWarmup),
// and returns the client's transport and the hedges it counted itself.
type hedgeClient struct {
	name string
	// fromWarmup: the client's delay is the p95 of a warm-up round sent
	// through base alone, as a user of a fixed delay would pick it;
	// otherwise the warm-up round goes through the client itself (whose
	// delay is learned, or fixed).
	fromWarmup bool
	// delay describes, for the tables, the delay of a client whose delay
	// does not come from the warm-up.
	delay string
	build func(base http.RoundTripper, delay time.Duration) (http.RoundTripper, func() uint64)
}

// Settings of the peers.
const (
	hedgeMaxExtraLoad = 0.05                  // WithHedging's, and failsafe-budget's max rate
	hedgedhttpDelay   = 10 * time.Millisecond // hedgedhttp's fixed delay
	hedgedhttpUpto    = 2                     // hedgedhttp's requests in all: the original and one hedge
)

// hedgeClients returns the clients in the order of the tables: no
// hedging first, as the baseline.
func hedgeClients() []hedgeClient {
	return []hedgeClient{
		{name: "none", delay: "—", build: func(base http.RoundTripper, _ time.Duration) (http.RoundTripper, func() uint64) {
			t := retryhttp.New(base)
			return t, func() uint64 { return t.Stats().Hedges }
		}},
		{name: "retryhttp", delay: "learned", build: func(base http.RoundTripper, _ time.Duration) (http.RoundTripper, func() uint64) {
			d := &hedgeDelays{start: map[*http.Request]time.Time{}}
			t := retryhttp.New(base, retryhttp.WithHedging(hedgeMaxExtraLoad), retryhttp.WithHooks(d.hooks()))
			return &timedHedges{t, d}, func() uint64 { return t.Stats().Hedges }
		}},
		{name: "failsafe-p95", fromWarmup: true, build: func(base http.RoundTripper, d time.Duration) (http.RoundTripper, func() uint64) {
			return newFailsafeHedge(base, d, false)
		}},
		{name: "failsafe-budget", fromWarmup: true, build: func(base http.RoundTripper, d time.Duration) (http.RoundTripper, func() uint64) {
			return newFailsafeHedge(base, d, true)
		}},
		{name: "hedgedhttp", delay: hedgedhttpDelay.String() + " fixed", build: func(base http.RoundTripper, _ time.Duration) (http.RoundTripper, func() uint64) {
			rt, st, err := hedgedhttp.NewRoundTripperAndStats(hedgedhttpDelay, hedgedhttpUpto, base)
			if err != nil {
				panic(err) // the settings are ours
			}
			return rt, func() uint64 { return st.ActualRoundTrips() - st.RequestedRoundTrips() }
		}},
	}
}

// hedgeDelays records, through hooks, how long after its first attempt
// each hedge of retryhttp went: its learned delay, as the tables show it.
type hedgeDelays struct {
	mu     sync.Mutex
	start  map[*http.Request]time.Time // guarded by mu
	delays []time.Duration             // guarded by mu
}

func (d *hedgeDelays) hooks() *retryhttp.Hooks {
	return &retryhttp.Hooks{
		AttemptStart: func(e retryhttp.Event) {
			d.mu.Lock()
			defer d.mu.Unlock()
			switch {
			case e.Hedge:
				if s, ok := d.start[e.Request]; ok {
					d.delays = append(d.delays, time.Since(s))
				}
			case e.Attempt == 1:
				d.start[e.Request] = time.Now()
			}
		},
		AttemptDone: func(e retryhttp.Event) {
			if e.Hedge {
				return // the first attempt's entry goes with it
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			delete(d.start, e.Request)
		},
	}
}

// timedHedges is retryhttp's transport with its hedges' delays.
type timedHedges struct {
	*retryhttp.Transport
	delays *hedgeDelays
}

// learnedDelay returns the median delay of the hedges sent since the
// last call, and false when none went.
func (t *timedHedges) learnedDelay() (time.Duration, bool) {
	t.delays.mu.Lock()
	defer t.delays.mu.Unlock()
	ds := t.delays.delays
	t.delays.delays = nil
	if len(ds) == 0 {
		return 0, false
	}
	slices.Sort(ds)
	return ds[len(ds)/2], true
}

// newFailsafeHedge builds failsafe-go's hedge policy with a fixed delay
// and one hedge at most; with withBudget, the hedges also take a permit
// of failsafe's budget at hedgeMaxExtraLoad of the executions in flight
// (its minimum of 3 concurrent hedges kept). It hedges whatever it is
// given: it has no notion of idempotency.
func newFailsafeHedge(base http.RoundTripper, d time.Duration, withBudget bool) (http.RoundTripper, func() uint64) {
	var hedges atomic.Uint64
	b := hedgepolicy.NewBuilderWithDelay[*http.Response](d).
		WithMaxHedges(1).
		OnHedge(func(failsafe.ExecutionEvent[*http.Response]) { hedges.Add(1) })
	if withBudget {
		b = b.WithBudget(budget.NewBuilder().WithMaxRate(hedgeMaxExtraLoad).Build())
	}
	return failsafehttp.NewRoundTripper(base, b.Build()), hedges.Load
}

// newHedgeBase is a client's own base transport: go-cleanhttp's pooled
// transport, with enough idle connections per host for every request in
// flight. Its default per host is GOMAXPROCS+1, 3 on a CI runner: at
// 1,500 requests a second it would open and close thousands of
// connections a run, and the tails would measure connection setup and
// the TIME_WAIT table, not hedging.
func newHedgeBase() *http.Transport {
	t := cleanhttp.DefaultPooledTransport()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 512, 512
	return t
}
