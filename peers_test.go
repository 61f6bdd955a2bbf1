package retryhttp

// Ports of the intent of peer libraries' tests (go-retryablehttp v0.7.8,
// failsafe-go v0.9.8 failsafehttp, net/http of Go 1.26) to this transport,
// in our own code. The comment above each test names the cases it ports.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// go-retryablehttp TestRoundTripper_implements.
var _ http.RoundTripper = (*Transport)(nil)

// peerRT is a next RoundTripper made of a function.
type peerRT func(*http.Request) (*http.Response, error)

func (f peerRT) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// peerRun runs f as the subtest name, inside a synctest bubble.
func peerRun(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
}

// peerGiveUp returns an option whose hooks record the reason of the last
// give-up; it stays reasonNone when the request ends without one.
func peerGiveUp() (Option, *Reason) {
	r := new(Reason)
	return WithHooks(&Hooks{GiveUp: func(i Event) { *r = i.Reason }}), r
}

// peerReq returns a request; its error fails the test.
func peerReq(t *testing.T, ctx context.Context, method, rawURL string, body io.Reader) *http.Request {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	require.NoError(t, err)
	return req
}

// readStatus reads and closes resp's body and returns its status.
func readStatus(t *testing.T, resp *http.Response) int {
	t.Helper()
	readBody(t, resp)
	return resp.StatusCode
}

// peerServer is a server on 127.0.0.1 that records each request's body by
// path and counts the connections it accepts.
type peerServer struct {
	*httptest.Server
	conns  atomic.Int32
	mu     sync.Mutex
	bodies map[string][]string // guarded by mu
}

