package retryhttp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// How far an attempt got, read from the errors net/http returns.
func TestClassifyReach(t *testing.T) {
	get := newReq(context.Background(), http.MethodGet, nil)
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	cases := []struct {
		name string
		err  error
		want reach
	}{
		{"dial refused", dial, notReached},
		{"dial refused, wrapped by http.Client", &url.Error{Op: "Get", URL: testURL, Err: dial}, notReached},
		{"name not found", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "example.test", IsNotFound: true}}, notThere},
		{"connection refused, as net reports it", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, notThere},
		{"bare DNS error", &net.DNSError{Err: "server misbehaving", Name: "example.test"}, notReached},
		{"proxy refused", &net.OpError{Op: "proxyconnect", Net: "tcp", Err: errors.New("connection refused")}, notReached},
		{"TLS alert", tls.AlertError(40), notReached},
		{"not TLS", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, notReached},
		{"TLS handshake timeout", errors.New("net/http: TLS handshake timeout"), notReached},
		{"reset after connecting", errReset(), reached},
		{"EOF", io.EOF, reached},
		{"unexpected EOF", io.ErrUnexpectedEOF, reached},
		{"attempt timed out", attemptTimedOut(), reached},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := classify(get, nil, c.err, DefaultRetryIf)
			assert.Equal(t, c.want, v.reach, "reach")
			assert.True(t, v.retry, "retryable")
			assert.Equal(t, outcomeFailure, v.host, "what the host is told")
		})
	}
}

// attemptTimedOut returns the error of an attempt that its attempt timeout
// ended before its response headers arrived.
func attemptTimedOut() error {
	req := newReq(context.Background(), http.MethodGet, nil)
	hang := peerRT(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	})
	_, err := attempt.Send(hang, req, time.Millisecond, req.Context())
	return err
}

// Errors the request itself causes are the caller's: one attempt, nothing
// told to the host's circuit, no budget token spent. Two such calls 2.5 s
// apart would otherwise trip the circuit of a host that answers every
// other caller.
func TestClassifyCallerMistakes(t *testing.T) {
	cases := []struct {
		name string
		req  func(ctx context.Context) *http.Request
	}{
		{"header value with a newline", func(ctx context.Context) *http.Request {
			req := newReq(ctx, http.MethodGet, nil)
			req.Header.Set("Authorization", "Bearer token-from-a-file\n")
			return req
		}},
		{"header name with a space", func(ctx context.Context) *http.Request {
			req := newReq(ctx, http.MethodGet, nil)
			req.Header["X Bad"] = []string{"v"}
			return req
		}},
		{"unsupported scheme", func(ctx context.Context) *http.Request {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "rstp://example.test/path", nil)
			if err != nil {
				panic(err)
			}
			return req
		}},
		{"invalid method", func(ctx context.Context) *http.Request {
			req := newReq(ctx, http.MethodGet, nil)
			req.Method = "BAD METHOD"
			return req
		}},
		{"control character in the query", func(ctx context.Context) *http.Request {
			req := newReq(ctx, http.MethodGet, nil)
			req.URL.RawQuery = "q=\x01"
			return req
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				breaker := NewBreaker(BreakerConfig{})
				budget := NewBudget(BudgetConfig{Ratio: 1, MinPerSecond: -1, MaxTokens: 100})
				// A real http.Transport: these errors are its own, and it
				// returns them before dialing.
				bad := New(&http.Transport{}, WithBreaker(breaker), WithBudget(budget))
				for i := range 2 {
					if i > 0 {
						time.Sleep(2500 * time.Millisecond)
					}
					resp, err := bad.RoundTrip(c.req(t.Context()))
					require.Error(t, err)
					assert.Nil(t, resp)
					e := asError(t, err)
					assert.Equal(t, 1, e.Attempts, "attempts of call %d", i+1)
					assert.Equal(t, ReasonNotRetryable, e.Reason, "reason of call %d", i+1)
				}
				assert.Equal(t, uint64(2), bad.Stats().Attempts, "attempts in all")
				assert.Equal(t, 2.0, budget.tokens(keyOf(mustParse(t, testURL)), time.Now()), "tokens: two deposits, no withdrawal")

				next := newNext(reply{status: http.StatusOK})
				good := New(next, WithBreaker(breaker), WithBudget(budget))
				resp, err := good.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				require.NoError(t, err, "the host's circuit must still admit requests")
				readBody(t, resp)
				assert.Equal(t, 1, next.calls())
			})
		})
	}
}

