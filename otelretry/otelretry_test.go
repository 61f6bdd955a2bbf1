package otelretry_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/otelretry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// reply is what the scripted next RoundTripper answers to one attempt.
type reply struct {
	status int
	header http.Header
	err    error
	wait   time.Duration // how long the attempt takes; virtual inside synctest
	hang   bool          // block until the attempt's context ends, then return its error
}

// roundTripFunc is an in-memory next RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// script answers attempt i with replies[i]; the last reply repeats. It is
// safe for concurrent use, but its order is meaningful only for one request
// at a time.
func script(replies ...reply) roundTripFunc {
	var mu sync.Mutex
	n := 0
	return func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		r := replies[min(n, len(replies)-1)]
		n++
		mu.Unlock()
		if req.Body != nil {
			_, _ = io.Copy(io.Discard, req.Body)
			_ = req.Body.Close()
		}
		time.Sleep(r.wait)
		switch {
		case r.hang:
			<-req.Context().Done()
			return nil, req.Context().Err()
		case r.err != nil:
			return nil, r.err
		}
		return respond(req, r.status, r.header), nil
	}
}

func respond(req *http.Request, status int, h http.Header) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}
}

// newProvider returns a MeterProvider whose readings the reader collects.
func newProvider(t *testing.T) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	return reader, mp
}

// readings is what one collection holds, by instrument name and then by
// attribute set, encoded as "key=value,key=value" in key order.
type readings struct {
	sums   map[string]map[string]int64   // counters and up-down counters
	counts map[string]map[string]uint64  // histograms: values recorded
	totals map[string]map[string]float64 // histograms: their sum
	gauges map[string]map[string]float64 // gauges: the last value
}

