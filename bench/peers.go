package bench

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/retryhttp/retryhttp"
)

// Schedule is the retry schedule every peer is given, so that the peers
// differ only in what they do with it.
type Schedule struct {
	Base     time.Duration // interval bound (or delay) of the first retry
	Cap      time.Duration // largest interval bound (or delay)
	Attempts int           // every attempt, the first included
}

// DefaultSchedule is retryhttp's default: FullJitter{Base: 200ms, Cap: 30s},
// four attempts.
var DefaultSchedule = Schedule{Base: 200 * time.Millisecond, Cap: 30 * time.Second, Attempts: 4}

// Peer is one retrying RoundTripper, built around a base transport with a
// schedule.
type Peer struct {
	Key  string // short name, for benchmark names and flags
	Name string // the row's name in tables
	Wrap func(next http.RoundTripper, s Schedule) http.RoundTripper
}

// Peers returns every peer of the herd, in a fixed order, the bare
// transport first as the baseline: what the fan-out costs with no retry at
// all. Each call to Wrap builds fresh state (budgets, circuits, clients).
func Peers() []Peer {
	return []Peer{
		{"bare", "bare transport (no retries)", func(next http.RoundTripper, _ Schedule) http.RoundTripper { return next }},
		{"retryhttp", "retryhttp (default budget + breaker)", wrapRetryhttp(true)},
		{"retryhttp-off", "retryhttp, budget + breaker off", wrapRetryhttp(false)},
		{"retryablehttp", "go-retryablehttp, full jitter", wrapRetryablehttp(true)},
		{"retryablehttp-plain", "go-retryablehttp, default backoff (no jitter)", wrapRetryablehttp(false)},
		{"failsafe", "failsafe-go, jitter factor 1.0", wrapFailsafe(jitterFactor)},
		{"failsafe-full", "failsafe-go, full jitter (DelayFunc)", wrapFailsafe(fullJitter)},
		{"failsafe-budget", "failsafe-go, full jitter + budget", wrapFailsafe(fullJitterBudget)},
	}
}

// PeerByKey returns the peer with the key, and whether there is one.
func PeerByKey(key string) (Peer, bool) {
	for _, p := range Peers() {
		if p.Key == key {
			return p, true
		}
	}
	return Peer{}, false
}

// wrapRetryhttp builds retryhttp with the schedule; on keeps its default
// budget and breaker, off turns both off.
func wrapRetryhttp(on bool) func(http.RoundTripper, Schedule) http.RoundTripper {
	return func(next http.RoundTripper, s Schedule) http.RoundTripper {
		opts := []retryhttp.Option{
			retryhttp.WithPolicy(retryhttp.FullJitter{Base: s.Base, Cap: s.Cap}),
			retryhttp.WithMaxAttempts(s.Attempts),
		}
		if !on {
			opts = append(opts, retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil))
		}
		return retryhttp.New(next, opts...)
	}
}

// wrapRetryablehttp builds go-retryablehttp's RoundTripper. Its Client
// sends through an http.Client whose Transport is next. With jitter, the
// delay is drawn from [0, DefaultBackoff] (DefaultBackoff is base·2^i
// capped, i from 0); a response carrying Retry-After keeps DefaultBackoff's
// own reading of it, unjittered and unclamped, as the library does.
// PassthroughErrorHandler makes it return the last response, as retryhttp
// does, instead of an error.
func wrapRetryablehttp(jitter bool) func(http.RoundTripper, Schedule) http.RoundTripper {
	return func(next http.RoundTripper, s Schedule) http.RoundTripper {
		return newRetryablehttp(next, s, jitter, 0)
	}
}

// newRetryablehttp is wrapRetryablehttp's RoundTripper, each attempt
// bounded by attemptTimeout (the Timeout of the http.Client it sends each
// attempt through) unless that is 0.
func newRetryablehttp(next http.RoundTripper, s Schedule, jitter bool, attemptTimeout time.Duration) http.RoundTripper {
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: next, Timeout: attemptTimeout}
	c.Logger = nil
	c.RetryWaitMin = s.Base
	c.RetryWaitMax = s.Cap
	c.RetryMax = s.Attempts - 1
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	if jitter {
		c.Backoff = func(lo, hi time.Duration, n int, resp *http.Response) time.Duration {
			d := retryablehttp.DefaultBackoff(lo, hi, n, resp)
			if resp != nil && resp.Header.Get("Retry-After") != "" {
				return d
			}
			return rand.N(d + 1)
		}
	}
	return &retryablehttp.RoundTripper{Client: c}
}

type failsafeVariant int

const (
	jitterFactor     failsafeVariant = iota // WithBackoff + WithJitterFactor(1.0): delay in (0, 2d]
	fullJitter                              // WithDelayFunc drawing [0, min(cap, base·2^(n−1)))
	fullJitterBudget                        // fullJitter with failsafe's own budget.New()
)

// wrapFailsafe builds failsafe-go's RoundTripper. ReturnLastFailure makes it
// return the last response instead of an ExceededError.
func wrapFailsafe(v failsafeVariant) func(http.RoundTripper, Schedule) http.RoundTripper {
	return func(next http.RoundTripper, s Schedule) http.RoundTripper {
		b := failsafehttp.NewRetryPolicyBuilder().
			WithMaxAttempts(s.Attempts).
			ReturnLastFailure()
		switch v {
		case jitterFactor:
			b = b.WithBackoff(s.Base, s.Cap).WithJitterFactor(1.0)
		case fullJitter, fullJitterBudget:
			b = b.WithDelayFunc(failsafeFullJitter(s))
		}
		if v == fullJitterBudget {
			b = b.WithBudget(budget.New())
		}
		return failsafehttp.NewRoundTripper(next, b.Build())
	}
}

// failsafeFullJitter is a DelayFunc that keeps failsafehttp's Retry-After
// reading and otherwise draws the same full jitter as retryhttp, retry n
// being the number of attempts made so far.
func failsafeFullJitter(s Schedule) failsafe.DelayFunc[*http.Response] {
	p := retryhttp.FullJitter{Base: s.Base, Cap: s.Cap}
	return func(exec failsafe.ExecutionAttempt[*http.Response]) time.Duration {
		if d := failsafehttp.DelayFunc(exec); d >= 0 {
			return d
		}
		return p.Delay(exec.Attempts(), 0)
	}
}
