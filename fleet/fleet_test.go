package fleet_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/retryhttp/retryhttp/internal/testhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: a fleet's loops end with the
// context given to Run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleetRun is one scenario for several transports in one process, each
// standing for a process of its own: its own breaker and budget, and, when
// sharing, its own Fleet on one store.
type fleetRun struct {
	transports int
	share      bool
	rate       int           // requests per second, in all
	sendFor    time.Duration // how long requests are sent
	outage     time.Duration // the host fails every attempt for this long
	status     int           // the failure; 0: 503
	retryAfter string        // sent with each failure
	bad        int           // transport whose own network fails every attempt; -1: none
}

// fleetResult counts what the host received.
type fleetResult struct {
	failed  int // attempts answered with a failure
	late    int // attempts the host received from 5 s into the outage until its end
	inHold  int // attempts in the 30 s after the first failure
	refused int // requests refused without an attempt by transports other than the bad one
}

func runFleetScenario(t *testing.T, c fleetRun) fleetResult {
	t.Helper()
	var res fleetResult
	synctest.Test(t, func(t *testing.T) {
		if c.status == 0 {
			c.status = http.StatusServiceUnavailable
		}
		start := time.Now()
		var mu sync.Mutex
		host := hostFunc(func(*http.Request) (int, error) {
			at := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if at < c.outage {
				res.failed++
				if at >= 5*time.Second {
					res.late++
				}
				if at < 30*time.Second {
					res.inHold++
				}
				return 0, nil
			}
			return http.StatusOK, nil
		})
		next := failWith{host, c.status, c.retryAfter}
		store := newMemStore(5 * time.Millisecond)
		store.every = 2 * time.Second
		ctx, cancel := context.WithCancel(context.Background())
		var running sync.WaitGroup
		trs := make([]*retryhttp.Transport, c.transports)
		for i := range trs {
			var rt http.RoundTripper = next
			if i == c.bad {
				rt = brokenNetwork{}
			}
			opts := []retryhttp.Option{}
			if c.share {
				f := fleet.New(store, fleet.Config{Instance: fmt.Sprint("p", i), Heartbeat: time.Second})
				running.Go(func() { _ = f.Run(ctx) })
				opts = append(opts, retryhttp.WithFleet(f))
			}
			trs[i] = retryhttp.New(rt, opts...)
		}
		time.Sleep(100 * time.Millisecond) // the first heartbeats go round
		start = time.Now()
		var wg sync.WaitGroup
		var refused atomic.Int64
		n := int(c.sendFor / time.Second * time.Duration(c.rate))
		for i := range n {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(c.rate))))
			tr := i % c.transports
			wg.Go(func() {
				resp, err := trs[tr].RoundTrip(newGET(context.Background()))
				if err == nil {
					resp.Body.Close()
				} else if e, ok := err.(*retryhttp.Error); ok && e.Attempts == 0 && tr != c.bad {
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		cancel()
		running.Wait()
		store.pending.Wait()
		res.refused = int(refused.Load())
	})
	return res
}

// hostFunc is the host of a scenario: it answers each attempt with a
// response of the status it returns, or, for 0, with the error.
type hostFunc func(req *http.Request) (int, error)

func (h hostFunc) RoundTrip(req *http.Request) (*http.Response, error) {
	status, err := h(req)
	if status == 0 {
		return nil, err
	}
	return testhttp.Response(req, status, http.NoBody), nil
}

// failWith turns the host's 0 status into a failure with a status and an
// optional Retry-After.
type failWith struct {
	f          hostFunc
	status     int
	retryAfter string
}

func (w failWith) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.f.RoundTrip(req)
	if resp == nil && err == nil {
		resp = testhttp.Response(req, w.status, http.NoBody)
		if w.retryAfter != "" {
			resp.Header.Set("Retry-After", w.retryAfter)
		}
	}
	return resp, err
}

// brokenNetwork fails every attempt, as one process's own bad network would.
type brokenNetwork struct{}

func (brokenNetwork) RoundTrip(req *http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// testURL is the URL of every request; the host is the key of every
// circuit.
const testURL = "http://example.test/path?q=1"

// newGET returns a GET of testURL; its error cannot happen.
func newGET(ctx context.Context) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, testURL, nil)
	if err != nil {
		panic(err)
	}
	return req
}