// newPeerServer starts a peerServer, closed when the test ends, that
// answers with answer(w, r, n), n counting r's path's requests from 1.
func newPeerServer(t *testing.T, tlsOn bool, answer func(w http.ResponseWriter, r *http.Request, n int)) *peerServer {
	s := &peerServer{bodies: map[string][]string{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies[r.URL.Path] = append(s.bodies[r.URL.Path], string(b))
		n := len(s.bodies[r.URL.Path])
		s.mu.Unlock()
		answer(w, r, n)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // rejected TLS handshakes
	if tlsOn {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// got returns the bodies that requests to path carried, in order.
func (s *peerServer) got(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies[path]...)
}

// go-retryablehttp TestClient_Do (bodies *bytes.Buffer, *bytes.Reader,
// strings.Reader, custom io.Reader); failsafe-go TestBodyReader; net/http
// TestRetryRequestsOnError (the body rewound on each retry).
func TestPeerBodyRewoundEveryKind(t *testing.T) {
	type custom struct{ io.Reader } // unknown to http.NewRequest: no GetBody
	cases := []struct {
		name, method string
		body         io.Reader
		opts         []Option
	}{
		{"*bytes.Buffer", "PUT", bytes.NewBufferString("hello"), nil},
		{"*bytes.Reader", "PUT", bytes.NewReader([]byte("hello")), nil},
		{"*strings.Reader", "PUT", strings.NewReader("hello"), nil},
		{"custom io.Reader, buffered", "PUT", custom{strings.NewReader("hello")}, []Option{WithBodyBuffer(1 << 10)}},
		{"GET with a body", "GET", strings.NewReader("hello"), nil},
	}
	dial := reply{err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, c := range cases {
		peerRun(t, c.name, func(t *testing.T) {
			next := newNext(dial, dial, reply{status: 500}, reply{status: 500}, reply{status: 200, body: "ok"})
			const u = "http://example.test/v1/foo"
			req := peerReq(t, t.Context(), c.method, u, c.body)
			req.Header.Set("foo", "bar")
			resp, err := newT(next, append(c.opts, WithMaxAttempts(6), WithPolicy(immediate{}))...).RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, "ok", readBody(t, resp))
			reqs := next.requests()
			require.Len(t, reqs, 5, "attempts that reached next")
			for i, r := range reqs {
				assert.Equal(t, []string{c.method, u, "bar", "hello"}, []string{r.method, r.url, r.header.Get("foo"), string(r.body)},
					"method, URL, header foo and body of attempt %d", i+1)
			}
		})
	}
}

// net/http TestTransportRequestReplayable (rows "POST with X-Idempotency-Key",
// which we do not honour, and "GET with a non-rewindable body").
func TestPeerReplayabilityRows(t *testing.T) {
	cases := []struct {
		name, method, key string // key: a header set to "k1"
		noGetBody         bool
		wantCalls         int
		wantReason        Reason
	}{
		{"POST with only X-Idempotency-Key", "POST", "X-Idempotency-Key", false, 1, ReasonNotReplayable},
		{"control: POST with Idempotency-Key", "POST", "Idempotency-Key", false, 2, reasonNone},
		{"GET with a body without GetBody, no buffer", "GET", "X-Unrelated", true, 1, ReasonNotReplayable},
		{"control: GET with a body with GetBody", "GET", "X-Unrelated", false, 2, reasonNone},
	}
	for _, c := range cases {
		peerRun(t, c.name, func(t *testing.T) {
			req := newReq(t.Context(), c.method, strings.NewReader("x"))
			req.Header.Set(c.key, "k1")
			if c.noGetBody {
				req.GetBody = nil
			}
			next := newNext(reply{status: 503, body: "busy"}, reply{status: 200, body: "ok"})
			hooks, reason := peerGiveUp()
			resp, err := newT(next, hooks).RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, []string{"busy", "ok"}[c.wantCalls-1], readBody(t, resp))
			assert.Equal(t, c.wantCalls, next.calls(), "attempts that reached next")
			assert.Equal(t, c.wantReason, *reason, "give-up reason")
			for i, r := range next.requests() {
				assert.Equal(t, "x", string(r.body), "body of attempt %d", i+1)
			}
		})
	}
}

// peerBodies are a caller's request body and the bodies its GetBody handed
// out, each counting its Close calls.
type peerBodies struct {
	caller *trackedBody
	mu     sync.Mutex
	fresh  []*trackedBody // guarded by mu
}

// peerCountedReq returns a PUT of "payload" to rawURL whose body, and every
// body from its GetBody, counts its Close calls.
func peerCountedReq(t *testing.T, ctx context.Context, rawURL string) (*http.Request, *peerBodies) {
	b := &peerBodies{caller: newTrackedBody("payload")}
	req := peerReq(t, ctx, http.MethodPut, rawURL, nil)
	req.Body, req.ContentLength = b.caller, int64(len("payload"))
	req.GetBody = func() (io.ReadCloser, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.fresh = append(b.fresh, newTrackedBody("payload"))
		return b.fresh[len(b.fresh)-1], nil
	}
	return req, b
}

// check asserts that the caller's body and every body from GetBody were
// closed exactly once, and that GetBody gave at least minFresh bodies.
func (b *peerBodies) check(t *testing.T, minFresh int) {
	t.Helper()
	assert.Equal(t, int32(1), b.caller.closed.Load(), "Close calls on the caller's body")
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.GreaterOrEqual(t, len(b.fresh), minFresh, "bodies from GetBody")
	for i, f := range b.fresh {
		assert.Equal(t, int32(1), f.closed.Load(), "Close calls on GetBody body %d", i+1)
	}
}

// net/http TestTransportClosesRequestBody, TestClientCallsCloseOnlyOnce
// (issue 40382), TestTransportClosesBodyOnInvalidRequests (bad header value).
func TestPeerCallerBodyClosedOnce(t *testing.T) {
	cases := []struct {
		name       string
		opts       []Option
		cancelAt   time.Duration
		wantCalls  int
		wantReason Reason
	}{
		{"success first time", nil, 0, 1, reasonNone},
		{"retries used up on 503", nil, 0, defaultMaxAttempts, ReasonAttemptsUsed},
		{"cancelled during the backoff wait", []Option{WithPolicy(Exponential{Base: 10 * time.Second})}, 3 * time.Second, 1, ReasonContextDone},
		{"budget exhausted", []Option{WithBudget(NewBudget(BudgetConfig{Ratio: -1, MinPerSecond: -1})), WithMaxWait(0)}, 0, 1, ReasonBudgetExhausted},
	}
	for _, c := range cases {
		peerRun(t, c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if c.cancelAt > 0 {
				time.AfterFunc(c.cancelAt, cancel)
			}
			status := map[bool]int{true: 200, false: 503}[c.wantReason == reasonNone]
			next := newNext(reply{status: status})
			req, bodies := peerCountedReq(t, ctx, testURL)
			hooks, reason := peerGiveUp()
			resp, err := newT(next, append(c.opts, hooks)...).RoundTrip(req)
			if c.cancelAt > 0 {
				assert.ErrorIs(t, err, context.Canceled)
			} else if assert.NoError(t, err) {
				assert.Equal(t, status, readStatus(t, resp))
			}
			assert.Equal(t, c.wantCalls, next.calls(), "attempts that reached next")
			assert.Equal(t, c.wantReason, *reason, "give-up reason")
			bodies.check(t, c.wantCalls-1)
		})
	}
	t.Run("invalid header value through http.Transport", func(t *testing.T) {
		srv := newPeerServer(t, false, func(http.ResponseWriter, *http.Request, int) {})
		base := &http.Transport{}
		defer base.CloseIdleConnections()
		var calls atomic.Int32
		next := peerRT(func(r *http.Request) (*http.Response, error) { calls.Add(1); return base.RoundTrip(r) })
		req, bodies := peerCountedReq(t, t.Context(), srv.URL+"/never")
		req.Header.Set("Authorization", "Bearer token-read-from-a-file\n")
		resp, err := newT(next).RoundTrip(req)
		assert.Nil(t, resp)
		assert.Equal(t, ReasonNotRetryable, asError(t, err).Reason, "Error.Reason")
		assert.Equal(t, int32(1), calls.Load(), "attempts that reached next")
		assert.Empty(t, srv.got("/never"), "requests that reached the server")
		bodies.check(t, 0)
	})
}

// net/http TestTransportBodyReadError (issue 18239),
// TestTransportClosesBodyOnError (issue 6981).
func TestPeerBodyReadErrorNotRetried(t *testing.T) {
	errBody := errors.New("scripted body read failure")
	for name, opts := range map[string][]Option{"no GetBody": nil, "no GetBody, WithBodyBuffer": {WithBodyBuffer(64)}} {
		peerRun(t, name, func(t *testing.T) {
			src := &trackedBody{r: io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(errBody))}
			req := newReq(t.Context(), http.MethodPut, nil)
			req.Body = src
			var calls int
			var read []byte
			next := peerRT(func(r *http.Request) (*http.Response, error) {
				calls++ // as http.Transport: send the body, close it, return its read error
				var err error
				read, err = io.ReadAll(r.Body)
				if r.Body.Close(); err != nil {
					return nil, err
				}
				return newResponse(r, 503, http.NoBody), nil
			})
			resp, err := newT(next, opts...).RoundTrip(req)
			assert.Nil(t, resp)
			assert.ErrorIs(t, err, errBody)
			assert.Equal(t, 1, asError(t, err).Attempts, "Error.Attempts")
			assert.Equal(t, 1, calls, "attempts that reached next")
			assert.Equal(t, "abc", string(read), "what next read before the error")
			assert.Equal(t, int32(1), src.closed.Load(), "Close calls on the caller's body")
		})
	}
}

