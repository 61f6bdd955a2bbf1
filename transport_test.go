package retryhttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newT builds every transport these tests drive. It is the one place that
// turns off what they do not exercise: the retry budget and the circuit
// breaker that New turns on by default, so that a test of the attempt loop
// is cut short by neither. opts come after, so a test may turn them on.
func newT(next http.RoundTripper, opts ...Option) *Transport {
	return New(next, append([]Option{WithBudget(nil), WithBreaker(nil)}, opts...)...)
}

const testURL = "http://example.test/path?q=1"

// newReq returns a request for testURL; its error cannot happen.
func newReq(ctx context.Context, method string, body io.Reader) *http.Request {
	req, err := http.NewRequestWithContext(ctx, method, testURL, body)
	if err != nil {
		panic(err)
	}
	return req
}

// readBody reads and closes a response body.
func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "reading the response body")
	require.NoError(t, resp.Body.Close(), "closing the response body")
	return string(b)
}

// errReset is a connection reset as net/http reports it.
func errReset() error {
	return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// asError returns err as *Error, failing the test if it is not one.
func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e, "got %T %v, want *Error", err, err)
	return e
}

// Which methods and which outcomes are retried.
func TestTransportRetriesByMethodAndStatus(t *testing.T) {
	methods := []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete}
	errRefused := errors.New("connection refused (scripted)")
	outcomes := []struct {
		name      string
		status    int // 0: a transport error
		wantCalls int
	}{
		{"408", http.StatusRequestTimeout, defaultMaxAttempts},
		{"429", http.StatusTooManyRequests, defaultMaxAttempts},
		{"500", http.StatusInternalServerError, defaultMaxAttempts},
		{"502", http.StatusBadGateway, defaultMaxAttempts},
		{"503", http.StatusServiceUnavailable, defaultMaxAttempts},
		{"504", http.StatusGatewayTimeout, defaultMaxAttempts},
		{"transport error", 0, defaultMaxAttempts},
		{"400 not retried", http.StatusBadRequest, 1},
		{"404 not retried", http.StatusNotFound, 1},
		{"501 not retried", http.StatusNotImplemented, 1},
	}
	for _, method := range methods {
		for _, o := range outcomes {
			t.Run(method+"/"+o.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					script := make([]reply, defaultMaxAttempts)
					for i := range script {
						if o.status == 0 {
							script[i] = reply{err: fmt.Errorf("attempt %d: %w", i+1, errRefused)}
						} else {
							script[i] = reply{status: o.status, body: fmt.Sprintf("attempt %d", i+1)}
						}
					}
					next := newNext(script...)
					resp, err := newT(next).RoundTrip(newReq(t.Context(), method, nil))

					assert.Equal(t, o.wantCalls, next.calls(), "attempts that reached next")
					for i, r := range next.requests() {
						assert.Equal(t, method, r.method, "method of attempt %d", i+1)
					}
					last := fmt.Sprintf("attempt %d", o.wantCalls)
					if o.status == 0 {
						require.Error(t, err)
						assert.Nil(t, resp, "a response beside the error")
						assert.ErrorIs(t, err, errRefused)
						assert.ErrorContains(t, err, last, "the error is not the last attempt's")
						return
					}
					require.NoError(t, err)
					assert.Equal(t, o.status, resp.StatusCode)
					assert.Equal(t, last, readBody(t, resp), "the response is not the last attempt's")
				})
			})
		}
	}
}

// Transport errors that no retry can mend are returned at once.
func TestTransportErrorsNotRetried(t *testing.T) {
	cases := []struct {
		name string
		url  string
		err  error
	}{
		{"unknown certificate authority", testURL, &url.Error{Op: "Get", URL: testURL, Err: x509.UnknownAuthorityError{}}},
		{"certificate verification", testURL, &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "example.test"}}},
		{"malformed URL", "http:///no-host", errReset()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newNext(reply{err: c.err}, reply{status: 200})
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.url, nil)
				require.NoError(t, err)
				resp, err := newT(next).RoundTrip(req)
				assert.Nil(t, resp)
				assert.ErrorIs(t, err, c.err)
				assert.Equal(t, 1, next.calls(), "attempts that reached next")
				assert.Equal(t, ReasonNotRetryable, asError(t, err).Reason, "Error.Reason")
			})
		})
	}
}

