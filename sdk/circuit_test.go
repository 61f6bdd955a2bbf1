package sdk

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Helpers for the rows that open a circuit before the measured call.

// tripPath is where a row's prep sends the failures that open the circuit
// of the server's host; the row's script answers it with tripReply.
const tripPath = "/trip"

var tripReply = Reply{Status: 503, Header: map[string]string{"Content-Type": "text/plain"}, Body: []byte("tripping\n")}

// withTrip answers tripPath with a 503 and everything else by s.
func withTrip(s Script) Script {
	return ByPath(map[string]Script{tripPath: Always(tripReply)}, s)
}

// quickBreaker opens a circuit once failures have persisted for 10 ms
// (at least two of them) and keeps it open for exactly openFor. A circuit
// trips on a failure that comes at least Span after the first of its
// period; a failure more than 2 x Span after it starts a new period
// instead, so the failures that trip it must come closer together than
// that: tripHost sends them back to back.
func quickBreaker(openFor time.Duration) *retryhttp.Breaker {
	return retryhttp.NewBreaker(retryhttp.BreakerConfig{
		Span: 10 * time.Millisecond, MinFailures: 2, OpenFor: openFor, OpenJitter: -1, OnStateChange: recordOpen,
	})
}

// opens is every key whose circuit a breaker of these tests opened. Tests
// run in parallel, each against its own server, so a test looks only at
// the keys of its server's address.
var opens struct {
	mu   sync.Mutex
	keys []string
}

// recordOpen is the OnStateChange of the tests' breakers.
func recordOpen(i retryhttp.Event) {
	if i.To == retryhttp.StateOpen {
		opens.mu.Lock()
		opens.keys = append(opens.keys, i.Key)
		opens.mu.Unlock()
	}
}

// noWait turns the transport's wait for an open circuit off, in the rows
// about what an SDK does with a refusal (the local 503, or the error): the
// refusal comes back at once, as it does for a dispatcher with its own
// queue, instead of the request waiting for the host to recover.
var noWait = retryhttp.WithMaxWait(0)

// The open times of the k rows: short where the SDK waits for the circuit
// (a local 503 tells it to), long where the row must see every try
// refused.
const (
	shortOpen = time.Second
	longOpen  = 10 * time.Second
)

// getPath sends a GET for path through e's client, one attempt.
func getPath(path string) func(context.Context, env) error {
	return func(ctx context.Context, e env) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+path, nil)
		if err != nil {
			return err
		}
		resp, err := e.hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
}

// tripWith returns a prep that calls send, one attempt per retryhttp
// request, until the transport reports a circuit whose key ends in
// keySuffix opened; at most limit calls. send is expected to fail.
func tripWith(keySuffix string, limit int, send func(context.Context, env) error) func(*testing.T, context.Context, env) {
	return func(t *testing.T, ctx context.Context, e env) {
		ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithMaxAttempts(1))
		addr := e.srv.Listener.Addr().String()
		var opened []string
		isOpen := func() bool {
			opens.mu.Lock()
			defer opens.mu.Unlock()
			opened = opened[:0]
			for _, k := range opens.keys {
				if strings.Contains(k, addr) {
					opened = append(opened, k)
				}
			}
			for _, k := range opened {
				if strings.HasSuffix(k, keySuffix) {
					return true
				}
			}
			return false
		}
		calls := 0
		for ; calls < limit && !isOpen(); calls++ {
			_ = send(ctx, e)
		}
		require.True(t, isOpen(), "no circuit with a key ending in %q opened after %d calls", keySuffix, calls)
		t.Logf("prep: %d calls opened the circuit %v", calls, opened)
	}
}

// tripHost opens the circuit of the server's host (the default key), with
// failing GETs sent back to back: a quickBreaker trips after about 10 ms of
// them, a few dozen on loopback.
var tripHost = tripWith("", 2000, getPath(tripPath))

