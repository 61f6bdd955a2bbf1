package retryhttp

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookStep is what hookFake answers to one attempt.
type hookStep struct {
	status     int           // the response's status; 0 returns err instead
	retryAfter string        // the response's Retry-After header, if not empty
	err        error         // returned, without a response, when status is 0
	took       time.Duration // virtual time the attempt takes before it answers
}

// hookFake is an in-memory next RoundTripper scripted per URL path: the
// i-th attempt (0-based) that reaches a path gets script[path][i], the last
// step repeating. It reads and closes every request body, as a transport
// must, and answers with an empty body. It is safe for concurrent use; a
// path's script is only meaningful for one request at a time.
type hookFake struct {
	script map[string][]hookStep

	mu    sync.Mutex
	calls map[string]int // attempts that reached each path; guarded by mu
}

func newHookFake(script map[string][]hookStep) *hookFake {
	return &hookFake{script: script, calls: map[string]int{}}
}

func (f *hookFake) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	p := req.URL.Path
	f.mu.Lock()
	steps, i := f.script[p], f.calls[p]
	f.calls[p]++
	f.mu.Unlock()
	if len(steps) == 0 {
		return nil, fmt.Errorf("hookFake: no script for path %q", p)
	}
	s := steps[min(i, len(steps)-1)]
	if s.took > 0 {
		time.Sleep(s.took)
	}
	if s.status == 0 {
		return nil, s.err
	}
	resp := &http.Response{
		Status:     fmt.Sprintf("%d %s", s.status, http.StatusText(s.status)),
		StatusCode: s.status,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
		Body:       http.NoBody,
		Request:    req,
	}
	if s.retryAfter != "" {
		resp.Header.Set("Retry-After", s.retryAfter)
	}
	return resp, nil
}

// count returns how many attempts reached path.
func (f *hookFake) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[path]
}

// hookEvent is one call of a hook: which Hooks it went to and the info it
// got, with the Request field cleared (hookLog keeps it apart), so that
// events compare with assert.Equal.
type hookEvent struct {
	src  string // "transport" (WithHooks given to New), "request" (through ContextWithOptions) or "breaker" (OnStateChange)
	info any    // a startEv, doneEv, retryEv, giveUpEv or circuitEv
}

// The Event of each hook, told apart by type so that a log of events says
// which hook got each one.
type (
	startEv   Event
	doneEv    Event
	retryEv   Event
	giveUpEv  Event
	circuitEv Event
)

// hookLog records the calls of the hooks it makes, in order. It is safe
// for concurrent use.
type hookLog struct {
	mu     sync.Mutex
	events []hookEvent     // guarded by mu
	reqs   []*http.Request // the Request of each event, nil for the breaker's; guarded by mu
}

// hooks returns a Hooks with every field set, recording into l as src.
func (l *hookLog) hooks(src string) *Hooks {
	rec := func(as func(Event) any) func(Event) {
		return func(i Event) {
			r := i.Request
			i.Request = nil
			l.add(src, r, as(i))
		}
	}
	return &Hooks{
		AttemptStart:   rec(func(i Event) any { return startEv(i) }),
		AttemptDone:    rec(func(i Event) any { return doneEv(i) }),
		RetryScheduled: rec(func(i Event) any { return retryEv(i) }),
		GiveUp:         rec(func(i Event) any { return giveUpEv(i) }),
	}
}

// onState returns a BreakerConfig.OnStateChange recording into l.
func (l *hookLog) onState() func(Event) {
	return func(i Event) { l.add("breaker", nil, circuitEv(i)) }
}

func (l *hookLog) add(src string, req *http.Request, info any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, hookEvent{src, info})
	l.reqs = append(l.reqs, req)
}

// take returns the events recorded since the last take, after checking
// that every event that carries a request carries req, the caller's.
func (l *hookLog) take(t *testing.T, req *http.Request) []hookEvent {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range l.reqs {
		if _, ok := l.events[i].info.(circuitEv); ok {
			continue
		}
		assert.Same(t, req, r, "event %d (%T): the hook must get the caller's request", i, l.events[i].info)
	}
	ev := l.events
	l.events, l.reqs = nil, nil
	return ev
}

// of returns the infos of type I among events, in order.
func of[I any](events []hookEvent) []I {
	var out []I
	for _, e := range events {
		if i, ok := e.info.(I); ok {
			out = append(out, i)
		}
	}
	return out
}