// POST and PATCH are retried only with a non-empty Idempotency-Key,
// and every attempt carries the same key.
func TestTransportPostAndPatch(t *testing.T) {
	const payload = `{"event":"delivered"}`
	failures := []struct {
		name  string
		reply func() reply
	}{
		{"503", func() reply { return reply{status: http.StatusServiceUnavailable, body: "busy"} }},
		{"connection reset", func() reply { return reply{err: errReset()} }},
	}
	keys := []struct {
		name      string
		key       []string // Idempotency-Key values; nil: no header
		wantCalls int
	}{
		{"no key", nil, 1},
		{"empty key", []string{""}, 1},
		{"with key", []string{"delivery-42"}, defaultMaxAttempts},
	}
	for _, method := range []string{http.MethodPost, http.MethodPatch} {
		for _, f := range failures {
			for _, k := range keys {
				t.Run(method+"/"+f.name+"/"+k.name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						next := newNext(f.reply())
						req := newReq(t.Context(), method, strings.NewReader(payload))
						if k.key != nil {
							req.Header["Idempotency-Key"] = k.key
						}
						resp, err := newT(next).RoundTrip(req)

						require.Equal(t, k.wantCalls, next.calls(), "attempts that reached next")
						for i, r := range next.requests() {
							assert.Equal(t, k.key, r.header["Idempotency-Key"], "Idempotency-Key of attempt %d", i+1)
							assert.Equal(t, payload, string(r.body), "body of attempt %d", i+1)
						}
						if f.name == "503" {
							require.NoError(t, err)
							assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
							assert.Equal(t, "busy", readBody(t, resp))
							return
						}
						require.Error(t, err)
						assert.Nil(t, resp)
						assert.ErrorIs(t, err, syscall.ECONNRESET)
						e := asError(t, err)
						assert.Equal(t, k.wantCalls, e.Attempts, "Error.Attempts")
						if k.wantCalls == 1 {
							assert.Equal(t, ReasonNotReplayable, e.Reason, "Error.Reason")
						}
					})
				})
			}
		}
	}
}

// The last response comes back untouched; every discarded
// one is drained (at most attempt.DrainLimit bytes) and closed.
func TestTransportResponseBodies(t *testing.T) {
	t.Run("retries exhausted: last body unread, earlier ones closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(
				reply{status: 503, body: "fail 1"}, reply{status: 503, body: "fail 2"},
				reply{status: 503, body: "fail 3"}, reply{status: 503, body: "fail 4"},
			)
			resp, err := newT(next).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			bodies := next.respBodies()
			require.Len(t, bodies, 4)
			for i, b := range bodies[:3] {
				assert.Equal(t, int32(1), b.closed.Load(), "Close calls on discarded body %d", i+1)
				assert.Equal(t, int64(b.size), b.read.Load(), "bytes drained from discarded body %d", i+1)
			}
			last := bodies[3]
			assert.Zero(t, last.read.Load(), "bytes the transport read from the returned body")
			assert.Zero(t, last.closed.Load(), "Close calls on the returned body before the caller's")
			assert.Equal(t, "fail 4", readBody(t, resp))
			assert.Equal(t, int32(1), last.closed.Load(), "Close calls after the caller closed it")
		})
	})
	t.Run("failure then success: failed body drained and closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{status: 502, body: "bad gateway"}, reply{status: 200, body: "ok"})
			resp, err := newT(next).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			bodies := next.respBodies()
			require.Len(t, bodies, 2)
			assert.Equal(t, int64(len("bad gateway")), bodies[0].read.Load(), "bytes drained from the failed body")
			assert.Equal(t, int32(1), bodies[0].closed.Load(), "Close calls on the failed body")
			assert.Zero(t, bodies[1].read.Load(), "bytes the transport read from the success body")
			assert.Equal(t, "ok", readBody(t, resp))
		})
	})
	t.Run("large failed body drained only up to the limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{status: 503, body: strings.Repeat("x", 4*attempt.DrainLimit)}, reply{status: 200})
			resp, err := newT(next).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			b := next.respBodies()[0]
			assert.Equal(t, int64(attempt.DrainLimit), b.read.Load(), "bytes drained from a large failed body")
			assert.Equal(t, int32(1), b.closed.Load(), "Close calls on the large failed body")
		})
	})
	t.Run("not retryable: body unread", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{status: 404, body: "no such thing"})
			resp, err := newT(next).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			b := next.respBodies()[0]
			assert.Zero(t, b.read.Load(), "bytes the transport read from the returned body")
			assert.Zero(t, b.closed.Load(), "Close calls on the returned body")
			assert.Equal(t, "no such thing", readBody(t, resp))
		})
	})
}

// reqSnapshot is what a caller can see of its request.
type reqSnapshot struct {
	method, url, host string
	urlPtr            *url.URL
	header            http.Header
	headerMap         uintptr // identity of the header map
	contentLength     int64
	hasGetBody        bool
	ctx               context.Context
	body              io.ReadCloser
}

func snapshotOf(r *http.Request) reqSnapshot {
	return reqSnapshot{
		method: r.Method, url: r.URL.String(), host: r.Host, urlPtr: r.URL,
		header: r.Header.Clone(), headerMap: reflect.ValueOf(r.Header).Pointer(),
		contentLength: r.ContentLength, hasGetBody: r.GetBody != nil,
		ctx: r.Context(), body: r.Body,
	}
}

