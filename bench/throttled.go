package bench

import (
	"cmp"
	"container/heap"
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
	"github.com/retryhttp/retryhttp"
	"golang.org/x/time/rate"
)

// BatchConfig is one throttled batch: Requests GETs, all queued at t = 0,
// taken one at a time by Workers workers, as a batch job does. A request
// that comes back failed goes back into the queue, due at the instant its
// client advises (retryhttp: RetryAt's; the peers: the next delay of their
// own schedule), and is taken again by the next free worker once due. The
// batch ends when every request is delivered or given up: a request is
// given up when its next instant falls past the horizon, and no attempt
// outlives it (every call's context ends there).
type BatchConfig struct {
	// Requests is the size of the batch. 0 means 10,000.
	Requests int
	// Workers is how many requests are in a client's hands at once.
	// 0 means 200.
	Workers int
	// Schedule is the peers' schedule, and the batch loop's own backoff
	// when a client advises nothing. Zero fields mean base 200 ms, cap 30 s
	// (retryhttp's default), 10 attempts.
	Schedule Schedule
	// Horizon bounds the batch, from t = 0. 0 means 120 s.
	Horizon time.Duration
}

func (c BatchConfig) withDefaults() BatchConfig {
	if c.Requests <= 0 {
		c.Requests = 10_000
	}
	if c.Workers <= 0 {
		c.Workers = 200
	}
	if c.Schedule.Base <= 0 {
		c.Schedule.Base = DefaultSchedule.Base
	}
	if c.Schedule.Cap <= 0 {
		c.Schedule.Cap = DefaultSchedule.Cap
	}
	if c.Schedule.Attempts <= 0 {
		c.Schedule.Attempts = 10
	}
	if c.Horizon <= 0 {
		c.Horizon = 120 * time.Second
	}
	return c
}

// BatchClient is one client of the throttled batch.
type BatchClient struct {
	Key  string // short name, for flags
	Name string // the row's name in tables
	// New builds the client over next, the base transport, with the
	// batch's schedule. Each call builds fresh state.
	New func(next http.RoundTripper, s Schedule) BatchTransport
}

// BatchTransport is what the batch loop sends through, and how it learns
// when to send a failed request again.
type BatchTransport struct {
	http.RoundTripper
	// RetryAt, when set, gives the instant a failed request is due again
	// (retryhttp's (*Transport).RetryAt). A zero instant falls back on
	// Backoff.
	RetryAt func(*http.Response, error) (time.Time, retryhttp.Reason)
	// Backoff is the wait before a failed request is due again, n being
	// the attempts it has made so far (its retry number, as Policy.Delay
	// counts). nil means full jitter with the batch's schedule, as the
	// peers' own backoff would draw their next retry.
	Backoff func(n int) time.Duration
}

// ThrottledClients returns the clients of the throttled batch, in a fixed
// order: retryhttp three ways, then the peers with full jitter.
func ThrottledClients() []BatchClient {
	return []BatchClient{
		{"retryhttp-jitter", "retryhttp, full jitter alone (adaptive rate, budget, breaker off)", func(next http.RoundTripper, s Schedule) BatchTransport {
			return retryhttpBatch(next,
				retryhttp.WithPolicy(retryhttp.FullJitter{Base: s.Base, Cap: s.Cap}),
				retryhttp.WithMaxAttempts(s.Attempts),
				retryhttp.WithAdaptiveRate(), retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil))
		}},
		{"retryhttp-guarded", "retryhttp, full jitter + budget + breaker (defaults, adaptive rate off)", func(next http.RoundTripper, _ Schedule) BatchTransport {
			return retryhttpBatch(next, retryhttp.WithAdaptiveRate())
		}},
		{"retryhttp", "retryhttp defaults (adaptive rate)", func(next http.RoundTripper, _ Schedule) BatchTransport {
			return retryhttpBatch(next)
		}},
		{"retryablehttp", "go-retryablehttp, full jitter", func(next http.RoundTripper, s Schedule) BatchTransport {
			return BatchTransport{RoundTripper: wrapRetryablehttp(true)(next, s)}
		}},
		{"failsafe", "failsafe-go, full jitter (DelayFunc)", func(next http.RoundTripper, s Schedule) BatchTransport {
			return BatchTransport{RoundTripper: wrapFailsafe(fullJitter)(next, s)}
		}},
	}
}

// ThrottledClientByKey returns the client with the key among
// ThrottledClients, and whether there is one.
func ThrottledClientByKey(key string) (BatchClient, bool) {
	for _, c := range ThrottledClients() {
		if c.Key == key {
			return c, true
		}
	}
	return BatchClient{}, false
}

