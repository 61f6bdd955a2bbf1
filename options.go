package retryhttp

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/retryhttp/retryhttp/fleet"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// defaultMaxAttempts is the default number of attempts, the first included.
// With the default policy four attempts wait at most 0.2+0.4+0.8 = 1.4 s in
// all: enough to ride out a blip, short enough that a caller is not held
// long by a host that is down (the breaker handles that).
const defaultMaxAttempts = 4

// Defaults for a server's Retry-After header.
const (
	// defaultMaxRetryAfter clamps a server's Retry-After: the same bound as
	// defaultCap, so a hostile or broken header cannot park a request for
	// longer than the policy's longest delay plus the spread.
	defaultMaxRetryAfter = 30 * time.Second
	// defaultRetryAfterSpread is the width of the random spread added above a
	// Retry-After wait. Retry-After has a resolution of one second, so a
	// spread of up to one second never delays a client by more than the
	// smallest step the server could have asked for, and it turns 10,000
	// clients told the same instant into ten 100 ms slices of 1,000 instead
	// of one slice of 10,000.
	defaultRetryAfterSpread = time.Second
)

// defaultMaxWait is the longest a request waits, in all, for its key to
// recover, by default: the default policy's cap. A wait that long is still
// within a delivery's usefulness (an event delivered a minute late is
// still news; ten minutes late it is a log entry), and a request that
// waited its whole retry sequence would have spent about as long at its
// cap; the caller's own deadline bounds it first when shorter.
const defaultMaxWait = defaultCap

// minAttemptTimeout is the shortest attempt timeout WithAttemptTimeout sets.
const minAttemptTimeout = time.Millisecond

// settings are what a Transport's options set for each request.
type settings struct {
	policy           Policy
	stateful         bool // policy may use its prev argument: it needs per-host memory
	maxAttempts      int
	firstJitter      time.Duration
	maxRetryAfter    time.Duration
	retryAfterSpread time.Duration
	retryIf          func(*http.Response, error) bool
	idempotentIf     func(*http.Request) bool
	bodyBuffer       int64
	attemptTimeout   time.Duration
	throttleOn       []int // statuses that cut a key's send rate when they come without Retry-After
	// inFlight limits the attempts in flight per key (WithConcurrencyLimit):
	// MaxInFlight 0, no limit; Queue is set per request (see limits).
	inFlight       perkey.Limits
	slowCalls      bool          // the breaker counts slow attempts: time them (see clock)
	maxWait        time.Duration // the longest a request waits, in all, for its key to recover; 0: refuse at once
	responseBuffer int64         // the largest successful response body read before RoundTrip returns; 0: none
	hedge          float64       // the share of extra attempts hedging may send; 0: off
	// extras: an attempt needs more than a plain send (a response buffer,
	// hedging); see sendExtra. Set by New and for each request's options.
	extras bool
}

// setExtras sets s.extras from the settings it stands for.
func (s *settings) setExtras() { s.extras = s.responseBuffer > 0 || s.hedge > 0 }

// Option configures a Transport in New. Those that shape one request's
// retries are RequestOptions, which a request may also carry through
// ContextWithOptions; the others set what a Transport shares between its
// requests.
type Option interface {
	applyTransport(*Transport)
}

// RequestOption is an Option that one request may take too, through
// ContextWithOptions. Given to New, it sets the default for every request.
type RequestOption interface {
	Option
	applyRequest(*settings)
}

// requestOption sets what one request's retries are shaped by.
type requestOption struct {
	name string
	f    func(*settings)
}

func (o requestOption) applyTransport(t *Transport) { o.f(&t.s) }
func (o requestOption) applyRequest(s *settings)    { o.f(s) }
func (o requestOption) String() string              { return o.name }

// transportOption sets what a Transport shares between its requests.
type transportOption struct {
	name string
	f    func(*Transport)
}

func (o transportOption) applyTransport(t *Transport) { o.f(t) }
func (o transportOption) String() string              { return o.name }

func newRequestOption(name string, f func(*settings)) RequestOption {
	return requestOption{name: name, f: f}
}

func newTransportOption(name string, f func(*Transport)) Option {
	return transportOption{name: name, f: f}
}

// offIfNegative returns v, or 0 (off) for a negative v: in an option, zero
// and negative values alike turn the setting off.
func offIfNegative[N int | int64 | time.Duration](v N) N { return max(v, 0) }

// WithPolicy sets the policy that draws the delay before each retry; nil
// means FullJitter{}.
func WithPolicy(p Policy) RequestOption {
	return newRequestOption("WithPolicy", func(s *settings) {
		if p == nil {
			p = FullJitter{}
		}
		s.policy = p
	})
}

// WithMaxAttempts sets how many attempts a request may make, the first
// included; 1 or less turns retries off. The default is 4, and up to two
// more, within the deadline, while the key's failure is young.
func WithMaxAttempts(n int) RequestOption {
	return newRequestOption("WithMaxAttempts", func(s *settings) { s.maxAttempts = max(n, 1) })
}

