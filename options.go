package retryhttp

import (
	"fmt"
	"net/http"
	"slices"
	"time"
)

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
// included: 1 or 0 turns retries off. The default is 4.
func WithMaxAttempts(n int) RequestOption {
	nonNegative("WithMaxAttempts", n)
	return newRequestOption("WithMaxAttempts", func(s *settings) { s.maxAttempts = max(n, 1) })
}

// WithFirstAttemptJitter delays each request's first attempt by a duration
// drawn from [0, max), so that a bulk sender's burst (10,000 deliveries from
// one batch) does not arrive at one instant. The wait ends early, with the
// context's error, if the request's context ends. 0 turns it off (the
// default).
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
// Retry-After wait, so that clients told the same instant do not return at
// the same instant. The default is 1 s; 0 means no
// spread.
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
// DefaultIdempotentIf. f must not modify the request. For one request, mark
// it either way through its context:
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
// must not have its circuit opened. No status turns it off. A key
// that has never been throttled costs nothing beyond the look-up of its key's
// lane, which a transport with a breaker makes anyway.
func WithAdaptiveRate(statuses ...int) RequestOption {
	statuses = slices.Clone(statuses)
	return newRequestOption("WithAdaptiveRate", func(s *settings) { s.throttleOn = statuses })
}

// WithConcurrencyLimit allows at most n attempts in flight (sent, response
// headers not yet back) to one key, so that one slow tenant cannot hold
// every connection and goroutine of the caller (a bulkhead). Attempts over
// the limit wait their turn, until the request's context ends; with refuse
// set they are refused at once instead, with an Error wrapping
// ErrConcurrencyLimit, so that a dispatcher moves on to other work. 0 turns
// it off (the default).
func WithConcurrencyLimit(n int, refuse bool) Option {
	nonNegative("WithConcurrencyLimit", n)
	return newTransportOption("WithConcurrencyLimit", func(t *Transport) {
		t.s.maxInFlight, t.s.refuseInFlight = n, refuse
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
// GiveUpInfo.Local set, and Stats counts it in LocalResponses. A request
// first waits for the key to recover, as WithMaxWait allows, and gets the
// local 503 if its wait ends unanswered; with WithMaxWait(0) it gets it at
// once, so that the SDK's own backoff is all there is. Without this option
// (the default) the transport never invents a response: the caller gets an
// Error wrapping ErrCircuitOpen.
func WithCircuitOpenResponse() Option {
	return newTransportOption("WithCircuitOpenResponse", func(t *Transport) { t.localOpen = true })
}

// WithFailingHorizon makes RetryAt answer ReasonGone (give the request
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

// minAttemptTimeout is the shortest attempt timeout WithAttemptTimeout sets.
const minAttemptTimeout = time.Millisecond

// DefaultRetryIf is the default test of WithRetryIf. It retries transport
// errors and the statuses 408, 429, 500, 502, 503 and 504, unless the server
// advises otherwise: on a response with a status of 400 or above, the
// headers X-Should-Retry (sent by OpenAI, Anthropic and other APIs whose
// SDKs are generated alike) and Stripe-Should-Retry, when "true" or "false",
// decide instead. Whatever it says, the transport never retries the
// caller's own context ending, a certificate error, or an error the request
// itself caused before anything reached the host (a malformed URL or
// header, an unsupported scheme).
func DefaultRetryIf(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	if resp.StatusCode >= 400 {
		if advice, ok := shouldRetry(resp.Header); ok {
			return advice
		}
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// shouldRetry reads a server's advice on retrying a response: ok is false
// when it gives none.
func shouldRetry(h http.Header) (retry, ok bool) {
	for _, name := range [...]string{"X-Should-Retry", "Stripe-Should-Retry"} {
		switch h.Get(name) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	return false, false
}

// DefaultIdempotentIf is the default test of WithIdempotentIf: the methods
// that RFC 9110 defines as idempotent (GET, HEAD, OPTIONS, TRACE, PUT,
// DELETE), and POST or PATCH carrying a non-empty Idempotency-Key header,
// which asks the server to apply the request at most once.
func DefaultIdempotentIf(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	case http.MethodPost, http.MethodPatch:
		return req.Header.Get("Idempotency-Key") != ""
	}
	return false
}
