package retryhttp

import (
	"context"
	"fmt"
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
}

// Option configures a Transport in New. The options that shape one
// request's retries return a RequestOption, which a request may also carry
// through ContextWithOptions; the options that return a plain Option set
// state or behaviour that a Transport shares between its requests (a
// budget, a breaker, hooks, the key), and only New takes them.
//
// Every option follows one rule for its argument. Zero (0 or nil) turns
// off what can be off: retries (WithMaxAttempts(0) sends each request
// once), the budget, the breaker, hooks, first-attempt jitter, waits asked
// for by Retry-After, the Retry-After spread, the body buffer, the
// response buffer, the attempt timeout and the wait for a key to recover
// (WithMaxWait(0) refuses at once). For a choice that cannot be off (the policy, the retry
// and idempotency tests, the key) zero restores the default. A negative
// number or duration has no meaning, and the option panics, naming itself.
type Option interface {
	applyTransport(*Transport)
}

// RequestOption is an Option that one request may take too, through
// ContextWithOptions: it shapes that request's own retries. Given to New,
// it sets the Transport's default for every request.
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

// nonNegative panics, naming the option, if v is negative.
func nonNegative[N int | int64 | time.Duration](option string, v N) {
	if v < 0 {
		panic(fmt.Sprintf("retryhttp: %s(%v): negative", option, v))
	}
}

// WithPolicy sets the policy that draws the delay before each retry.
// nil means the default, FullJitter{} (base 200 ms, cap 30 s).
func WithPolicy(p Policy) RequestOption {
	return newRequestOption("WithPolicy", func(s *settings) {
		if p == nil {
			p = FullJitter{}
		}
		s.policy = p
	})
}

// WithMaxAttempts sets how many attempts a request may make, the first
// included: 1 or 0 turns retries off. The default is 4. A request whose
// attempts are used while its key's failure is young may make up to two
// more to ride it out, within its deadline and WithMaxWait (see the
// package documentation); WithMaxWait(0) keeps it to n.
func WithMaxAttempts(n int) RequestOption {
	nonNegative("WithMaxAttempts", n)
	return newRequestOption("WithMaxAttempts", func(s *settings) { s.maxAttempts = max(n, 1) })
}

// WithFirstAttemptJitter delays each request's first attempt by a duration
// drawn from [0, max), so that a bulk sender's burst (10,000 deliveries from
// one batch) does not arrive at one instant. The wait ends early, with the
// context's error, if the request's context ends; or with an Error
// wrapping ErrCircuitOpen, and no attempt sent, if the key's circuit is or
// becomes open. 0 turns it off (the default).
func WithFirstAttemptJitter(max time.Duration) RequestOption {
	nonNegative("WithFirstAttemptJitter", max)
	return newRequestOption("WithFirstAttemptJitter", func(s *settings) { s.firstJitter = max })
}

// WithMaxRetryAfter clamps the wait a server's Retry-After header may ask
// for; the default is 30 s. 0 means a Retry-After
// never delays a retry beyond the spread.
func WithMaxRetryAfter(d time.Duration) RequestOption {
	nonNegative("WithMaxRetryAfter", d)
	return newRequestOption("WithMaxRetryAfter", func(s *settings) { s.maxRetryAfter = d })
}

// WithRetryAfterSpread sets the width of the random spread added above a
// Retry-After wait, or a hold's end, so that clients told the same instant
// do not return at the same instant. The spread follows the crowd: drawn
// when the server's wait is over, it is 1 ms for each request of the key
// then sleeping toward it or waiting for it beyond the first 100, up to
// this width, so that a lone caller, or a service's 100 workers, take a
// Retry-After as given while 1,100 or more are spread over all of it. The
// default is 1 s; 0 means no spread.
func WithRetryAfterSpread(d time.Duration) RequestOption {
	nonNegative("WithRetryAfterSpread", d)
	return newRequestOption("WithRetryAfterSpread", func(s *settings) { s.retryAfterSpread = d })
}

