package retryhttp

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// huge is an absurd duration, count or size: the largest there is.
const huge = math.MaxInt64

// Every numeric option follows the package's one rule for settings: a
// negative value and zero alike turn it off; an absurd value is taken as
// given, or bounded where a larger one could not mean anything; none
// panics.
func TestSettingsRuleOptions(t *testing.T) {
	type get func(*Transport) int64
	cases := []struct {
		name                   string
		opt                    func(v int64) Option
		get                    get
		negative, zero, absurd int64 // what each must mean
	}{
		{"WithMaxAttempts", func(v int64) Option { return WithMaxAttempts(int(v)) }, func(t *Transport) int64 { return int64(t.s.maxAttempts) }, 1, 1, huge},
		{"WithFirstAttemptJitter", func(v int64) Option { return WithFirstAttemptJitter(time.Duration(v)) }, func(t *Transport) int64 { return int64(t.s.firstJitter) }, 0, 0, huge},
		{"WithMaxRetryAfter", func(v int64) Option { return WithMaxRetryAfter(time.Duration(v)) }, func(t *Transport) int64 { return int64(t.s.maxRetryAfter) }, 0, 0, huge},
		{"WithRetryAfterSpread", func(v int64) Option { return WithRetryAfterSpread(time.Duration(v)) }, func(t *Transport) int64 { return int64(t.s.retryAfterSpread) }, 0, 0, huge},
		{"WithBodyBuffer", func(v int64) Option { return WithBodyBuffer(v) }, func(t *Transport) int64 { return t.s.bodyBuffer }, 0, 0, huge},
		{"WithAttemptTimeout", func(v int64) Option { return WithAttemptTimeout(time.Duration(v)) }, func(t *Transport) int64 { return int64(t.s.attemptTimeout) }, 0, 0, huge},
		{"WithMaxWait", func(v int64) Option { return WithMaxWait(time.Duration(v)) }, func(t *Transport) int64 { return int64(t.s.maxWait) }, 0, 0, huge},
		{"WithResponseBuffer", func(v int64) Option { return WithResponseBuffer(v) }, func(t *Transport) int64 { return t.s.responseBuffer }, 0, 0, huge},
		{"WithConcurrencyLimit", func(v int64) Option { return WithConcurrencyLimit(int(v)) }, func(t *Transport) int64 { return int64(t.s.inFlight.MaxInFlight) }, 0, 0, huge},
		{"WithFailingHorizon", func(v int64) Option { return WithFailingHorizon(time.Duration(v)) }, func(t *Transport) int64 { return int64(t.horizon) }, 0, 0, huge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.name, fmt.Sprint(c.opt(1)))
			for _, v := range []struct {
				give, want int64
			}{{-1, c.negative}, {math.MinInt64, c.negative}, {0, c.zero}, {huge, c.absurd}} {
				var tr *Transport
				require.NotPanics(t, func() { tr = New(nil, c.opt(v.give)) }, "%s(%d)", c.name, v.give)
				assert.Equal(t, v.want, c.get(tr), "%s(%d)", c.name, v.give)
				if ro, ok := c.opt(v.give).(RequestOption); ok {
					s := (&perRequest{opts: []RequestOption{ro}}).settings(&New(nil).s)
					assert.Equal(t, v.want, c.get(&Transport{s: *s}), "%s(%d) through a context", c.name, v.give)
				}
			}
		})
	}
	t.Run("WithAdaptiveRate", func(t *testing.T) {
		for _, give := range [][]int{{-1}, {0}, {huge}, {99, 600}} {
			assert.Empty(t, New(nil, WithAdaptiveRate(give...)).s.throttleOn, "%v: no status, so pacing is off", give)
		}
		assert.Equal(t, []int{429, 503}, New(nil, WithAdaptiveRate(-1, 429, 0, 503)).s.throttleOn, "the statuses kept")
	})
	t.Run("nil", func(t *testing.T) {
		tr := New(nil, WithPolicy(nil), WithRetryIf(nil), WithIdempotentIf(nil), WithKey(nil))
		assert.Equal(t, FullJitter{}, tr.s.policy, "WithPolicy(nil): the default")
		assert.True(t, sameFunc(tr.s.retryIf, DefaultRetryIf), "WithRetryIf(nil): the default")
		assert.True(t, sameFunc(tr.s.idempotentIf, DefaultIdempotentIf), "WithIdempotentIf(nil): the default")
		assert.Nil(t, tr.keyFunc, "WithKey(nil): the default key")
		tr = New(nil, WithBudget(nil), WithBreaker(nil), WithHooks(nil), WithFleet(nil))
		assert.Nil(t, tr.budget, "WithBudget(nil): off")
		assert.Nil(t, tr.breaker, "WithBreaker(nil): off")
		assert.Nil(t, tr.hooks, "WithHooks(nil): none")
		assert.Nil(t, tr.fleet, "WithFleet(nil): none")
	})
}