// WithFirstAttemptJitter delays each request's first attempt by a duration
// drawn from [0, max), so that a bulk sender's burst does not arrive at
// one instant. Off by default.
func WithFirstAttemptJitter(max time.Duration) RequestOption {
	max = offIfNegative(max)
	return newRequestOption("WithFirstAttemptJitter", func(s *settings) { s.firstJitter = max })
}

// WithMaxRetryAfter clamps the wait a server's Retry-After may ask for.
// The default is 30 s; off, a Retry-After delays a retry by its spread
// only.
func WithMaxRetryAfter(d time.Duration) RequestOption {
	d = offIfNegative(d)
	return newRequestOption("WithMaxRetryAfter", func(s *settings) { s.maxRetryAfter = d })
}

// WithRetryAfterSpread sets the most of the random spread added above a
// Retry-After wait or a hold's end, so that clients told the same instant
// do not return at it together: 1 ms for each request of the key waiting
// beyond the first 100, up to this width. The default is 1 s.
func WithRetryAfterSpread(d time.Duration) RequestOption {
	d = offIfNegative(d)
	return newRequestOption("WithRetryAfterSpread", func(s *settings) { s.retryAfterSpread = d })
}

// WithRetryIf sets which outcomes of an attempt are retryable: f gets the
// response (nil on error) and the error (nil with a response); nil means
// DefaultRetryIf. It cannot make retryable the caller's context ending, or
// a request that may not be sent twice. f must not read or close the
// body.
func WithRetryIf(f func(*http.Response, error) bool) RequestOption {
	return newRequestOption("WithRetryIf", func(s *settings) {
		if f == nil {
			f = DefaultRetryIf
		}
		s.retryIf = f
	})
}

// WithIdempotentIf sets which requests may be sent more than once; nil
// means DefaultIdempotentIf. It decides only for attempts that reached the
// server, or may have: one that provably never did (its connection
// refused) is retried whatever f says. To keep a request from being
// retried at all, give it WithMaxAttempts(1) through its context. f must
// not modify the request.
func WithIdempotentIf(f func(*http.Request) bool) RequestOption {
	return newRequestOption("WithIdempotentIf", func(s *settings) {
		if f == nil {
			f = DefaultIdempotentIf
		}
		s.idempotentIf = f
	})
}

// WithBodyBuffer lets a request whose body has no GetBody be retried: up
// to maxBytes of it are read into memory first and replayed from there; a
// larger body is sent once. Off by default: only bodies with GetBody
// (http.NewRequest sets it for a bytes.Buffer, bytes.Reader or
// strings.Reader) are replayed.
func WithBodyBuffer(maxBytes int64) RequestOption {
	maxBytes = offIfNegative(maxBytes)
	return newRequestOption("WithBodyBuffer", func(s *settings) { s.bodyBuffer = maxBytes })
}

// WithAttemptTimeout gives each attempt d to deliver its response headers;
// one that runs out is a retryable error satisfying errors.Is(err,
// context.DeadlineExceeded). Reading the body is not cut off. Off by
// default; under 1 ms (the scheduler's jitter) is 1 ms.
func WithAttemptTimeout(d time.Duration) RequestOption {
	if d = offIfNegative(d); d > 0 {
		d = max(d, minAttemptTimeout)
	}
	return newRequestOption("WithAttemptTimeout", func(s *settings) { s.attemptTimeout = d })
}

// WithAdaptiveRate sets the statuses that, without a usable Retry-After,
// cut a key's send rate to 0.7 of what it was, to grow back along a CUBIC
// curve (RFC 9438). The default is 429; add 503 for S3's "503 SlowDown".
// With no status (a number outside 100 to 599 counts for none), pacing is
// off, the quotas servers advertise in rate-limit headers included.
func WithAdaptiveRate(statuses ...int) RequestOption {
	statuses = slices.DeleteFunc(slices.Clone(statuses), func(c int) bool { return c < 100 || c > 599 })
	return newRequestOption("WithAdaptiveRate", func(s *settings) { s.throttleOn = statuses })
}

// WithMaxWait sets the longest a request waits, in all, for its key to
// recover where the budget or an open circuit would refuse it: 30 s by
// default, within the deadline, holding no connection. With 0, for a
// dispatcher's own queue, those refusals, a server's wait over 1 s and an
// attempt over WithConcurrencyLimit come back at once, with RetryAt.
func WithMaxWait(d time.Duration) RequestOption {
	d = offIfNegative(d)
	return newRequestOption("WithMaxWait", func(s *settings) { s.maxWait = d })
}

// WithResponseBuffer reads a 2xx response's body, up to maxBytes, before
// RoundTrip returns, so that a body cut mid-read is retried, not handed to
// the caller as a read error. Only requests that may be retried are
// buffered; a larger body comes back streaming. Off by default; leave it
// off for streams (server-sent events, long polls).
func WithResponseBuffer(maxBytes int64) RequestOption {
	maxBytes = offIfNegative(maxBytes)
	return newRequestOption("WithResponseBuffer", func(s *settings) { s.responseBuffer = maxBytes })
}