func collect(t *testing.T, reader *sdkmetric.ManualReader) readings {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := readings{sums: map[string]map[string]int64{}, counts: map[string]map[string]uint64{}, totals: map[string]map[string]float64{},
		gauges: map[string]map[string]float64{}}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelretry.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				got.sums[m.Name] = map[string]int64{}
				for _, p := range d.DataPoints {
					got.sums[m.Name][encode(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				got.counts[m.Name] = map[string]uint64{}
				got.totals[m.Name] = map[string]float64{}
				for _, p := range d.DataPoints {
					got.counts[m.Name][encode(p.Attributes)] = p.Count
					got.totals[m.Name][encode(p.Attributes)] = p.Sum
				}
			case metricdata.Gauge[float64]:
				got.gauges[m.Name] = map[string]float64{}
				for _, p := range d.DataPoints {
					got.gauges[m.Name][encode(p.Attributes)] = p.Value
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return got
}

func encode(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// sendAll sends each request through rt and closes what comes back.
func sendAll(t *testing.T, rt http.RoundTripper, reqs ...*http.Request) {
	t.Helper()
	for _, req := range reqs {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			assert.NoError(t, resp.Body.Close())
		}
	}
}

// get returns a request without a body; it panics on a malformed URL, which
// only a broken test passes.
func get(method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		panic(err)
	}
	return req
}

// Attribute sets as the readings encode them.
const (
	get200 = "http.request.method=GET,http.response.status_code=200"
	get503 = "http.request.method=GET,http.response.status_code=503"
	getM   = "http.request.method=GET"
	retry1 = "retryhttp.retry=1,retryhttp.retry_after=false"
	retry2 = "retryhttp.retry=2,retryhttp.retry_after=false"
)

func TestNewHooks(t *testing.T) {
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	tests := []struct {
		name   string
		opts   []retryhttp.Option
		script []reply
		req    func() *http.Request
		sums   map[string]map[string]int64
		counts map[string]map[string]uint64
		totals map[string]map[string]float64
	}{
		{
			name:   "503 503 200 recovers",
			script: []reply{{status: 503}, {status: 503}, {status: 200}},
			sums: map[string]map[string]int64{
				"retryhttp.attempts": {get503: 2, get200: 1},
				"retryhttp.retries":  {getM: 2},
			},
			counts: map[string]map[string]uint64{"retryhttp.retry.delay": {retry1: 1, retry2: 1}},
		},
		{
			name:   "attempts used",
			opts:   []retryhttp.Option{retryhttp.WithMaxAttempts(3)},
			script: []reply{{status: 503}},
			sums: map[string]map[string]int64{
				"retryhttp.attempts": {get503: 3},
				"retryhttp.retries":  {getM: 2},
				"retryhttp.give_ups": {get503 + ",retryhttp.reason=attempts used": 1},
			},
			counts: map[string]map[string]uint64{"retryhttp.retry.delay": {retry1: 1, retry2: 1}},
		},
		{
			name:   "budget denied",
			opts:   []retryhttp.Option{retryhttp.WithBudget(retryhttp.NewBudget(retryhttp.BudgetConfig{Ratio: -1, MinPerSecond: -1})), retryhttp.WithMaxWait(0)},
			script: []reply{{status: 503}},
			sums: map[string]map[string]int64{
				"retryhttp.attempts":      {get503: 1},
				"retryhttp.budget.denied": {getM: 1},
				"retryhttp.give_ups":      {get503 + ",retryhttp.reason=budget exhausted": 1},
			},
		},
		{
			// The retry the budget refuses waits for the key instead, and
			// goes as the key's test: the refusal is counted when the wait
			// ends, and there is no give-up.
			name:   "budget denied, waited",
			opts:   []retryhttp.Option{retryhttp.WithBudget(retryhttp.NewBudget(retryhttp.BudgetConfig{Ratio: -1, MinPerSecond: -1}))},
			script: []reply{{status: 503}, {status: 200}},
			sums: map[string]map[string]int64{
				"retryhttp.attempts":      {get503: 1, get200: 1},
				"retryhttp.retries":       {getM: 1},
				"retryhttp.budget.denied": {getM: 1},
				"retryhttp.waits":         {"retryhttp.cause=budget exhausted,retryhttp.released=true": 1},
			},
			counts: map[string]map[string]uint64{"retryhttp.wait.duration": {"retryhttp.cause=budget exhausted,retryhttp.released=true": 1}},
		},
		{
			name: "Retry-After sets the delay, clamped once",
			opts: []retryhttp.Option{retryhttp.WithMaxRetryAfter(10 * time.Second), retryhttp.WithRetryAfterSpread(0)},
			script: []reply{
				{status: 429, header: http.Header{"Retry-After": {"2"}}},
				{status: 503, header: http.Header{"Retry-After": {"120"}}},
				{status: 200},
			},
			sums: map[string]map[string]int64{
				"retryhttp.attempts": {
					"http.request.method=GET,http.response.status_code=429": 1,
					get503: 1,
					get200: 1,
				},
				"retryhttp.retries":     {getM: 2},
				"retryhttp.retry_after": {"retryhttp.clamped=false": 1, "retryhttp.clamped=true": 1},
			},
			counts: map[string]map[string]uint64{"retryhttp.retry.delay": {
				"retryhttp.retry=1,retryhttp.retry_after=true": 1,
				"retryhttp.retry=2,retryhttp.retry_after=true": 1,
			}},
			totals: map[string]map[string]float64{"retryhttp.retry.delay": {
				"retryhttp.retry=1,retryhttp.retry_after=true": 2,
				"retryhttp.retry=2,retryhttp.retry_after=true": 10,
			}},
		},
		{
			name:   "transport error then success",
			script: []reply{{err: dialErr}, {status: 200}},
			req:    func() *http.Request { return get(http.MethodPut, "https://api.example/v1") },
			sums: map[string]map[string]int64{
				"retryhttp.attempts": {
					"error.type=*net.OpError,http.request.method=PUT":       1,
					"http.request.method=PUT,http.response.status_code=200": 1,
				},
				"retryhttp.retries": {"http.request.method=PUT": 1},
			},
			counts: map[string]map[string]uint64{"retryhttp.retry.delay": {retry1: 1}},
		},
		{
			name:   "attempt timeouts",
			opts:   []retryhttp.Option{retryhttp.WithAttemptTimeout(time.Second), retryhttp.WithMaxAttempts(2)},
			script: []reply{{hang: true}},
			sums: map[string]map[string]int64{
				"retryhttp.attempts": {"error.type=timeout,http.request.method=GET": 2},
				"retryhttp.retries":  {getM: 1},
				"retryhttp.give_ups": {"error.type=timeout,http.request.method=GET,retryhttp.reason=attempts used": 1},
			},
			counts: map[string]map[string]uint64{"retryhttp.retry.delay": {retry1: 1}},
		},
		{
			name:   "404 is not a failure",
			script: []reply{{status: 404}},
			sums: map[string]map[string]int64{
				"retryhttp.attempts": {"http.request.method=GET,http.response.status_code=404": 1},
			},
		},
		{
			name:   "unknown method is _OTHER and not idempotent",
			script: []reply{{status: 503}},
			req:    func() *http.Request { return get("PURGE", "https://api.example/v1") },
			sums: map[string]map[string]int64{
				"retryhttp.attempts": {"http.request.method=_OTHER,http.response.status_code=503": 1},
				"retryhttp.give_ups": {"http.request.method=_OTHER,http.response.status_code=503,retryhttp.reason=not replayable": 1},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reader, mp := newProvider(t)
				hooks, err := otelretry.NewHooks(mp)
				require.NoError(t, err)
				opts := append([]retryhttp.Option{
					retryhttp.WithHooks(hooks),
					retryhttp.WithPolicy(immediate{}),
					retryhttp.WithBreaker(nil),
				}, tc.opts...)
				tr := retryhttp.New(script(tc.script...), opts...)
				req := get(http.MethodGet, "https://api.example/v1")
				if tc.req != nil {
					req = tc.req()
				}
				sendAll(t, tr, req)

				got := collect(t, reader)
				assert.Equal(t, tc.sums, got.sums, "counters")
				if tc.counts == nil {
					tc.counts = map[string]map[string]uint64{}
				}
				assert.Equal(t, tc.counts, got.counts, "histogram counts")
				for name, want := range tc.totals {
					assert.Equal(t, want, got.totals[name], "%s sums", name)
				}
				// The hooks agree with the transport's own counters.
				st := tr.Stats()
				assert.Equal(t, int64(st.Attempts), total(got.sums["retryhttp.attempts"]), "attempts vs Stats")
				assert.Equal(t, int64(st.Retries), total(got.sums["retryhttp.retries"]), "retries vs Stats")
				assert.Equal(t, int64(st.BudgetDenied), total(got.sums["retryhttp.budget.denied"]), "budget.denied vs Stats")
				var giveUps, delays uint64
				for _, n := range st.GiveUps {
					giveUps += n
				}
				for _, h := range st.Delays {
					delays += h.Count
				}
				assert.Equal(t, int64(giveUps), total(got.sums["retryhttp.give_ups"]), "give_ups vs Stats")
				assert.Equal(t, delays, total(got.counts["retryhttp.retry.delay"]), "retry.delay vs Stats")
				assert.Equal(t, int64(st.Waits), total(got.sums["retryhttp.waits"]), "waits vs Stats")
				assert.Equal(t, st.Waits, total(got.counts["retryhttp.wait.duration"]), "wait.duration vs Stats")
				var waited float64
				for _, v := range got.totals["retryhttp.wait.duration"] {
					waited += v
				}
				assert.InDelta(t, st.WaitTime.Seconds(), waited, 1e-9, "wait.duration's sum vs Stats")
			})
		})
	}
}

func total[V int64 | uint64](m map[string]V) V {
	var n V
	for _, v := range m {
		n += v
	}
	return n
}

// TestCircuit trips a circuit with failures spread over its span, is
// refused while it is open, and closes it with a probe after OpenFor.
func TestCircuit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newProvider(t)
		hooks, err := otelretry.NewHooks(mp)
		require.NoError(t, err)
		onChange, err := otelretry.OnStateChange(mp)
		require.NoError(t, err)
		breaker := retryhttp.NewBreaker(retryhttp.BreakerConfig{
			Span: time.Millisecond, MinFailures: 2, OpenFor: time.Minute, OpenJitter: -1,
			OnStateChange: onChange,
		})
		// Each failure takes a millisecond, so the second is a span after
		// the first, and trips the circuit.
		next := script(reply{status: 503, wait: time.Millisecond}, reply{status: 503, wait: time.Millisecond}, reply{status: 200})
		// Refusals come back at once (WithMaxWait(0)), so that the circuit's
		// refusal is what each request ends with.
		tr := retryhttp.New(next, retryhttp.WithHooks(hooks), retryhttp.WithPolicy(immediate{}),
			retryhttp.WithBudget(nil), retryhttp.WithBreaker(breaker), retryhttp.WithMaxWait(0))
		// A second transport shares the breaker, without the hooks: the
		// breaker still reports its changes once.
		other := retryhttp.New(next, retryhttp.WithBudget(nil), retryhttp.WithBreaker(breaker), retryhttp.WithMaxWait(0))

		// The first request trips the circuit on its second attempt, so no
		// third is scheduled and it gets that 503 back; the second request
		// is refused without an attempt.
		sendAll(t, tr, get(http.MethodGet, "https://api.example/a"), get(http.MethodGet, "https://api.example/b"))
		got := collect(t, reader)
		assert.Equal(t, map[string]map[string]int64{
			"retryhttp.attempts": {get503: 2},
			"retryhttp.retries":  {getM: 1},
			"retryhttp.give_ups": {
				"http.request.method=GET,http.response.status_code=503,retryhttp.reason=circuit open": 1,
				"error.type=circuit_open,http.request.method=GET,retryhttp.reason=circuit open":       1,
			},
			"retryhttp.circuit.transitions": {"retryhttp.circuit.from=closed,retryhttp.circuit.to=open": 1},
			"retryhttp.circuit.open":        {"": 1},
		}, got.sums)
		assert.Equal(t, map[string]uint64{retry1: 1}, got.counts["retryhttp.retry.delay"])

		// After OpenFor, a probe through the other transport half-opens the
		// circuit and its success closes it: the gauge follows.
		time.Sleep(time.Minute)
		sendAll(t, other, get(http.MethodGet, "https://api.example/c"))
		got = collect(t, reader)
		assert.Equal(t, map[string]int64{
			"retryhttp.circuit.from=closed,retryhttp.circuit.to=open":      1,
			"retryhttp.circuit.from=open,retryhttp.circuit.to=half-open":   1,
			"retryhttp.circuit.from=half-open,retryhttp.circuit.to=closed": 1,
		}, got.sums["retryhttp.circuit.transitions"])
		assert.Equal(t, map[string]int64{"": 0}, got.sums["retryhttp.circuit.open"])
		assert.Equal(t, map[string]int64{get503: 2}, got.sums["retryhttp.attempts"], "the other transport has no hooks")
	})
}