// both returns what a request with hooks at both levels must record for
// infos: each one to the transport's hooks, then to the request's; a
// circuit's change once, to the breaker's OnStateChange.
func both(infos ...any) []hookEvent {
	var out []hookEvent
	for _, i := range infos {
		if c, ok := i.(circuitEv); ok {
			out = append(out, hookEvent{"breaker", c}) // the breaker tells its change once
			continue
		}
		out = append(out, hookEvent{"transport", i}, hookEvent{"request", i})
	}
	return out
}

// newHookTransport returns a transport through next whose transport-level
// hooks record into log. The budget and the breaker are off and Retry-After
// has no spread, so that delays are exact; opts come after and may turn
// them back on.
func newHookTransport(next http.RoundTripper, log *hookLog, opts ...Option) *Transport {
	base := []Option{WithBudget(nil), WithBreaker(nil), WithRetryAfterSpread(0), WithMaxWait(0), WithHooks(log.hooks("transport"))}
	return New(next, append(base, opts...)...)
}

// hookReq returns a request for url whose context carries request-level
// hooks recording into log.
func hookReq(ctx context.Context, log *hookLog, method, url string, body io.Reader) *http.Request {
	req, err := http.NewRequestWithContext(ContextWithOptions(ctx, WithHooks(log.hooks("request"))), method, url, body)
	if err != nil {
		panic(err)
	}
	return req
}

// TestHooksAttemptEvents follows one request through five attempts and
// checks every event with every field, at both levels, the transport's
// hooks first. The policy is Exponential and Retry-After has no spread, so
// every delay is exact; the fake sleeps in virtual time, so every duration
// is exact too.
func TestHooksAttemptEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errConn := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		next := newHookFake(map[string][]hookStep{"/": {
			{status: 503, took: 10 * time.Millisecond},
			{err: errConn, took: 25 * time.Millisecond},
			{status: 503, retryAfter: "2", took: 5 * time.Millisecond},
			{status: 429, retryAfter: "3600"}, // above the 7 s clamp
			{status: 503, took: time.Millisecond},
		}})
		var log hookLog
		tr := newHookTransport(next, &log,
			WithMaxAttempts(5),
			WithPolicy(Exponential{Base: 100 * time.Millisecond}),
			WithMaxRetryAfter(7*time.Second),
			WithMaxWait(time.Minute)) // it sleeps the server's waits itself
		req := hookReq(t.Context(), &log, http.MethodGet, "http://host/", nil)

		start := time.Now()
		resp, err := tr.RoundTrip(req)
		elapsed := time.Since(start)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode, "the last response is returned")
		require.NoError(t, resp.Body.Close())

		want := both(
			startEv{Attempt: 1},
			doneEv{Attempt: 1, Status: 503, Duration: 10 * time.Millisecond},
			retryEv{Attempt: 1, Delay: 100 * time.Millisecond},
			startEv{Attempt: 2},
			doneEv{Attempt: 2, Err: errConn, Duration: 25 * time.Millisecond},
			retryEv{Attempt: 2, Delay: 200 * time.Millisecond},
			startEv{Attempt: 3},
			doneEv{Attempt: 3, Status: 503, Duration: 5 * time.Millisecond},
			retryEv{Attempt: 3, Delay: 2 * time.Second, RetryAfter: true},
			startEv{Attempt: 4},
			doneEv{Attempt: 4, Status: 429},
			// A Retry-After of 5 s or more holds the key, to the clamp:
			// not a change of the circuit.
			retryEv{Attempt: 4, Delay: 7 * time.Second, RetryAfter: true, Clamped: true},
			startEv{Attempt: 5},
			doneEv{Attempt: 5, Status: 503, Duration: time.Millisecond},
			giveUpEv{Attempt: 5, Reason: ReasonAttemptsUsed, Status: 503},
		)
		assert.Equal(t, want, log.take(t, req))
		// 10+25+5+0+1 ms in the attempts, 100 ms+200 ms+2 s+7 s waiting.
		assert.Equal(t, 9341*time.Millisecond, elapsed, "virtual time of the request")
		assert.Equal(t, 5, next.count("/"))
	})
}