// The caller's request is never modified and its body is closed on
// every path, errors included.
func TestTransportCallerRequest(t *testing.T) {
	const payload = "caller's payload"
	cases := []struct {
		name      string
		method    string
		getBody   bool // the request has GetBody
		opts      []Option
		script    []reply
		cancelAt  time.Duration // > 0: the caller cancels its context then
		wantCalls int
		wantCode  int   // 0: an error is wanted
		wantErr   error // for errors.Is when wantCode is 0
	}{
		{name: "success", method: http.MethodPut, getBody: true,
			script: []reply{{status: 200}}, wantCalls: 1, wantCode: 200},
		{name: "retries exhausted with status", method: http.MethodPut, getBody: true,
			script: []reply{{status: 503}}, wantCalls: 4, wantCode: 503},
		{name: "retries exhausted with error", method: http.MethodPut, getBody: true,
			script: []reply{{err: errReset()}}, wantCalls: 4, wantErr: syscall.ECONNRESET},
		{name: "not idempotent", method: http.MethodPost, getBody: true,
			script: []reply{{status: 503}}, wantCalls: 1, wantCode: 503},
		{name: "cancelled during first-attempt jitter", method: http.MethodPut, getBody: true,
			// A 1 ms cancel against jitter drawn from [0, 1000 h): the draw
			// lands below 1 ms with probability 3e-10.
			opts:   []Option{WithFirstAttemptJitter(1000 * time.Hour)},
			script: []reply{{status: 200}}, cancelAt: time.Millisecond, wantCalls: 0, wantErr: context.Canceled},
		{name: "cancelled during backoff", method: http.MethodPut, getBody: true,
			opts:   []Option{WithPolicy(Exponential{Base: 10 * time.Second})},
			script: []reply{{status: 503}}, cancelAt: 3 * time.Second, wantCalls: 1, wantErr: context.Canceled},
		{name: "attempt timeouts", method: http.MethodPut, getBody: true,
			opts:   []Option{WithAttemptTimeout(time.Second)},
			script: []reply{{hang: true}}, wantCalls: 4, wantErr: context.DeadlineExceeded},
		{name: "buffered body, retries exhausted", method: http.MethodPut,
			opts:   []Option{WithBodyBuffer(1 << 10)},
			script: []reply{{status: 503}}, wantCalls: 4, wantCode: 503},
		{name: "buffered body, cancelled during first-attempt jitter", method: http.MethodPut,
			opts:   []Option{WithBodyBuffer(1 << 10), WithFirstAttemptJitter(1000 * time.Hour)},
			script: []reply{{status: 200}}, cancelAt: time.Millisecond, wantCalls: 0, wantErr: context.Canceled},
		{name: "body not replayable", method: http.MethodPut,
			script: []reply{{status: 503}}, wantCalls: 1, wantCode: 503},
		{name: "body larger than buffer", method: http.MethodPut,
			opts:   []Option{WithBodyBuffer(4)},
			script: []reply{{status: 503}}, wantCalls: 1, wantCode: 503},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if c.cancelAt > 0 {
					time.AfterFunc(c.cancelAt, cancel)
				}
				body := newTrackedBody(payload)
				req := newReq(ctx, c.method, nil)
				req.Header.Set("X-Trace", "abc")
				req.Body, req.ContentLength = body, int64(len(payload))
				var (
					mu      sync.Mutex
					fresh   []*trackedBody // bodies GetBody handed out
					getBody = func() (io.ReadCloser, error) {
						mu.Lock()
						defer mu.Unlock()
						b := newTrackedBody(payload)
						fresh = append(fresh, b)
						return b, nil
					}
				)
				if c.getBody {
					req.GetBody = getBody
				}
				before := snapshotOf(req)
				next := newNext(c.script...)
				t0 := time.Now()

				resp, err := newT(next, c.opts...).RoundTrip(req)

				if c.cancelAt > 0 {
					assert.Equal(t, c.cancelAt, time.Since(t0), "RoundTrip returned late after the cancel")
				}
				assert.Equal(t, c.wantCalls, next.calls(), "attempts that reached next")
				for i, r := range next.requests() {
					assert.Equal(t, payload, string(r.body), "body of attempt %d", i+1)
				}
				if c.wantCode != 0 {
					require.NoError(t, err)
					assert.Equal(t, c.wantCode, resp.StatusCode)
					readBody(t, resp)
				} else {
					require.Error(t, err)
					assert.Nil(t, resp, "a response beside the error")
					assert.ErrorIs(t, err, c.wantErr)
				}

				after := snapshotOf(req)
				assert.Equal(t, before, after, "the caller's request changed")
				assert.True(t, before.ctx == after.ctx, "the caller's request context was replaced")
				assert.True(t, before.body == after.body, "the caller's request body was replaced")
				assert.GreaterOrEqual(t, body.closed.Load(), int32(1), "the caller's body was not closed")
				mu.Lock()
				defer mu.Unlock()
				for i, b := range fresh {
					assert.GreaterOrEqual(t, b.closed.Load(), int32(1), "body %d from GetBody was not closed", i+1)
				}
			})
		})
	}
}

