package retryhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Set the Transport of an http.Client: requests that fail in a way that is
// safe to retry are retried, with backoff, behind the client's back.
func Example() {
	// A server that fails once with 503, then answers.
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil)}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Status, strings.TrimSpace(string(body)))
	fmt.Println("requests the server saw:", requests.Load())
	// Output:
	// 200 OK hello
	// requests the server saw: 2
}

// slogHooks returns hooks that log every attempt, retry and give-up
// through logger; slogCircuits logs a breaker's changes of circuit.
//
// A request's headers (Authorization, Cookie), its URL's query (tokens,
// signatures) and its body carry secrets, so these hooks log none of them:
// only the method, the URL as scheme://host/path, attempt and retry numbers,
// status codes, whether a Retry-After set the delay, and why the transport
// gave up. They do not log an error's text either, which can quote the
// whole URL; they log that there was one. A real program would also log
// Event.Delay and Event.Duration; they are left out here only
// because they differ from run to run.
func slogHooks(logger *slog.Logger) *retryhttp.Hooks {
	req := func(r *http.Request) []any {
		return []any{"method", r.Method, "url", safeURL(r.URL)}
	}
	return &retryhttp.Hooks{
		AttemptStart: func(i retryhttp.Event) {
			logger.Info("attempt", append(req(i.Request), "attempt", i.Attempt)...)
		},
		AttemptDone: func(i retryhttp.Event) {
			if i.Err != nil {
				logger.Info("attempt failed", append(req(i.Request), "attempt", i.Attempt, "error", true)...)
				return
			}
			logger.Info("response", append(req(i.Request), "attempt", i.Attempt, "status", i.Status)...)
		},
		RetryScheduled: func(i retryhttp.Event) {
			logger.Info("retry", append(req(i.Request), "retry", i.Attempt, "retry_after", i.RetryAfter)...)
		},
		GiveUp: func(i retryhttp.Event) {
			logger.Warn("give up", append(req(i.Request),
				"attempts", i.Attempt, "reason", i.Reason.String(), "status", i.Status, "error", i.Err != nil)...)
		},
	}
}

// slogCircuits returns a BreakerConfig.OnStateChange that logs each change
// of a circuit through logger.
func slogCircuits(logger *slog.Logger) func(retryhttp.Event) {
	return func(i retryhttp.Event) {
		logger.Warn("circuit", "host", i.Key, "from", i.From.String(), "to", i.To.String())
	}
}

// safeURL returns u without its query, fragment or user information.
func safeURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.Path
}

// Log attempts, retries and give-ups with log/slog, without leaking the
// secrets that requests carry (see slogHooks).
func ExampleWithHooks_slog() {
	// A server that asks every request to come back at once.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	// Dial the test server whatever the URL's host, so the log below names
	// the same host on every run.
	next := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Listener.Addr().String())
	}}

	// A text log on standard output, without the time so that it can be
	// compared.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))

	client := &http.Client{Transport: retryhttp.New(next,
		retryhttp.WithHooks(slogHooks(logger)),
		retryhttp.WithMaxAttempts(2),
		retryhttp.WithMaxWait(0),          // give up when the attempts are used
		retryhttp.WithRetryAfterSpread(0), // Retry-After: 0 means now
	)}
	defer client.CloseIdleConnections()

	req, err := http.NewRequest(http.MethodGet, "http://api.example.test/orders?token=secret", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("status:", resp.StatusCode)
	// Output:
	// level=INFO msg=attempt method=GET url=http://api.example.test/orders attempt=1
	// level=INFO msg=response method=GET url=http://api.example.test/orders attempt=1 status=503
	// level=INFO msg=retry method=GET url=http://api.example.test/orders retry=1 retry_after=true
	// level=INFO msg=attempt method=GET url=http://api.example.test/orders attempt=2
	// level=INFO msg=response method=GET url=http://api.example.test/orders attempt=2 status=503
	// level=WARN msg="give up" method=GET url=http://api.example.test/orders attempts=2 reason="attempts used" status=503 error=false
	// status: 503
}