// A transport given every option at its most absurd still serves: a
// request that fails is answered within its deadline, nothing panics.
func TestSettingsRuleAbsurdServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newNext(reply{status: 503, header: http.Header{"Retry-After": {"99999999999"}}}, reply{status: 200}),
			WithMaxAttempts(huge), WithFirstAttemptJitter(time.Millisecond), WithMaxRetryAfter(huge), WithRetryAfterSpread(huge),
			WithBodyBuffer(huge), WithAttemptTimeout(huge), WithMaxWait(huge), WithResponseBuffer(huge),
			WithConcurrencyLimit(huge), WithFailingHorizon(huge),
			WithPolicy(FullJitter{Base: huge, Cap: huge}),
			WithBudget(NewBudget(BudgetConfig{Ratio: math.Inf(1), MinPerSecond: math.MaxFloat64, MaxTokens: math.Inf(1), MaxHosts: huge})),
			WithBreaker(NewBreaker(BreakerConfig{Span: huge, MinFailures: huge, FailureRatio: 7, OpenFor: huge, MaxOpenFor: huge,
				OpenJitter: huge, Probes: huge, MaxHosts: huge, SlowAfter: huge})))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		resp, err := tr.RoundTrip(newReq(ctx, http.MethodGet, nil))
		if err == nil {
			readBody(t, resp)
		}
		assert.LessOrEqual(t, time.Since(start), time.Minute, "within the deadline")
		at, _ := tr.RetryAt(resp, err)
		assert.True(t, at.IsZero() || at.After(start), "RetryAt's instant did not overflow into the past: %v", at)
	})
}