// A body that does not match its declared length is the caller's mistake
// too, though net/http finds it while writing.
func TestClassifyContentLengthMismatch(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	tr := New(nil, WithBreaker(nil))
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, strings.NewReader("short"))
	require.NoError(t, err)
	req.ContentLength = 100
	_, err = tr.RoundTrip(req)
	require.Error(t, err)
	e := asError(t, err)
	assert.Equal(t, 1, e.Attempts)
	assert.Equal(t, ReasonNotRetryable, e.Reason)
}

// A POST without an Idempotency-Key that provably never reached the server
// is retried: the first dial is refused, the server starts listening, and
// receives the POST exactly once. One that may have reached it (reset after
// the request was written) is sent once.
func TestClassifyPostNeverReached(t *testing.T) {
	t.Run("dial refused, then a listening server", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close()) // the port is closed now

		var received atomic.Int64
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			received.Add(1)
			fmt.Fprintf(w, "got %s", b)
		})}
		defer srv.Close()
		var refused error
		hooks := &Hooks{AttemptDone: func(i Event) {
			if i.Attempt != 1 {
				return
			}
			// Only after the first attempt failed does the port listen.
			refused = i.Err
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				panic(err)
			}
			go func() { _ = srv.Serve(ln) }()
		}}
		tr := New(nil, WithBreaker(nil), WithPolicy(immediate{}), WithHooks(hooks))
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/hook", strings.NewReader("event"))
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, "got event", readBody(t, resp))
		require.Error(t, refused, "the first attempt must have failed")
		assert.True(t, attempt.NeverReached(refused), "first attempt's error %v", refused)
		assert.Equal(t, int64(1), received.Load(), "POSTs received")
		assert.Equal(t, uint64(2), tr.Stats().Attempts)
	})
	t.Run("reset after the request was written", func(t *testing.T) {
		var received atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			received.Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(err)
			}
			conn.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
			conn.Close()
		}))
		defer srv.Close()
		tr := New(nil, WithBreaker(nil), WithPolicy(immediate{}))
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("event"))
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.Error(t, err)
		e := asError(t, err)
		assert.Equal(t, ReasonNotReplayable, e.Reason)
		assert.Equal(t, 1, e.Attempts)
		assert.Equal(t, int64(1), received.Load(), "POSTs received")
	})
}

// The server's own advice: X-Should-Retry and Stripe-Should-Retry decide a
// response of 400 or above; idempotency still applies; WithRetryIf
// overrides; Retry-After-Ms wins over Retry-After.
func TestClassifyServerAdvice(t *testing.T) {
	cases := []struct {
		name      string
		method    string
		status    int
		header    http.Header
		opts      []Option
		wantCalls int
	}{
		{"503, X-Should-Retry: false", http.MethodGet, 503, http.Header{"X-Should-Retry": {"false"}}, nil, 1},
		{"503, X-Should-Retry: true", http.MethodGet, 503, http.Header{"X-Should-Retry": {"true"}}, nil, defaultMaxAttempts},
		{"400, X-Should-Retry: true", http.MethodGet, 400, http.Header{"X-Should-Retry": {"true"}}, nil, defaultMaxAttempts},
		{"409, X-Should-Retry: false", http.MethodGet, 409, http.Header{"X-Should-Retry": {"false"}}, nil, 1},
		{"503, Stripe-Should-Retry: false", http.MethodGet, 503, http.Header{"Stripe-Should-Retry": {"false"}}, nil, 1},
		{"409, Stripe-Should-Retry: true", http.MethodGet, 409, http.Header{"Stripe-Should-Retry": {"true"}}, nil, defaultMaxAttempts},
		{"409, no advice", http.MethodGet, 409, nil, nil, 1},
		{"503, advice not a boolean", http.MethodGet, 503, http.Header{"X-Should-Retry": {"maybe"}}, nil, defaultMaxAttempts},
		{"200, X-Should-Retry: true", http.MethodGet, 200, http.Header{"X-Should-Retry": {"true"}}, nil, 1},
		{"POST without a key, X-Should-Retry: true", http.MethodPost, 503, http.Header{"X-Should-Retry": {"true"}}, nil, 1},
		{"WithRetryIf overrides", http.MethodGet, 503, http.Header{"X-Should-Retry": {"false"}},
			[]Option{WithRetryIf(func(r *http.Response, err error) bool { return err != nil || r.StatusCode == 503 })}, defaultMaxAttempts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newNext(reply{status: c.status, header: c.header, body: "answer"})
				resp, err := newT(next, c.opts...).RoundTrip(newReq(t.Context(), c.method, strings.NewReader("x")))
				require.NoError(t, err)
				assert.Equal(t, "answer", readBody(t, resp), "the last response, unread")
				assert.Equal(t, c.wantCalls, next.calls())
			})
		})
	}
}