// WithRetryIf sets which outcomes of an attempt are retryable: f gets the
// response (nil on error) and the error (nil with a response). The caller's
// own context ending is never retried, whatever f says, and f cannot make a
// request that may not be sent twice retryable. nil means DefaultRetryIf.
// f must not read or close the response body.
func WithRetryIf(f func(*http.Response, error) bool) RequestOption {
	return newRequestOption("WithRetryIf", func(s *settings) {
		if f == nil {
			f = DefaultRetryIf
		}
		s.retryIf = f
	})
}

// WithIdempotentIf sets which requests may be sent more than once. nil means
// DefaultIdempotentIf. f must not modify the request. It is a rule of
// safety, not a choice of what to retry: it decides only for attempts
// that reached the server, or may have. An attempt that provably never
// did (its connection refused, its name not found, its TLS handshake
// failed) is retried whatever f says, as sending it again cannot apply it
// twice. To retry only some requests at all, give the others one attempt
// (WithMaxAttempts(1) in their context). For one request, mark it either
// way through its context:
//
//	always := func(*http.Request) bool { return true }
//	ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithIdempotentIf(always))
func WithIdempotentIf(f func(*http.Request) bool) RequestOption {
	return newRequestOption("WithIdempotentIf", func(s *settings) {
		if f == nil {
			f = DefaultIdempotentIf
		}
		s.idempotentIf = f
	})
}

// WithBodyBuffer lets requests whose body cannot be replayed (no GetBody)
// be retried: up to maxBytes of such a body are read into memory before the
// first attempt and replayed from there. A larger body is sent once, whole,
// and not retried. 0 turns buffering off (the default): only bodies with
// GetBody, such as those http.NewRequest makes from a bytes.Buffer,
// bytes.Reader or strings.Reader, are replayed.
func WithBodyBuffer(maxBytes int64) RequestOption {
	nonNegative("WithBodyBuffer", maxBytes)
	return newRequestOption("WithBodyBuffer", func(s *settings) { s.bodyBuffer = maxBytes })
}

// WithAttemptTimeout gives each attempt d to deliver its response headers.
// An attempt that runs out is a retryable transport error whose cause
// satisfies errors.Is(err, context.DeadlineExceeded). Reading the body of a
// response that arrived in time is not cut off: the attempt's context lives
// until the body is closed. 0 turns it off (the default); the request's own
// context still bounds everything. A d below one millisecond is raised to
// one: a shorter timeout falls within the scheduler's own jitter, so
// whether an attempt made it would depend on the machine's load, not on the
// host, and every attempt could fail the same way.
func WithAttemptTimeout(d time.Duration) RequestOption {
	nonNegative("WithAttemptTimeout", d)
	if d > 0 {
		d = max(d, minAttemptTimeout)
	}
	return newRequestOption("WithAttemptTimeout", func(s *settings) { s.attemptTimeout = d })
}

// WithAdaptiveRate sets the statuses that limit a key's send rate: an
// answer with one of them and no usable Retry-After (the server said "too
// many" but not when to come back) cuts the rate at which attempts to the
// key leave, first attempts and retries alike, to 0.7 of what it was; the
// rate then grows back along a CUBIC curve (RFC 9438) while the key answers
// normally, and pacing ends once it has grown well past what was
// throttled. Attempts to a paced key wait their turn, first come first
// served; the wait ends with the request's context, and a request whose
// deadline the queue ahead cannot fit returns at once. The default is 429
// only: a 503 without Retry-After may be an outage, the breaker's business;
// add it with WithAdaptiveRate(429, 503). While 429 is among the statuses,
// a 429 does not count toward tripping the key's circuit: the host is up
// and asks for less, and a batch whose first burst is answered 429 at once
// must not have its circuit opened. No status turns pacing off, that by
// statuses and that by the quota a server advertises in its rate-limit
// headers (RateLimit, X-RateLimit-* and the vendors' forms), which
// otherwise holds a key while its quota is spent and paces it at the rate
// the quota sustains. A key
// that has never been throttled costs nothing beyond the look-up of its key's
// lane, which a transport with a breaker makes anyway.
func WithAdaptiveRate(statuses ...int) RequestOption {
	statuses = slices.Clone(statuses)
	return newRequestOption("WithAdaptiveRate", func(s *settings) { s.throttleOn = statuses })
}