// TestHooksPartial checks that hooks with some fields nil, or a nil *Hooks
// in the context, are skipped without harm while the others still fire.
func TestHooksPartial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newHookFake(map[string][]hookStep{"/": {{status: 503}, {status: 200}}})
		var starts []int
		tr := New(next, WithBudget(nil), WithBreaker(nil), WithPolicy(immediate{}),
			WithHooks(&Hooks{AttemptStart: func(i Event) { starts = append(starts, i.Attempt) }}))
		ctx := ContextWithOptions(t.Context(), WithHooks(nil))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://host/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, []int{1, 2}, starts)
	})
}

// TestHooksNoGiveUpOnAnswer: a request that ends on a response that is not
// a failure (a 200, or a 404, which is an answer) does not give up, whether
// or not a retry came before it.
func TestHooksNoGiveUpOnAnswer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []hookStep
	}{
		{"200", []hookStep{{status: 200}}},
		{"404", []hookStep{{status: 404}}},
		{"503_then_200", []hookStep{{status: 503, retryAfter: "1"}, {status: 200}}},
		{"503_then_404", []hookStep{{status: 503, retryAfter: "1"}, {status: 404}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log hookLog
				tr := newHookTransport(newHookFake(map[string][]hookStep{"/": tc.steps}), &log)
				req := hookReq(t.Context(), &log, http.MethodGet, "http://host/", nil)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				final := tc.steps[len(tc.steps)-1].status
				assert.Equal(t, final, resp.StatusCode)

				ev := log.take(t, req)
				assert.Empty(t, of[giveUpEv](ev), "GiveUp must not be called for a request ending on %d", final)
				dones := of[doneEv](ev)
				require.Len(t, dones, 2*len(tc.steps), "AttemptDone at both levels")
				assert.Equal(t, doneEv{Attempt: len(tc.steps), Status: final}, dones[len(dones)-1])
				assert.Empty(t, tr.Stats().GiveUps, "Stats.GiveUps")
			})
		})
	}
}

