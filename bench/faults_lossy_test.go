package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lossy link: puts PUTs of lossyBody bytes from lossyWorkers
// workers, each with a lossyDeadline, through a proxy whose reset_peer
// toxic resets a share of the connections; the host closes every
// connection after its answer, so each attempt dials afresh and meets the
// toxic's odds.
const (
	lossyPuts     = 500
	lossyWorkers  = 16
	lossyBody     = 64 << 10
	lossyDeadline = 20 * time.Second
	lossyShare    = 0.3
	// lossyWrite is how long the host takes to store a body, a store's
	// write, so that the clean run takes seconds (1.9 s here), as a
	// service's would: without it 16 workers put 500 bodies in 0.4 s over
	// loopback, less than the backoff of a few retries, and the ratio
	// would measure the backoff against nothing.
	lossyWrite = 50 * time.Millisecond
)

// testLossyLink: the same 500 PUTs through a clean link, then through one
// that resets 30% of connections, both with the defaults. No byte is
// lost or altered: every PUT answered 200 was stored whole (the host
// checks each body against its SHA-256, sent in a header), and every
// other came back to its caller as a failure, long before its deadline.
// The lossy run ends within 3 times the clean one: the budget bounds
// retries to its share of the traffic, and a retry it cannot fund comes
// back at once, where it used to wait in the key's queue for a recovery
// that 30% of resets kept cutting (207 to 321 s for the run, when tried).
func testLossyLink(t *testing.T, tp *toxiproxy) faultRow {
	checkLeaks(t)
	var altered atomic.Int64
	var mu sync.Mutex
	stored := map[string]string{} // path -> SHA-256 of the body stored
	h := newHost(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // the connection was reset mid-body
		}
		sum := sha256.Sum256(body)
		got := hex.EncodeToString(sum[:])
		if got != r.Header.Get("X-Body-Sha256") {
			altered.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		time.Sleep(lossyWrite) // the store's write
		mu.Lock()
		stored[r.URL.Path] = got
		mu.Unlock()
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusOK)
	})
	x := tp.newProxy(t, "lossy", h.addr())

	var lost atomic.Int64
	run := func(name string) (time.Duration, int, int, retryhttp.Stats) {
		tr := retryhttp.New(nil)
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		var next atomic.Int64
		var failed, late atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range lossyWorkers {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= lossyPuts {
						return
					}
					payload := make([]byte, lossyBody)
					for j := range payload {
						payload[j] = byte(rand.IntN(256))
					}
					sum := sha256.Sum256(payload)
					ctx, cancel := context.WithTimeout(context.Background(), lossyDeadline)
					req, err := http.NewRequestWithContext(ctx, http.MethodPut, x.url(fmt.Sprintf("/%s/%d", name, i)), bytes.NewReader(payload))
					if err != nil {
						cancel()
						failed.Add(1)
						continue
					}
					req.Header.Set("X-Body-Sha256", hex.EncodeToString(sum[:]))
					sent := time.Now()
					resp, err := client.Do(req)
					if time.Since(sent) >= lossyDeadline/2 {
						late.Add(1)
					}
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					if err != nil || resp.StatusCode != http.StatusOK {
						failed.Add(1)
					} else {
						mu.Lock()
						ok := stored[req.URL.Path] == hex.EncodeToString(sum[:])
						mu.Unlock()
						if !ok {
							lost.Add(1) // answered 200, not stored whole
						}
					}
					cancel()
				}
			})
		}
		wg.Wait()
		return time.Since(start), int(failed.Load()), int(late.Load()), tr.Stats()
	}

	clean, cleanFailed, _, _ := run("clean")
	in := map[string]any{"name": "reset", "type": "reset_peer", "stream": "upstream", "toxicity": lossyShare, "attributes": map[string]any{"timeout": 0}}
	require.NoError(t, x.tp.call(http.MethodPost, "/proxies/"+x.name+"/toxics", in, nil))
	lossy, lossyFailed, late, st := run("lossy")

	t.Logf("%d PUTs of %d KiB, %d workers, %v deadlines, %v per write: clean link %v (%d failed); %.0f%% of connections reset %v (%.2fx): %d answered 200, %d handed back failed (%d budget refusals), %d after half their deadline, %d attempts, %d waits (%v in all); bodies lost %d, altered %d",
		lossyPuts, lossyBody>>10, lossyWorkers, lossyDeadline, lossyWrite, clean.Round(time.Millisecond), cleanFailed,
		100*lossyShare, lossy.Round(time.Millisecond), float64(lossy)/float64(clean), lossyPuts-lossyFailed, lossyFailed, st.BudgetDenied, late, st.Attempts, st.Waits, st.WaitTime.Round(time.Millisecond), lost.Load(), altered.Load())
	assert.Zero(t, cleanFailed, "PUTs failed on the clean link")
	assert.Zero(t, lost.Load(), "PUTs answered 200 whose body was not stored whole")
	assert.Zero(t, altered.Load(), "bodies that arrived altered")
	assert.Zero(t, late, "PUTs that came back after half their deadline")
	assert.Less(t, lossyFailed, lossyPuts/2, "PUTs handed back failed")
	assert.LessOrEqual(t, float64(lossy), 3*float64(clean), "the lossy run's time, against the clean one's")
	return faultRow{
		Scenario: fmt.Sprintf("%d PUTs of 64 KiB from %d workers, %v deadlines; reset_peer toxic on %.0f%% of connections", lossyPuts, lossyWorkers, lossyDeadline, 100*lossyShare),
		Client:   "retryhttp defaults",
		Figures:  fmt.Sprintf("clean %v; lossy %v (%.2fx), %d of %d handed back failed (the budget's refusals: %d), %d attempts, 0 bodies lost or altered", clean.Round(time.Millisecond), lossy.Round(time.Millisecond), float64(lossy)/float64(clean), lossyFailed, lossyPuts, st.BudgetDenied, st.Attempts),
	}
}