// Every numeric field of the config structs follows the same rule: zero
// means the default; a negative value turns the setting off where it can
// be off and means the default where it cannot; a value beyond what the
// setting can mean is bounded; NaN means the default; none panics.
func TestSettingsRuleConfigs(t *testing.T) {
	t.Run("BreakerConfig", func(t *testing.T) {
		def := NewBreaker(BreakerConfig{}).cfg
		assert.Equal(t, defaultBreakerSpan, def.Span)
		assert.Equal(t, def.OpenFor, def.OpenJitter, "OpenJitter 0: OpenFor")
		neg := NewBreaker(BreakerConfig{Span: -1, MinFailures: -1, FailureRatio: -1, OpenFor: -1, MaxOpenFor: -1,
			OpenJitter: -1, Probes: -1, MaxHosts: -1, SlowAfter: -1}).cfg
		assert.Equal(t, []any{def.Span, def.MinFailures, def.FailureRatio, def.OpenFor, def.MaxOpenFor, def.Probes},
			[]any{neg.Span, neg.MinFailures, neg.FailureRatio, neg.OpenFor, neg.MaxOpenFor, neg.Probes}, "negative: the default where it cannot be off")
		assert.Negative(t, neg.OpenJitter, "OpenJitter negative: no jitter")
		assert.Negative(t, neg.SlowAfter, "SlowAfter negative: the rule off")
		var absurd BreakerConfig
		require.NotPanics(t, func() {
			absurd = NewBreaker(BreakerConfig{Span: huge, MinFailures: huge, FailureRatio: 7, OpenFor: huge, MaxOpenFor: huge,
				OpenJitter: huge, Probes: huge, MaxHosts: huge, SlowAfter: huge}).cfg
		})
		assert.Equal(t, 1.0, absurd.FailureRatio, "a share above 1 is 1")
		for _, d := range []time.Duration{absurd.Span, absurd.OpenFor, absurd.MaxOpenFor, absurd.OpenJitter} {
			assert.Equal(t, maxBreakerDuration, d, "durations bounded so that their sums cannot overflow")
		}
		nan := NewBreaker(BreakerConfig{FailureRatio: math.NaN()}).cfg
		assert.Equal(t, def.FailureRatio, nan.FailureRatio, "NaN: the default")
	})
	t.Run("BudgetConfig", func(t *testing.T) {
		def := NewBudget(BudgetConfig{})
		assert.Equal(t, int64(defaultBudgetRatio*unit), def.ratio)
		assert.Equal(t, float64(defaultBudgetMinPerSecond), def.perSec)
		neg := NewBudget(BudgetConfig{Ratio: -1, MinPerSecond: -1, MaxTokens: -1, MaxHosts: -1})
		assert.Zero(t, neg.ratio, "Ratio negative: no deposits")
		assert.Zero(t, neg.perSec, "MinPerSecond negative: no floor")
		assert.Equal(t, def.max, neg.max, "MaxTokens negative: the default")
		for _, inf := range []BudgetConfig{
			{Ratio: math.Inf(1), MinPerSecond: math.Inf(1), MaxTokens: math.Inf(1), MaxHosts: huge},
			{Ratio: math.MaxFloat64, MinPerSecond: math.MaxFloat64, MaxTokens: math.MaxFloat64},
		} {
			var b *Budget
			require.NotPanics(t, func() { b = NewBudget(inf) })
			assert.Equal(t, int64(maxBudgetTokens*unit), b.ratio, "bounded: %+v", inf)
			assert.Equal(t, int64(maxBudgetTokens*unit), b.max, "bounded: %+v", inf)
			assert.Equal(t, float64(maxBudgetTokens), b.perSec, "bounded: %+v", inf)
			assert.Positive(t, b.global.floor.Burst(), "the floor's burst fits its integer")
		}
		ninf := NewBudget(BudgetConfig{Ratio: math.Inf(-1), MinPerSecond: math.Inf(-1)})
		assert.Zero(t, ninf.ratio, "-Inf is negative: off")
		assert.Zero(t, ninf.perSec, "-Inf is negative: off")
		nan := NewBudget(BudgetConfig{Ratio: math.NaN(), MinPerSecond: math.NaN(), MaxTokens: math.NaN()})
		assert.Equal(t, []any{def.ratio, def.perSec, def.max}, []any{nan.ratio, nan.perSec, nan.max}, "NaN: the default")
	})
	t.Run("policies", func(t *testing.T) {
		for _, p := range []Policy{FullJitter{Base: -1, Cap: -1}, EqualJitter{Base: -1, Cap: -1}, DecorrelatedJitter{Base: -1, Cap: -1}, Exponential{Base: -1, Cap: -1}} {
			assert.Equal(t, defaultCap, p.(interface{ MaxDelay() time.Duration }).MaxDelay(), "%T negative: the defaults", p)
		}
		for _, p := range []Policy{FullJitter{Base: huge, Cap: huge}, EqualJitter{Base: huge, Cap: huge}, DecorrelatedJitter{Base: huge, Cap: huge}, Exponential{Base: huge, Cap: huge}} {
			for n := 1; n < 100; n++ {
				d := p.Delay(n, huge)
				assert.GreaterOrEqual(t, d, time.Duration(0), "%T: delay %d", p, n)
			}
		}
	})
}

// sameFunc reports whether two functions are the same function.
func sameFunc[F any](a, b F) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

var _ http.RoundTripper = (*Transport)(nil)