// TestHooksGiveUpReasons drives one request down each path on which the
// transport gives up, and checks the GiveUp event at both levels, the
// retries scheduled before it and the virtual time it took.
func TestHooksGiveUpReasons(t *testing.T) {
	certErr := x509.UnknownAuthorityError{}
	for _, tc := range []struct {
		name   string
		opts   []Option
		steps  []hookStep
		method string
		body   func() io.Reader // nil: no body
		// ctx derives the request's context; nil: the test's.
		ctx     func(context.Context) (context.Context, context.CancelFunc)
		want    giveUpEv
		retries int           // RetryScheduled events before the give-up
		elapsed time.Duration // virtual time the request takes
	}{
		{
			name:    "attempts_used",
			opts:    []Option{WithMaxAttempts(2)},
			steps:   []hookStep{{status: 503, retryAfter: "1"}},
			want:    giveUpEv{Attempt: 2, Reason: ReasonAttemptsUsed, Status: 503},
			retries: 1,
			elapsed: time.Second,
		},
		{
			name:  "budget_exhausted",
			opts:  []Option{WithBudget(NewBudget(BudgetConfig{Ratio: -1, MinPerSecond: -1}))},
			steps: []hookStep{{status: 503}},
			want:  giveUpEv{Attempt: 1, Reason: ReasonBudgetExhausted, Status: 503},
		},
		{
			// The server asks for 5 s; the caller has 1 s: return at once.
			name:  "deadline",
			steps: []hookStep{{status: 503, retryAfter: "5"}},
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, time.Second)
			},
			want: giveUpEv{Attempt: 1, Reason: ReasonContextDone, Status: 503},
		},
		{
			name:   "not_idempotent",
			method: http.MethodPost,
			body:   func() io.Reader { return strings.NewReader("payload") },
			steps:  []hookStep{{status: 503}},
			want:   giveUpEv{Attempt: 1, Reason: ReasonNotReplayable, Status: 503},
		},
		{
			// io.NopCloser hides the strings.Reader, so NewRequest sets no
			// GetBody, and no WithBodyBuffer is given.
			name:   "body_not_replayable",
			method: http.MethodPut,
			body:   func() io.Reader { return io.NopCloser(strings.NewReader("payload")) },
			steps:  []hookStep{{status: 503}},
			want:   giveUpEv{Attempt: 1, Reason: ReasonNotReplayable, Status: 503},
		},
		{
			name:  "not_retryable",
			steps: []hookStep{{err: certErr}},
			want: giveUpEv{Attempt: 1, Reason: ReasonNotRetryable, Err: &Error{
				Method: http.MethodGet, Key: "http://host", Attempts: 1, Reason: ReasonNotRetryable, Err: certErr, key: hostKey{Scheme: "http", Host: "host"},
			}},
		},
		{
			// Cancelled 1 s into a 10 s wait (a request that may wait:
			// WithMaxWait(0) would hand it back at once).
			name:  "context_done",
			steps: []hookStep{{status: 503, retryAfter: "10"}},
			opts:  []Option{WithMaxWait(time.Minute)},
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(time.Second, cancel)
				return ctx, cancel
			},
			want: giveUpEv{Attempt: 1, Reason: ReasonContextDone, Err: &Error{
				Method: http.MethodGet, Key: "http://host", Attempts: 1, Reason: ReasonContextDone, Err: context.Canceled, key: hostKey{Scheme: "http", Host: "host"},
			}},
			retries: 1,
			elapsed: time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log hookLog
				next := newHookFake(map[string][]hookStep{"/": tc.steps})
				tr := newHookTransport(next, &log, tc.opts...)
				ctx := t.Context()
				if tc.ctx != nil {
					var cancel context.CancelFunc
					ctx, cancel = tc.ctx(ctx)
					defer cancel()
				}
				method := tc.method
				if method == "" {
					method = http.MethodGet
				}
				var body io.Reader
				if tc.body != nil {
					body = tc.body()
				}
				req := hookReq(ctx, &log, method, "http://host/", body)

				start := time.Now()
				resp, err := tr.RoundTrip(req)
				elapsed := time.Since(start)
				if tc.want.Err != nil {
					require.Nil(t, resp, "a response beside the error %v", err)
					assert.Equal(t, tc.want.Err, err, "the error RoundTrip returns")
				} else {
					require.NoError(t, err)
					assert.Equal(t, tc.want.Status, resp.StatusCode)
					require.NoError(t, resp.Body.Close())
				}

				ev := log.take(t, req)
				gu := of[giveUpEv](ev)
				require.Len(t, gu, 2, "GiveUp at both levels")
				assert.Equal(t, both(tc.want), ev[len(ev)-2:], "GiveUp, last, transport's first")
				if tc.want.Err != nil {
					// The hook sees the very error the caller gets.
					assert.Same(t, err, gu[0].Err, "giveUpEv.Err is the returned error")
				}
				assert.Len(t, of[retryEv](ev), 2*tc.retries, "RetryScheduled events, both levels")
				assert.Equal(t, tc.elapsed, elapsed, "virtual time of the request")
				assert.Equal(t, map[Reason]uint64{tc.want.Reason: 1}, tr.Stats().GiveUps, "Stats.GiveUps")
			})
		})
	}
}

