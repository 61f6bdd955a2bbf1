package retryhttp

import (
	"context"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outageNext answers every attempt with fail until end, then 200.
type outageNext struct {
	end   time.Time
	fail  func(req *http.Request) (*http.Response, error)
	calls atomic.Int32
}

func (n *outageNext) RoundTrip(req *http.Request) (*http.Response, error) {
	n.calls.Add(1)
	if time.Now().Before(n.end) {
		return n.fail(req)
	}
	return newResponse(req, http.StatusOK, newCountingBody("ok")), nil
}

func answer503(req *http.Request) (*http.Response, error) {
	return newResponse(req, http.StatusServiceUnavailable, newCountingBody("down")), nil
}

func refuseDial(*http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// A lone caller with a 10 s deadline and a fresh transport, sent as a
// host's outage begins, rides the outage out: the default 4 attempts are
// over within 1.4 s, and the two ride-out attempts past them land far
// enough into the deadline for an outage of 1 to 3 s to be over before
// one of them.
func TestLoneCallerRidesOut(t *testing.T) {
	const trials = 200
	for _, c := range []struct {
		name   string
		outage time.Duration
		fail   func(*http.Request) (*http.Response, error)
	}{
		{"503 for 1s", time.Second, answer503},
		{"503 for 3s", 3 * time.Second, answer503},
		{"refused for 2s", 2 * time.Second, refuseDial},
	} {
		t.Run(c.name, func(t *testing.T) {
			delivered, most := 0, 0
			var longest time.Duration
			for range trials {
				synctest.Test(t, func(t *testing.T) {
					start := time.Now()
					next := &outageNext{end: start.Add(c.outage), fail: c.fail}
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					defer cancel()
					resp, err := New(next).RoundTrip(newReq(ctx, http.MethodGet, nil))
					if err == nil && resp.StatusCode == http.StatusOK {
						delivered++
					}
					if resp != nil {
						readBody(t, resp)
					}
					most = max(most, int(next.calls.Load()))
					longest = max(longest, time.Since(start))
				})
			}
			t.Logf("%s: %d of %d delivered, at most %d attempts, the longest in %v", c.name, delivered, trials, most, longest)
			assert.GreaterOrEqual(t, delivered, trials*99/100, "delivered")
			assert.LessOrEqual(t, most, defaultMaxAttempts+rideOutAttempts, "attempts of one request")
		})
	}
}

// What turns the ride-out off: retries turned off, no wait allowed, no
// breaker to show the key failing, or a key that other requests find up.
func TestRideOutNeedsEvidence(t *testing.T) {
	for _, c := range []struct {
		name     string
		opts     []Option
		others   bool // another path of the key answers 200 meanwhile
		attempts int
	}{
		{"defaults", nil, false, defaultMaxAttempts + rideOutAttempts},
		{"WithMaxAttempts(1)", []Option{WithMaxAttempts(1)}, false, 1},
		{"WithMaxWait(0)", []Option{WithMaxWait(0)}, false, defaultMaxAttempts},
		{"no breaker", []Option{WithBreaker(nil)}, false, defaultMaxAttempts},
		{"the key answers others", nil, true, defaultMaxAttempts},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var fails atomic.Int32
				next := peerRT(func(req *http.Request) (*http.Response, error) {
					if req.URL.Path == "/up" {
						return newResponse(req, http.StatusOK, newCountingBody("ok")), nil
					}
					fails.Add(1)
					return answer503(req)
				})
				tr := New(next, c.opts...)
				done := make(chan struct{})
				if !c.others {
					close(done)
				} else {
					// Requests that succeed between this one's attempts.
					go func() {
						defer close(done)
						for range 20 {
							req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://example.test/up", nil)
							resp, err := tr.RoundTrip(req)
							if assert.NoError(t, err) {
								readBody(t, resp)
							}
							time.Sleep(100 * time.Millisecond)
						}
					}()
				}
				resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				require.NoError(t, err)
				readBody(t, resp)
				assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
				assert.EqualValues(t, c.attempts, fails.Load(), "attempts")
				<-done
			})
		})
	}
}