// Every attempt carries the original body, byte for byte; a body
// that cannot be replayed is sent once, whole.
func TestTransportReplaysBody(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	fail3 := []reply{{status: 503}, {status: 503}, {status: 503}, {status: 200}}
	cases := []struct {
		name      string
		req       func(ctx context.Context) *http.Request
		opts      []Option
		wantCalls int
		wantCode  int
		wantBody  []byte
	}{
		{
			name:      "GetBody from http.NewRequest",
			req:       func(ctx context.Context) *http.Request { return newReq(ctx, http.MethodPut, bytes.NewReader(payload)) },
			wantCalls: 4, wantCode: 200, wantBody: payload,
		},
		{
			name:      "WithBodyBuffer, body exactly the buffer size",
			req:       func(ctx context.Context) *http.Request { return noGetBody(ctx, payload) },
			opts:      []Option{WithBodyBuffer(int64(len(payload)))},
			wantCalls: 4, wantCode: 200, wantBody: payload,
		},
		{
			name:      "WithBodyBuffer, body one byte over the buffer size",
			req:       func(ctx context.Context) *http.Request { return noGetBody(ctx, payload) },
			opts:      []Option{WithBodyBuffer(int64(len(payload) - 1))},
			wantCalls: 1, wantCode: 503, wantBody: payload,
		},
		{
			name:      "no GetBody and no buffer",
			req:       func(ctx context.Context) *http.Request { return noGetBody(ctx, payload) },
			wantCalls: 1, wantCode: 503, wantBody: payload,
		},
		{
			name:      "http.NoBody",
			req:       func(ctx context.Context) *http.Request { return newReq(ctx, http.MethodPut, http.NoBody) },
			wantCalls: 4, wantCode: 200, wantBody: []byte{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newNext(fail3...)
				resp, err := newT(next, c.opts...).RoundTrip(c.req(t.Context()))
				require.NoError(t, err)
				assert.Equal(t, c.wantCode, resp.StatusCode)
				readBody(t, resp)
				reqs := next.requests()
				require.Len(t, reqs, c.wantCalls, "attempts that reached next")
				for i, r := range reqs {
					assert.True(t, bytes.Equal(c.wantBody, r.body), "body of attempt %d: got %d bytes, want %d identical bytes", i+1, len(r.body), len(c.wantBody))
				}
			})
		})
	}
}

// noGetBody returns a PUT whose body cannot be replayed by net/http.
func noGetBody(ctx context.Context, payload []byte) *http.Request {
	req := newReq(ctx, http.MethodPut, nil)
	req.Body = io.NopCloser(strings.NewReader(string(payload)))
	req.ContentLength = int64(len(payload))
	req.GetBody = nil
	return req
}

// Retry-After in each form delays the retry by at least its value,
// clamped, plus the spread; unusable values fall back to the policy.
func TestTransportRetryAfter(t *testing.T) {
	const (
		v      = 7 * time.Second
		spread = 500 * time.Millisecond
		// Exponential{Base: 1s} waits exactly 1 s before the first retry,
		// so the policy's delay is recognisable.
		policyDelay = time.Second
		rfc850      = "Monday, 02-Jan-06 15:04:05 GMT"
	)
	constant := func(s string) func(time.Time) string { return func(time.Time) string { return s } }
	cases := []struct {
		name       string
		value      func(now time.Time) string
		opts       []Option
		want       time.Duration
		fromHeader bool // the header counts, so the spread applies
	}{
		{"delta-seconds", constant("7"), nil, v, true},
		{"RFC 1123 date", func(now time.Time) string { return now.Add(v).UTC().Format(http.TimeFormat) }, nil, v, true},
		{"RFC 850 date", func(now time.Time) string { return now.Add(v).UTC().Format(rfc850) }, nil, v, true},
		{"ANSI C asctime date", func(now time.Time) string { return now.Add(v).UTC().Format(time.ANSIC) }, nil, v, true},
		{"garbage", constant("soon"), nil, policyDelay, false},
		{"negative", constant("-7"), nil, policyDelay, false},
		{"fraction", constant("7.5"), nil, policyDelay, false},
		{"past date", func(now time.Time) string { return now.Add(-v).UTC().Format(http.TimeFormat) }, nil, policyDelay, false},
		{"1000000000 clamped to the default MaxRetryAfter", constant("1000000000"), nil, defaultMaxRetryAfter, true},
		{"beyond a Duration clamped, not overflowed", constant("99999999999999999999999"), nil, defaultMaxRetryAfter, true},
		{"clamped by WithMaxRetryAfter", constant("7"), []Option{WithMaxRetryAfter(3 * time.Second)}, 3 * time.Second, true},
	}
	for _, c := range cases {
		t.Run(c.name+"/spread 0", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bubble starts on a whole second, so a date header
				// carries v exactly.
				h := http.Header{"Retry-After": {c.value(time.Now())}}
				next := newNext(reply{status: 503, header: h}, reply{status: 200})
				opts := append([]Option{WithPolicy(Exponential{Base: policyDelay}), WithRetryAfterSpread(0)}, c.opts...)
				resp, err := newT(next, opts...).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				readBody(t, resp)
				reqs := next.requests()
				require.Len(t, reqs, 2)
				assert.Equal(t, c.want, reqs[1].at.Sub(reqs[0].at), "wait before the retry for Retry-After: %s", h.Get("Retry-After"))
			})
		})
		t.Run(c.name+"/spread 500ms", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// More than crowdFree, so that the crowd is spread.
				const n = crowdFree + 50
				now := time.Now()
				next := &herdNext{t0: now, first: func() *http.Response {
					return &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {c.value(now)}}, Body: http.NoBody}
				}}
				opts := append([]Option{WithPolicy(Exponential{Base: policyDelay}), WithRetryAfterSpread(spread)}, c.opts...)
				tr := newT(next, opts...)
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
						if assert.NoError(t, err) {
							assert.Equal(t, 200, resp.StatusCode)
							_ = resp.Body.Close()
						}
					})
				}
				wg.Wait()
				waits := next.retries()
				require.Len(t, waits, n, "retries")
				distinct := map[time.Duration]bool{}
				for _, w := range waits {
					distinct[w] = true
					if c.fromHeader {
						assert.True(t, w >= c.want && w < c.want+spread, "wait %v, want in [%v, %v)", w, c.want, c.want+spread)
					} else {
						assert.Equal(t, c.want, w, "the spread applies to Retry-After only")
					}
				}
				if c.fromHeader {
					assert.Greater(t, len(distinct), 1, "every client waited the same %v", waits[0])
				}
			})
		})
	}
}

