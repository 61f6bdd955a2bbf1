package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The early answer: a PUT of uploadSize bytes that the host answers 503,
// before reading the body, to the first earlyRefusals attempts, and accepts
// after; the proxy passes the upload to the host at uploadRateKBps (its
// bandwidth toxic, upstream), so each 503 arrives while the client is
// still sending, and a whole upload takes about a second.
const (
	uploadSize     = 8 << 20
	earlyRefusals  = 2
	uploadRateKBps = 8_000
)

// loopbackPorts matches the loopback addresses in an error, whose ports
// change from run to run.
var loopbackPorts = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// accepted is what the host read of the upload it accepted.
type accepted struct {
	n   int64
	sum [sha256.Size]byte
	err error
}

// testEarlyAnswer: the transport's defaults replay the body through the
// GetBody that http.NewRequest sets for a bytes.Reader, while the
// abandoned attempts' writes may still be running; the body the host
// accepts must be the caller's, byte for byte, and the run race-free
// (the test runs under -race).
func testEarlyAnswer(t *testing.T, tp *toxiproxy) faultRow {
	checkLeaks(t)
	payload := make([]byte, uploadSize)
	rand.NewChaCha8([32]byte{'p', 'u', 't'}).Read(payload)
	want := sha256.Sum256(payload)

	var mu sync.Mutex
	var got []accepted
	h := newHost(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n <= earlyRefusals {
			// Before reading a byte of the body: the server closes the
			// connection after this answer rather than read 8 MiB.
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		s := sha256.New()
		read, err := io.Copy(s, r.Body)
		mu.Lock()
		got = append(got, accepted{n: read, sum: [sha256.Size]byte(s.Sum(nil)), err: err})
		mu.Unlock()
	})
	x := tp.newProxy(t, "upload", h.addr())
	x.addToxic(t, "slow-read", "bandwidth", "upstream", map[string]any{"rate": uploadRateKBps})

	c := newCounted()
	var outcomes []string // each attempt's status or error, in order; hooks run on the request's goroutine
	hooks := c.hooks()
	counted := hooks.AttemptDone
	hooks.AttemptDone = func(i retryhttp.AttemptDoneInfo) {
		counted(i)
		if i.Err != nil {
			outcomes = append(outcomes, "error: "+loopbackPorts.ReplaceAllString(i.Err.Error(), "127.0.0.1:port"))
		} else {
			outcomes = append(outcomes, fmt.Sprint(i.Status))
		}
	}
	tr := retryhttp.New(nil, retryhttp.WithHooks(hooks))
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, x.url("/upload"), bytes.NewReader(payload))
	require.NoError(t, err)
	require.NotNil(t, req.GetBody, "http.NewRequest sets GetBody for a bytes.Reader")
	start := time.Now()
	resp, err := client.Do(req)
	require.NoError(t, err, "the upload is delivered after %d early 503s", earlyRefusals)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	elapsed := time.Since(start)

	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(earlyRefusals+1), c.attempts.Load(), "two refused attempts, then the accepted one")
	assert.Equal(t, int64(earlyRefusals+1), h.received.Load(), "the host received each attempt")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1, "the host accepted one upload")
	assert.NoError(t, got[0].err, "the host read the accepted upload to its end")
	assert.Equal(t, int64(uploadSize), got[0].n, "the host read every byte")
	assert.Equal(t, want, got[0].sum, "the accepted body is byte-identical to the caller's (SHA-256)")

	return faultRow{
		Scenario: fmt.Sprintf("PUT of %d MiB answered 503 before its body is read, %d times, then 200; upstream at %d KB/s (bandwidth toxic)", uploadSize>>20, earlyRefusals, uploadRateKBps),
		Client:   "retryhttp.New(nil) (defaults), body from http.NewRequest (GetBody)",
		Figures: fmt.Sprintf("attempts: %s; the host received %d requests and accepted %d bytes, SHA-256 %s; %.2f s",
			strings.Join(outcomes, ", "), h.received.Load(), got[0].n, map[bool]string{true: "identical", false: "different"}[got[0].sum == want], elapsed.Seconds()),
	}
}