// TestHooksCircuitChange walks one host's circuit through closed -> open
// -> half-open -> closed, one request at a time with no retries, and checks
// that each change is reported, at both levels, to the request that caused
// it; and that a request the open circuit refuses gives up with
// ReasonCircuitOpen without reaching the network.
func TestHooksCircuitChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		next := newHookFake(map[string][]hookStep{"/": {{status: 503}, {status: 503}, {status: 200}}})
		var log hookLog
		// Trip on failure that lasts a second; stay open exactly 2 s.
		br := NewBreaker(BreakerConfig{Span: time.Second, MinFailures: 1, OpenFor: 2 * time.Second, OpenJitter: -1, OnStateChange: log.onState()})
		tr := newHookTransport(next, &log, WithBreaker(br), WithMaxAttempts(1))
		do := func() (*http.Request, *http.Response, error) {
			req := hookReq(t.Context(), &log, http.MethodGet, "http://host/", nil)
			resp, err := tr.RoundTrip(req)
			if resp != nil {
				require.NoError(t, resp.Body.Close())
			}
			return req, resp, err
		}
		const host = "http://host"
		failed := giveUpEv{Attempt: 1, Reason: ReasonAttemptsUsed, Status: 503}

		// t = 0: the first failure starts the failure period.
		req, _, err := do()
		require.NoError(t, err)
		assert.Equal(t, both(
			startEv{Attempt: 1},
			doneEv{Attempt: 1, Status: 503},
			failed,
		), log.take(t, req), "t=0: no change yet")

		// t = 1 s: failure has lasted the span: the circuit opens.
		time.Sleep(time.Second)
		req, _, err = do()
		require.NoError(t, err)
		assert.Equal(t, both(
			startEv{Attempt: 1},
			doneEv{Attempt: 1, Status: 503},
			circuitEv{Key: host, From: StateClosed, To: StateOpen, Until: start.Add(3 * time.Second)},
			failed,
		), log.take(t, req), "t=1s: closed -> open")

		// t = 1 s: the open circuit refuses without touching the network.
		req, resp, err := do()
		require.Nil(t, resp)
		require.ErrorIs(t, err, ErrCircuitOpen)
		assert.Equal(t, both(giveUpEv{Attempt: 0, Reason: ReasonCircuitOpen, Err: &Error{
			Method: http.MethodGet, Key: "http://host", Attempts: 0, Reason: ReasonCircuitOpen, Err: ErrCircuitOpen,
			Until: start.Add(3 * time.Second), key: hostKey{Scheme: "http", Host: "host"},
		}}), log.take(t, req), "t=1s: refused")
		assert.Equal(t, 2, next.count("/"), "the refused request reached the network")

		// t = 3 s: OpenFor has passed: the next request is the half-open
		// probe, and its success closes the circuit.
		time.Sleep(2 * time.Second)
		req, resp, err = do()
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, both(
			circuitEv{Key: host, From: StateOpen, To: StateHalfOpen},
			startEv{Attempt: 1},
			doneEv{Attempt: 1, Status: 200},
			circuitEv{Key: host, From: StateHalfOpen, To: StateClosed},
		), log.take(t, req), "t=3s: open -> half-open -> closed")

		s := tr.Stats()
		assert.Equal(t, uint64(1), s.CircuitRejected, "Stats.CircuitRejected")
		assert.Equal(t, map[Reason]uint64{ReasonAttemptsUsed: 2, ReasonCircuitOpen: 1}, s.GiveUps)
	})
}

// TestHooksCircuitOpenWakesSleeper: a request waiting 4 s for its retry is
// woken when another request trips the host's circuit 1 s in, and gives up
// at that instant with ReasonCircuitOpen.
func TestHooksCircuitOpenWakesSleeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := newHookFake(map[string][]hookStep{
			"/a": {{status: 503}},
			"/b": {{status: 503}},
		})
		start := time.Now()
		var logA, logB hookLog
		br := NewBreaker(BreakerConfig{Span: time.Second, MinFailures: 1, OpenJitter: -1, OnStateChange: logB.onState()})
		tr := New(next, WithBudget(nil), WithBreaker(br), WithPolicy(Exponential{Base: 4 * time.Second}), WithMaxWait(0))

		reqA := hookReq(t.Context(), &logA, http.MethodGet, "http://host/a", nil)
		var (
			errA     error
			elapsedA time.Duration
			done     = make(chan struct{})
		)
		go func() {
			defer close(done)
			start := time.Now()
			resp, err := tr.RoundTrip(reqA)
			elapsedA, errA = time.Since(start), err
			if resp != nil {
				resp.Body.Close()
			}
		}()

		// 1 s later a POST (no retry of its own) fails: failure has lasted
		// the span, and the circuit opens.
		time.Sleep(time.Second)
		reqB := hookReq(t.Context(), &logB, http.MethodPost, "http://host/b", nil)
		resp, err := tr.RoundTrip(reqB)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		<-done

		assert.Equal(t, time.Second, elapsedA, "A woke when the circuit opened, not after its 4 s")
		require.ErrorIs(t, errA, ErrCircuitOpen)
		opened := start.Add(time.Second + defaultBreakerOpenFor)
		wantErr := &Error{Method: http.MethodGet, Key: "http://host", Attempts: 1, Reason: ReasonCircuitOpen, Err: ErrCircuitOpen,
			Until: opened, key: hostKey{Scheme: "http", Host: "host"}}
		assert.Equal(t, []hookEvent{
			{"request", startEv{Attempt: 1}},
			{"request", doneEv{Attempt: 1, Status: 503}},
			{"request", retryEv{Attempt: 1, Delay: 4 * time.Second}},
			{"request", giveUpEv{Attempt: 1, Reason: ReasonCircuitOpen, Err: wantErr}},
		}, logA.take(t, reqA), "A")
		assert.Equal(t, []hookEvent{
			{"request", startEv{Attempt: 1}},
			{"request", doneEv{Attempt: 1, Status: 503}},
			{"breaker", circuitEv{Key: "http://host", From: StateClosed, To: StateOpen, Until: opened}},
			{"request", giveUpEv{Attempt: 1, Reason: ReasonNotReplayable, Status: 503}},
		}, logB.take(t, reqB), "B")
		s := tr.Stats()
		assert.Equal(t, uint64(1), s.CircuitRejected, "the sleep the circuit ended")
		assert.Equal(t, map[Reason]uint64{ReasonCircuitOpen: 1, ReasonNotReplayable: 1}, s.GiveUps)
	})
}