// TestHostAttribute checks that no measurement names a host unless asked,
// and that none ever holds a path, a query or a header value.
func TestHostAttribute(t *testing.T) {
	const host = "server.address=api.example,server.port=8443"
	tests := []struct {
		name     string
		opts     []otelretry.Option
		attempts map[string]int64
		circuit  map[string]int64
	}{
		{
			name:     "default",
			attempts: map[string]int64{get503: 2, get200: 1},
			circuit:  map[string]int64{"": 0},
		},
		{
			name:     "WithHostAttribute",
			opts:     []otelretry.Option{otelretry.WithHostAttribute()},
			attempts: map[string]int64{get503 + "," + host: 2, get200 + "," + host: 1},
			circuit:  map[string]int64{host: 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reader, mp := newProvider(t)
				hooks, err := otelretry.NewHooks(mp, tc.opts...)
				require.NoError(t, err)
				onChange, err := otelretry.OnStateChange(mp, tc.opts...)
				require.NoError(t, err)
				breaker := retryhttp.NewBreaker(retryhttp.BreakerConfig{
					Span: time.Millisecond, MinFailures: 2, OpenFor: time.Minute, OpenJitter: -1,
					OnStateChange: onChange,
				})
				next := script(reply{status: 503, wait: time.Millisecond}, reply{status: 503, wait: time.Millisecond}, reply{status: 200})
				tr := retryhttp.New(next, retryhttp.WithHooks(hooks), retryhttp.WithPolicy(immediate{}),
					retryhttp.WithBudget(nil), retryhttp.WithBreaker(breaker))
				secret := func(path string) *http.Request {
					req := get(http.MethodGet, "https://API.example:8443/"+path+"?token=secret")
					req.Header.Set("Authorization", "Bearer secret")
					return req
				}
				sendAll(t, tr, secret("private-a"))
				time.Sleep(time.Minute)
				sendAll(t, tr, secret("private-b"))

				got := collect(t, reader)
				assert.Equal(t, tc.attempts, got.sums["retryhttp.attempts"])
				assert.Equal(t, tc.circuit, got.sums["retryhttp.circuit.open"])
				for name, points := range got.sums {
					for set := range points {
						assert.Equal(t, tc.opts != nil, strings.Contains(set, host), "%s {%s}: host", name, set)
						assert.NotContains(t, set, "secret", name)
						assert.NotContains(t, set, "private", name)
					}
				}
				for name, points := range got.counts {
					for set := range points {
						assert.Equal(t, tc.opts != nil, strings.Contains(set, host), "%s {%s}: host", name, set)
					}
				}
			})
		})
	}
}