// peerEndless is a body that never ends; it counts the bytes read from it.
type peerEndless struct{ n atomic.Int64 }

func (e *peerEndless) Read(p []byte) (int, error) {
	copy(p, bytes.Repeat([]byte{'a'}, len(p)))
	e.n.Add(int64(len(p)))
	return len(p), nil
}

// net/http TestProbeZeroLengthBody (a pipe body is sent before it is
// written), TestIssue3595 (a never-ending body answered early).
func TestPeerStreamingBodyNotReadAhead(t *testing.T) {
	peerRun(t, "pipe body on GET", func(t *testing.T) {
		pr, pw := io.Pipe()
		req := newReq(t.Context(), http.MethodGet, nil)
		req.Body = pr
		started := make(chan struct{})
		var got []byte
		next := peerRT(func(r *http.Request) (*http.Response, error) {
			close(started)
			got, _ = io.ReadAll(r.Body)
			return newResponse(r, 200, http.NoBody), r.Body.Close()
		})
		// The caller writes only once next has the body: a transport that
		// read the pipe first would deadlock the bubble. A pipe write
		// returns once read, so each write reaches next as it is made.
		go func() {
			<-started
			io.WriteString(pw, "one")
			io.WriteString(pw, "two")
			pw.Close()
		}()
		resp, err := newT(next).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 200, readStatus(t, resp))
		assert.Equal(t, "onetwo", string(got), "the body as next read it")
	})
	peerRun(t, "never-ending body, WithBodyBuffer(16)", func(t *testing.T) {
		src := &peerEndless{}
		req := newReq(t.Context(), http.MethodPut, nil)
		req.Body = io.NopCloser(src)
		var before int64
		var got []byte
		next := peerRT(func(r *http.Request) (*http.Response, error) {
			before = src.n.Load()
			got, _ = io.ReadAll(io.LimitReader(r.Body, 1000))
			return newResponse(r, http.StatusUnauthorized, http.NoBody), r.Body.Close()
		})
		resp, err := newT(next, WithBodyBuffer(16)).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusUnauthorized, readStatus(t, resp))
		assert.LessOrEqual(t, before, int64(17), "bytes read from the body before the first attempt")
		assert.Equal(t, strings.Repeat("a", 1000), string(got), "the body as next read it")
	})
}

