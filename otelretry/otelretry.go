// Package otelretry records what a retryhttp.Transport does as OpenTelemetry
// metrics. NewHooks returns a retryhttp.Hooks whose callbacks add to the
// instruments of one metric.MeterProvider; hand it to the transport:
//
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//	hooks, err := otelretry.NewHooks(provider)
//	if err != nil {
//		return err
//	}
//	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithHooks(hooks))}
//
// # Instruments
//
// The meter is named "github.com/retryhttp/retryhttp/otelretry". Its
// instruments, with the attributes each carries:
//
//	retryhttp.attempts             Int64Counter        {attempt}     attempts sent, counted when each returns
//	    http.request.method, and http.response.status_code or error.type;
//	    retryhttp.hedge=true for a hedge (retryhttp.WithHedging)
//	retryhttp.retries              Int64Counter        {retry}       attempts after the first, counted as each is sent
//	    http.request.method
//	retryhttp.retry.delay          Float64Histogram    s             the wait before each retry
//	    retryhttp.retry (1 for the first retry; 16 also holds every later one),
//	    retryhttp.retry_after (the server's Retry-After set the wait)
//	retryhttp.retry_after          Int64Counter        {retry}       retries whose wait a Retry-After set
//	    retryhttp.clamped (the server asked for more than WithMaxRetryAfter allows)
//	retryhttp.budget.denied        Int64Counter        {retry}       retries the retry budget refused
//	    http.request.method
//	retryhttp.give_ups             Int64Counter        {request}     requests that stopped on a failure
//	    http.request.method, retryhttp.reason (Reason.String, such as
//	    "attempts used"), and http.response.status_code or error.type
//	retryhttp.waits                Int64Counter        {wait}        waits of requests for their key to recover, counted as each ends
//	    retryhttp.cause (Reason.String: "circuit open", "budget exhausted",
//	    or "none" for a wait behind others), retryhttp.released (the key
//	    let the request go; false: the wait ran out or its context ended)
//	retryhttp.wait.duration        Float64Histogram    s             the length of each wait
//	    retryhttp.cause, retryhttp.released
//	retryhttp.circuit.transitions  Int64Counter        {transition}  changes of a host's circuit
//	    retryhttp.circuit.from, retryhttp.circuit.to (State.String, such as "half-open")
//	retryhttp.circuit.open         Int64UpDownCounter  {circuit}     circuits open now (half-open ones are not)
//	retryhttp.quota.responses      Int64Counter        {response}    responses whose advertised quota (rate-limit headers) was applied
//	    retryhttp.quota.exhausted (a policy had nothing left: the key was held until its reset)
//	retryhttp.quota.rate           Float64Gauge        {request}/s   the send rate the key is held to after the quota was applied (0: not paced)
//
// These agree with the transport's own retryhttp.Stats: attempts with
// Attempts, retries with Retries, the delay histogram's count with the
// delays counted in Delays, give_ups with GiveUps, waits with Waits (and,
// released, with WaitsReleased), the wait histogram's sum with WaitTime;
// budget.denied with BudgetDenied, but for a request that had waited out
// its whole wait allowance (WithMaxWait) before the budget refused it,
// which budget.denied does not count. A refusal that waits is counted when
// its wait ends; one handed back, with the give-up. The delay histogram counts retries when they are scheduled and
// retryhttp.retries when they are sent, so a retry whose wait the context
// or an opening circuit cut short is in the first only. Retry-After is
// counted only on retries that were scheduled, so retryhttp.retry_after can
// be below RetryAfterSeen, which also counts headers on responses that
// ended a request.
//
// # What is recorded, and what never is
//
// http.request.method is the request's method, "GET" for an empty one, and
// "_OTHER" for a method that RFC 9110 and RFC 5789 do not define, so a
// caller cannot grow the number of series without bound. error.type is
// "timeout" for an error that reports a timeout (an attempt timeout
// included), "canceled" for a canceled context, "circuit_open" for a request
// an open circuit refused, and otherwise the error's Go type, as
// semconv.ErrorType gives it (such as "*net.OpError").
//
// The host is recorded, as server.address and server.port, only with
// WithHostAttribute, because every host a client talks to multiplies the
// series of every instrument. Header values, URL paths, query strings and
// bodies are never recorded. Measurements are made with the request's
// context, so an exemplar can point at the request's trace; circuit changes,
// which belong to a host, with context.Background.
//
// # Installing the hooks once
//
// Install the hooks with retryhttp.WithHooks, on the transport (given to
// retryhttp.New) or per request (through retryhttp.ContextWithOptions), not
// both: a request that carries
// them twice is counted twice. Circuit changes are recorded by
// OnStateChange, given to the Breaker, which reports each change once
// however many transports share it.
package otelretry