// A dependency down for 3 minutes, called 10 times a second by requests
// without a deadline: once the key has been failing for longer than a
// request would wait for it (WithMaxWait, 30 s by default), the failure is
// sustained and requests fail at once, instead of each holding its caller
// for the whole wait; the host sees the probes of the open circuit and
// little else.
func TestDeadDependencyFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			outage = 3 * time.Minute
			every  = 100 * time.Millisecond
		)
		start := time.Now()
		next := &outageNext{end: start.Add(outage), fail: answer503}
		tr := New(next)
		n := int(outage / every)
		took := make([]time.Duration, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				sent := time.Now()
				resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				took[i] = time.Since(sent)
				if err == nil {
					readBody(t, resp)
				}
			})
			time.Sleep(every)
		}
		wg.Wait()
		late := slices.Clone(took[int(time.Minute/every):])
		slices.Sort(late)
		p95 := late[len(late)*95/100]
		early := slices.Clone(took[:int(10*time.Second/every)])
		slices.Sort(early)
		t.Logf("attempts in %v: %d; requests after the first minute: p50 %v, p95 %v, max %v; in the first 10 s: p50 %v, max %v",
			outage, next.calls.Load(), late[len(late)/2], p95, late[len(late)-1], early[len(early)/2], early[len(early)-1])
		assert.LessOrEqual(t, p95, time.Second, "p95 of requests after the first minute")
		assert.LessOrEqual(t, next.calls.Load(), int32(400), "attempts that reached the host")
	})
}

// Without a breaker, 10,000 GETs at once through a 20 s outage: the
// budget turns most retries back, and those requests wait for the key,
// which a test at a time tries; once one succeeds the waiters go. None is
// handed back its old failure after the host has returned. (The first
// waiter used to be let go to test while alone in the queue, admitted as a
// plain attempt whose outcome the key never heard of: every later waiter
// waited out its 30 s for a test that never ended.)
func TestBreakerOffNoWaitForNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			requests = 10_000
			outage   = 20 * time.Second
		)
		start := time.Now()
		next := &outageNext{end: start.Add(outage), fail: answer503}
		tr := New(next, WithBreaker(nil))
		var wg sync.WaitGroup
		var delivered, failedAfter atomic.Int32
		var last atomic.Int64
		for range requests {
			wg.Go(func() {
				resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					readBody(t, resp)
				}
				switch {
				case ok:
					delivered.Add(1)
				case time.Since(start) >= outage:
					failedAfter.Add(1)
				}
				last.Store(max(last.Load(), int64(time.Since(start))))
			})
		}
		wg.Wait()
		t.Logf("%d of %d delivered, %d failures handed back after the host returned at %v, the last request back at %v, %d attempts",
			delivered.Load(), requests, failedAfter.Load(), outage, time.Duration(last.Load()), next.calls.Load())
		assert.Zero(t, failedAfter.Load(), "failures handed back after the host returned")
		// A waiter let go to test the key in the outage may use its last
		// attempt on it, and stop then.
		assert.GreaterOrEqual(t, delivered.Load(), int32(requests*99/100), "delivered")
	})
}

// The spread above a Retry-After follows the crowd: a lone caller takes
// the server's word, while 1,000 told the same instant are spread over
// 900 ms (TestTransportRetryAfterHerd).
func TestLoneCallerTakesRetryAfterAsGiven(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			var at []time.Duration
			next := peerRT(func(req *http.Request) (*http.Response, error) {
				at = append(at, time.Since(start))
				if len(at) == 1 {
					resp := newResponse(req, http.StatusServiceUnavailable, newCountingBody("busy"))
					resp.Header.Set("Retry-After", "1")
					return resp, nil
				}
				return newResponse(req, http.StatusOK, newCountingBody("ok")), nil
			})
			resp, err := New(next).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			require.Len(t, at, 2)
			assert.GreaterOrEqual(t, at[1], time.Second, "the retry came before the server asked")
			assert.Equal(t, time.Second, at[1], "the retry of a lone caller, spread as if by a crowd")
		})
	}
}