// slogErrNext is a next RoundTripper that fails every attempt with an error
// quoting the whole URL, as a *url.Error does.
type slogErrNext struct{}

func (slogErrNext) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return nil, &url.Error{Op: req.Method, URL: req.URL.String(), Err: errors.New("connection reset")}
}

// TestSlogExampleRedacts sends requests carrying a secret in every place a
// request can carry one — the query, the user information, the
// Authorization and Cookie headers, the body — through slogHooks into a
// buffer, down every kind of event, and checks that the secret never
// reaches the log while the events do.
func TestSlogExampleRedacts(t *testing.T) {
	const secret = "secret"
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	hooks := slogHooks(logger)
	newReq := func(t *testing.T, method, rawURL string, body io.Reader) *http.Request {
		req, err := http.NewRequest(method, rawURL, body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Cookie", "session="+secret)
		req.Header.Set("Idempotency-Key", secret)
		return req
	}
	assertRedacted := func(t *testing.T, want ...string) {
		t.Helper()
		out := buf.String()
		buf.Reset()
		t.Logf("log:\n%s", out)
		assert.NotContains(t, out, secret, "the log leaks a secret")
		for _, w := range want {
			assert.Contains(t, out, w)
		}
	}

	t.Run("server", func(t *testing.T) {
		// 503 with Retry-After: 0, then 200.
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if n.Add(1)%2 == 1 {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}))
		defer srv.Close()
		tr := retryhttp.New(nil, retryhttp.WithHooks(hooks), retryhttp.WithRetryAfterSpread(0))
		defer tr.CloseIdleConnections()

		u := strings.Replace(srv.URL, "http://", "http://user:"+secret+"@", 1) + "/orders?token=" + secret + "#" + secret
		resp, err := tr.RoundTrip(newReq(t, http.MethodPut, u, strings.NewReader(`{"password":"`+secret+`"}`)))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assertRedacted(t, "msg=attempt", "msg=response", "status=503", "msg=retry", "retry_after=true", "attempt=2", "status=200",
			"url="+srv.URL+"/orders ")
	})

	t.Run("error_and_circuit", func(t *testing.T) {
		// Every attempt fails with an error that quotes the URL. In virtual
		// time: the retry 1 s after the first failure fails again, failure
		// has lasted the breaker's span and the circuit opens, ending the
		// wait for the next retry; the second request is refused.
		synctest.Test(t, func(t *testing.T) {
			br := retryhttp.NewBreaker(retryhttp.BreakerConfig{Span: time.Second, MinFailures: 1, OnStateChange: slogCircuits(logger)})
			tr := retryhttp.New(slogErrNext{}, retryhttp.WithHooks(hooks), retryhttp.WithBreaker(br),
				retryhttp.WithPolicy(retryhttp.Exponential{Base: time.Second}), retryhttp.WithMaxWait(0))
			// The errors the hooks are given quote the URL, secret included:
			// slogHooks must not log them.
			var seen []string
			ctx := retryhttp.ContextWithOptions(t.Context(), retryhttp.WithHooks(&retryhttp.Hooks{
				AttemptDone: func(i retryhttp.Event) { seen = append(seen, i.Err.Error()) },
			}))
			for range 2 {
				req := newReq(t, http.MethodPost, "http://api.example.test/hook?sig="+secret, strings.NewReader(secret))
				resp, err := tr.RoundTrip(req.WithContext(ctx))
				require.ErrorIs(t, err, retryhttp.ErrCircuitOpen)
				require.Nil(t, resp)
			}
			require.Len(t, seen, 2, "attempts sent")
			for _, e := range seen {
				assert.Contains(t, e, secret)
			}
		})
		assertRedacted(t, `msg="attempt failed"`, "error=true", `msg=circuit host=http://api.example.test from=closed to=open`,
			`reason="circuit open"`, "url=http://api.example.test/hook ")
	})
}