// net/http TestReuseRequest.
func TestPeerSameRequestTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newNext(reply{status: 503}, reply{status: 200, body: "first"}, reply{status: 503}, reply{status: 200, body: "second"})
		tr := newT(next, WithPolicy(immediate{}))
		req := newReq(t.Context(), http.MethodGet, nil)
		before := snapshotOf(req)
		for i, want := range []string{"first", "second"} {
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err, "send %d", i+1)
			assert.Equal(t, want, readBody(t, resp), "send %d", i+1)
			assert.Equal(t, 2*(i+1), next.calls(), "attempts after send %d", i+1)
			assert.Equal(t, before, snapshotOf(req), "the request after send %d", i+1)
		}
	})
}

// failsafe-go TestClientRetryPolicyWith429ThenSuccess; go-retryablehttp
// TestClient_Do_WithResponseHandler ("succeeds on 2nd"), TestClient_CheckRetry
// (a custom test decides).
func TestPeerStatusRows(t *testing.T) {
	retry404 := WithRetryIf(func(r *http.Response, err error) bool { return DefaultRetryIf(r, err) || r.StatusCode == 404 })
	badState := WithRetryIf(func(r *http.Response, err error) bool { return err != nil || r.Header.Get("X-State") == "bad" })
	x := func(status int, state string) reply {
		return reply{status: status, header: http.Header{"X-State": {state}}, body: state}
	}
	cases := []struct {
		name                string
		opt                 Option
		script              []reply
		wantCalls, wantCode int
	}{
		{"429,429,200", WithRetryIf(nil), []reply{x(429, "x"), x(429, "x"), x(200, "ok")}, 3, 200},
		{"WithRetryIf: 404,404,200", retry404, []reply{x(404, "x"), x(404, "x"), x(200, "ok")}, 3, 200},
		{"control: 404 not retried by default", WithRetryIf(nil), []reply{x(404, "ok"), x(200, "x")}, 1, 404},
		{"WithRetryIf: 200 judged bad, then ok", badState, []reply{x(200, "bad"), x(200, "ok")}, 2, 200},
	}
	for _, c := range cases {
		peerRun(t, c.name, func(t *testing.T) {
			next := newNext(c.script...)
			resp, err := newT(next, WithPolicy(immediate{}), c.opt).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			assert.Equal(t, c.wantCode, resp.StatusCode)
			assert.Equal(t, "ok", readBody(t, resp))
			assert.Equal(t, c.wantCalls, next.calls(), "attempts that reached next")
			for i, b := range next.respBodies()[:c.wantCalls-1] {
				assert.Equal(t, int32(1), b.closed.Load(), "Close calls on discarded body %d", i+1)
			}
		})
	}
}