// A Retry-After holds the route it answered: /export told to come back in
// 10 s holds /export, while /healthz on the same host, 100 ms later, is
// sent and answered. Host-wide evidence holds the whole key: a 503 for the
// host's root, a second route held, a 429 (a rate limit counts the
// client's requests), or a key function naming the scope.
func TestHoldCoversTheRoute(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   []Option
		status int
		held   []string // the paths answered with Retry-After: 10, in order
		sent   bool     // /healthz is sent
	}{
		{"one route", nil, http.StatusServiceUnavailable, []string{"/export"}, true},
		{"the root", nil, http.StatusServiceUnavailable, []string{"/"}, false},
		{"two routes", nil, http.StatusServiceUnavailable, []string{"/export", "/report"}, false},
		{"a 429", nil, http.StatusTooManyRequests, []string{"/export"}, false},
		{"WithKey", []Option{WithKey(func(r *http.Request) string { return r.URL.Host })}, http.StatusServiceUnavailable, []string{"/export"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				seen := map[string]int{}
				next := peerRT(func(req *http.Request) (*http.Response, error) {
					mu.Lock()
					seen[req.URL.Path]++
					mu.Unlock()
					if req.URL.Path == "/healthz" {
						return newResponse(req, http.StatusOK, newCountingBody("ok")), nil
					}
					resp := newResponse(req, c.status, newCountingBody("later"))
					resp.Header.Set("Retry-After", "10")
					return resp, nil
				})
				tr := New(next, c.opts...)
				get := func(path string, within time.Duration) (*http.Response, error) {
					ctx, cancel := context.WithTimeout(t.Context(), within)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example.test"+path, nil)
					resp, err := tr.RoundTrip(req)
					if err == nil {
						readBody(t, resp)
					}
					return resp, err
				}
				for _, p := range c.held {
					// A 2 s deadline: the 10 s wait cannot fit, the answer
					// comes back at once, and the key or route is held.
					resp, err := get(p, 2*time.Second)
					require.NoError(t, err)
					require.Equal(t, c.status, resp.StatusCode)
				}
				time.Sleep(100 * time.Millisecond)
				start := time.Now()
				resp, err := get("/healthz", 500*time.Millisecond)
				if c.sent {
					require.NoError(t, err)
					assert.Equal(t, http.StatusOK, resp.StatusCode)
					assert.Less(t, time.Since(start), 500*time.Millisecond)
					// The held route itself stays held.
					_, err = get(c.held[0], time.Second)
					assert.ErrorIs(t, err, errHeld)
					var e *Error
					require.ErrorAs(t, err, &e)
					at, why := tr.RetryAt(nil, err)
					assert.Equal(t, ReasonHeld, why)
					assert.False(t, at.Before(e.Until), "RetryAt %v, before the route's hold ends at %v", at, e.Until)
					assert.Greater(t, e.Until.Sub(start), 9*time.Second, "Error.Until: the route's hold")
				} else {
					assert.ErrorIs(t, err, errHeld)
				}
				mu.Lock()
				defer mu.Unlock()
				if c.sent {
					assert.Equal(t, 1, seen["/healthz"])
				} else {
					assert.Zero(t, seen["/healthz"], "/healthz sent while the key is held")
				}
			})
		})
	}
}

// A service calls a key at a steady 200 requests a second; the key
// refuses connections for 2 s. No request fails (the waits ride it out),
// and as the key comes back the waiters return at no more than twice the
// rate they came at, beside the flow that goes on: no 100 ms after the
// return carries more than 4 times the steady rate (the whole backlog of
// 400 within half a second would be 5 to 6 times).
func TestRecoveryRampsFromTheFlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			every  = 5 * time.Millisecond // 200 requests a second
			bucket = 100 * time.Millisecond
			steady = int(bucket / every)
		)
		start := time.Now()
		downFrom, downTo := start.Add(5*time.Second), start.Add(7*time.Second)
		var mu sync.Mutex
		per := map[int]int{} // attempts per bucket from start
		next := peerRT(func(req *http.Request) (*http.Response, error) {
			now := time.Now()
			mu.Lock()
			per[int(now.Sub(start)/bucket)]++
			mu.Unlock()
			time.Sleep(every) // the answer's latency
			if !now.Before(downFrom) && now.Before(downTo) {
				return refuseDial(req)
			}
			return newResponse(req, http.StatusOK, newCountingBody("ok")), nil
		})
		tr := New(next)
		var wg sync.WaitGroup
		var failed atomic.Int32
		for range int(12 * time.Second / every) {
			wg.Go(func() {
				resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				if err != nil {
					failed.Add(1)
					return
				}
				readBody(t, resp)
			})
			time.Sleep(every)
		}
		wg.Wait()
		back := int(downTo.Sub(start) / bucket)
		most, at := 0, 0
		for b := back; b < back+30; b++ {
			if per[b] > most {
				most, at = per[b], b-back
			}
		}
		t.Logf("steady %d per 100 ms; after the return at most %d, %v after it; failed %d", steady, most, time.Duration(at)*bucket, failed.Load())
		assert.Zero(t, failed.Load(), "requests failed")
		assert.LessOrEqual(t, most, 4*steady, "attempts in a 100 ms after the return")
	})
}

