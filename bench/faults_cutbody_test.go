package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cut body: the host sends cutBodySize bytes with a Content-Length, and
// the proxy's limit_data toxic closes the connection once cutAfter bytes
// (headers included) have gone downstream.
const (
	cutBodySize = 1_000_000
	cutAfter    = 300_000
)

// cutCase is one client of the scenario: how its transport is built, and
// whether it is expected to deliver the body whole.
type cutCase struct {
	name  string
	opts  []retryhttp.Option
	whole bool // the body arrives whole, after a retry; else it is cut
}

// cutCases are the defaults, which hand the 200 back at its headers, and
// the response buffer, which reads the body first and retries the cut.
func cutCases() []cutCase {
	return []cutCase{
		{name: "retryhttp.New(nil) (defaults)"},
		{name: "retryhttp.New(nil, WithResponseBuffer(2 MiB))", opts: []retryhttp.Option{retryhttp.WithResponseBuffer(2 << 20)}, whole: true},
	}
}

// testCutBody runs each cut case against its own host and proxy.
//
// The toxic must cut the first attempt's body only, so that a retry can
// succeed. limit_data counts per connection (each new connection starts
// from zero), so it would cut every attempt. Instead the request's own
// AttemptStart hook (WithHooks through ContextWithOptions, beside whatever the transport
// has) removes the toxic before any attempt after the first is sent: hooks
// run synchronously on the request's goroutine, so the removal has taken
// effect on every connection, live and new, before the retry dials or
// reuses one. The first attempt is therefore always cut, and any retry
// always clean, however the transport schedules it.
func testCutBody(t *testing.T, tp *toxiproxy) []faultRow {
	body := make([]byte, cutBodySize)
	rand.NewChaCha8([32]byte{'c', 'u', 't'}).Read(body)
	var rows []faultRow
	for i, cc := range cutCases() {
		t.Run(cc.name, func(t *testing.T) {
			rows = append(rows, cutOne(t, tp, "cut"+strconv.Itoa(i), body, cc))
		})
	}
	return rows
}

func cutOne(t *testing.T, tp *toxiproxy, name string, body []byte, cc cutCase) faultRow {
	checkLeaks(t)
	h := newHost(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	x := tp.newProxy(t, name, h.addr())
	x.addToxic(t, "cut", "limit_data", "downstream", map[string]any{"bytes": cutAfter})

	tr := retryhttp.New(nil, cc.opts...)
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	var attempts atomic.Int64
	var removed atomic.Bool
	removeErr := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithHooks(&retryhttp.Hooks{AttemptStart: func(i retryhttp.Event) {
		attempts.Add(1)
		if i.Attempt >= 2 && removed.CompareAndSwap(false, true) {
			removeErr <- x.removeToxic("cut")
		}
	}}))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, x.url("/blob"), nil)
	require.NoError(t, err)
	start := time.Now()
	resp, err := client.Do(req)
	require.NoError(t, err, "the first attempt's headers pass the toxic: a 200 arrives")
	got, readErr := io.ReadAll(resp.Body)
	resp.Body.Close()
	elapsed := time.Since(start)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	if removed.Load() {
		assert.NoError(t, <-removeErr, "removing the toxic before the retry")
	}

	n := len(got)
	assert.True(t, n <= len(body) && bytes.Equal(body[:n], got), "what arrives is the body's prefix, byte for byte")
	if cc.whole {
		assert.NoError(t, readErr, "the body is read whole")
		assert.Equal(t, len(body), n, "all %d bytes arrive", len(body))
		assert.True(t, bytes.Equal(body, got), "the body is byte-identical")
		assert.GreaterOrEqual(t, attempts.Load(), int64(2), "the cut attempt is retried")
	} else {
		assert.ErrorIs(t, readErr, io.ErrUnexpectedEOF, "the caller reads the 200, then the cut")
		assert.Less(t, n, cutAfter, "the proxy passed at most %d bytes, headers included", cutAfter)
		assert.Equal(t, int64(1), attempts.Load(), "a 200 is not retried")
	}
	assert.Equal(t, attempts.Load(), h.waitReceived(attempts.Load(), 5*time.Second), "the host received each attempt")

	return faultRow{
		Scenario: fmt.Sprintf("200 with a %d-byte body, cut after %d bytes (limit_data toxic, first attempt only)", cutBodySize, cutAfter),
		Client:   cc.name,
		Figures: fmt.Sprintf("200; %d body bytes read, then %v; attempts: %d sent, %d received by the host; %.2f s",
			n, errOrEOF(readErr), attempts.Load(), h.received.Load(), elapsed.Seconds()),
	}
}

// errOrEOF names the end of a read: the error, or the clean end.
func errOrEOF(err error) string {
	if err == nil {
		return "the clean end"
	}
	return fmt.Sprintf("%q", err.Error())
}