// WithMaxWait sets the longest a request waits, in all, for its key to
// recover, where the retry budget, an open circuit or an isolated key
// would otherwise refuse it. The default is 30 s; the request's context
// bounds the wait too. A waiting request holds no connection and no
// goroutine of the transport's; the key lets it go, oldest first, only on
// evidence that it is back (a probe or another request answered), at a
// rate that starts low and grows while the key keeps answering. The wait
// is not an attempt. It also bounds how long a key may have been failing
// for a request to wait for it: a key failing for longer is down, and its
// open circuit refuses requests at once, while those already waiting
// return when it has been failing for that long. A request whose attempts
// are used rides out a key failing for less (see WithMaxAttempts).
// When the wait ends unanswered, the caller gets what it would have got
// without waiting (the last response, or an Error with the reason), and
// Event and Error say how long it waited.
//
// 0 waits for nothing on the request's behalf, as a dispatcher with its
// own queue wants: a refusal of the budget or the circuit comes back at
// once, and so does a wait a server asked for longer than 1 s (a
// Retry-After, or a hold, with ReasonHeld); the
// caller asks RetryAt when to send the request again. The policy's own
// delays are slept as drawn (at most 0.8 s each under the default).
func WithMaxWait(d time.Duration) RequestOption {
	nonNegative("WithMaxWait", d)
	return newRequestOption("WithMaxWait", func(s *settings) { s.maxWait = d })
}

// WithResponseBuffer makes the transport read the body of a successful
// response (a 2xx status) into memory, up to maxBytes, before RoundTrip
// returns it, so that a body cut mid-read (the connection reset or closed
// before the declared Content-Length, or a chunked body's end, arrived) is
// retried like a transport error, instead of reaching the caller as a
// read error after the headers: RoundTrip cannot take a response back
// once it has returned it. It suits small JSON answers that a caller reads
// whole anyway; the body is then read before RoundTrip returns, and a
// caller that stops reading early no longer saves the rest of the
// transfer.
//
// The rules of a retry apply as to any transport error: only a request
// that may be sent again is buffered (idempotent, its body replayable, and
// more than one attempt allowed), and the others stream as they do
// without the option; a cut that is not retried (the budget, the circuit,
// the deadline, the attempts left, or WithRetryIf) ends the request with
// an Error wrapping the read error. A body the response declares larger
// than maxBytes is not read; one that turns out larger (no declared
// length) is handed back streaming, the bytes already read in front of
// the rest. A buffered body's ContentLength is its length. Stats counts
// the bodies buffered, cut and too large. 0 turns it off (the default).
//
// The read is bounded by the request's context only: WithAttemptTimeout
// bounds the wait for the response headers, not the body. A body that
// stalls without being cut keeps RoundTrip waiting until the context
// ends, so give the request a deadline; and leave the option off for
// streamed answers (server-sent events, long polls), which RoundTrip
// would return only once the stream ends.
func WithResponseBuffer(maxBytes int64) RequestOption {
	nonNegative("WithResponseBuffer", maxBytes)
	return newRequestOption("WithResponseBuffer", func(s *settings) { s.responseBuffer = maxBytes })
}

// WithConcurrencyLimit allows at most n attempts in flight (sent, response
// headers not yet back) to one key, so that one slow tenant cannot hold
// every connection and goroutine of the caller (a bulkhead). Attempts over
// the limit wait their turn, first come first served, until the request's
// context ends; a request of WithMaxWait(0), which waits for nothing, is
// refused at once instead (ReasonConcurrencyLimit), so that a dispatcher
// with a fixed pool of workers moves on to other work. 0 turns it off
// (the default).
func WithConcurrencyLimit(n int) Option {
	nonNegative("WithConcurrencyLimit", n)
	return newTransportOption("WithConcurrencyLimit", func(t *Transport) {
		t.s.inFlight = perkey.Limits{MaxInFlight: n}
	})
}