// 1,000 clients told "Retry-After: 5" at one instant come back
// spread over the default 1 s window, not at one instant.
func TestTransportRetryAfterHerd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		next := &herdNext{t0: time.Now(), first: func() *http.Response {
			return &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {"5"}}, Body: http.NoBody}
		}}
		tr := newT(next) // default spread: defaultRetryAfterSpread, 1 s
		sendConcurrently(t, tr, n, testURL)
		waits := next.retries()
		require.Len(t, waits, n, "retries")
		var buckets [10]int // 100 ms each over [5 s, 6 s)
		for _, w := range waits {
			if !assert.True(t, w >= 5*time.Second && w < 6*time.Second, "retry at %v, want in [5s, 6s)", w) {
				continue
			}
			buckets[(w-5*time.Second)/(100*time.Millisecond)]++
		}
		// A uniform spread puts ~10% (about 100, s.d. ~9.5) in each bucket;
		// 20% would be ten standard deviations out.
		for i, got := range buckets {
			assert.LessOrEqual(t, got, n/5, "retries in bucket [%v, %v): %v", 5*time.Second+time.Duration(i)*100*time.Millisecond,
				5*time.Second+time.Duration(i+1)*100*time.Millisecond, buckets)
		}
	})
}

// A wait ends at the instant the context ends; a deadline
// that leaves no room for the delay returns at once.
func TestTransportWaitAndContext(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   []Option
		header http.Header
	}{
		{"policy delay 30s", []Option{WithPolicy(Exponential{Base: 30 * time.Second})}, nil},
		{"Retry-After 30", []Option{WithRetryAfterSpread(0)}, http.Header{"Retry-After": {"30"}}},
	} {
		t.Run(c.name+"/cancelled after 7s", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				time.AfterFunc(7*time.Second, cancel)
				next := newNext(reply{status: 503, header: c.header}, reply{status: 200})
				t0 := time.Now()
				resp, err := newT(next, c.opts...).RoundTrip(newReq(ctx, http.MethodGet, nil))
				elapsed := time.Since(t0)

				assert.Nil(t, resp)
				assert.Equal(t, 7*time.Second, elapsed, "RoundTrip returned at a different instant than the cancel")
				assert.ErrorIs(t, err, context.Canceled)
				e := asError(t, err)
				assert.Equal(t, 1, e.Attempts, "Error.Attempts")
				assert.Equal(t, ReasonContextDone, e.Reason, "Error.Reason")
				assert.ErrorContains(t, err, "1 attempt")
				assert.Equal(t, 1, next.calls(), "attempts that reached next")
			})
		})
	}
	deadlineCases := []struct {
		name      string
		timeout   time.Duration
		opts      []Option
		header    http.Header
		wantCalls int
		wantWait  time.Duration
	}{
		{"policy delay beyond the deadline", 5 * time.Second,
			[]Option{WithPolicy(Exponential{Base: 10 * time.Second})}, nil, 1, 0},
		{"Retry-After beyond the deadline", 5 * time.Second,
			[]Option{WithRetryAfterSpread(0)}, http.Header{"Retry-After": {"10"}}, 1, 0},
		{"policy delay within the deadline", 20 * time.Second,
			[]Option{WithPolicy(Exponential{Base: 10 * time.Second})}, nil, 2, 10 * time.Second},
	}
	for _, c := range deadlineCases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), c.timeout)
				defer cancel()
				next := newNext(reply{status: 503, header: c.header, body: "first"}, reply{status: 503, body: "second"})
				t0 := time.Now()
				resp, err := newT(next, append(c.opts, WithMaxAttempts(2))...).RoundTrip(newReq(ctx, http.MethodGet, nil))
				elapsed := time.Since(t0)

				require.NoError(t, err)
				assert.Equal(t, c.wantWait, elapsed, "time RoundTrip took")
				assert.Equal(t, c.wantCalls, next.calls(), "attempts that reached next")
				last := next.respBodies()[c.wantCalls-1]
				assert.Zero(t, last.read.Load(), "bytes the transport read from the returned body")
				assert.Equal(t, []string{"first", "second"}[c.wantCalls-1], readBody(t, resp))
			})
		})
	}
	t.Run("http.Client.Timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{status: 503, body: "unavailable"}, reply{status: 200})
			client := &http.Client{
				Transport: newT(next, WithPolicy(Exponential{Base: 10 * time.Second})),
				Timeout:   2 * time.Second,
			}
			t0 := time.Now()
			resp, err := client.Do(newReq(t.Context(), http.MethodGet, nil))
			elapsed := time.Since(t0)

			require.NoError(t, err)
			assert.Zero(t, elapsed, "time client.Do took")
			assert.Equal(t, 503, resp.StatusCode)
			assert.Equal(t, 1, next.calls(), "attempts that reached next")
			_, hasDeadline := next.requests()[0].ctx.Deadline()
			assert.True(t, hasDeadline, "the client's timeout did not reach the transport as a deadline")
			assert.Equal(t, "unavailable", readBody(t, resp))
		})
	})
}