// PacedClient is a plain client (no retries) behind a rate.Limiter at
// perSec (burst 1): the batch a caller who knew the server's limit would
// send. A failed request is due again at once (and waits its turn).
func PacedClient(perSec float64) BatchClient {
	return BatchClient{
		Key:  "paced",
		Name: fmt.Sprintf("a plain client paced at %g/s", perSec),
		New: func(next http.RoundTripper, _ Schedule) BatchTransport {
			return BatchTransport{
				RoundTripper: &paced{next: next, lim: rate.NewLimiter(rate.Limit(perSec), 1)},
				Backoff:      func(int) time.Duration { return 0 },
			}
		},
	}
}

type paced struct {
	next http.RoundTripper
	lim  *rate.Limiter
}

func (p *paced) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := p.lim.Wait(req.Context()); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	return p.next.RoundTrip(req)
}

func retryhttpBatch(next http.RoundTripper, opts ...retryhttp.Option) BatchTransport {
	t := retryhttp.New(next, opts...)
	return BatchTransport{RoundTripper: t, RetryAt: t.RetryAt}
}

// BatchResult is what one run of a batch saw, at the wire (below the
// client: every attempt, retries included).
type BatchResult struct {
	Client    string
	Requests  int
	Delivered int
	GaveUp    int
	// Done is when the last request was delivered, from t = 0; when not
	// all were, when the batch ended.
	Done      time.Duration
	Attempts  int     // requests sent
	OK        int     // attempts answered 200
	Throttled int     // attempts answered 429
	Other     int     // attempts answered otherwise
	Errors    int     // attempts that got a transport error
	PeakRPS   float64 // largest 100 ms bucket of attempts sent, per second
	PerBucket []int   // attempts sent per 100 ms from t = 0, to the last non-empty bucket
	Passes    int     // calls to the client: each request's first, and one per requeue
	// CallErrors counts calls that returned an error rather than a
	// response; ErrSample is one of them. Unsent counts those of them
	// that sent no attempt: the client refused the request unsent.
	CallErrors int
	Unsent     int
	ErrSample  string
	// Advice counts what RetryAt answered to failed calls, for retryhttp;
	// The zero Reason counts the zero instants the batch's backoff replaced.
	Advice map[retryhttp.Reason]int
	// AtOnce counts failed calls due again at once: their instant had
	// come by the time the call returned.
	AtOnce int
}

// AllDelivered reports whether every request of the batch was delivered.
func (r BatchResult) AllDelivered() bool { return r.Delivered == r.Requests }

// ThrottledPerDelivered is the 429s answered per request delivered.
func (r BatchResult) ThrottledPerDelivered() float64 {
	if r.Delivered == 0 {
		return math.Inf(1)
	}
	return float64(r.Throttled) / float64(r.Delivered)
}

// maxPasses bounds the calls one request gets, whatever its client
// advises: far more than any run makes (the horizon ends them first).
const maxPasses = 10_000

