package main

import (
	"github.com/retryhttp/retryhttp/internal/herdsim"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// bucket is the width of the time slices that the server counts in: the
// simulator's, so that both measure peaks alike.
const bucket = herdsim.Bucket

// endpoint is the tenant: a loopback server that answers 503 until the
// outage ends, then 200, and counts every attempt it receives per 100 ms,
// by the delivery number each request carries in its X-Delivery header.
type endpoint struct {
	srv    *httptest.Server
	outage time.Duration

	mu       sync.Mutex
	start    time.Time       // guarded by mu
	seen     map[int]int     // attempts per delivery; guarded by mu
	attempts []int           // per bucket; guarded by mu
	retries  []int           // attempts after the first, per bucket; guarded by mu
	wasted   int             // retries that arrived while down (wastedDef); guarded by mu
	conns    int             // connections opened; guarded by mu
	firstOK  map[int]bool    // deliveries that got a 200; guarded by mu
	okAt     []time.Duration // when each delivery first got a 200; guarded by mu
}

func newEndpoint(outage time.Duration) *endpoint {
	e := &endpoint{outage: outage}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	e.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.mu.Lock()
			e.conns++
			e.mu.Unlock()
		}
	}
	e.srv.Start() // listens on 127.0.0.1
	return e
}

// reset starts a new run: the outage starts now and every count is zero.
func (e *endpoint) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.start = time.Now()
	e.seen = map[int]int{}
	e.firstOK = map[int]bool{}
	e.attempts, e.retries, e.okAt = nil, nil, nil
	e.wasted, e.conns = 0, 0
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/warm" {
		// Opens a connection before the run; not counted.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	id, _ := strconv.Atoi(r.Header.Get("X-Delivery"))
	e.mu.Lock()
	at := time.Since(e.start)
	down := at < e.outage
	b := int(at / bucket)
	for len(e.attempts) <= b {
		e.attempts = append(e.attempts, 0)
		e.retries = append(e.retries, 0)
	}
	e.seen[id]++
	e.attempts[b]++
	if e.seen[id] > 1 {
		e.retries[b]++
		if down {
			e.wasted++
		}
	}
	if !down && !e.firstOK[id] {
		e.firstOK[id] = true
		e.okAt = append(e.okAt, at)
	}
	e.mu.Unlock()
	if down {
		http.Error(w, "tenant down", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// result is one row of the table, from the server's own counts.
type result struct {
	name            string
	perBucket       []int
	peakOutageRPS   float64 // largest bucket of retries before recovery, per second
	peakRecoveryRPS float64 // largest bucket of any attempts from recovery on, per second
	t99             time.Duration
	delivered       int
	attempts        int           // every attempt that reached the endpoint
	wasted          int           // see wastedDef
	conns           int           // connections opened during the run
	redrive         *redriveStats // the dispatcher's counts; nil without redrive
}

// redriveStats is what the dispatcher of a redrive row counted.
type redriveStats struct {
	horizon  time.Duration
	redrives int            // calls after a delivery's first
	atOnce   int            // of which RetryAt's instant had already come
	gaveUp   int            // deliveries whose next instant fell past the horizon
	advice   map[string]int // RetryAt's reasons, one per failure
}

func (e *endpoint) result(name string, deliveries int) result {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := result{name: name, perBucket: append([]int(nil), e.attempts...), delivered: len(e.okAt), wasted: e.wasted, conns: e.conns, t99: -1}
	r.peakOutageRPS, r.peakRecoveryRPS, r.attempts = herdsim.Peaks(e.attempts, e.retries, e.outage)
	// okAt is in arrival order, so it is sorted.
	if need := herdsim.Need99(deliveries); len(e.okAt) >= need && need > 0 {
		r.t99 = e.okAt[need-1]
	}
	return r
}