// go-retryablehttp TestClient_Do_fails/default_retry_policy_url_with_basic_auth.
func TestPeerErrorHidesURLPassword(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close()) // a closed port: every dial is refused
	u := "http://user:pasten@" + ln.Addr().String() + "/"
	tr := newT(nil, WithPolicy(immediate{}))
	defer tr.CloseIdleConnections()
	_, err = (&http.Client{Transport: tr}).Do(peerReq(t, t.Context(), "GET", u, nil))
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.NotContains(t, err.Error(), "pasten", "the client's error")
	_, err = tr.RoundTrip(peerReq(t, t.Context(), "GET", u, nil))
	assert.Equal(t, defaultMaxAttempts, asError(t, err).Attempts, "Error.Attempts")
	assert.NotContains(t, err.Error(), "pasten", "the transport's error")
}

// go-retryablehttp TestClient_DefaultRetryPolicy_TLS.
func TestPeerCertificateErrorNotRetried(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	srv := newPeerServer(t, true, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(503)
		}
	})
	get := func(tr *Transport, path string) (*http.Response, error) {
		return tr.RoundTrip(peerReq(t, t.Context(), "GET", srv.URL+path, nil))
	}
	b := NewBreaker(BreakerConfig{})
	var attempts atomic.Int32
	untrusting := New(nil, WithBudget(nil), WithBreaker(b), WithHooks(&Hooks{AttemptStart: func(Event) { attempts.Add(1) }}))
	defer untrusting.CloseIdleConnections()
	for i := range 3 {
		resp, err := get(untrusting, "/")
		assert.Nil(t, resp)
		var cve *tls.CertificateVerificationError
		require.ErrorAs(t, err, &cve, "request %d", i+1)
		assert.Equal(t, ReasonNotRetryable, asError(t, err).Reason, "request %d", i+1)
		assert.Equal(t, int32(i+1), attempts.Load(), "attempts after request %d", i+1)
	}
	l := bkLane(b, srv.URL)
	fails, _, _ := bkPeriod(l)
	assert.Zero(t, fails, "certificate errors counted against the host")
	trusting := New(srv.Client().Transport, WithBudget(nil), WithBreaker(b), WithMaxAttempts(1))
	resp, err := get(trusting, "/")
	require.NoError(t, err, "a later request to the host")
	assert.Equal(t, 200, readStatus(t, resp))
	resp, err = get(trusting, "/fail") // control: a 503 through the same Breaker counts
	require.NoError(t, err)
	assert.Equal(t, 503, readStatus(t, resp))
	fails, _, _ = bkPeriod(l)
	assert.Equal(t, 1, fails, "failures counted after a 503")
}

// net/http TestTransportReadToEndReusesConn, TestTransportPersistConnLeakShortBody.
func TestPeerDrainedConnectionReused(t *testing.T) {
	srv := newPeerServer(t, false, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n <= 2 {
			w.WriteHeader(503)
		}
		io.WriteString(w, "a short body")
	})
	tr := newT(nil, WithPolicy(immediate{}))
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(peerReq(t, t.Context(), "GET", srv.URL+"/x", nil))
	require.NoError(t, err)
	assert.Equal(t, 200, readStatus(t, resp))
	assert.Len(t, srv.got("/x"), 3, "attempts that reached the server")
	assert.Equal(t, int32(1), srv.conns.Load(), "connections the server accepted")
}

// go-retryablehttp TestClient_DefaultBackoff (429, seconds and date),
// TestBackoff_RateLimitLinearJitterBackoff (a header below the policy's delay
// still sets the wait; a 502 with Retry-After, which we honour on purpose).
func TestPeerRetryAfterRows(t *testing.T) {
	secs := func(s string) func(time.Time) string { return func(time.Time) string { return s } }
	date := func(now time.Time) string { return now.Add(2 * time.Second).UTC().Format(http.TimeFormat) }
	cases := []struct {
		name       string
		status     int
		value      func(now time.Time) string
		base, want time.Duration // base: Exponential's, the policy's first delay
	}{
		{"429 seconds", 429, secs("2"), time.Second, 2 * time.Second},
		{"429 date", 429, date, time.Second, 2 * time.Second},
		{"503 below the policy's delay", 503, secs("1"), 10 * time.Second, time.Second},
		{"502 honoured", 502, secs("3"), time.Second, 3 * time.Second},
	}
	for _, c := range cases {
		peerRun(t, c.name, func(t *testing.T) {
			next := newNext(reply{status: c.status, header: http.Header{"Retry-After": {c.value(time.Now())}}}, reply{status: 200})
			resp, err := newT(next, WithPolicy(Exponential{Base: c.base}), WithRetryAfterSpread(0)).
				RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			assert.Equal(t, 200, readStatus(t, resp))
			reqs := next.requests()
			require.Len(t, reqs, 2, "attempts that reached next")
			assert.Equal(t, c.want, reqs[1].at.Sub(reqs[0].at), "wait before the retry")
		})
	}
}