// TestHooksNoRetryAfterOwnTrip: when a request's own failure opens its
// host's circuit, no retry can follow, so the request gives up at once with
// ReasonCircuitOpen and the last real response: no RetryScheduled
// event, no delay in Stats.Delays and no budget token spent on a retry that
// will not be made.
func TestHooksNoRetryAfterOwnTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		next := newHookFake(map[string][]hookStep{"/": {{status: 503, retryAfter: "1"}}})
		var log hookLog
		br := NewBreaker(BreakerConfig{Span: time.Second, MinFailures: 1, OpenJitter: -1, OnStateChange: log.onState()})
		// The request deposits 2 tokens: one for the retry at t=0, one to
		// spare.
		budget := NewBudget(BudgetConfig{Ratio: 2, MinPerSecond: -1})
		tr := newHookTransport(next, &log, WithBreaker(br), WithBudget(budget))
		req := hookReq(t.Context(), &log, http.MethodGet, "http://host/", nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the last real response")
		require.NoError(t, resp.Body.Close())

		assert.Equal(t, both(
			startEv{Attempt: 1},
			doneEv{Attempt: 1, Status: 503},
			retryEv{Attempt: 1, Delay: time.Second, RetryAfter: true},
			startEv{Attempt: 2},
			doneEv{Attempt: 2, Status: 503},
			circuitEv{Key: "http://host", From: StateClosed, To: StateOpen, Until: start.Add(time.Second + defaultBreakerOpenFor)},
			giveUpEv{Attempt: 2, Reason: ReasonCircuitOpen, Status: 503},
		), log.take(t, req))
		assert.Zero(t, tr.Stats().Delays[1].Count, "a delay counted for retry 2, which was never made")
		assert.Equal(t, 1.0, budget.tokens(keyOf(req.URL), time.Now()), "tokens left: the spare one")
	})
}

// noopHooks has every callback set to a function that does nothing.
func noopHooks() *Hooks {
	return &Hooks{
		AttemptStart:   func(Event) {},
		AttemptDone:    func(Event) {},
		RetryScheduled: func(Event) {},
		GiveUp:         func(Event) {},
		WaitDone:       func(Event) {},
		Quota:          func(Event) {},
	}
}

// TestHooksSuccessPathAllocs pins what BenchmarkRoundTripHooks reports: the
// success path of a GET through a transport with its defaults (budget and
// breaker on) allocates nothing without hooks, nor with no-op hooks.
func TestHooksSuccessPathAllocs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hooks *Hooks
	}{{"nil", nil}, {"noop", noopHooks()}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(newOKNext(), WithHooks(tc.hooks))
			req, err := http.NewRequest(http.MethodGet, "http://example.test/x", nil)
			require.NoError(t, err)
			allocs := successAllocs(t, tr, req)
			assert.Zero(t, allocs, "allocations per request")
		})
	}
}

// successAllocs returns the allocations of one request through tr, req
// answered 200 the first time.
func successAllocs(t *testing.T, tr *Transport, req *http.Request) float64 {
	t.Helper()
	return testing.AllocsPerRun(1000, func() {
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatal(resp, err)
		}
	})
}

// BenchmarkRoundTripHooks measures what hooks cost on the success path: a
// GET answered 200 by an in-memory next, through a transport with its
// defaults, without hooks and with a no-op transport-level hook set. The
// difference is the two clock readings that timing AttemptDone needs and
// the calls themselves.
func BenchmarkRoundTripHooks(b *testing.B) {
	for _, bc := range []struct {
		name  string
		hooks *Hooks
	}{{"nil", nil}, {"noop", noopHooks()}} {
		b.Run(bc.name, func(b *testing.B) {
			tr := New(newOKNext(), WithHooks(bc.hooks))
			req, err := http.NewRequest(http.MethodGet, "http://example.test/x", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatal(resp, err)
				}
			}
		})
	}
}