// slowBody is a response body whose first Read takes wait, as a slow
// server's body does; it records whether the attempt's context was still
// alive when the bytes came.
type slowBody struct {
	ctx    context.Context
	wait   time.Duration
	r      io.Reader
	slept  bool
	ctxErr error
}

func (b *slowBody) Read(p []byte) (int, error) {
	if !b.slept {
		time.Sleep(b.wait) // virtual: a slow server, not a wait for the test
		b.slept, b.ctxErr = true, b.ctx.Err()
	}
	return b.r.Read(p)
}

func (b *slowBody) Close() error { return nil }

// WithAttemptTimeout bounds each attempt's wait for headers, not the body.
func TestTransportAttemptTimeout(t *testing.T) {
	t.Run("hung attempt retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{hang: true}, reply{status: 200, body: "ok"})
			t0 := time.Now()
			resp, err := newT(next, WithAttemptTimeout(2*time.Second), WithPolicy(immediate{})).
				RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			assert.Equal(t, "ok", readBody(t, resp))
			reqs := next.requests()
			require.Len(t, reqs, 2, "attempts that reached next")
			assert.Equal(t, 2*time.Second, reqs[1].at.Sub(t0), "when the second attempt started")
			assert.Error(t, reqs[0].ctx.Err(), "the hung attempt's context is still alive")
		})
	})
	t.Run("all attempts hung", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{hang: true})
			t0 := time.Now()
			resp, err := newT(next, WithAttemptTimeout(2*time.Second), WithPolicy(immediate{})).
				RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			assert.Nil(t, resp)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, defaultMaxAttempts, asError(t, err).Attempts, "Error.Attempts")
			assert.Equal(t, defaultMaxAttempts, next.calls(), "attempts that reached next")
			assert.Equal(t, defaultMaxAttempts*2*time.Second, time.Since(t0), "time RoundTrip took")
			assert.NoError(t, t.Context().Err(), "the caller's context")
		})
	})
	t.Run("slow body read not cut off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var body *slowBody
			next := newNext(reply{status: 200, newBody: func(req *http.Request) io.ReadCloser {
				body = &slowBody{ctx: req.Context(), wait: 5 * time.Second, r: strings.NewReader("slow but whole")}
				return body
			}})
			resp, err := newT(next, WithAttemptTimeout(time.Second)).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err, "reading a slow body")
			assert.Equal(t, "slow but whole", string(got))
			assert.NoError(t, body.ctxErr, "the attempt's context when the slow body was read")
			actx := next.requests()[0].ctx
			assert.NoError(t, actx.Err(), "the attempt's context before Body.Close")
			require.NoError(t, resp.Body.Close())
			assert.ErrorIs(t, actx.Err(), context.Canceled, "the attempt's context after Body.Close")
		})
	})
}