// TestConcurrent sends requests from many goroutines through one set of
// hooks, for the race detector and for exact totals.
func TestConcurrent(t *testing.T) {
	reader, mp := newProvider(t)
	hooks, err := otelretry.NewHooks(mp)
	require.NoError(t, err)
	next := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if strings.HasSuffix(req.URL.Path, "/fail") {
			return respond(req, 503, nil), nil
		}
		return respond(req, 200, nil), nil
	})
	tr := retryhttp.New(next, retryhttp.WithHooks(hooks), retryhttp.WithPolicy(immediate{}),
		retryhttp.WithBudget(nil), retryhttp.WithBreaker(nil), retryhttp.WithMaxAttempts(2))
	const goroutines, each = 16, 50
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				sendAll(t, tr, get(http.MethodGet, "http://api.example/ok"), get(http.MethodGet, "http://api.example/fail"))
			}
		})
	}
	wg.Wait()
	const n = goroutines * each
	got := collect(t, reader)
	assert.Equal(t, map[string]map[string]int64{
		"retryhttp.attempts": {get200: n, get503: 2 * n},
		"retryhttp.retries":  {getM: n},
		"retryhttp.give_ups": {get503 + ",retryhttp.reason=attempts used": n},
	}, got.sums)
	assert.Equal(t, map[string]uint64{retry1: n}, got.counts["retryhttp.retry.delay"])
}