// Retry-After-Ms is the more precise and wins over Retry-After; an unusable
// one leaves Retry-After to decide. Both take the clamp and the spread.
func TestClassifyRetryAfterMs(t *testing.T) {
	cases := []struct {
		name   string
		header http.Header
		opts   []Option
		want   time.Duration
	}{
		{"alone", http.Header{"Retry-After-Ms": {"300"}}, nil, 300 * time.Millisecond},
		{"with a fraction", http.Header{"Retry-After-Ms": {"2.5"}}, nil, 2500 * time.Microsecond},
		{"beside Retry-After", http.Header{"Retry-After-Ms": {"300"}, "Retry-After": {"5"}}, nil, 300 * time.Millisecond},
		{"unusable, Retry-After decides", http.Header{"Retry-After-Ms": {"-1"}, "Retry-After": {"5"}}, nil, 5 * time.Second},
		{"clamped", http.Header{"Retry-After-Ms": {"99999999"}}, []Option{WithMaxRetryAfter(2 * time.Second)}, 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newNext(reply{status: 429, header: c.header}, reply{status: 200})
				var info Event
				opts := append([]Option{WithRetryAfterSpread(0), WithPolicy(Exponential{Base: time.Hour}),
					WithHooks(&Hooks{RetryScheduled: func(i Event) { info = i }})}, c.opts...)
				tr := newT(next, opts...)
				start := time.Now()
				resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				require.NoError(t, err)
				readBody(t, resp)
				reqs := next.requests()
				require.Len(t, reqs, 2)
				assert.Equal(t, c.want, reqs[1].at.Sub(start), "retry sent after")
				assert.True(t, info.RetryAfter, "the header set the delay")
				assert.Equal(t, uint64(1), tr.Stats().RetryAfterSeen)
			})
		})
	}
}

// resp.Request is the caller's own request, as net/http's Transport sets
// it, whatever the transport sent in its place.
func TestClassifyResponseRequestIsCallers(t *testing.T) {
	cases := []struct {
		name   string
		script []reply
		opts   []Option
		body   func() io.Reader
	}{
		{"after a retry", []reply{{status: 503}, {status: 200}}, nil, func() io.Reader { return strings.NewReader("b") }},
		{"retries used up", []reply{{status: 503}}, nil, nil},
		{"buffered body", []reply{{status: 503}, {status: 200}}, []Option{WithBodyBuffer(10)}, func() io.Reader { return io.MultiReader(strings.NewReader("b")) }},
		{"attempt timeout", []reply{{status: 200}}, []Option{WithAttemptTimeout(time.Second)}, nil},
		{"attempt timeout, after a retry", []reply{{status: 503}, {status: 200}}, []Option{WithAttemptTimeout(time.Second)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var body io.Reader
				if c.body != nil {
					body = c.body()
				}
				req := newReq(t.Context(), http.MethodPut, body)
				resp, err := newT(newNext(c.script...), c.opts...).RoundTrip(req)
				require.NoError(t, err)
				readBody(t, resp)
				assert.Same(t, req, resp.Request)
			})
		})
	}
}

// Error answers net.Error's questions as url.Error does.
func TestClassifyErrorTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newNext(reply{hang: true})
		_, err := newT(next, WithAttemptTimeout(time.Second), WithMaxAttempts(1)).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		e := asError(t, err)
		assert.True(t, e.Timeout())
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.Contains(t, err.Error(), "attempt timed out after 1s")
	})
}
