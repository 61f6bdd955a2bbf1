package retryhttp

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowHost is a next RoundTripper in virtual time: it answers 200 after
// latency, or never when hung, unless the attempt's context ends first; it
// counts the attempts it received.
type slowHost struct {
	latency time.Duration
	hung    atomic.Bool
	calls   atomic.Int64
}

func (h *slowHost) RoundTrip(req *http.Request) (*http.Response, error) {
	h.calls.Add(1)
	var answer <-chan time.Time
	if !h.hung.Load() {
		t := time.NewTimer(h.latency)
		defer t.Stop()
		answer = t.C
	}
	select {
	case <-answer:
		return newResponse(req, http.StatusOK, http.NoBody), nil
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

// burstOf sends workers x each GETs through tr, each worker one at a
// time, each GET with its own deadline, and returns each GET's error.
func burstOf(tr *Transport, workers, each int, deadline time.Duration) []error {
	errs := make([]error, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
				if err == nil {
					resp.Body.Close()
				}
				errs[w*each+i] = err
				cancel()
			}
		})
	}
	wg.Wait()
	return errs
}

// getWithin sends one GET through tr with a deadline d from now.
func getWithin(tr *Transport, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// opened records whether the breaker's circuits ever opened.
func opened() (*atomic.Bool, BreakerConfig) {
	var o atomic.Bool
	return &o, BreakerConfig{OnStateChange: func(i Event) {
		if i.To == StateOpen {
			o.Store(true)
		}
	}}
}

// A host that accepts every request and never answers, under the
// defaults, with callers' deadlines and no attempt timeout: the attempts
// that waited out their callers' deadlines count against the host, its
// circuit opens, and the GETs that come after wait without being sent;
// at most half the GETs reach the host.
func TestSlowCallHungHostTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &slowHost{}
		host.hung.Store(true)
		o, cfg := opened()
		tr := New(host, WithBreaker(NewBreaker(cfg)))
		errs := burstOf(tr, 20, 5, 2*time.Second)

		for i, err := range errs {
			e := asError(t, err)
			assert.True(t, errors.Is(e, context.DeadlineExceeded) || errors.Is(e, ErrCircuitOpen), "GET %d ends with its deadline, or the open circuit it waited for until then: %v", i, e)
		}
		assert.True(t, o.Load(), "the circuit opens")
		assert.LessOrEqual(t, host.calls.Load(), int64(len(errs)/2), "at most half the GETs are sent")
		assert.NotZero(t, tr.Stats().SlowAttempts, "the attempts that waited out their deadlines are counted")
		t.Logf("%d GETs, %d sent, %d counted slow", len(errs), host.calls.Load(), tr.Stats().SlowAttempts)
	})
}

// The rule, off (SlowAfter < 0), leaves a hung host's circuit closed, as
// a caller's context ending told it nothing before.
func TestSlowCallOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &slowHost{}
		host.hung.Store(true)
		o, cfg := opened()
		cfg.SlowAfter = -1
		tr := New(host, WithBreaker(NewBreaker(cfg)))
		errs := burstOf(tr, 20, 5, 2*time.Second)
		assert.False(t, o.Load(), "the circuit never opens")
		assert.Equal(t, int64(len(errs)), host.calls.Load(), "every GET is sent")
		assert.Zero(t, tr.Stats().SlowAttempts)
	})
}

// Callers whose deadlines are shorter than a healthy host's normal
// latency do not open its circuit: neither below the floor with no answer
// timed yet (300 ms deadlines, a host that answers in 500 ms, nobody ever
// served), nor above it, once the host's answers have shown how long it
// takes (1.2 s deadlines, a host that answers in 1.5 s to the callers who
// wait). The same callers do open the circuit of a host that hangs, even
// one that was answering in 1.5 s: 2.5 s deadlines outlast twice its
// answer time.
func TestSlowCallShortDeadlineHealthyHost(t *testing.T) {
	cases := []struct {
		name     string
		latency  time.Duration
		warm     bool          // one caller that waits is served first
		short    time.Duration // the deadline of most callers
		patient  bool          // two callers of 10 s deadlines run beside them
		hung     bool          // the host hangs after the warm-up
		wantOpen bool
	}{
		{name: "below the floor, nothing served", latency: 500 * time.Millisecond, short: 300 * time.Millisecond},
		{name: "above the floor, normal latency known", latency: 1500 * time.Millisecond, warm: true, short: 1200 * time.Millisecond, patient: true},
		{name: "hung after answering in 1.5 s", latency: 1500 * time.Millisecond, warm: true, short: 3500 * time.Millisecond, hung: true, wantOpen: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &slowHost{latency: c.latency}
				o, cfg := opened()
				br := NewBreaker(cfg)
				tr := New(host, WithBreaker(br))
				if c.warm {
					// The transport's first request is one of the sample
					// whose attempts are timed: its counter's first count.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
					cancel()
					require.NoError(t, err, "the warm-up GET is served")
					resp.Body.Close()
				}
				host.hung.Store(c.hung)
				var wg sync.WaitGroup
				var served atomic.Int64
				if c.patient {
					for range 2 {
						wg.Go(func() {
							for _, err := range burstOf(tr, 1, 6, 10*time.Second) {
								if err == nil {
									served.Add(1)
								}
							}
						})
					}
				}
				errs := burstOf(tr, 20, 8, c.short)
				wg.Wait()

				for i, err := range errs {
					if c.wantOpen {
						// Those that waited for the open circuit until their
						// deadline end with the refusal they waited out.
						e := asError(t, err)
						assert.True(t, errors.Is(e, context.DeadlineExceeded) || errors.Is(e, ErrCircuitOpen), "GET %d: %v", i, e)
						continue
					}
					assert.ErrorIs(t, err, context.DeadlineExceeded, "GET %d ends with its deadline", i)
				}
				if c.patient {
					assert.Equal(t, int64(12), served.Load(), "the callers who wait are served")
				}
				assert.Equal(t, c.wantOpen, o.Load(), "the circuit opens")
				if !c.wantOpen {
					assert.Zero(t, tr.Stats().SlowAttempts, "no attempt counts against the host")
					assert.Equal(t, StateClosed, br.Host("http://example.test").State)
				}
			})
		})
	}
}

