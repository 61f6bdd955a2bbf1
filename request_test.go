package retryhttp

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Options carried by a request's context apply to that request only, after
// the transport's own.
func TestRequestOptions(t *testing.T) {
	always := func(*http.Request) bool { return true }
	never := func(*http.Request) bool { return false }
	cases := []struct {
		name      string
		method    string
		key       string // Idempotency-Key; "" for none
		opts      []RequestOption
		wantCalls int
	}{
		{"no options: the transport's 4", http.MethodGet, "", nil, defaultMaxAttempts},
		{"one attempt for this call", http.MethodGet, "", []RequestOption{WithMaxAttempts(1)}, 1},
		{"two attempts for this call", http.MethodGet, "", []RequestOption{WithMaxAttempts(2)}, 2},
		{"a POST without a key marked idempotent", http.MethodPost, "", []RequestOption{WithIdempotentIf(always)}, defaultMaxAttempts},
		{"a GET marked not idempotent", http.MethodGet, "", []RequestOption{WithIdempotentIf(never)}, 1},
		{"a POST with a key marked not idempotent", http.MethodPost, "k", []RequestOption{WithIdempotentIf(never)}, 1},
		{"the later option wins", http.MethodGet, "", []RequestOption{WithMaxAttempts(1), WithMaxAttempts(3)}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newNext(reply{status: 503, body: "busy"})
				tr := newT(next)
				ctx := t.Context()
				if c.opts != nil {
					ctx = ContextWithOptions(ctx, c.opts...)
				}
				req := newReq(ctx, c.method, strings.NewReader("payload"))
				if c.key != "" {
					req.Header.Set("Idempotency-Key", c.key)
				}
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				assert.Equal(t, "busy", readBody(t, resp))
				assert.Equal(t, c.wantCalls, next.calls())

				// The transport itself is unchanged for the next request.
				next2 := newNext(reply{status: 503})
				resp, err = newT(next2).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				require.NoError(t, err)
				readBody(t, resp)
				assert.Equal(t, defaultMaxAttempts, next2.calls())
			})
		})
	}

	t.Run("options through a derived context add up, beside hooks", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			next := newNext(reply{status: 503}, reply{status: 503}, reply{status: 200})
			var retries []Event
			ctx := ContextWithOptions(t.Context(), WithMaxAttempts(3))
			ctx = ContextWithOptions(ctx, WithHooks(&Hooks{RetryScheduled: func(i Event) { retries = append(retries, i) }}))
			ctx = ContextWithOptions(ctx, WithPolicy(Exponential{Base: time.Second}))
			start := time.Now()
			resp, err := newT(next).RoundTrip(newReq(ctx, http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			assert.Equal(t, 3, next.calls(), "WithMaxAttempts(3) kept")
			require.Len(t, retries, 2, "the request's hooks kept")
			assert.Equal(t, 3*time.Second, time.Since(start), "the request's policy: 1 s, then 2 s")
		})
	})

	t.Run("an option only a Transport takes does not compile", func(t *testing.T) {
		t.Parallel()
		for _, o := range []string{"retryhttp.WithMaxAttempts(1)", "retryhttp.WithHooks(nil)"} {
			out, err := compileCall(t, o)
			require.NoError(t, err, "a RequestOption compiles: %s", out)
		}
		for _, o := range []string{"retryhttp.WithBreaker(nil)", "retryhttp.WithBudget(nil)",
			"retryhttp.WithKey(nil)", "retryhttp.WithFleet(nil)", "retryhttp.WithConcurrencyLimit(1)", "retryhttp.WithCircuitOpenResponse()"} {
			out, err := compileCall(t, o)
			require.Error(t, err, "ContextWithOptions(ctx, %s) compiled", o)
			assert.Contains(t, out, "does not implement retryhttp.RequestOption", "%s", o)
		}
	})
}

// bucketKey keys a request by scheme, host and first path segment, as a
// path-style bucket endpoint needs.
func bucketKey(r *http.Request) string {
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return r.URL.Scheme + "://" + r.URL.Host + "/" + seg
}