// go-retryablehttp TestClient_RequestWithContext (the context cancelled
// before Do).
func TestPeerPreCancelledContext(t *testing.T) {
	send := func(t *testing.T, next http.RoundTripper, rawURL string) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		req, bodies := peerCountedReq(t, ctx, rawURL)
		resp, err := newT(next).RoundTrip(req)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, ReasonContextDone, asError(t, err).Reason, "Error.Reason")
		bodies.check(t, 0)
	}
	peerRun(t, "next honours the context", func(t *testing.T) {
		next := newNext(reply{hang: true}, reply{status: 200}) // hang: returns the context's error
		t0 := time.Now()
		send(t, next, testURL)
		assert.LessOrEqual(t, next.calls(), 1, "attempts that reached next")
		assert.Zero(t, time.Since(t0), "time RoundTrip took")
	})
	t.Run("through http.Transport to a real server", func(t *testing.T) {
		srv := newPeerServer(t, false, func(http.ResponseWriter, *http.Request, int) {})
		next := &http.Transport{}
		defer next.CloseIdleConnections()
		send(t, next, srv.URL+"/x")
		assert.Empty(t, srv.got("/x"), "requests that reached the server")
	})
}

// peerPolicy records each call of Delay and waits n ms before retry n.
type peerPolicy struct {
	mu    sync.Mutex
	ns    []int
	prevs []time.Duration
}

func (p *peerPolicy) Delay(n int, prev time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ns, p.prevs = append(p.ns, n), append(p.prevs, prev)
	return time.Duration(n) * time.Millisecond
}

// go-retryablehttp TestClient_BackoffCustom, TestBackoff (a custom backoff is
// called once per retry).
func TestPeerCustomPolicyCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newNext(reply{status: 503}, reply{status: 503}, reply{status: 503}, reply{status: 200, body: "done"})
		p := &peerPolicy{}
		resp, err := newT(next, WithPolicy(p)).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		assert.Equal(t, "done", readBody(t, resp))
		assert.Equal(t, []int{1, 2, 3}, p.ns, "n of each Delay call")
		assert.Equal(t, []time.Duration{0, time.Millisecond, 2 * time.Millisecond}, p.prevs, "prev of each Delay call")
		reqs := next.requests()
		require.Len(t, reqs, 4, "attempts that reached next")
		for i := 1; i < len(reqs); i++ {
			assert.Equal(t, time.Duration(i)*time.Millisecond, reqs[i].at.Sub(reqs[i-1].at), "wait before retry %d", i)
		}
	})
}

// net/http TestRedirectGetBody, TestPostRedirects (a 307 resends the body
// through GetBody); go-retryablehttp TestClient_RedirectWithBody,
// TestClient_DefaultRetryPolicy_redirects; failsafe-go
// TestClientRetryPolicyWithRedirects (a 3xx is never retried).
func TestPeerRedirectsUnderClient(t *testing.T) {
	srv := newPeerServer(t, false, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.URL.Path == "/a":
			http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
		case r.URL.Path == "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case n == 1:
			w.WriteHeader(503)
		}
	})
	tr := New(nil, WithPolicy(immediate{}))
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	resp, err := client.Do(peerReq(t, t.Context(), "PUT", srv.URL+"/a", strings.NewReader("payload")))
	require.NoError(t, err)
	assert.Equal(t, 200, readStatus(t, resp))
	assert.Equal(t, []string{"payload"}, srv.got("/a"), "bodies /a received")
	assert.Equal(t, []string{"payload", "payload"}, srv.got("/b"), "bodies /b received")
	_, err = client.Do(peerReq(t, t.Context(), "GET", srv.URL+"/loop", nil))
	assert.ErrorContains(t, err, "stopped after 10 redirects")
	assert.Len(t, srv.got("/loop"), 10, "requests /loop received: one per hop")
}
