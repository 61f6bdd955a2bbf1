package retryhttp

import (
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Every option follows the one rule its doc states: zero turns off what
// can be off and restores the default of a choice that cannot be; a
// negative value panics; and only the options that shape one request's
// retries may ride its context.
func TestOptionRule(t *testing.T) {
	cases := []struct {
		name       string
		zero       Option                // the option given zero
		check      func(*Transport) bool // what zero must mean
		negative   func()                // nil: no negative value to give
		perRequest bool                  // ContextWithOptions takes it
		meaning    string                // of zero, for the failure message
	}{
		{"WithPolicy", WithPolicy(nil), func(t *Transport) bool { return t.s.policy == FullJitter{} }, nil, true, "the default policy"},
		{"WithMaxAttempts", WithMaxAttempts(0), func(t *Transport) bool { return t.s.maxAttempts == 1 }, func() { WithMaxAttempts(-1) }, true, "retries off"},
		{"WithFirstAttemptJitter", WithFirstAttemptJitter(0), func(t *Transport) bool { return t.s.firstJitter == 0 }, func() { WithFirstAttemptJitter(-1) }, true, "off"},
		{"WithMaxRetryAfter", WithMaxRetryAfter(0), func(t *Transport) bool { return t.s.maxRetryAfter == 0 }, func() { WithMaxRetryAfter(-1) }, true, "Retry-After waits off"},
		{"WithRetryAfterSpread", WithRetryAfterSpread(0), func(t *Transport) bool { return t.s.retryAfterSpread == 0 }, func() { WithRetryAfterSpread(-1) }, true, "no spread"},
		{"WithRetryIf", WithRetryIf(nil), func(t *Transport) bool { return sameFunc(t.s.retryIf, DefaultRetryIf) }, nil, true, "DefaultRetryIf"},
		{"WithIdempotentIf", WithIdempotentIf(nil), func(t *Transport) bool { return sameFunc(t.s.idempotentIf, DefaultIdempotentIf) }, nil, true, "DefaultIdempotentIf"},
		{"WithBodyBuffer", WithBodyBuffer(0), func(t *Transport) bool { return t.s.bodyBuffer == 0 }, func() { WithBodyBuffer(-1) }, true, "off"},
		{"WithAttemptTimeout", WithAttemptTimeout(0), func(t *Transport) bool { return t.s.attemptTimeout == 0 }, func() { WithAttemptTimeout(-time.Second) }, true, "off"},
		{"WithAdaptiveRate", WithAdaptiveRate(), func(t *Transport) bool { return len(t.s.throttleOn) == 0 }, nil, true, "off"},
		{"WithConcurrencyLimit", WithConcurrencyLimit(0), func(t *Transport) bool { return t.s.inFlight.MaxInFlight == 0 }, func() { WithConcurrencyLimit(-1) }, false, "off"},
		{"WithKey", WithKey(nil), func(t *Transport) bool { return t.keyFunc == nil }, nil, false, "the default key"},
		{"WithBudget", WithBudget(nil), func(t *Transport) bool { return t.budget == nil }, nil, false, "off"},
		{"WithBreaker", WithBreaker(nil), func(t *Transport) bool { return t.breaker == nil }, nil, false, "off"},
		{"WithHooks", WithHooks(nil), func(t *Transport) bool { return t.hooks == nil }, nil, true, "none"},
		{"WithFleet", WithFleet(nil), func(t *Transport) bool { return t.fleet == nil }, nil, false, "none"},
		{"WithCircuitOpenResponse", WithCircuitOpenResponse(), func(t *Transport) bool { return t.localOpen }, nil, false, "on (it takes no argument)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.name, fmt.Sprint(c.zero))
			tr := New(nil, c.zero)
			assert.True(t, c.check(tr), "%s given zero must mean %s", c.name, c.meaning)
			if c.negative != nil {
				assert.Contains(t, panicValue(c.negative), "retryhttp: "+c.name+"(-1", "a negative value panics, naming the option")
			}
			ro, perRequest := c.zero.(RequestOption)
			assert.Equal(t, c.perRequest, perRequest, "%s is a RequestOption", c.name)
			if perRequest {
				assert.NotPanics(t, func() { ContextWithOptions(t.Context(), ro) })
			}
		})
	}
}

// panicValue returns what f panics with, as a string ("" if it does not).
func panicValue(f func()) (msg string) {
	defer func() {
		if v := recover(); v != nil {
			msg = fmt.Sprint(v)
		}
	}()
	f()
	return ""
}

// sameFunc reports whether two functions are the same function.
func sameFunc[F any](a, b F) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

var _ http.RoundTripper = (*Transport)(nil)
