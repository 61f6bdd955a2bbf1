package sdk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The early answer to an upload: a PUT of uploadSize bytes that the server
// answers 503 before reading its body, earlyRefusals times, and accepts
// after.
const (
	uploadSize    = 8 << 20
	earlyRefusals = 2
)

// uploadServer answers the first earlyRefusals requests 503 without
// reading a byte of their body, and reads the rest whole, keeping the
// length and SHA-256 of what it read.
type uploadServer struct {
	*httptest.Server
	mu       sync.Mutex
	received int
	accepted []upload
}

// upload is what the server read of an upload it accepted.
type upload struct {
	n   int64
	sum [sha256.Size]byte
	err error
}

func newUploadServer(t *testing.T) *uploadServer {
	s := &uploadServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.received++
		n := s.received
		s.mu.Unlock()
		if n <= earlyRefusals {
			// Before reading the body: the client is still sending it
			// when the answer arrives, and net/http lets that write go on
			// after RoundTrip has returned.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write(openai503.Body)
			return
		}
		h := sha256.New()
		read, err := io.Copy(h, r.Body)
		s.mu.Lock()
		s.accepted = append(s.accepted, upload{n: read, sum: [sha256.Size]byte(h.Sum(nil)), err: err})
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(s.Close)
	return s
}

// The README's openai-go recipe (the SDK's retries on, retryhttp sending
// each try once) with an 8 MiB upload from a *bytes.Reader, which openai-go
// replays by seeking the one reader back to its start as soon as a try
// fails. The server answers the first two tries 503 before reading them,
// so each of those tries is still being written when its answer comes
// back. The third try must deliver the caller's bytes whole, and, under
// -race, no write of an earlier try may read the reader after the
// transport has handed its 503 back (the race detector fails the test if
// one does).
func TestOpenAIUploadAnsweredEarly(t *testing.T) {
	payload := make([]byte, uploadSize)
	rand.NewChaCha8([32]byte{'u', 'p'}).Read(payload)
	want := sha256.Sum256(payload)
	srv := newUploadServer(t)

	tr := retryhttp.New(nil, retryhttp.WithMaxAttempts(1))
	defer tr.CloseIdleConnections()
	var tries []int // each try's status, 0 for an error; the SDK tries one at a time
	client := openai.NewClient(
		option.WithAPIKey("sk-test"),
		option.WithBaseURL(srv.URL+"/v1/"),
		option.WithHTTPClient(&http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := tr.RoundTrip(r)
			status := 0
			if err == nil {
				status = resp.StatusCode
			}
			tries = append(tries, status)
			return resp, err
		})}),
		option.WithMaxRetryDelay(time.Millisecond), // the backoff is not what is measured
	)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out map[string]any
	err := client.Put(ctx, "uploads/blob", bytes.NewReader(payload), &out,
		option.WithHeader("Content-Type", "application/octet-stream"))
	require.NoError(t, err, "the third try is accepted")

	assert.Equal(t, []int{503, 503, 200}, tries, "the SDK's three tries, each sent once")
	srv.mu.Lock()
	defer srv.mu.Unlock()
	assert.Equal(t, earlyRefusals+1, srv.received, "the server received each try once")
	require.Len(t, srv.accepted, 1, "the server accepted one upload")
	got := srv.accepted[0]
	assert.NoError(t, got.err, "the server read the accepted upload to its end")
	assert.Equal(t, int64(uploadSize), got.n, "every byte arrived")
	assert.Equal(t, want, got.sum, "the upload is the caller's bytes (SHA-256)")
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
