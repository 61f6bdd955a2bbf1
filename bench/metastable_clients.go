package bench

import (
	"net/http"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/retryhttp/retryhttp"
)

// MetastableClient is one client of the metastable trigger.
type MetastableClient struct {
	Key  string // short name, for flags
	Name string // the row's name in tables
	// New builds the client over next with the schedule, each attempt
	// bounded by attempt. Each call builds fresh state.
	New func(next http.RoundTripper, s Schedule, attempt time.Duration) *http.Client
}

// MetastableClients returns the clients of the metastable trigger, the
// one that never retries first as the baseline.
func MetastableClients() []MetastableClient {
	return []MetastableClient{
		{"none", "no retries (timeout = attempt timeout)", func(next http.RoundTripper, _ Schedule, attempt time.Duration) *http.Client {
			return &http.Client{Transport: next, Timeout: attempt}
		}},
		{"retryablehttp", "go-retryablehttp, full jitter", func(next http.RoundTripper, s Schedule, attempt time.Duration) *http.Client {
			return &http.Client{Transport: newRetryablehttp(next, s, true, attempt)}
		}},
		{"failsafe", "failsafe-go retry, full jitter", func(next http.RoundTripper, s Schedule, attempt time.Duration) *http.Client {
			return &http.Client{Transport: newFailsafeTimed(next, s, attempt, false)}
		}},
		{"failsafe-breaker", "failsafe-go retry + circuit breaker", func(next http.RoundTripper, s Schedule, attempt time.Duration) *http.Client {
			return &http.Client{Transport: newFailsafeTimed(next, s, attempt, true)}
		}},
		{"retryhttp", "retryhttp defaults + WithAttemptTimeout", func(next http.RoundTripper, s Schedule, attempt time.Duration) *http.Client {
			return &http.Client{Transport: retryhttp.New(next,
				retryhttp.WithPolicy(retryhttp.FullJitter{Base: s.Base, Cap: s.Cap}),
				retryhttp.WithMaxAttempts(s.Attempts),
				retryhttp.WithAttemptTimeout(attempt),
			)}
		}},
	}
}

// MetastableClientByKey returns the client with the key, and whether there
// is one.
func MetastableClientByKey(key string) (MetastableClient, bool) {
	for _, cl := range MetastableClients() {
		if cl.Key == key {
			return cl, true
		}
	}
	return MetastableClient{}, false
}

// Breaker settings of the failsafe-go client with a circuit breaker: open
// for 1 s, then 3 trial calls, all of which must succeed to close it; it
// opens when half of at least 10 calls within 1 s failed.
const (
	failsafeOpenFor   = time.Second
	failsafeTrials    = 3
	failsafeMinCalls  = 10
	failsafeFailShare = 0.5
)

// newFailsafeTimed builds failsafe-go's RoundTripper with the schedule's
// full jitter (as in the herd) and a timeout policy innermost, so that it
// bounds each attempt: policies compose from the first, outermost, to the
// last, around the request. With breaker, a circuit breaker sits between
// the retry and the timeout, so that every attempt, timed out or not,
// counts toward it, and the retry policy retries its refusals
// (circuitbreaker.ErrOpen is an error like any other to it).
func newFailsafeTimed(next http.RoundTripper, s Schedule, attempt time.Duration, breaker bool) http.RoundTripper {
	retry := failsafehttp.NewRetryPolicyBuilder().
		WithMaxAttempts(s.Attempts).
		WithDelayFunc(failsafeFullJitter(s)).
		ReturnLastFailure().
		Build()
	policies := []failsafe.Policy[*http.Response]{retry}
	if breaker {
		cb := circuitbreaker.NewBuilder[*http.Response]().
			HandleIf(func(resp *http.Response, err error) bool {
				return err != nil || resp.StatusCode >= http.StatusInternalServerError
			}).
			WithFailureRateThreshold(failsafeFailShare, failsafeMinCalls, time.Second).
			WithDelay(failsafeOpenFor).
			WithSuccessThreshold(failsafeTrials).
			Build()
		policies = append(policies, cb)
	}
	policies = append(policies, timeout.New[*http.Response](attempt))
	return failsafehttp.NewRoundTripper(next, policies...)
}