import (
	"context"
	"errors"
	"net/http"

	"github.com/retryhttp/retryhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ScopeName is the name of the meter that NewHooks takes from its
// MeterProvider: the package's import path.
const ScopeName = "github.com/retryhttp/retryhttp/otelretry"

// DelayBuckets returns the bucket boundaries, in seconds, of the
// retryhttp.retry.delay histogram: 1 ms and below for a policy that retries at once and a
// Retry-After of 0; 10, 50 and 100 ms; the bounds of the default FullJitter,
// 200 ms doubling up to 25.6 s, then its 30 s cap; and 31 s, the default
// Retry-After clamp plus its spread. A View in the SDK can replace them.
func DelayBuckets() []float64 {
	return []float64{0.001, 0.01, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 31}
}

// Option adjusts NewHooks.
type Option func(*config)

type config struct {
	host bool
}

// WithHostAttribute adds server.address and server.port to every
// measurement: the host of the request's URL, or of the circuit that
// changed; without it no measurement names a host. Each host a client talks to then adds series to every instrument,
// and each measurement builds its attribute set afresh instead of reusing
// one, so give it only to a client that talks to a known, small set of
// hosts.
func WithHostAttribute() Option {
	return func(c *config) { c.host = true }
}

// NewHooks returns hooks that record a Transport's attempts, retries, give-ups
// and circuit changes with instruments of the meter ScopeName from mp. nil
// means the global MeterProvider, otel.GetMeterProvider(). It returns an
// error if an instrument cannot be created. The hooks are safe for
// concurrent use; transports that share them add to the same series.
func NewHooks(mp metric.MeterProvider, opts ...Option) (*retryhttp.Hooks, error) {
	r, err := recorderFor(mp, opts)
	if err != nil {
		return nil, err
	}
	return &retryhttp.Hooks{
		AttemptStart:   r.attemptStart,
		AttemptDone:    r.attemptDone,
		RetryScheduled: r.retryScheduled,
		GiveUp:         r.giveUp,
		WaitDone:       r.waitDone,
		Quota:          r.quota,
	}, nil
}

// OnStateChange returns a function for retryhttp.BreakerConfig.OnStateChange
// that records the breaker's circuit changes (retryhttp.circuit.transitions,
// retryhttp.circuit.open) with the same instruments as NewHooks. The
// Breaker calls it once for each change, whichever transport's request made
// it, so the open-circuit gauge stays true for a Breaker shared between
// transports. mp and opts are as for NewHooks.
func OnStateChange(mp metric.MeterProvider, opts ...Option) (func(retryhttp.Event), error) {
	r, err := recorderFor(mp, opts)
	if err != nil {
		return nil, err
	}
	return r.circuitChange, nil
}

// recorderFor makes the recorder of NewHooks and OnStateChange: the same
// instruments, which a MeterProvider hands out once however often they are
// asked for.
func recorderFor(mp metric.MeterProvider, opts []Option) (*recorder, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	var c config
	for _, o := range opts {
		o(&c)
	}
	return newRecorder(mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL)), c)
}

