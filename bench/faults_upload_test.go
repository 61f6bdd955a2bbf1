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

// earlyCase is one client of the early-answer scenario.
type earlyCase struct {
	name string
	opts []retryhttp.Option
	// sdk: the caller retries by itself, as openai-go does: three tries,
	// one attempt each through the transport, its body one *bytes.Reader
	// that its GetBody seeks back to the start as soon as a try fails.
	sdk bool
}

// testEarlyAnswer runs each client against its own host and proxy: the
// transport's defaults, which replay the body through the GetBody that
// http.NewRequest sets for a bytes.Reader while the abandoned attempts'
// writes may still be running; and a caller that retries by itself over a
// transport that sends each try once, rewinding one shared reader the
// moment a 503 comes back, while that try's write is still going. The body
// the host accepts must be the caller's, byte for byte, and the run
// race-free (the test runs under -race): no write may read the shared
// reader after the transport has handed its 503 back.
func testEarlyAnswer(t *testing.T, tp *toxiproxy) []faultRow {
	var rows []faultRow
	for i, ec := range []earlyCase{
		{name: "retryhttp.New(nil) (defaults), body from http.NewRequest (GetBody)"},
		{name: "retryhttp.New(nil, WithMaxAttempts(1)), the caller's 3 tries rewinding one *bytes.Reader", opts: []retryhttp.Option{retryhttp.WithMaxAttempts(1)}, sdk: true},
	} {
		t.Run(ec.name, func(t *testing.T) { rows = append(rows, earlyOne(t, tp, fmt.Sprintf("upload%d", i), ec)) })
	}
	return rows
}

func earlyOne(t *testing.T, tp *toxiproxy, name string, ec earlyCase) faultRow {
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
	x := tp.newProxy(t, name, h.addr())
	x.addToxic(t, "slow-read", "bandwidth", "upstream", map[string]any{"rate": uploadRateKBps})

	c := newCounted()
	var outcomes []string // each attempt's status or error, in order; hooks run on the request's goroutine
	hooks := c.hooks()
	counted := hooks.AttemptDone
	hooks.AttemptDone = func(i retryhttp.Event) {
		counted(i)
		if i.Err != nil {
			outcomes = append(outcomes, "error: "+loopbackPorts.ReplaceAllString(i.Err.Error(), "127.0.0.1:port"))
		} else {
			outcomes = append(outcomes, fmt.Sprint(i.Status))
		}
	}
	tr := retryhttp.New(nil, append([]retryhttp.Option{retryhttp.WithHooks(hooks), c.breaker()}, ec.opts...)...)
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	var resp *http.Response
	var err error
	if ec.sdk {
		resp, err = sdkPut(ctx, client, x.url("/upload"), payload, earlyRefusals+1)
	} else {
		var req *http.Request
		req, err = http.NewRequestWithContext(ctx, http.MethodPut, x.url("/upload"), bytes.NewReader(payload))
		require.NoError(t, err)
		require.NotNil(t, req.GetBody, "http.NewRequest sets GetBody for a bytes.Reader")
		resp, err = client.Do(req)
	}
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
		Client:   ec.name,
		Figures: fmt.Sprintf("attempts: %s; the host received %d requests and accepted %d bytes, SHA-256 %s; %.2f s",
			strings.Join(outcomes, ", "), h.received.Load(), got[0].n, map[bool]string{true: "identical", false: "different"}[got[0].sum == want], elapsed.Seconds()),
	}
}

// sdkPut uploads payload as openai-go does: one *bytes.Reader, whose
// GetBody seeks it back to the start; up to tries tries, each sent once,
// the body rewound as soon as a try fails, before its response is closed.
func sdkPut(ctx context.Context, c *http.Client, url string, payload []byte, tries int) (*http.Response, error) {
	shared := bytes.NewReader(payload)
	getBody := func() (io.ReadCloser, error) {
		_, err := shared.Seek(0, io.SeekStart)
		return io.NopCloser(shared), err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, nil)
	if err != nil {
		return nil, err
	}
	req.GetBody, req.ContentLength = getBody, int64(len(payload))
	for try := 1; ; try++ {
		if req.Body, err = getBody(); err != nil {
			return nil, err
		}
		resp, err := c.Do(req.Clone(ctx))
		if try == tries || err == nil && resp.StatusCode < 500 {
			return resp, err
		}
		if _, err := getBody(); err != nil { // the rewind, at once
			return nil, err
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
}