// Errors after retries keep their cause and say how many attempts
// were made.
func TestTransportErrorKeepsCause(t *testing.T) {
	errSentinel := errors.New("scripted transport failure")
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		name  string
		err   error
		check func(t *testing.T, err error)
	}{
		{"sentinel", errSentinel, func(t *testing.T, err error) { assert.ErrorIs(t, err, errSentinel) }},
		{"*net.OpError", refused, func(t *testing.T, err error) {
			var op *net.OpError
			require.ErrorAs(t, err, &op)
			assert.Same(t, refused, op, "the *net.OpError reached through errors.As")
			assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newNext(reply{err: c.err})
				resp, err := newT(next).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				assert.Nil(t, resp)
				require.Error(t, err)
				c.check(t, err)
				e := asError(t, err)
				assert.Equal(t, 4, e.Attempts, "Error.Attempts")
				assert.Equal(t, ReasonAttemptsUsed, e.Reason, "Error.Reason")
				assert.Equal(t, "http://example.test", e.Key, "Error.Key")
				assert.Contains(t, err.Error(), "4 attempts", "error string")
				assert.Contains(t, err.Error(), c.err.Error(), "error string")
			})
		})
	}
}

// The first attempt is jittered, the retries are not.
func TestTransportFirstAttemptJitter(t *testing.T) {
	t.Run("first attempts spread over [0, max)", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const n, max = 200, time.Second
			next := newNext(reply{status: 200})
			tr := newT(next, WithFirstAttemptJitter(max))
			t0 := time.Now()
			sendConcurrently(t, tr, n, testURL)
			reqs := next.requests()
			require.Len(t, reqs, n, "attempts that reached next")
			var buckets [10]int // 100 ms each
			for _, r := range reqs {
				d := r.at.Sub(t0)
				if assert.True(t, d >= 0 && d < max, "first attempt at %v, want in [0, %v)", d, max) {
					buckets[d/(max/10)]++
				}
			}
			// ~20 per bucket; an empty one has probability 0.9^200 ≈ 7e-10.
			for i, got := range buckets {
				assert.NotZero(t, got, "first attempts in bucket %d of 10: %v", i, buckets)
			}
		})
	})
	t.Run("retry not jittered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{status: 503}, reply{status: 200})
			t0 := time.Now()
			resp, err := newT(next, WithFirstAttemptJitter(time.Second), WithPolicy(Exponential{Base: time.Second})).
				RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			reqs := next.requests()
			require.Len(t, reqs, 2)
			assert.Less(t, reqs[0].at.Sub(t0), time.Second, "first attempt")
			assert.Equal(t, time.Second, reqs[1].at.Sub(reqs[0].at), "wait before the retry")
		})
	})
}

// The options that change who and what is retried, and how often.
func TestTransportOptions(t *testing.T) {
	cases := []struct {
		name      string
		method    string
		opts      []Option
		status    int
		wantCalls int
	}{
		{"WithIdempotentIf allows POST", http.MethodPost,
			[]Option{WithIdempotentIf(func(*http.Request) bool { return true })}, 503, 4},
		{"WithIdempotentIf forbids GET", http.MethodGet,
			[]Option{WithIdempotentIf(func(*http.Request) bool { return false })}, 503, 1},
		{"WithRetryIf retries 404", http.MethodGet,
			[]Option{WithRetryIf(func(r *http.Response, err error) bool { return err != nil || r.StatusCode == 404 })}, 404, 4},
		{"WithRetryIf refuses 503", http.MethodGet,
			[]Option{WithRetryIf(func(*http.Response, error) bool { return false })}, 503, 1},
		{"WithMaxAttempts(1) sends once", http.MethodGet, []Option{WithMaxAttempts(1)}, 503, 1},
		{"WithMaxAttempts(2)", http.MethodGet, []Option{WithMaxAttempts(2)}, 503, 2},
		{"WithMaxAttempts(6)", http.MethodGet, []Option{WithMaxAttempts(6)}, 503, 6},
		{"WithMaxAttempts(-1)", http.MethodGet, []Option{WithMaxAttempts(-1)}, 503, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newNext(reply{status: c.status, body: "answer"})
				resp, err := newT(next, c.opts...).RoundTrip(newReq(t.Context(), c.method, nil))
				require.NoError(t, err)
				assert.Equal(t, c.status, resp.StatusCode)
				assert.Equal(t, "answer", readBody(t, resp))
				assert.Equal(t, c.wantCalls, next.calls(), "attempts that reached next")
			})
		})
	}
}

// A next that breaks the RoundTripper contract does not make this
// transport break it.
func TestTransportNextBreaksContract(t *testing.T) {
	t.Run("response and error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			errBoth := errors.New("scripted error beside a response")
			next := newNext(reply{status: 200, body: "ignored", err: errBoth})
			resp, err := newT(next).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			assert.Nil(t, resp, "a response beside the error")
			assert.ErrorIs(t, err, errBoth)
			bodies := next.respBodies()
			require.NotEmpty(t, bodies)
			for i, b := range bodies {
				assert.Equal(t, int32(1), b.closed.Load(), "Close calls on the body of attempt %d", i+1)
			}
		})
	})
	t.Run("nil response and nil error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{})
			resp, err := newT(next).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			assert.Nil(t, resp)
			assert.Error(t, err, "nil, nil from next must become an error")
		})
	})
}