// watchable is a transport with the default breaker to a slowHost that
// answers after latency, and the lane of the host's key.
func watchable(latency time.Duration) (*Transport, *perkey.Lane) {
	br := NewBreaker(BreakerConfig{})
	tr := New(&slowHost{latency: latency}, WithBreaker(br))
	return tr, br.set.Lane(tr.requestKey(newReq(context.Background(), http.MethodGet, nil)))
}

// A request whose context cannot end is never timed, even to a watched
// key: its success feeds no answer time (so a later caller's 1.2 s
// deadline still counts against a host that hangs). A request with a
// deadline to the same watched key is timed.
func TestSlowCallBackgroundNotTimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, l := watchable(1500 * time.Millisecond)
		l.Watch(time.Now())
		resp, err := tr.RoundTrip(newReq(context.Background(), http.MethodGet, nil))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Zero(t, l.AnswerTime(), "an untimed success feeds no answer time")

		require.NoError(t, getWithin(tr, 10*time.Second))
		assert.Equal(t, 1500*time.Millisecond, l.AnswerTime(), "a timed one does")
	})
}

// A caller that gives up on an attempt makes its key watched, whether or
// not the attempt was timed: every attempt to the key is then timed, and
// the first timed attempt that ends more than perkey.WatchFor after the
// latest give-up ends the watch.
func TestSlowCallWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, l := watchable(100 * time.Millisecond)
		get := func(d time.Duration) error { return getWithin(tr, d) }
		assert.False(t, l.Watched(), "a new key is not watched")
		require.ErrorIs(t, get(50*time.Millisecond), context.DeadlineExceeded)
		assert.True(t, l.Watched(), "a caller gave up: the key is watched")
		assert.Zero(t, tr.Stats().SlowAttempts, "50 ms is below SlowAfter: nothing counts")

		for range 20 {
			require.NoError(t, get(time.Second))
			assert.True(t, l.Watched(), "within WatchFor of the give-up")
		}
		assert.Equal(t, 100*time.Millisecond, l.AnswerTime(), "the watched key's answers are timed")

		time.Sleep(perkey.WatchFor) // virtual time: past the watch's end
		require.NoError(t, get(time.Second))
		assert.False(t, l.Watched(), "the first timed attempt past the watch's end ends it")
	})
}

// The timed success path, a GET whose context has a deadline through a
// transport with its defaults, allocates nothing.
func TestSlowCallTimedSuccessAllocs(t *testing.T) {
	tr := New(newOKNext())
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.test/x", nil)
	require.NoError(t, err)
	assert.Zero(t, successAllocs(t, tr, req), "allocations per request")
	l := tr.breaker.set.Peek(tr.requestKey(req))
	require.NotNil(t, l)
	assert.NotZero(t, l.AnswerTime(), "the successes were timed")
}

// Only a deadline blames a hung host, and only for a request with no
// body: callers that cancel after 2 s (a hedge that won elsewhere), and
// uploads whose 2 s deadlines pass (the time may be the caller's own slow
// upload), leave its circuit closed. The same GETs with 2 s deadlines
// open it (TestSlowCallHungHostTrips).
func TestSlowCallOnlyDeadlinesBlame(t *testing.T) {
	for _, c := range []string{"cancelled GETs", "PUTs past their deadlines"} {
		t.Run(c, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				host := &slowHost{}
				host.hung.Store(true)
				o, cfg := opened()
				tr := New(host, WithBreaker(NewBreaker(cfg)))
				var wg sync.WaitGroup
				for range 20 {
					wg.Go(func() {
						for range 5 {
							var req *http.Request
							var cancel context.CancelFunc
							if c == "cancelled GETs" {
								var ctx context.Context
								ctx, cancel = context.WithCancel(context.Background())
								time.AfterFunc(2*time.Second, cancel)
								req = newReq(ctx, http.MethodGet, nil)
							} else {
								var ctx context.Context
								ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
								req = newReq(ctx, http.MethodPut, strings.NewReader("upload"))
							}
							_, err := tr.RoundTrip(req)
							assert.Error(t, err)
							cancel()
						}
					})
				}
				wg.Wait()
				assert.False(t, o.Load(), "the circuit never opens")
				assert.Zero(t, tr.Stats().SlowAttempts, "no attempt counts against the host")
				assert.Equal(t, int64(100), host.calls.Load(), "every request is sent")
			})
		})
	}
}
