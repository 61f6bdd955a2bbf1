// Package retryhttptest helps test code that uses the retryhttp transport
// (or any HTTP client) against a scriptable, misbehaving server.
//
// A Handler answers each request as a Script says, by request number ("fail
// twice with 503, then succeed") or by time ("down for 2 seconds"), with
// status codes, Retry-After in either form, huge generated bodies, slow
// headers, slow bodies and TCP resets. It also records what it received
// (requests per method, body hashes, Idempotency-Key values), so a test can
// assert that a request was received exactly once.
//
//	h, srv := retryhttptest.Start(t, retryhttptest.FailN(2, http.StatusServiceUnavailable))
//	resp, err := client.Get(srv.URL)
//	...
//	require.Equal(t, 3, h.Count())
//
// NewServer and Start serve HTTP/1.1 on 127.0.0.1 only.
//
// Beware that net/http's Transport itself retries a request once, on a new
// connection, when a reused keep-alive connection fails before any response
// byte arrives and the request is replayable (GET, HEAD, OPTIONS, TRACE, or
// any request with an Idempotency-Key or X-Idempotency-Key header and a
// rewindable body) or nothing was written. With ResetAfterRequest the server
// can therefore count one request more than the code under test sent, unless
// the request is the first on its connection (or keep-alives are disabled).
package retryhttptest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// NewServer starts and returns an HTTP/1.1 server listening on 127.0.0.1
// (loopback only) that serves h, typically a *Handler. The caller must call
// its Close method, which waits for running handlers and closes idle
// connections of the server's Client. It panics if it cannot listen, like
// httptest.NewServer. Use Start in tests to get cleanup for free.
func NewServer(h http.Handler) *httptest.Server {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		panic("retryhttptest: failed to listen on 127.0.0.1: " + err.Error())
	}
	srv := &httptest.Server{
		Listener: l,
		Config:   &http.Server{Handler: h},
	}
	srv.Start()
	return srv
}

// Start creates a Handler for s, serves it with NewServer, and registers the
// server's Close with tb.Cleanup. Use the returned server's URL and Client;
// the Handler's methods report what the server received.
func Start(tb testing.TB, s Script) (*Handler, *httptest.Server) {
	tb.Helper()
	h := NewHandler(s)
	srv := NewServer(h)
	tb.Cleanup(srv.Close)
	return h, srv
}