// RunBatch sends the batch c to url through the client built over base
// and returns what it saw. It returns when every request was delivered or
// given up, and every call has returned.
func RunBatch(cl BatchClient, base http.RoundTripper, url string, c BatchConfig) BatchResult {
	c = c.withDefaults()
	w := &wire{next: base, perReq: make([]atomic.Int32, c.Requests), perBucket: make([]atomic.Int32, int(c.Horizon/Bucket)+2)}
	bt := cl.New(w, c.Schedule)
	backoff := bt.Backoff
	if backoff == nil {
		p := retryhttp.FullJitter{Base: c.Schedule.Base, Cap: c.Schedule.Cap}
		backoff = func(n int) time.Duration { return p.Delay(n, 0) }
	}
	client := &http.Client{Transport: bt.RoundTripper}
	defer client.CloseIdleConnections()

	type outcome struct {
		id     int
		ok     bool
		unsent bool          // an error, and no attempt sent
		at     time.Duration // when the call returned, from t = 0
		next   time.Time     // when due again, if not ok
		why    retryhttp.Reason
		err    error
	}
	ready := make(chan int)
	back := make(chan outcome, c.Workers)
	start := time.Now()
	w.start = start
	end := start.Add(c.Horizon)

	var workers sync.WaitGroup
	for range c.Workers {
		workers.Go(func() {
			for id := range ready {
				ctx, cancel := context.WithDeadline(context.Background(), end)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					panic(err) // the URL is ours
				}
				req.Header.Set(deliveryHeader, strconv.Itoa(id))
				sent := w.perReq[id].Load()
				resp, err := client.Do(req)
				o := outcome{id: id, ok: err == nil && resp.StatusCode == http.StatusOK, err: err}
				o.unsent = err != nil && w.perReq[id].Load() == sent
				if !o.ok {
					if bt.RetryAt != nil {
						// Asked when the failure comes back, before the
						// body is closed, as RetryAt's documentation says.
						o.next, o.why = bt.RetryAt(resp, err)
					}
					if o.next.IsZero() {
						o.next = time.Now().Add(backoff(int(w.perReq[id].Load())))
					}
				}
				if resp != nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				// Ends what a client left behind: failsafe-go leaves the
				// responses it discards unclosed until the context ends.
				cancel()
				o.at = time.Since(start)
				back <- o
			}
		})
	}

	r := BatchResult{Client: cl.Name, Requests: c.Requests, Advice: map[retryhttp.Reason]int{}}
	q := make(dueQueue, c.Requests)
	for i := range q {
		q[i] = due{at: start, seq: i, id: i}
	}
	seq := c.Requests
	passes := make([]int, c.Requests)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// Each turn of the loop hands a due request to a worker, takes an
	// outcome back, or waits for the next request to come due; every
	// request ends (delivered, or given up at the horizon or maxPasses),
	// so the loop ends.
	for left := c.Requests; left > 0; {
		var out chan int
		var head int
		var wake <-chan time.Time
		if len(q) > 0 {
			if d := time.Until(q[0].at); d <= 0 {
				out, head = ready, q[0].id
			} else {
				timer.Reset(d)
				wake = timer.C
			}
		}
		select {
		case out <- head:
			heap.Pop(&q)
			passes[head]++
			r.Passes++
		case <-wake:
		case o := <-back:
			switch {
			case o.ok:
				r.Delivered++
				r.Done = max(r.Done, o.at)
				left--
				continue
			case o.err != nil:
				r.CallErrors++
				if o.unsent {
					r.Unsent++
				}
				if r.ErrSample == "" {
					r.ErrSample = o.err.Error()
				}
			}
			if bt.RetryAt != nil {
				r.Advice[o.why]++
			}
			if !o.next.After(start.Add(o.at)) {
				r.AtOnce++
			}
			if o.next.After(end) || passes[o.id] >= maxPasses {
				r.GaveUp++
				left--
				continue
			}
			heap.Push(&q, due{at: o.next, seq: seq, id: o.id})
			seq++
		}
	}
	close(ready)
	workers.Wait()
	if !r.AllDelivered() {
		r.Done = time.Since(start)
	}
	r.Attempts = int(w.attempts.Load())
	r.OK = int(w.ok.Load())
	r.Throttled = int(w.throttled.Load())
	r.Other = int(w.other.Load())
	r.Errors = int(w.errs.Load())
	for i := range w.perBucket {
		n := int(w.perBucket[i].Load())
		r.PeakRPS = max(r.PeakRPS, float64(n)*float64(time.Second/Bucket))
		r.PerBucket = append(r.PerBucket, n)
	}
	for len(r.PerBucket) > 0 && r.PerBucket[len(r.PerBucket)-1] == 0 {
		r.PerBucket = r.PerBucket[:len(r.PerBucket)-1]
	}
	return r
}

// due is a request waiting in the batch's queue: taken once at has come,
// earliest first, then in the order queued.
type due struct {
	at      time.Time
	seq, id int
}

type dueQueue []due