// WithHedging sends a second copy of a request's first attempt when it
// has not answered within the time its key's answers take but for the
// slowest maxExtraLoad of them, takes the first usable answer and cancels
// the other. 0.05 sends at most 5% more attempts. Only requests that may
// be sent twice are copied, and only while their key is healthy and the
// retry budget has tokens to spare. Off (0) by default.
func WithHedging(maxExtraLoad float64) RequestOption {
	if !(maxExtraLoad > 0) {
		maxExtraLoad = 0
	}
	maxExtraLoad = min(maxExtraLoad, 1)
	return newRequestOption("WithHedging", func(s *settings) { s.hedge = maxExtraLoad })
}

// WithConcurrencyLimit allows at most n attempts in flight to one key, so
// that one slow tenant cannot take every connection and worker (a
// bulkhead). Attempts over it wait their turn; one of WithMaxWait(0) is
// refused at once (ReasonConcurrencyLimit). Off by default.
func WithConcurrencyLimit(n int) Option {
	n = offIfNegative(n)
	return newTransportOption("WithConcurrencyLimit", func(t *Transport) {
		t.s.inFlight = perkey.Limits{MaxInFlight: n}
	})
}

// WithKey sets what a request's circuit, hold, send rate and per-host
// budget are kept by; nil means scheme://host[:port]. Key by tenant, bucket
// or API key where one host serves many, so that one failing or throttled
// does not stop the others. f is called for every request: keep it cheap.
func WithKey(f func(*http.Request) string) Option {
	return newTransportOption("WithKey", func(t *Transport) { t.keyFunc = f })
}

// WithCircuitOpenResponse gives a request an open circuit refuses a local
// 503 instead of an error, for an SDK above that handles a 503 its own
// way. It says when to come back (Retry-After, Retry-After-Ms,
// X-Amz-Retry-After) and carries X-Retryhttp-Local: circuit-open.
func WithCircuitOpenResponse() Option {
	return newTransportOption("WithCircuitOpenResponse", func(t *Transport) { t.localOpen = true })
}

// WithFailingHorizon makes RetryAt answer ReasonNotRetryable for a failure
// of a key failing for longer than d, as webhook senders disable an
// endpoint after days (Stripe three, Svix five), and bounds RetryAt's
// instant to d ahead. Off by default.
func WithFailingHorizon(d time.Duration) Option {
	d = offIfNegative(d)
	return newTransportOption("WithFailingHorizon", func(t *Transport) { t.horizon = d })
}

// WithHooks sets hooks: given to New, for every request; through
// ContextWithOptions, for that context's requests, after the transport's.
// nil means none.
func WithHooks(h *Hooks) RequestOption { return hooksOption{h} }

// hooksOption is WithHooks: the transport keeps its hooks, and a request's
// are kept beside them, not in its settings.
type hooksOption struct{ h *Hooks }

func (o hooksOption) applyTransport(t *Transport) { t.hooks = o.h }
func (o hooksOption) applyRequest(*settings)      {}
func (o hooksOption) String() string              { return "WithHooks" }

// WithBreaker sets the circuit breaker, which may be shared between
// transports; nil turns it off. The default is NewBreaker(BreakerConfig{}).
func WithBreaker(b *Breaker) Option {
	return newTransportOption("WithBreaker", func(t *Transport) { t.breaker = b })
}

// WithBudget sets the retry budget, which may be shared between
// transports; nil turns it off. The default is NewBudget(BudgetConfig{}).
func WithBudget(b *Budget) Option {
	return newTransportOption("WithBudget", func(t *Transport) { t.budget = b })
}

// WithFleet shares the transport's breaker and budget with other
// processes through f (package github.com/retryhttp/retryhttp/fleet). nil
// means none.
func WithFleet(f *fleet.Fleet) Option {
	return newTransportOption("WithFleet", func(t *Transport) { t.fleet = f })
}

// requestKey is the context key of what one request carries for the
// transport: its hooks and its options, in one value so that RoundTrip
// looks the context up once.
type requestKey struct{}

type perRequest struct {
	hooks *Hooks
	opts  []RequestOption
}

// perRequestOf returns a copy of what ctx carries for the transport, or an
// empty one.
func perRequestOf(ctx context.Context) *perRequest {
	pr := &perRequest{}
	if old, ok := ctx.Value(requestKey{}).(*perRequest); ok {
		*pr = *old
		pr.opts = slices.Clone(old.opts)
	}
	return pr
}

// ContextWithOptions returns a copy of ctx whose requests take opts after
// the transport's own (and after any given through a parent context), so
// that one call through an SDK can be shaped:
//
//	ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithMaxAttempts(1)) // no retries for this call
func ContextWithOptions(ctx context.Context, opts ...RequestOption) context.Context {
	pr := perRequestOf(ctx)
	for _, o := range opts {
		switch o := o.(type) {
		case nil:
		case hooksOption:
			pr.hooks = o.h
		default:
			pr.opts = append(pr.opts, o)
		}
	}
	return context.WithValue(ctx, requestKey{}, pr)
}

// settings returns the transport's settings with the request's options
// applied.
func (pr *perRequest) settings(base *settings) *settings {
	s := *base
	for _, o := range pr.opts {
		o.applyRequest(&s)
	}
	s.stateful = stateful(s.policy)
	s.setExtras()
	return &s
}
