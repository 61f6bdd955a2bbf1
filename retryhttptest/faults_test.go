package retryhttptest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// This file tests the faults, delays and large bodies; server_test.go has
// TestMain and the helpers.

// requireReset checks that err reports a connection reset: a TCP RST, not
// the EOF of an orderly close. Other systems report resets differently, so
// elsewhere it only checks for an error.
func requireReset(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	if runtime.GOOS == "linux" {
		require.ErrorIs(t, err, syscall.ECONNRESET)
	}
}

func TestResetAfterRequest(t *testing.T) {
	h, srv := Start(t, Script{Steps: []Action{{Fault: ResetAfterRequest}}})

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("payload"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := srv.Client().Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	requireReset(t, err)

	// The request was read and counted before the reset.
	require.Equal(t, 1, h.Count())
	require.Equal(t, map[string]int{"k1": 1}, h.Keys())
	require.Equal(t, map[string]int{BodyHash([]byte("payload")): 1}, h.HashCounts())
	require.Zero(t, h.BytesWritten())

	// The server carries on with the next step.
	require.Equal(t, http.StatusOK, get(t, srv))
	require.Equal(t, 2, h.Count())
}

func TestResetMidBody(t *testing.T) {
	body := bytes.Repeat([]byte("a"), 1000)
	h, srv := Start(t, Script{Steps: []Action{{Body: body, Fault: ResetMidBody}}})

	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, 1000, resp.ContentLength)
	got, err := io.ReadAll(resp.Body)
	requireReset(t, err)
	require.LessOrEqual(t, len(got), 500)
	require.Equal(t, body[:len(got)], got)
	require.EqualValues(t, 500, h.BytesWritten())
	require.Zero(t, h.Abandoned())
}

func TestSlowHeadersHonourClientTimeout(t *testing.T) {
	const delay = 5 * time.Second
	h, srv := Start(t, Script{Steps: []Action{{HeaderDelay: delay}}})
	c := *srv.Client()
	c.Timeout = 50 * time.Millisecond

	start := time.Now()
	resp, err := c.Get(srv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "%v", err)
	require.Equal(t, 1, h.Count())

	srv.Close() // Waits for the handler, which must stop waiting early.
	require.Less(t, time.Since(start), delay)
	require.Equal(t, 1, h.Abandoned())
	require.Zero(t, h.BytesWritten())
}

func TestSlowHeaders(t *testing.T) {
	const delay = 20 * time.Millisecond
	_, srv := Start(t, Script{Steps: []Action{{HeaderDelay: delay}}})
	start := time.Now()
	require.Equal(t, http.StatusOK, get(t, srv))
	require.GreaterOrEqual(t, time.Since(start), delay)
}

func TestSlowBody(t *testing.T) {
	const delay = 10 * time.Millisecond
	h, srv := Start(t, Script{Steps: []Action{{
		Body: []byte("hello, world"), ChunkSize: 4, ChunkDelay: delay,
	}}})
	start := time.Now()
	code, body, _ := do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "hello, world", body)
	require.GreaterOrEqual(t, time.Since(start), 3*delay, "a pause before each of 3 chunks")
	require.EqualValues(t, 12, h.BytesWritten())
}

func TestSlowBodyHeadersFirstAndCancellable(t *testing.T) {
	const delay = 5 * time.Second
	h, srv := Start(t, Script{Steps: []Action{{
		Status: http.StatusServiceUnavailable, BodySize: 100, ChunkSize: 10, ChunkDelay: delay,
	}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)

	start := time.Now()
	resp, err := srv.Client().Do(req) // Headers arrive without waiting for the body.
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.EqualValues(t, 100, resp.ContentLength)

	cancel()
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, context.Canceled)

	srv.Close() // Waits for the handler, which must stop pausing early.
	require.Less(t, time.Since(start), delay)
	require.Equal(t, 1, h.Abandoned())
	require.Zero(t, h.BytesWritten())
}

func TestLargeBodyStopsWhenClientGoesAway(t *testing.T) {
	const size = 1 << 30
	h, srv := Start(t, Script{Steps: []Action{{Status: http.StatusServiceUnavailable, BodySize: size}}})

	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.EqualValues(t, size, resp.ContentLength)
	buf := make([]byte, 64<<10)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte("x"), len(buf)), buf)
	require.NoError(t, resp.Body.Close()) // Closes the connection mid-body.

	srv.Close() // Waits for the handler to notice and stop.
	require.Equal(t, 1, h.Abandoned())
	require.GreaterOrEqual(t, h.BytesWritten(), int64(len(buf)))
	require.Less(t, h.BytesWritten(), int64(64<<20), "socket buffers, not the whole body")
}

func TestHeadGetsNoBody(t *testing.T) {
	h, srv := Start(t, Script{Then: Action{BodySize: 1 << 30}})
	resp, err := srv.Client().Head(srv.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, 1<<30, resp.ContentLength)
	require.Zero(t, h.BytesWritten())
	require.Equal(t, map[string]int{http.MethodHead: 1}, h.Methods())
}