func (q dueQueue) Len() int { return len(q) }
func (q dueQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q dueQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)   { *q = append(*q, x.(due)) }
func (q *dueQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// wire counts the attempts a client sends, below it: per status, per
// request (by deliveryHeader) and per 100 ms bucket from start.
type wire struct {
	next                           http.RoundTripper
	start                          time.Time // set before the first attempt
	perReq                         []atomic.Int32
	perBucket                      []atomic.Int32
	attempts, ok, throttled, other atomic.Int64
	errs                           atomic.Int64
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	b := min(int(time.Since(w.start)/Bucket), len(w.perBucket)-1)
	w.perBucket[b].Add(1)
	w.attempts.Add(1)
	if id, err := strconv.Atoi(req.Header.Get(deliveryHeader)); err == nil && id >= 0 && id < len(w.perReq) {
		w.perReq[id].Add(1)
	}
	resp, err := w.next.RoundTrip(req)
	switch {
	case err != nil:
		w.errs.Add(1)
	case resp.StatusCode == http.StatusOK:
		w.ok.Add(1)
	case resp.StatusCode == http.StatusTooManyRequests:
		w.throttled.Add(1)
	default:
		w.other.Add(1)
	}
	return resp, err
}

// Admitter is the throttling server: it answers 200 within a token bucket
// (golang.org/x/time/rate, Allow) and 429 without Retry-After beyond it,
// as an API's rate limiter does, and counts both.
type Admitter struct {
	lim           *rate.Limiter
	ok, throttled atomic.Int64
}

// NewAdmitter returns an Admitter that admits perSec requests a second
// with the burst.
func NewAdmitter(perSec float64, burst int) *Admitter {
	return &Admitter{lim: rate.NewLimiter(rate.Limit(perSec), burst)}
}

func (a *Admitter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if a.lim.Allow() {
		a.ok.Add(1)
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	a.throttled.Add(1)
	http.Error(w, "too many requests", http.StatusTooManyRequests)
}

// Counts returns the requests answered 200 and 429 so far.
func (a *Admitter) Counts() (ok, throttled int) { return int(a.ok.Load()), int(a.throttled.Load()) }

// ThrottledConfig is the throttled batch on loopback.
type ThrottledConfig struct {
	BatchConfig
	// Rate and Burst are the server's token bucket. 0 means 500/s and 50.
	Rate  float64
	Burst int
	// Rounds is how many times every client runs, the order rotating from
	// round to round. 0 means 3.
	Rounds int
	// Clients are the clients to run; nil means ThrottledClients().
	Clients []BatchClient
}

func (c ThrottledConfig) withDefaults() ThrottledConfig {
	c.BatchConfig = c.BatchConfig.withDefaults()
	if c.Rate <= 0 {
		c.Rate = 500
	}
	if c.Burst <= 0 {
		c.Burst = 50
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.Clients == nil {
		c.Clients = ThrottledClients()
	}
	return c
}

// ThrottledRun is one run against the loopback server: the client's view
// and the server's own counts.
type ThrottledRun struct {
	BatchResult
	ServerOK, ServerThrottled int
}

// RunThrottled runs every client of c through the throttled batch on
// loopback, c.Rounds times each, one run at a time, each against a fresh
// server (a fresh bucket, full) and a fresh base transport, rotating the
// order of the clients from round to round. It returns every run, by
// client in the order of c.Clients, then by round.
func RunThrottled(c ThrottledConfig) [][]ThrottledRun {
	c = c.withDefaults()
	runs := make([][]ThrottledRun, len(c.Clients))
	for r := range c.Rounds {
		for j := range c.Clients {
			i := (j + r) % len(c.Clients)
			runs[i] = append(runs[i], runThrottledOnce(c.Clients[i], c))
		}
	}
	return runs
}

func runThrottledOnce(cl BatchClient, c ThrottledConfig) ThrottledRun {
	a := NewAdmitter(c.Rate, c.Burst)
	srv := httptest.NewUnstartedServer(a)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	defer srv.Close()
	base := NewBatchBase(c.Workers)
	defer base.CloseIdleConnections()
	r := RunBatch(cl, base, srv.URL+"/item", c.BatchConfig)
	ok, throttled := a.Counts()
	return ThrottledRun{BatchResult: r, ServerOK: ok, ServerThrottled: throttled}
}

// NewBatchBase returns the base transport every client of a batch sends
// through: cleanhttp's pooled transport keeping an idle connection per
// worker.
func NewBatchBase(workers int) *http.Transport {
	base := cleanhttp.DefaultPooledTransport()
	base.MaxIdleConns = workers
	base.MaxIdleConnsPerHost = workers
	return base
}

// Median is the median of a run's results, column by column (each
// column's own median, so a row may mix rounds). Done is the median of the
// rounds' times with a round that did not deliver everything counted as
// the longest; Delivered the median of the delivered counts.
type Median struct {
	Client                         string
	AllDelivered                   bool // in the median round by Done
	Done                           time.Duration
	Delivered, Attempts, Throttled float64
	ThrottledPerDeliv, PeakRPS     float64
	CallErrors                     float64
	ErrSample                      string
	// Every round's Done, 429s and deliveries, in the order of rounds.
	DoneEach                     []time.Duration
	ThrottledEach, DeliveredEach []int
	// Every round's calls, calls that returned an error, requeues due at
	// once and RetryAt's advice.
	PassesEach, CallErrorsEach, AtOnceEach []int
	AdviceEach                             []map[retryhttp.Reason]int
}

// Medians summarises each client's runs.
func Medians(c ThrottledConfig, runs [][]ThrottledRun) []Median {
	c = c.withDefaults()
	ms := make([]Median, len(runs))
	for i, rs := range runs {
		m := Median{Client: c.Clients[i].Name}
		type byDone struct {
			d   time.Duration
			all bool
		}
		var dones []byDone
		var deliv, att, thr, per, peak, cerr []float64
		for _, r := range rs {
			d := r.Done
			if !r.AllDelivered() {
				d = time.Duration(math.MaxInt64)
			}
			dones = append(dones, byDone{d, r.AllDelivered()})
			deliv = append(deliv, float64(r.Delivered))
			att = append(att, float64(r.Attempts))
			thr = append(thr, float64(r.Throttled))
			per = append(per, r.ThrottledPerDelivered())
			peak = append(peak, r.PeakRPS)
			cerr = append(cerr, float64(r.CallErrors))
			m.DoneEach = append(m.DoneEach, r.Done)
			m.ThrottledEach = append(m.ThrottledEach, r.Throttled)
			m.DeliveredEach = append(m.DeliveredEach, r.Delivered)
			m.PassesEach = append(m.PassesEach, r.Passes)
			m.CallErrorsEach = append(m.CallErrorsEach, r.CallErrors)
			m.AtOnceEach = append(m.AtOnceEach, r.AtOnce)
			m.AdviceEach = append(m.AdviceEach, r.Advice)
			if m.ErrSample == "" {
				m.ErrSample = r.ErrSample
			}
		}
		slices.SortFunc(dones, func(a, b byDone) int { return cmp.Compare(a.d, b.d) })
		md := dones[len(dones)/2]
		m.Done, m.AllDelivered = md.d, md.all
		m.Delivered, m.Attempts, m.Throttled = median(deliv), median(att), median(thr)
		m.ThrottledPerDeliv, m.PeakRPS, m.CallErrors = median(per), median(peak), median(cerr)
		ms[i] = m
	}
	return ms
}

// median returns the median of xs (the mean of the middle two for an even
// count); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// ThrottledMarkdown formats the medians as a Markdown table, with a line
// that states the configuration, and a line per client with every round.
func ThrottledMarkdown(c ThrottledConfig, ms []Median) string {
	c = c.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "%d GETs queued at t = 0, %d workers; server admits %g/s (token bucket, burst %d), 429 without Retry-After beyond; peers: base %v, cap %v, %d attempts, requeued after their own full jitter; retryhttp requeued at RetryAt; horizon %v; medians of %d interleaved rounds.\n\n",
		c.Requests, c.Workers, c.Rate, c.Burst, c.Schedule.Base, c.Schedule.Cap, c.Schedule.Attempts, c.Horizon, c.Rounds)
	b.WriteString("| client | all delivered in | attempts | 429s answered | 429s per delivered | peak offered req/s (100 ms) |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|\n")
	for _, m := range ms {
		done := fmt.Sprintf("%.1f s", m.Done.Seconds())
		if !m.AllDelivered {
			done = fmt.Sprintf("not all: %.0f delivered by %v", m.Delivered, c.Horizon)
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.2f | %.0f |\n",
			m.Client, done, m.Attempts, m.Throttled, m.ThrottledPerDeliv, m.PeakRPS)
	}
	b.WriteString("\nEvery round: done; 429s; delivered; calls to the client; calls that returned an error; requeued due at once; RetryAt's advice to failed calls:\n\n")
	for _, m := range ms {
		var parts []string
		for i := range m.DoneEach {
			parts = append(parts, fmt.Sprintf("%.1f s; %d; %d; %d; %d; %d; %s", m.DoneEach[i].Seconds(), m.ThrottledEach[i],
				m.DeliveredEach[i], m.PassesEach[i], m.CallErrorsEach[i], m.AtOnceEach[i], adviceString(m.AdviceEach[i])))
		}
		fmt.Fprintf(&b, "- %s: %s\n", m.Client, strings.Join(parts, " | "))
		if m.ErrSample != "" {
			fmt.Fprintf(&b, "  - an error: %s\n", m.ErrSample)
		}
	}
	return b.String()
}

// adviceString formats RetryAt's advice counts, in the order of Advice.
func adviceString(a map[retryhttp.Reason]int) string {
	if len(a) == 0 {
		return "-"
	}
	var parts []string
	for why := retryhttp.Reason(0); why <= retryhttp.ReasonBudgetExhausted; why++ {
		if a[why] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", why, a[why]))
		}
	}
	return strings.Join(parts, ", ")
}