// Eight processes sharing what they learn waste about what one process
// carrying all the traffic wastes; eight that share nothing waste more.
func TestFleetSharesWhatItLearns(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	base := fleetRun{rate: 200, sendFor: 30 * time.Second, outage: 20 * time.Second, bad: -1}
	one, shared, isolated := base, base, base
	one.transports = 1
	shared.transports, shared.share = 8, true
	isolated.transports = 8
	r1, rs, ri := runFleetScenario(t, one), runFleetScenario(t, shared), runFleetScenario(t, isolated)
	t.Logf("20 s outage, wasted attempts: one transport %d, 8 sharing %d (%.2fx), 8 isolated %d (%.2fx); from 5 s on: %d, %d, %d",
		r1.failed, rs.failed, float64(rs.failed)/float64(r1.failed), ri.failed, float64(ri.failed)/float64(r1.failed), r1.late, rs.late, ri.late)
	assert.LessOrEqual(t, float64(rs.failed), 1.10*float64(r1.failed), "8 sharing against one")
	assert.GreaterOrEqual(t, float64(ri.failed), 1.3*float64(r1.failed), "8 isolated against one")

	long := base
	long.sendFor, long.outage = 70*time.Second, 60*time.Second
	l1, ls := long, long
	l1.transports = 1
	ls.transports, ls.share = 8, true
	p1, ps := runFleetScenario(t, l1), runFleetScenario(t, ls)
	t.Logf("60 s outage, attempts from 5 s on (probes): one transport %d, 8 sharing %d (%.2fx)", p1.late, ps.late, float64(ps.late)/float64(p1.late))
	assert.LessOrEqual(t, float64(ps.late), 1.5*float64(p1.late), "probes of 8 sharing against one")
}

// A 429 with Retry-After: 30 holds the key across the fleet.
func TestFleetSharesHolds(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	r := runFleetScenario(t, fleetRun{transports: 8, share: true, rate: 200, sendFor: 10 * time.Second,
		outage: 30 * time.Second, status: http.StatusTooManyRequests, retryAfter: "30", bad: -1})
	t.Logf("attempts from the fleet in the 30 s of the hold: %d", r.inHold)
	assert.LessOrEqual(t, r.inHold, 10)
}

// One process whose own network fails does not open the others' circuits.
func TestFleetOneBadInstance(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	r := runFleetScenario(t, fleetRun{transports: 8, share: true, rate: 200, sendFor: 20 * time.Second, bad: 3})
	assert.Zero(t, r.refused, "requests the healthy processes refused")
	assert.Zero(t, r.failed, "the host failed nothing")
}

// A store that is down leaves each process as it would be alone: nothing
// blocks, announcements are dropped and counted, the fleet size decays to 1.
func TestFleetStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore(time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a := fleet.New(store, fleet.Config{Instance: "a", Heartbeat: time.Second})
		b := fleet.New(store, fleet.Config{Instance: "b", Heartbeat: time.Second})
		var running sync.WaitGroup
		running.Go(func() { _ = a.Run(ctx) })
		running.Go(func() { _ = b.Run(ctx) })
		budget := retryhttp.NewBudget(retryhttp.BudgetConfig{})
		tr := retryhttp.New(statusNext(200), retryhttp.WithBudget(budget), retryhttp.WithFleet(a))
		time.Sleep(1500 * time.Millisecond)
		require.Equal(t, 2, a.Stats().Size, "fleet size with both alive")
		assert.Equal(t, 5, retriesGranted(t, budget), "the floor's burst, halved")

		store.setDown(true)
		time.Sleep(10 * time.Second)
		for range 100 {
			testhttp.SendGET(t, tr, testURL)
		}
		assert.Equal(t, 1, a.Stats().Size, "fleet size after heartbeats stopped")
		assert.Positive(t, a.Stats().Dropped, "announcements dropped")
		cancel()
		running.Wait()
		store.pending.Wait()
	})
}

// retriesGranted returns how many retries budget grants one request at
// once, as whole tokens: the request fails until the budget refuses a
// retry, with no delay between its attempts, so that the floor does not
// refill meanwhile.
func retriesGranted(t *testing.T, budget *retryhttp.Budget) int {
	t.Helper()
	tr := retryhttp.New(statusNext(http.StatusServiceUnavailable), retryhttp.WithBudget(budget), retryhttp.WithBreaker(nil),
		retryhttp.WithPolicy(noDelay{}), retryhttp.WithMaxAttempts(100), retryhttp.WithMaxWait(0))
	testhttp.SendGET(t, tr, testURL)
	s := tr.Stats()
	require.Equal(t, uint64(1), s.BudgetDenied, "the budget refused the last retry")
	return int(s.Retries)
}

// noDelay retries at once.
type noDelay struct{}

func (noDelay) Delay(int, time.Duration) time.Duration { return 0 }

// statusNext answers every attempt with its status.
type statusNext int

func (n statusNext) RoundTrip(req *http.Request) (*http.Response, error) {
	return testhttp.Response(req, int(n), http.NoBody), nil
}

// A transport shared through a fleet reads only local memory: its success
// path allocates nothing.
func TestFleetSuccessPathAllocs(t *testing.T) {
	ok := &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}
	next := roundTripFunc(func(*http.Request) (*http.Response, error) { return ok, nil })
	tr := retryhttp.New(next, retryhttp.WithFleet(fleet.New(newMemStore(0), fleet.Config{})))
	req, err := http.NewRequest(http.MethodGet, "http://example.test/x", nil)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatal(resp, err)
		}
	})
	assert.Zero(t, allocs)
}

// roundTripFunc is an http.RoundTripper of one function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