// backsOff asserts how an SDK came back after the local 503: the first try
// was refused locally and asked for most of the open time in header (in
// units), and after every refused try but the last the SDK paused at least
// what the header asked, and less than that plus slack.
func backsOff(header string, unit, slack time.Duration) func(*testing.T, observed) {
	return func(t *testing.T, o observed) {
		require.NotEmpty(t, o.tries)
		require.True(t, o.tries[0].local(), "the first try was not refused with the local 503")
		first, err := strconv.ParseInt(o.tries[0].header.Get(header), 10, 64)
		require.NoError(t, err, "%s of the first try", header)
		assert.Greater(t, time.Duration(first)*unit, shortOpen/2, "the first refusal asks for most of the open time")
		for i := 0; i+1 < len(o.tries); i++ {
			tr := o.tries[i]
			if !tr.local() {
				continue
			}
			v, err := strconv.ParseInt(tr.header.Get(header), 10, 64)
			require.NoError(t, err, "try %d: %s", i+1, header)
			asked := time.Duration(v) * unit
			pause := o.tries[i+1].start.Sub(tr.end)
			assert.GreaterOrEqual(t, pause, asked, "try %d: paused %v, %s asked %v", i+1, pause, header, asked)
			assert.Less(t, pause, asked+slack, "try %d: paused %v, %s asked %v", i+1, pause, header, asked)
		}
	}
}

// orLocal accepts success or, as typed checks it, the local 503. An SDK
// told to come back in Retry-After-Ms or X-Amz-Retry-After milliseconds
// may come back before the circuit half-opens and be refused again: the
// transport rounds those headers down to the millisecond, so a client that
// waits exactly what they say arrives up to 1 ms early. The second refusal
// says 0 ms; openai-go then retries at once and, early again, can spend
// its last try the same way (9 calls in 30 under load, measured while
// writing these rows); the AWS SDKs wait their own backoff instead and
// arrive after it.
func orLocal(typed func(error, int) error) func(error, int) error {
	return func(err error, status int) error {
		if err == nil {
			return nil
		}
		return typed(err, status)
	}
}

// servedOrRefused asserts the outcome orLocal accepts: on success exactly
// one request reached the server (the probe of the half-open circuit),
// after tries all refused locally; on failure, none did.
func servedOrRefused(t *testing.T, o observed) {
	require.NotEmpty(t, o.tries)
	last := len(o.tries) - 1
	for i, tr := range o.tries[:last] {
		assert.True(t, tr.local(), "try %d was not refused with the local 503", i+1)
	}
	if o.err == nil {
		assert.Len(t, o.reqs, 1, "requests that reached the server")
		assert.False(t, o.tries[last].local(), "the last try succeeded but was refused")
		return
	}
	assert.Empty(t, o.reqs, "requests that reached the server")
	assert.True(t, o.tries[last].local(), "the last try was not refused with the local 503")
}

// triesAll asserts that the SDK made n tries, each refused by the open
// circuit without a response (no local 503), and each paused less than
// within after the previous one.
func triesAll(n int, within time.Duration) func(*testing.T, observed) {
	return func(t *testing.T, o observed) {
		require.Len(t, o.tries, n, "SDK tries")
		for i, tr := range o.tries {
			assert.ErrorIs(t, tr.err, retryhttp.ErrCircuitOpen, "try %d", i+1)
			if i > 0 {
				assert.Less(t, tr.start.Sub(o.tries[i-1].end), within, "try %d: pause", i+1)
			}
		}
	}
}

// triesN asserts that the SDK made exactly n tries.
func triesN(n int) func(*testing.T, observed) {
	return func(t *testing.T, o observed) { assert.Len(t, o.tries, n, "SDK tries") }
}

// oncePerTry asserts the per-request form's promise: every SDK try was sent
// to the server exactly once.
func oncePerTry(t *testing.T, o observed) {
	assert.Len(t, o.reqs, len(o.tries), "requests that reached the server, against the SDK's tries")
}

// inspects runs several inspections.
func inspects(is ...func(*testing.T, observed)) func(*testing.T, observed) {
	return func(t *testing.T, o observed) {
		for _, i := range is {
			i(t, o)
		}
	}
}

// perRequest is a row's ctx that sets retryhttp options for the call.
func perRequest(o ...retryhttp.RequestOption) func(context.Context) context.Context {
	return func(ctx context.Context) context.Context { return retryhttp.ContextWithOptions(ctx, o...) }
}

var (
	always = func(*http.Request) bool { return true }
	never  = func(*http.Request) bool { return false }
)