// WithKey sets what a request's circuit, hold and per-host budget are kept
// by: f returns the key, and requests with equal keys share them. nil means
// the default, scheme://host[:port] (the port only when it is not the
// scheme's default). On a path-style endpoint, where one host serves many
// buckets or tenants, key by the first path segment as well, so that one
// failing bucket does not stop the others:
//
//	retryhttp.WithKey(func(r *http.Request) string {
//		seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
//		return r.URL.Scheme + "://" + r.URL.Host + "/" + seg
//	})
//
// Hooks, errors and the breaker's snapshot report the key. f is called for
// every request, so it should be cheap; it must not modify the request.
func WithKey(f func(*http.Request) string) Option {
	return newTransportOption("WithKey", func(t *Transport) { t.keyFunc = f })
}

// WithCircuitOpenResponse makes a request that an open circuit refuses get
// a local 503 response instead of an error, so that an SDK above the
// transport handles it as it handles a server's 503 (its own error type,
// its own backoff). The response says when the circuit may let a probe
// through, in Retry-After (seconds), Retry-After-Ms and X-Amz-Retry-After
// (milliseconds, which aws-sdk-go-v2 reads), and carries the header
// X-Retryhttp-Local: circuit-open to mark it as made by this transport, not
// by the server; its body is a JSON error object. GiveUp hooks see it with
// Event.Local set, and Stats counts it in LocalResponses. A request
// first waits for the key to recover, as WithMaxWait allows, and gets the
// local 503 if its wait ends unanswered; with WithMaxWait(0) it gets it at
// once, so that the SDK's own backoff is all there is. Without this option
// (the default) the transport never invents a response: the caller gets an
// Error wrapping ErrCircuitOpen.
func WithCircuitOpenResponse() Option {
	return newTransportOption("WithCircuitOpenResponse", func(t *Transport) { t.localOpen = true })
}

// WithFailingHorizon makes RetryAt answer ReasonNotRetryable (give the request
// up) for a failure of a key that has been failing for longer than d: its
// circuit opened on failures that began more than d ago and has not closed
// since. A dispatcher with its own queue uses it to disable an endpoint
// that has been failing for days, as webhook senders do (Svix after five
// days, Stripe after three). Breaker.Host says since when a key has been
// failing. 0 turns it off (the default): RetryAt always gives an instant.
func WithFailingHorizon(d time.Duration) Option {
	nonNegative("WithFailingHorizon", d)
	return newTransportOption("WithFailingHorizon", func(t *Transport) { t.horizon = d })
}

// WithHooks sets hooks: given to New, called for every request through
// the transport; through ContextWithOptions, for the requests made with
// that context, after the transport's. nil means none.
func WithHooks(h *Hooks) RequestOption { return hooksOption{h} }

// hooksOption is WithHooks: the transport keeps its hooks, and a request's
// are kept beside them, not in its settings.
type hooksOption struct{ h *Hooks }

func (o hooksOption) applyTransport(t *Transport) { t.hooks = o.h }
func (o hooksOption) applyRequest(*settings)      {}
func (o hooksOption) String() string              { return "WithHooks" }

// WithBreaker sets the circuit breaker; nil turns it off. New uses a fresh
// NewBreaker(BreakerConfig{}) when this option is not given. Pass the same
// Breaker to several transports to share it.
func WithBreaker(b *Breaker) Option {
	return newTransportOption("WithBreaker", func(t *Transport) { t.breaker = b })
}

// WithBudget sets the retry budget; nil turns it off. New uses a fresh
// NewBudget(BudgetConfig{}) when this option is not given. Pass the same
// Budget to several transports to share it.
func WithBudget(b *Budget) Option {
	return newTransportOption("WithBudget", func(t *Transport) { t.budget = b })
}

// WithFleet shares the transport's breaker and budget through f, a fleet
// of package github.com/retryhttp/retryhttp/fleet. nil means none (the
// default).
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

// ContextWithOptions returns a copy of ctx that carries options for the
// requests made with it: they apply after the transport's own, to those
// requests only. SDKs pass the caller's context down to the transport, so
// this sets one call's retries through an SDK that hides its requests:
//
//	ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithMaxAttempts(1)) // no retries for this call
//
// The options a request may take are the RequestOptions: those that shape
// its own retries, and WithHooks. Options set again through a derived context add to the earlier ones, the later
// winning. A request with no options costs nothing more; one with options
// pays for a copy of the transport's settings.
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
	return &s
}
