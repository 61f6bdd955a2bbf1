package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rolling deploy: a loopback server restarted every deployEvery, its
// port refusing connections for deployDown each time, while deployWorkers
// workers send GETs, keyless POSTs and keyed POSTs (Idempotency-Key), each
// with a deployDeadline, for deployRun.
const (
	deployEvery    = 1500 * time.Millisecond
	deployDown     = 300 * time.Millisecond
	deployFront503 = 500 * time.Millisecond // the front's 503 window
	deployWorkers  = 100
	deployDeadline = 10 * time.Second
	deployRun      = 7500 * time.Millisecond
	deployWork     = 5 * time.Millisecond  // each request's time in the handler
	deployThink    = 20 * time.Millisecond // each worker's pause between requests
)

// deployMode is how the server restarts.
type deployMode int

const (
	deployGraceful deployMode = iota // http.Server.Shutdown over HTTP/1.1: in-flight requests finish
	deployAbrupt                     // http.Server.Close: connections cut with requests in flight
	deployH2                         // unencrypted HTTP/2, Shutdown: GOAWAY
	deployFront                      // a front that stays up and answers 503, Retry-After: 1 while the backend restarts
)

func (m deployMode) String() string {
	return [...]string{"graceful HTTP/1.1", "abrupt close", "HTTP/2 GOAWAY", "front 503 + Retry-After: 1"}[m]
}

// deployServer is the application being deployed: GET /item answers;
// POST /order applies an order, named by X-Order, once per Idempotency-Key
// when it carries one. It applies an order before it answers, so an
// answer lost to a cut connection leaves the order applied.
type deployServer struct {
	mode     deployMode
	addr     string
	front    atomic.Bool // the front answers 503 now
	mu       sync.Mutex
	srv      *http.Server
	draining sync.WaitGroup      // old servers shutting down
	applied  map[string]int      // order -> times applied; guarded by mu
	keys     map[string]struct{} // Idempotency-Keys applied; guarded by mu
}

func (d *deployServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.front.Load() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "deploying", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	if r.Method == http.MethodPost {
		d.mu.Lock()
		key := r.Header.Get("Idempotency-Key")
		if _, done := d.keys[key]; key == "" || !done {
			d.applied[r.Header.Get("X-Order")]++
			if key != "" {
				d.keys[key] = struct{}{}
			}
		}
		d.mu.Unlock()
	}
	time.Sleep(deployWork)
	w.Write([]byte("ok\n"))
}

// start serves on d.addr (a free port the first time), retrying the bind
// briefly: the port the previous server held may take a moment to free.
func (d *deployServer) start(t *testing.T) {
	addr := d.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for range 100 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, err, "binding %s", addr)
	if d.addr == "" {
		// Set once, before any worker reads it: every restart binds it.
		d.addr = ln.Addr().String()
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
	if d.mode == deployH2 {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	d.mu.Lock()
	d.srv = srv
	d.mu.Unlock()
	go srv.Serve(ln)
}

// restart stops the server as its mode does, leaves the port refusing for
// deployDown, and serves again; the front instead answers 503 for
// deployFront503.
func (d *deployServer) restart(t *testing.T) {
	if d.mode == deployFront {
		d.front.Store(true)
		time.Sleep(deployFront503)
		d.front.Store(false)
		return
	}
	d.mu.Lock()
	srv := d.srv
	d.mu.Unlock()
	if d.mode == deployAbrupt {
		srv.Close()
	} else {
		// The old server drains while the new one starts, as in a rolling
		// deploy: its listener closes at once, so the port refuses for
		// deployDown whatever the draining takes (an HTTP/2 server's
		// Shutdown can wait out its whole timeout for streams in flight).
		d.draining.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if srv.Shutdown(ctx) != nil {
				srv.Close() // what is still open when the drain runs out
			}
			cancel()
		})
	}
	time.Sleep(deployDown)
	d.start(t)
}

func (d *deployServer) stop() {
	d.mu.Lock()
	d.srv.Close()
	d.mu.Unlock()
	d.draining.Wait()
}

// deployResult is what one client saw through one deploy.
type deployResult struct {
	gets, getsFailed   int
	getP99             time.Duration
	posts, postsFailed int // keyless
	twice              int // keyless POSTs applied more than once
	keyed, keyedFailed int
	lastErr            string
}

func (r deployResult) String() string {
	return fmt.Sprintf("GETs %d, %d failed, p99 %v; keyless POSTs %d, %d failed, %d applied twice; keyed POSTs %d, %d failed",
		r.gets, r.getsFailed, r.getP99.Round(time.Millisecond), r.posts, r.postsFailed, r.twice, r.keyed, r.keyedFailed)
}

