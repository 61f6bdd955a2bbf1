package retryhttp

import (
	"net/http"
	"strconv"
	"time"
)

// Option adjusts a Transport in New.
type Option func(*Transport)

// WithPolicy sets the policy that draws the delay before each retry.
// nil means the default, FullJitter{} (base 200 ms, cap 30 s).
func WithPolicy(p Policy) Option {
	return func(t *Transport) {
		if p == nil {
			p = FullJitter{}
		}
		t.s.policy = p
	}
}

// WithMaxAttempts sets how many attempts a request may make, the first
// included: 1 turns retries off. The default is DefaultMaxAttempts (4).
// It panics if n < 1, which would send nothing.
func WithMaxAttempts(n int) Option {
	if n < 1 {
		panic("retryhttp: WithMaxAttempts(" + strconv.Itoa(n) + "): n counts every attempt, the first included, and must be at least 1")
	}
	return func(t *Transport) { t.s.maxAttempts = n }
}

// WithFirstAttemptJitter delays each request's first attempt by a duration
// drawn from [0, max), so that a bulk sender's burst (10,000 deliveries from
// one batch) does not arrive at one instant. The wait ends early, with the
// context's error, if the request's context ends. max <= 0 turns it off (the
// default).
func WithFirstAttemptJitter(max time.Duration) Option {
	return func(t *Transport) { t.s.firstJitter = max }
}

// WithMaxRetryAfter clamps the wait a server's Retry-After header may ask
// for; the default is DefaultMaxRetryAfter (30 s). 0 means a Retry-After
// never delays a retry beyond the spread. It panics if d < 0.
func WithMaxRetryAfter(d time.Duration) Option {
	if d < 0 {
		panic("retryhttp: WithMaxRetryAfter(" + d.String() + "): negative duration")
	}
	return func(t *Transport) { t.s.maxRetryAfter = d }
}

// WithRetryAfterSpread sets the width of the random spread added above a
// Retry-After wait, so that clients told the same instant do not return at
// the same instant. The default is DefaultRetryAfterSpread (1 s); 0 means no
// spread. It panics if d < 0.
func WithRetryAfterSpread(d time.Duration) Option {
	if d < 0 {
		panic("retryhttp: WithRetryAfterSpread(" + d.String() + "): negative duration")
	}
	return func(t *Transport) { t.s.retryAfterSpread = d }
}

// WithRetryIf sets which outcomes of an attempt are retryable: f gets the
// response (nil on error) and the error (nil with a response). The caller's
// own context ending is never retried, whatever f says, and f cannot make a
// request that may not be sent twice retryable. nil means DefaultRetryIf.
// f must not read or close the response body.
func WithRetryIf(f func(*http.Response, error) bool) Option {
	return func(t *Transport) {
		if f == nil {
			f = DefaultRetryIf
		}
		t.s.retryIf = f
	}
}

// WithIdempotentIf sets which requests may be sent more than once. nil means
// DefaultIdempotentIf. f must not modify the request.
func WithIdempotentIf(f func(*http.Request) bool) Option {
	return func(t *Transport) {
		if f == nil {
			f = DefaultIdempotentIf
		}
		t.s.idempotentIf = f
	}
}

// WithBodyBuffer lets requests whose body cannot be replayed (no GetBody)
// be retried: up to maxBytes of such a body are read into memory before the
// first attempt and replayed from there. A larger body is sent once, whole,
// and not retried. maxBytes <= 0 turns buffering off (the default): only
// bodies with GetBody, such as those http.NewRequest makes from a
// bytes.Buffer, bytes.Reader or strings.Reader, are replayed.
func WithBodyBuffer(maxBytes int64) Option {
	return func(t *Transport) { t.s.bodyBuffer = maxBytes }
}

// WithAttemptTimeout gives each attempt d to deliver its response headers.
// An attempt that runs out is a retryable transport error whose cause
// satisfies errors.Is(err, context.DeadlineExceeded). Reading the body of a
// response that arrived in time is not cut off: the attempt's context lives
// until the body is closed. d <= 0 turns it off (the default); the request's
// own context still bounds everything. A d below one millisecond is raised
// to one: a shorter timeout falls within the scheduler's own jitter, so
// whether an attempt made it would depend on the machine's load, not on the
// host, and every attempt could fail the same way.
func WithAttemptTimeout(d time.Duration) Option {
	if d > 0 {
		d = max(d, minAttemptTimeout)
	}
	return func(t *Transport) { t.s.attemptTimeout = d }
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