// A key that answers others is not failing as a whole: a retry the
// budget refuses there comes back at once with its failure, instead of
// waiting in the key's queue for a recovery that nothing would start (a
// lossy link that resets some connections held its callers for their
// whole deadlines). The same refusal while the key fails as a whole
// waits for it (TestBreakerOffNoWaitForNothing, TestHerdBudgetAndBreaker).
func TestBudgetRefusalOnALiveKeyComesBackAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		next := peerRT(func(req *http.Request) (*http.Response, error) {
			if req.URL.Path == "/flaky" {
				n.Add(1)
				return answer503(req)
			}
			return newResponse(req, http.StatusOK, newCountingBody("ok")), nil
		})
		// One token, spent by the first retry; none refills.
		// Retries 100 ms apart, so that others answer between attempts.
		tr := New(next, WithBudget(NewBudget(BudgetConfig{Ratio: -1, MinPerSecond: 1, MaxTokens: 1})),
			WithPolicy(policyFunc(func(int, time.Duration) time.Duration { return 100 * time.Millisecond })))
		get := func(path string) *http.Response {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://api.example.test"+path, nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			readBody(t, resp)
			return resp
		}
		// Others answered 200 every 20 ms, meanwhile.
		done := make(chan struct{})
		stop := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
					get("/up")
				}
			}
		}()
		start := time.Now()
		resp := get("/flaky")
		resp2 := get("/flaky")
		close(stop)
		<-done
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, http.StatusServiceUnavailable, resp2.StatusCode)
		assert.Less(t, time.Since(start), 2*time.Second, "the refused retry waited")
		assert.EqualValues(t, 3, n.Load(), "attempts to /flaky: the first request two (its retry took the one token), the second one")
		assert.Equal(t, uint64(2), tr.Stats().GiveUps[ReasonBudgetExhausted], "both handed back for want of a token")
		assert.Zero(t, tr.Stats().Waits, "waits for the key")
	})
}

// A request riding out its key's failure goes as soon as another request
// shows the key back, not at its own next instant.
func TestRideOutWakesOnAnAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		next := &outageNext{end: start.Add(time.Second), fail: answer503}
		tr := New(next, WithPolicy(immediate{}))
		done := make(chan time.Duration)
		go func() {
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			if assert.NoError(t, err) {
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				readBody(t, resp)
			}
			done <- time.Since(start)
		}()
		// Its 4 attempts fail at once; it sleeps toward its first
		// ride-out attempt, 2.5 s or more away. Another request, after the
		// host is back, is answered.
		time.Sleep(1200 * time.Millisecond)
		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		took := <-done
		assert.Equal(t, 1200*time.Millisecond, took, "the ride-out went when another request was answered")
	})
}

// A ride-out that fails tells the requests after it that the failure is
// not young any more: the next request to the key, the caller's or an
// SDK's own retry, makes its 4 attempts and stops, until the key answers.
func TestRideOutInVainIsEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		next := peerRT(func(req *http.Request) (*http.Response, error) {
			n.Add(1)
			return answer503(req)
		})
		tr := New(next)
		for i, want := range []int32{defaultMaxAttempts + rideOutAttempts, defaultMaxAttempts} {
			n.Store(0)
			resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
			require.NoError(t, err)
			readBody(t, resp)
			assert.Equal(t, want, n.Load(), "attempts of request %d", i+1)
		}
	})
}