// recorder holds the instruments and the attribute sets recorded on them.
// Its fields are set once by newRecorder; the caches guard themselves.
type recorder struct {
	host bool // record server.address and server.port

	attempts     metric.Int64Counter
	retries      metric.Int64Counter
	delay        metric.Float64Histogram
	retryAfter   metric.Int64Counter
	budgetDenied metric.Int64Counter
	giveUps      metric.Int64Counter
	waits        metric.Int64Counter
	waitLength   metric.Float64Histogram
	transitions  metric.Int64Counter
	open         metric.Int64UpDownCounter
	quotas       metric.Int64Counter
	quotaRate    metric.Float64Gauge

	attemptSets setCache[attemptKey]
	methodSets  setCache[methodKey]
	delaySets   setCache[delayKey]
	clampSets   setCache[clampKey]
	quotaSets   setCache[exhaustedKey]
	giveUpSets  setCache[giveUpKey]
	circuitSets setCache[circuitKey]
	waitSets    setCache[waitKey]
	noSets      setCache[noKey]
}

func newRecorder(m metric.Meter, c config) (*recorder, error) {
	r := &recorder{host: c.host}
	var err, e error
	counter := func(name, unit, desc string) metric.Int64Counter {
		ctr, cerr := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = errors.Join(err, cerr)
		return ctr
	}
	r.attempts = counter("retryhttp.attempts", "{attempt}",
		"Attempts sent to the next RoundTripper, counted when each returns.")
	r.retries = counter("retryhttp.retries", "{retry}",
		"Attempts after a request's first, counted as each is sent.")
	r.retryAfter = counter("retryhttp.retry_after", "{retry}",
		"Retries whose wait a server's Retry-After header set.")
	r.budgetDenied = counter("retryhttp.budget.denied", "{retry}",
		"Retries the retry budget refused.")
	r.giveUps = counter("retryhttp.give_ups", "{request}",
		"Requests that stopped being retried on a failure, by reason.")
	r.transitions = counter("retryhttp.circuit.transitions", "{transition}",
		"Changes of state of a host's circuit.")
	r.waits = counter("retryhttp.waits", "{wait}",
		"Waits of requests for their key to recover, counted as each ends.")
	r.quotas = counter("retryhttp.quota.responses", "{response}",
		"Responses whose advertised quota (rate-limit headers) the transport applied.")
	r.quotaRate, e = m.Float64Gauge("retryhttp.quota.rate", metric.WithUnit("{request}/s"),
		metric.WithDescription("The send rate a key is held to after its advertised quota was applied; 0 when it is not paced."))
	err = errors.Join(err, e)
	r.waitLength, e = m.Float64Histogram("retryhttp.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("The length of each wait of a request for its key to recover."),
		metric.WithExplicitBucketBoundaries(DelayBuckets()...))
	err = errors.Join(err, e)
	r.delay, e = m.Float64Histogram("retryhttp.retry.delay", metric.WithUnit("s"),
		metric.WithDescription("The wait before each retry."),
		metric.WithExplicitBucketBoundaries(DelayBuckets()...))
	err = errors.Join(err, e)
	r.open, e = m.Int64UpDownCounter("retryhttp.circuit.open", metric.WithUnit("{circuit}"),
		metric.WithDescription("Circuits that are open: refusing requests without touching the network."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// maxRetryAttr is the largest value of the retryhttp.retry attribute, which
// stands for that retry and every later one, so that WithMaxAttempts(1000)
// cannot make a thousand series. It matches the histograms of
// retryhttp.Stats.Delays.
const maxRetryAttr = 16

func (r *recorder) attemptStart(i retryhttp.Event) {
	if i.Attempt > 1 {
		r.retries.Add(i.Request.Context(), 1, r.methodSets.get(methodKey(method(i.Request)), r.hostOf(i.Request)).add...)
	}
}

func (r *recorder) attemptDone(i retryhttp.Event) {
	k := attemptKey{method: method(i.Request), status: i.Status, hedge: i.Hedge}
	if i.Err != nil {
		// The transport normalises an attempt's outcome to a response or
		// an error, never both: a status is recorded only without an error.
		k = attemptKey{method: k.method, errType: errorType(i.Err), hedge: i.Hedge}
	}
	r.attempts.Add(i.Request.Context(), 1, r.attemptSets.get(k, r.hostOf(i.Request)).add...)
}

func (r *recorder) retryScheduled(i retryhttp.Event) {
	ctx := i.Request.Context()
	host := r.hostOf(i.Request)
	k := delayKey{retry: min(i.Attempt, maxRetryAttr), retryAfter: i.RetryAfter}
	r.delay.Record(ctx, i.Delay.Seconds(), r.delaySets.get(k, host).record...)
	if i.RetryAfter {
		r.retryAfter.Add(ctx, 1, r.clampSets.get(clampKey(i.Clamped), host).add...)
	}
}

func (r *recorder) giveUp(i retryhttp.Event) {
	ctx := i.Request.Context()
	host := r.hostOf(i.Request)
	k := giveUpKey{method: method(i.Request), reason: i.Reason, status: i.Status}
	if i.Err != nil {
		// Status is 0 with an error: the error names the outcome.
		k.errType = errorType(i.Err)
	}
	r.giveUps.Add(ctx, 1, r.giveUpSets.get(k, host).add...)
	if i.Reason == retryhttp.ReasonBudgetExhausted && i.Waited == 0 {
		// Handed back at once; a refusal that waited was counted when its
		// wait ended.
		r.budgetDenied.Add(ctx, 1, r.methodSets.get(methodKey(k.method), host).add...)
	}
}

func (r *recorder) waitDone(i retryhttp.Event) {
	ctx := i.Request.Context()
	host := r.hostOf(i.Request)
	m := r.waitSets.get(waitKey{cause: i.Reason, released: i.Released}, host)
	r.waits.Add(ctx, 1, m.add...)
	r.waitLength.Record(ctx, i.Waited.Seconds(), m.record...)
	if i.Reason == retryhttp.ReasonBudgetExhausted {
		r.budgetDenied.Add(ctx, 1, r.methodSets.get(methodKey(method(i.Request)), host).add...)
	}
}

func (r *recorder) quota(i retryhttp.Event) {
	ctx := i.Request.Context()
	host := r.hostOf(i.Request)
	r.quotas.Add(ctx, 1, r.quotaSets.get(exhaustedKey(!i.HeldUntil.IsZero()), host).add...)
	r.quotaRate.Record(ctx, i.Rate, r.noSets.get(noKey{}, host).record...)
}

func (r *recorder) circuitChange(i retryhttp.Event) {
	// The change belongs to a host, not to the request that caused it, so
	// it is recorded without that request's context.
	ctx := context.Background()
	var host []attribute.KeyValue
	if r.host {
		host = hostAttrs(i.Key)
	}
	r.transitions.Add(ctx, 1, r.circuitSets.get(circuitKey{from: i.From, to: i.To}, host).add...)
	// Half-open is not open: a circuit leaving open for half-open is one
	// fewer open circuit, and one failing its probe is one more again.
	switch {
	case i.To == retryhttp.StateOpen && i.From != retryhttp.StateOpen:
		r.open.Add(ctx, 1, r.noSets.get(noKey{}, host).add...)
	case i.From == retryhttp.StateOpen && i.To != retryhttp.StateOpen:
		r.open.Add(ctx, -1, r.noSets.get(noKey{}, host).add...)
	}
}

// hostOf returns the host attributes of req, or nil without
// WithHostAttribute.
func (r *recorder) hostOf(req *http.Request) []attribute.KeyValue {
	if !r.host || req.URL == nil {
		return nil
	}
	return urlHostAttrs(req.URL)
}