// The caller's own context ending is never retried, even when the
// error it causes looks retryable.
func TestTransportCallerContextEnds(t *testing.T) {
	cases := []struct {
		name     string
		timeout  time.Duration // > 0: the context has this deadline
		cancelAt time.Duration // > 0: the caller cancels then
		reply    func(cancel context.CancelFunc) reply
		wantCode int   // 0: an error is wanted
		wantErr  error // for errors.Is
		wantWait time.Duration
	}{
		{name: "cancelled during a hung attempt", cancelAt: time.Second,
			reply:   func(context.CancelFunc) reply { return reply{hang: true} },
			wantErr: context.Canceled, wantWait: time.Second},
		{name: "deadline passes during a hung attempt", timeout: time.Second,
			reply:   func(context.CancelFunc) reply { return reply{hang: true} },
			wantErr: context.DeadlineExceeded, wantWait: time.Second},
		{name: "connection reset as the context ends",
			reply: func(cancel context.CancelFunc) reply {
				return reply{err: errReset(), before: func(*http.Request) { cancel() }}
			},
			wantErr: syscall.ECONNRESET},
		{name: "503 as the context ends",
			reply: func(cancel context.CancelFunc) reply {
				return reply{status: 503, before: func(*http.Request) { cancel() }}
			},
			wantCode: 503},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if c.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
					defer cancel()
				}
				if c.cancelAt > 0 {
					time.AfterFunc(c.cancelAt, cancel)
				}
				next := newNext(c.reply(cancel), reply{status: 200})
				t0 := time.Now()
				resp, err := newT(next, WithPolicy(immediate{})).RoundTrip(newReq(ctx, http.MethodGet, nil))

				assert.Equal(t, 1, next.calls(), "attempts that reached next")
				assert.Equal(t, c.wantWait, time.Since(t0), "time RoundTrip took")
				if c.wantCode != 0 {
					require.NoError(t, err)
					assert.Equal(t, c.wantCode, resp.StatusCode)
					readBody(t, resp)
					return
				}
				assert.Nil(t, resp)
				assert.ErrorIs(t, err, c.wantErr)
				assert.Equal(t, ReasonContextDone, asError(t, err).Reason, "Error.Reason")
			})
		})
	}
}

// TestTransportBodyBufferUnbounded: WithBodyBuffer(math.MaxInt64), "buffer
// whatever comes", buffers and replays the whole body (the limit must not
// overflow into an empty read).
func TestTransportBodyBufferUnbounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newNext(reply{status: http.StatusServiceUnavailable}, reply{status: http.StatusOK})
		tr := newT(next, WithBodyBuffer(math.MaxInt64), WithPolicy(immediate{}))
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://example.test/x", nil)
		require.NoError(t, err)
		req.Body = io.NopCloser(strings.NewReader("payload"))
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		reqs := next.requests()
		require.Len(t, reqs, 2, "attempts")
		for i, r := range reqs {
			require.Equal(t, "payload", string(r.body), "attempt %d's body", i+1)
		}
	})
}

// TestTransportZeroValue: a Transport not made by New sends nothing, closes
// the request body and says what is wrong, rather than panicking.
func TestTransportZeroValue(t *testing.T) {
	body := newTrackedBody("payload")
	req, err := http.NewRequest(http.MethodPut, "http://example.test/", body)
	require.NoError(t, err)
	resp, err := (&Transport{}).RoundTrip(req)
	require.Nil(t, resp)
	require.ErrorContains(t, err, "retryhttp.New")
	require.Equal(t, int32(1), body.closed.Load(), "the request body is closed")
}

// WithIdempotentIf is a rule of safety: a PUT it rejects is not sent
// again once it reached the server, but one whose connection was refused
// never did, and is retried; WithMaxAttempts(1) in its context is how a
// caller keeps a request from being retried at all.
func TestIdempotentIfDecidesOnlyWhatReached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		getOnly := WithIdempotentIf(func(r *http.Request) bool { return r.Method == http.MethodGet })
		refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

		next := newNext(reply{status: 503})
		resp, err := newT(next, getOnly).RoundTrip(newReq(t.Context(), http.MethodPut, strings.NewReader("x")))
		require.NoError(t, err)
		readBody(t, resp)
		assert.Equal(t, 1, next.calls(), "a PUT that reached the server is not sent again")

		next = newNext(reply{err: refused}, reply{status: 200})
		resp, err = newT(next, getOnly).RoundTrip(newReq(t.Context(), http.MethodPut, strings.NewReader("x")))
		require.NoError(t, err)
		readBody(t, resp)
		assert.Equal(t, 2, next.calls(), "a refused dial never reached it: retried")

		next = newNext(reply{err: refused})
		ctx := ContextWithOptions(t.Context(), WithMaxAttempts(1))
		_, err = newT(next, getOnly).RoundTrip(newReq(ctx, http.MethodPut, strings.NewReader("x")))
		require.Error(t, err)
		assert.Equal(t, 1, next.calls(), "one attempt: not retried at all")
	})
}