// failingProvider's meters fail to create counters.
type failingProvider struct{ noop.MeterProvider }

func (failingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

type failingMeter struct{ noop.Meter }

var errNoCounter = errors.New("no counter")

func (failingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return noop.Int64Counter{}, errNoCounter
}

func TestNewHooksErrors(t *testing.T) {
	hooks, err := otelretry.NewHooks(failingProvider{})
	assert.ErrorIs(t, err, errNoCounter)
	assert.Nil(t, hooks)
}

func TestNewHooksNilProvider(t *testing.T) {
	// nil means the global provider, a no-op until one is set.
	hooks, err := otelretry.NewHooks(nil)
	require.NoError(t, err)
	require.NotNil(t, hooks)
	tr := retryhttp.New(script(reply{status: 503}, reply{status: 200}), retryhttp.WithHooks(hooks),
		retryhttp.WithPolicy(immediate{}))
	sendAll(t, tr, get(http.MethodGet, "https://api.example/v1"))
	assert.Equal(t, uint64(2), tr.Stats().Attempts)
}

// immediate retries at once: the tests' policy where a delay would only
// slow them down.
type immediate struct{}

func (immediate) Delay(int, time.Duration) time.Duration { return 0 }

// The quota a response advertises is counted, exhausted or not, as Stats
// counts it, and the rate it paces the key at is the gauge's.
func TestQuota(t *testing.T) {
	reader, mp := newProvider(t)
	hooks, err := otelretry.NewHooks(mp)
	require.NoError(t, err)
	policy := func(r string) http.Header {
		return http.Header{"Ratelimit-Policy": {`"p";q=100;w=10`}, "Ratelimit": {`"p";r=` + r + `;t=1`}}
	}
	tr := retryhttp.New(script(reply{status: 200, header: policy("50")}, reply{status: 200, header: policy("0")}, reply{status: 200}),
		retryhttp.WithHooks(hooks))
	sendAll(t, tr, get("GET", "http://example.test/a"), get("GET", "http://example.test/b"), get("GET", "http://example.test/c"))
	got := collect(t, reader)
	s := tr.Stats()
	assert.Equal(t, map[string]int64{"retryhttp.quota.exhausted=false": 1, "retryhttp.quota.exhausted=true": 1}, got.sums["retryhttp.quota.responses"])
	assert.Equal(t, int64(s.Quotas), total(got.sums["retryhttp.quota.responses"]))
	assert.Equal(t, int64(s.QuotaHeld), got.sums["retryhttp.quota.responses"]["retryhttp.quota.exhausted=true"])
	assert.InDelta(t, 9.5, got.gauges["retryhttp.quota.rate"][""], 1e-9, "95% of 100 per 10 s")
}
