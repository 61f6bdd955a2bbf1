package redisstate

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var jsonOut = flag.String("json", "", "write TestFleetEndToEnd's figures to this file as JSON")

// The end-to-end scenario: requests at rate, spread over the transports,
// to one loopback host that answers 503 from warm to warm+outage and 200
// otherwise, for sendFor in all.
const (
	e2eRate    = 200 // requests per second, in all
	e2eWarm    = 500 * time.Millisecond
	e2eOutage  = 3 * time.Second
	e2eSendFor = 4 * time.Second
	e2eRounds  = 3
)

// e2eResult is what the host received in one run.
type e2eResult struct {
	Failed   int `json:"failed"`            // attempts answered 503: wasted
	Attempts int `json:"attempts"`          // every attempt the host received
	Requests int `json:"requests"`          // requests sent to the transports
	Adopted  int `json:"adopted,omitempty"` // changes from other processes that the fleets applied
}

// runE2E sends the scenario's requests through n transports, each with the
// default breaker and budget and, when shared, a go-redis client and a
// Fleet of its own on srv.
func runE2E(t *testing.T, srv *redisServer, name string, n int, shared bool) e2eResult {
	var (
		mu    sync.Mutex
		res   e2eResult
		start atomic.Pointer[time.Time]
	)
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := start.Load()
		mu.Lock()
		defer mu.Unlock()
		res.Attempts++
		if s != nil {
			if at := time.Since(*s); at >= e2eWarm && at < e2eWarm+e2eOutage {
				res.Failed++
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer host.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	var clients []*redis.Client
	defer func() {
		// The fleets stop first, then their clients close.
		cancel()
		running.Wait()
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	trs := make([]*retryhttp.Transport, n)
	var fleets []*fleet.Fleet
	for i := range trs {
		next := &http.Transport{MaxIdleConnsPerHost: 64}
		defer next.CloseIdleConnections()
		var opts []retryhttp.Option
		if shared {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
			clients = append(clients, rdb)
			f := fleet.New(New(rdb, Options{Prefix: prefix(t) + name + ":"}), fleet.Config{Instance: fmt.Sprint(name, i)})
			running.Go(func() { _ = f.Run(ctx) })
			fleets = append(fleets, f)
			opts = append(opts, retryhttp.WithFleet(f))
		}
		trs[i] = retryhttp.New(next, opts...)
	}
	// Every process counts the others before the traffic starts.
	deadline := time.Now().Add(5 * time.Second)
	for _, f := range fleets {
		for f.Stats().Size < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		require.Equal(t, n, f.Stats().Size, "fleet size")
	}

	total := int(e2eSendFor * e2eRate / time.Second)
	var wg sync.WaitGroup
	now := time.Now()
	start.Store(&now)
	for i := range total {
		time.Sleep(time.Until(now.Add(time.Duration(i) * time.Second / e2eRate)))
		tr := trs[i%n]
		wg.Go(func() {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			req, err := http.NewRequestWithContext(rctx, http.MethodGet, host.URL+"/x", nil)
			if err != nil {
				t.Error(err)
				return
			}
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	res.Requests = total
	for _, f := range fleets {
		res.Adopted += int(f.Stats().Adopted)
	}
	return res
}

func median(xs []int) int {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Eight transports, each its own process with its own go-redis client and
// Fleet on one Redis, waste about what one transport carrying all the
// traffic wastes when a host fails for 3 s; eight that share nothing waste
// more. Each round runs the three side by side.
func TestFleetEndToEnd(t *testing.T) {
	srv := startRedis(t)
	type round struct {
		One      e2eResult `json:"one"`
		Shared   e2eResult `json:"shared"`
		Isolated e2eResult `json:"isolated"`
	}
	var rounds []round
	var one, shared, isolated []int
	for r := range e2eRounds {
		var rd round
		var wg sync.WaitGroup
		wg.Go(func() { rd.One = runE2E(t, srv, fmt.Sprint("one", r), 1, false) })
		wg.Go(func() { rd.Shared = runE2E(t, srv, fmt.Sprint("shared", r), 8, true) })
		wg.Go(func() { rd.Isolated = runE2E(t, srv, fmt.Sprint("isolated", r), 8, false) })
		wg.Wait()
		rounds = append(rounds, rd)
		assert.Positive(t, rd.Shared.Adopted, "round %d: opens adopted from other processes", r+1)
		one, shared, isolated = append(one, rd.One.Failed), append(shared, rd.Shared.Failed), append(isolated, rd.Isolated.Failed)
	}
	m1, ms, mi := median(one), median(shared), median(isolated)
	sharedRatio, isolatedRatio := float64(ms)/float64(m1), float64(mi)/float64(m1)

	var b strings.Builder
	fmt.Fprintf(&b, "%d req/s to one host failing for %v, wasted attempts (failed attempts the host received):\n", e2eRate, e2eOutage)
	fmt.Fprintf(&b, "%-28s %8s %8s %8s %8s %8s\n", "", "round 1", "round 2", "round 3", "median", "ratio")
	row := func(name string, xs []int, m int, ratio float64) {
		fmt.Fprintf(&b, "%-28s", name)
		for _, x := range xs {
			fmt.Fprintf(&b, " %8d", x)
		}
		fmt.Fprintf(&b, " %8d %7.2fx\n", m, ratio)
	}
	row("one transport", one, m1, 1)
	row("8 transports, one fleet", shared, ms, sharedRatio)
	row("8 transports, no sharing", isolated, mi, isolatedRatio)
	t.Log("\n" + b.String())

	if *jsonOut != "" {
		out, err := json.MarshalIndent(struct {
			SharedRatio   float64 `json:"shared_ratio"`
			IsolatedRatio float64 `json:"isolated_ratio"`
			Rounds        []round `json:"rounds"`
		}{sharedRatio, isolatedRatio, rounds}, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(*jsonOut, append(out, '\n'), 0o644))
	}
	assert.LessOrEqual(t, sharedRatio, 1.2, "8 transports sharing through Redis against one")
}