// runDeploy runs the deploy against a fresh server in mode, with the
// client made by client over a fresh http.Transport.
func runDeploy(t *testing.T, mode deployMode, client func(http.RoundTripper) http.RoundTripper) deployResult {
	d := &deployServer{mode: mode, applied: map[string]int{}, keys: map[string]struct{}{}}
	d.start(t)
	defer d.stop()
	next := http.DefaultTransport.(*http.Transport).Clone()
	next.MaxIdleConnsPerHost = deployWorkers
	if mode == deployH2 {
		next.Protocols = new(http.Protocols)
		next.Protocols.SetUnencryptedHTTP2(true)
		// A connection the restart left dead is found by a ping, as a
		// careful user's HTTP/2 client finds it; without one a request
		// sent on it waits for its deadline, whatever the client above.
		next.HTTP2 = &http.HTTP2Config{SendPingTimeout: 500 * time.Millisecond, PingTimeout: 500 * time.Millisecond}
	}
	defer next.CloseIdleConnections()
	rt := client(next)
	c := &http.Client{Transport: rt}
	if tr, ok := rt.(*retryhttp.Transport); ok {
		defer func() {
			st := tr.Stats()
			t.Logf("%s: retryhttp stats: attempts %d, waits %d (%v), circuit refusals %d, budget refusals %d, give-ups %v", mode, st.Attempts, st.Waits, st.WaitTime.Round(time.Millisecond), st.CircuitRejected, st.BudgetDenied, st.GiveUps)
		}()
	}

	stop := make(chan struct{})
	restarts := make(chan struct{})
	go func() {
		defer close(restarts)
		for {
			select {
			case <-stop:
				return
			case <-time.After(deployEvery):
				d.restart(t)
			}
		}
	}()

	var mu sync.Mutex
	var res deployResult
	var getTimes []time.Duration
	var seq atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range deployWorkers {
		wg.Go(func() {
			for time.Since(start) < deployRun {
				n := seq.Add(1)
				kind := rand.IntN(3)
				ctx, cancel := context.WithTimeout(context.Background(), deployDeadline)
				var req *http.Request
				if kind == 0 {
					req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/item", nil)
				} else {
					req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.addr+"/order", strings.NewReader(`{"n":1}`))
					req.Header.Set("X-Order", strconv.FormatInt(n, 10))
					if kind == 2 {
						req.Header.Set("Idempotency-Key", "k"+strconv.FormatInt(n, 10))
					}
				}
				sent := time.Now()
				resp, err := c.Do(req)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				took := time.Since(sent)
				cancel()
				mu.Lock()
				switch kind {
				case 0:
					res.gets++
					getTimes = append(getTimes, took)
					if !ok {
						res.getsFailed++
					}
				case 1:
					res.posts++
					if !ok {
						res.postsFailed++
					}
				default:
					res.keyed++
					if !ok {
						res.keyedFailed++
					}
				}
				if !ok {
					if err != nil {
						res.lastErr = err.Error()
					} else {
						res.lastErr = resp.Status
					}
				}
				mu.Unlock()
				// A pause, so that requests sample the deploy's time
				// evenly: a worker sending back to back would send
				// hundreds while the server is up for each one that
				// meets a restart, and the percentiles would not see
				// the restarts.
				time.Sleep(deployThink)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-restarts
	slices.Sort(getTimes)
	if len(getTimes) > 0 {
		res.getP99 = getTimes[len(getTimes)*99/100]
	}
	d.mu.Lock()
	for id, k := range d.applied {
		if k > 1 && !strings.HasPrefix(id, "k") {
			res.twice++
		}
	}
	d.mu.Unlock()
	return res
}

// TestRollingDeploy: through a rolling deploy in each of four modes, the
// defaults fail no GET, apply no keyless POST twice, and keep the GETs'
// p99 no worse than go-retryablehttp's defaults in the same mode (within
// 2%, the noise of two runs in turn). Each worker pauses between
// requests, so that the requests sample the deploy's time evenly.
func TestRollingDeploy(t *testing.T) {
	clients := []struct {
		name string
		wrap func(http.RoundTripper) http.RoundTripper
	}{
		{"retryhttp", func(next http.RoundTripper) http.RoundTripper { return retryhttp.New(next) }},
		{"go-retryablehttp", func(next http.RoundTripper) http.RoundTripper {
			c := retryablehttp.NewClient()
			c.HTTPClient = &http.Client{Transport: next}
			c.Logger = nil
			c.ErrorHandler = retryablehttp.PassthroughErrorHandler
			return &retryablehttp.RoundTripper{Client: c}
		}},
	}
	for _, mode := range []deployMode{deployGraceful, deployAbrupt, deployH2, deployFront} {
		t.Run(mode.String(), func(t *testing.T) {
			checkLeaks(t)
			var got [2]deployResult
			for i, c := range clients {
				got[i] = runDeploy(t, mode, c.wrap)
				t.Logf("%s, %s: %v (last failure: %s)", mode, c.name, got[i], got[i].lastErr)
			}
			ours, peer := got[0], got[1]
			assert.Zero(t, ours.getsFailed, "GETs failed")
			assert.Zero(t, ours.twice, "keyless POSTs applied twice")
			// The two clients run in turn on a shared machine: behind the
			// front both wait the Retry-After's 1 s, and their p99s differ
			// by a millisecond either way from run to run.
			assert.LessOrEqual(t, float64(ours.getP99), 1.02*float64(peer.getP99), "GET p99 against go-retryablehttp's")
		})
	}
}