// With a key by path segment, one failing bucket's circuit opens while
// another bucket on the same host keeps being served; hooks and errors name
// the key.
func TestRequestKeyByBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newBreakerFake(func(req *http.Request) (int, error) {
			if strings.HasPrefix(req.URL.Path, "/bad/") {
				return http.StatusServiceUnavailable, nil
			}
			return http.StatusOK, nil
		})
		var opened []string
		cfg := bkConfig()
		cfg.OnStateChange = func(i Event) {
			if i.To == StateOpen {
				opened = append(opened, i.Key)
			}
		}
		tr := New(next, WithBudget(nil), WithBreaker(NewBreaker(cfg)), WithKey(bucketKey), WithMaxWait(0))
		get := func(path string) (int, error) { return bkDo(t.Context(), tr, "http://s3.test"+path) }
		for i := 0; len(opened) == 0; i++ {
			require.Less(t, i, 10, "the bad bucket's circuit never opened")
			_, _ = get("/bad/key")
			status, err := get("/good/key")
			require.NoError(t, err, "the good bucket is served")
			require.Equal(t, http.StatusOK, status)
			time.Sleep(time.Second)
		}
		assert.Equal(t, []string{"http://s3.test/bad"}, opened, "circuits opened")
		_, err := get("/bad/other")
		require.ErrorIs(t, err, ErrCircuitOpen)
		assert.Equal(t, "http://s3.test/bad", asError(t, err).Key)
		status, err := get("/good/other")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, status)
	})
}

// With WithCircuitOpenResponse, a refused request gets a local 503 that
// says when to come back and that it is local; without it, an error.
func TestRequestCircuitOpenResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBreaker(bkConfig())
		bkTrip(t, bkLane(b, testURL))
		time.Sleep(2 * time.Second) // open for 3 s more
		var gaveUp Event
		next := newNext(reply{status: 200})
		tr := New(next, WithBudget(nil), WithBreaker(b), WithCircuitOpenResponse(), WithRetryAfterSpread(0), WithMaxWait(0),
			WithHooks(&Hooks{GiveUp: func(i Event) { gaveUp = i }}))
		req := newReq(t.Context(), http.MethodGet, nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Zero(t, next.calls(), "attempts")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Same(t, req, resp.Request)
		assert.Equal(t, "circuit-open", resp.Header.Get(localHeader))
		assert.Equal(t, "3", resp.Header.Get("Retry-After"))
		assert.Equal(t, strconv.Itoa(3000), resp.Header.Get("Retry-After-Ms"))
		assert.Equal(t, "3000", resp.Header.Get("X-Amz-Retry-After"))
		var body struct {
			Error struct{ Type, Code, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(readBody(t, resp)), &body))
		assert.Equal(t, "circuit_open", body.Error.Code)
		assert.True(t, gaveUp.Local, "Event.Local")
		assert.Equal(t, ReasonCircuitOpen, gaveUp.Reason)
		assert.Equal(t, uint64(1), tr.Stats().LocalResponses)

		// With the default spread, the callers refused together are told
		// different instants, none before the circuit lets a probe through.
		spread := New(next, WithBudget(nil), WithBreaker(b), WithCircuitOpenResponse(), WithMaxWait(0))
		told := map[string]bool{}
		for range 100 {
			resp, err := spread.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			ms, err := strconv.Atoi(resp.Header.Get("Retry-After-Ms"))
			require.NoError(t, err)
			assert.True(t, ms >= 3000 && ms <= 4000, "Retry-After-Ms %d", ms)
			told[resp.Header.Get("Retry-After-Ms")] = true
		}
		assert.Greater(t, len(told), 50, "distinct instants told to 100 callers")

		plain := New(next, WithBudget(nil), WithBreaker(b), WithMaxWait(0))
		_, err = plain.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.ErrorIs(t, err, ErrCircuitOpen, "without the option")
		assert.Zero(t, plain.Stats().LocalResponses)
	})
}

// A request without options pays nothing for them: the success path with a
// context that carries only hooks, or nothing, allocates nothing.
func TestRequestNoOptionsAllocs(t *testing.T) {
	tr := New(newOKNext())
	for name, ctx := range map[string]context.Context{
		"background":   context.Background(),
		"hooks only":   ContextWithOptions(context.Background(), WithHooks(&Hooks{})),
		"with options": ContextWithOptions(context.Background(), WithMaxAttempts(2)),
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.test/", nil)
		require.NoError(t, err)
		allocs := successAllocs(t, tr, req)
		want := 0.0
		if name == "with options" {
			want = 1 // the request's copy of the settings
		}
		assert.Equal(t, want, allocs, "%s: allocations per request", name)
	}
}

// compileCall builds, in a module of its own that uses this one, a program
// that calls ContextWithOptions(ctx, opt); it returns the go command's
// output and its error.
func compileCall(t *testing.T, opt string) (string, error) {
	t.Helper()
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	files := map[string]string{
		"go.mod": "module probe\n\ngo 1.26.0\n\nrequire github.com/retryhttp/retryhttp v0.0.0\n\nreplace github.com/retryhttp/retryhttp => " + root + "\n",
		"go.sum": string(sum),
		"main.go": "package main\n\nimport (\n\t\"context\"\n\n\t\"github.com/retryhttp/retryhttp\"\n)\n\n" +
			"func main() { _ = retryhttp.ContextWithOptions(context.Background(), " + opt + ") }\n",
	}
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
