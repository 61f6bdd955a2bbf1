package retryhttp

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cutServer serves body on 127.0.0.1, with its Content-Length unless
// chunked, and cuts the first cuts responses after cutAt body bytes: the
// handler aborts, and net/http closes the connection mid-body.
func cutServer(t *testing.T, body []byte, cutAt int, cuts int64, chunked bool) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		if !chunked {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		if i > cuts {
			w.Write(body)
			return
		}
		w.Write(body[:cutAt])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// A 200 whose 1,000,000-byte body is cut at 300,000 bytes: with the
// response buffer on it is retried and delivered whole; off, or for a
// request that may not be retried, the caller reads the 200 and then the
// cut, as before.
func TestResponseBufferCutBody(t *testing.T) {
	body := make([]byte, 1_000_000)
	rand.NewChaCha8([32]byte{'c'}).Read(body)
	cases := []struct {
		name    string
		method  string
		chunked bool
		opts    []Option
		whole   bool // delivered whole after a retry; else the caller sees the cut
	}{
		{"buffer on", http.MethodGet, false, []Option{WithResponseBuffer(2 << 20)}, true},
		{"buffer on, chunked", http.MethodGet, true, []Option{WithResponseBuffer(2 << 20)}, true},
		{"buffer off", http.MethodGet, false, nil, false},
		{"buffer on, keyless POST", http.MethodPost, false, []Option{WithResponseBuffer(2 << 20)}, false},
		{"buffer on, one attempt", http.MethodGet, false, []Option{WithResponseBuffer(2 << 20), WithMaxAttempts(1)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, served := cutServer(t, body, 300_000, 1, c.chunked)
			var attemptErrs []error
			hooks := &Hooks{AttemptDone: func(i Event) { attemptErrs = append(attemptErrs, i.Err) }}
			tr := New(nil, append([]Option{WithPolicy(immediate{}), WithHooks(hooks)}, c.opts...)...)
			defer tr.CloseIdleConnections()
			req, err := http.NewRequestWithContext(t.Context(), c.method, srv.URL, nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			got, readErr := io.ReadAll(resp.Body)
			resp.Body.Close()
			st := tr.Stats()
			if c.whole {
				assert.NoError(t, readErr)
				assert.True(t, bytes.Equal(body, got), "the body arrives whole, byte for byte (%d of %d bytes)", len(got), len(body))
				assert.Equal(t, int64(2), served.Load(), "the cut attempt was retried")
				assert.Equal(t, int64(len(body)), resp.ContentLength)
				assert.Equal(t, uint64(1), st.ResponsesCut)
				assert.Equal(t, uint64(1), st.ResponsesBuffered)
				require.Len(t, attemptErrs, 2)
				assert.ErrorIs(t, attemptErrs[0], io.ErrUnexpectedEOF, "AttemptDone sees the cut")
				assert.NoError(t, attemptErrs[1])
				return
			}
			assert.ErrorIs(t, readErr, io.ErrUnexpectedEOF, "the caller reads the 200, then the cut")
			assert.Equal(t, body[:300_000], got, "what arrives is the body's prefix")
			assert.Equal(t, int64(1), served.Load(), "a 200 is not retried")
			assert.Zero(t, st.ResponsesCut+st.ResponsesBuffered+st.ResponsesTooLarge, "nothing buffered")
		})
	}
}

// A cut that is not retried ends the request with an Error wrapping the
// read error.
func TestResponseBufferCutNotRetried(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 100_000)
	srv, served := cutServer(t, body, 30_000, 10, false)
	// WithMaxWait(0): no ride-out past the two attempts.
	tr := New(nil, WithPolicy(immediate{}), WithMaxAttempts(2), WithMaxWait(0), WithResponseBuffer(1<<20))
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.Nil(t, resp)
	e := asError(t, err)
	assert.Equal(t, ReasonAttemptsUsed, e.Reason)
	assert.ErrorIs(t, e, io.ErrUnexpectedEOF)
	assert.Contains(t, e.Error(), "response body cut after 30000 bytes")
	assert.Equal(t, int64(2), served.Load())
	assert.Equal(t, uint64(2), tr.Stats().ResponsesCut)
}

// A body larger than the buffer is handed back streaming, whole: unread
// when its Content-Length says so, with the bytes already read in front
// of the rest when it has none.
func TestResponseBufferTooLarge(t *testing.T) {
	body := make([]byte, 1_000_000)
	rand.NewChaCha8([32]byte{'l'}).Read(body)
	for _, chunked := range []bool{false, true} {
		t.Run(map[bool]string{false: "Content-Length", true: "chunked"}[chunked], func(t *testing.T) {
			srv, served := cutServer(t, body, 0, 0, chunked)
			tr := New(nil, WithResponseBuffer(500_000))
			defer tr.CloseIdleConnections()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.True(t, bytes.Equal(body, got), "the body arrives whole (%d of %d bytes)", len(got), len(body))
			assert.Equal(t, int64(1), served.Load())
			st := tr.Stats()
			assert.Equal(t, uint64(1), st.ResponsesTooLarge)
			assert.Zero(t, st.ResponsesBuffered)
		})
	}
}

// The buffered body is in memory when RoundTrip returns: the caller reads
// it after the request's context has ended.
func TestResponseBufferReadAfterContext(t *testing.T) {
	body := []byte(`{"ok":true}`)
	srv, _ := cutServer(t, body, 0, 0, false)
	tr := New(nil, WithResponseBuffer(1<<10), WithAttemptTimeout(time.Minute))
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	cancel()
	assert.Equal(t, string(body), readBody(t, resp))
	assert.Equal(t, uint64(1), tr.Stats().ResponsesBuffered)
}
