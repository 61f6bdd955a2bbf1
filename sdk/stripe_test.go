package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stripe/stripe-go/v82"
)

// Stripe's replies. A 503 from Stripe itself carries a JSON error; one from a
// proxy in front of it (a load balancer, an egress gateway) carries HTML.
var (
	stripe503 = Reply{Status: 503, Header: map[string]string{"Content-Type": "application/json", "Request-Id": "req_503"},
		Body: []byte(`{"error":{"type":"api_error","message":"scripted 503"}}`)}
	stripeProxy503 = Reply{Status: 503, Header: map[string]string{"Content-Type": "text/html"},
		Body: []byte("<html><body><h1>503 Service Unavailable</h1></body></html>\n")}
	stripeCustomer = Reply{Status: 200, Header: map[string]string{"Content-Type": "application/json", "Request-Id": "req_200"},
		Body: []byte(`{"id":"cus_123","object":"customer","email":"a@example.com"}`)}
)

// newStripe builds a Stripe client on e's *http.Client, pointed at the
// server, with e's tries (MaxNetworkRetries = tries-1).
func newStripe(e env) *stripe.Client {
	cfg := &stripe.BackendConfig{
		HTTPClient:    e.hc,
		URL:           stripe.String(e.srv.URL),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if e.tries > 0 {
		cfg.MaxNetworkRetries = stripe.Int64(int64(e.tries - 1))
	}
	backends := stripe.NewBackendsWithConfig(cfg)
	if !e.real {
		// Stripe sleeps 0.5 s, then about 1 s, between its tries; its
		// testing switch turns the sleeps off.
		backends.API.(*stripe.BackendImplementation).SetNetworkRetriesSleep(false)
	}
	return stripe.NewClient("sk_test_123", stripe.WithBackends(backends))
}

func stripeRetrieve(ctx context.Context, e env) error {
	_, err := newStripe(e).V1Customers.Retrieve(ctx, "cus_123", nil)
	return err
}

// stripeCreate creates a customer, a POST, with the given idempotency key
// ("" leaves the key to the SDK).
func stripeCreate(key string) func(context.Context, env) error {
	var k *string
	if key != "" {
		k = stripe.String(key)
	}
	return stripeCreateKey(k)
}

// stripeCreateKey creates a customer with params.IdempotencyKey set to key:
// nil leaves the key to the SDK; a pointer to "" makes the SDK send an
// empty Idempotency-Key, which is no key to retryhttp.
func stripeCreateKey(key *string) func(context.Context, env) error {
	return func(ctx context.Context, e env) error {
		p := &stripe.CustomerCreateParams{Email: stripe.String("a@example.com")}
		p.IdempotencyKey = key
		_, err := newStripe(e).V1Customers.Create(ctx, p)
		return err
	}
}

// stripeTyped checks that err is a *stripe.Error for the status.
func stripeTyped(err error, status int) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("not a *stripe.Error: %v", err)
	}
	if se.HTTPStatusCode != status {
		return fmt.Errorf("*stripe.Error status %d, want %d", se.HTTPStatusCode, status)
	}
	return nil
}

// stripeLocalTyped checks that the local 503 of an open circuit reaches
// the caller as a *stripe.Error parsed from its JSON body.
func stripeLocalTyped(err error, status int) error {
	if err := stripeTyped(err, status); err != nil {
		return err
	}
	var se *stripe.Error
	errors.As(err, &se)
	if se.Type != stripe.ErrorTypeAPI || se.Code != "circuit_open" || !strings.Contains(se.Msg, "circuit open") {
		return fmt.Errorf("*stripe.Error not parsed from the local body: type %q code %q message %q", se.Type, se.Code, se.Msg)
	}
	var api *stripe.APIError
	if !errors.As(err, &api) {
		return fmt.Errorf("no *stripe.APIError (the typed error of type api_error) in %v", err)
	}
	return nil
}

var idempotencyKey = func(r Request) string { return r.IdempotencyKey }

// emptyKey asserts that every request carried an Idempotency-Key header
// with an empty value.
func emptyKey(t *testing.T, reqs []Request) {
	for _, r := range reqs {
		v, ok := r.Header["Idempotency-Key"]
		assert.True(t, ok && len(v) == 1 && v[0] == "", "request %d: Idempotency-Key %q, want one empty value", r.N, v)
	}
}

func TestStripe(t *testing.T) {
	one := retryhttp.WithMaxAttempts(1)
	runSDK(t, sdkCase{name: "stripe", typed: stripeTyped, rows: []row{
		{
			name: "a defaults, real delays (GET, 503 JSON)", real: true,
			script: Always(stripe503), call: stripeRetrieve, status: 503, mayTrip: true,
		},
		{
			// Stripe does not retry a 503 whose body is a Stripe error: its
			// typed errors are retryable only as a 429 lock_timeout, and
			// that check comes before the status check.
			name: "a defaults, fast delays (GET, 503 JSON)", opts: opts(fast),
			script: Always(stripe503), call: stripeRetrieve, status: 503, promised: 3 * 4, want: 4 + rideOut,
		},
		{
			// A body Stripe cannot parse is "not a Stripe error": retried.
			name: "a defaults, fast delays (GET, 503 HTML from a proxy)", opts: opts(fast),
			script: Always(stripeProxy503), call: stripeRetrieve, untyped: true, promised: 3*4 + rideOut, want: 3*4 + rideOut,
		},
		{
			name: "b SDK off + retryhttp defaults (GET)", tries: 1,
			script: Always(stripe503), call: stripeRetrieve, status: 503, promised: 4 + rideOut, want: 4 + rideOut,
		},
		{
			name: "c retryhttp 1 attempt + SDK defaults (GET, 503 JSON)", opts: opts(one),
			script: Always(stripe503), call: stripeRetrieve, status: 503, promised: 3, want: 1,
		},
		{
			name: "c retryhttp 1 attempt + SDK defaults (GET, 503 HTML)", opts: opts(one),
			script: Always(stripeProxy503), call: stripeRetrieve, untyped: true, promised: 3, want: 3,
		},
		{
			name: "d POST + Idempotency-Key, SDK off + retryhttp defaults", tries: 1,
			script: Always(stripe503), call: stripeCreate("order-42"), status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(sameHeader("Idempotency-Key", idempotencyKey), sameBody, func(t *testing.T, reqs []Request) {
				if reqs[0].IdempotencyKey != "order-42" {
					t.Errorf("Idempotency-Key %q, want order-42", reqs[0].IdempotencyKey)
				}
			}),
		},
		{
			// Stripe adds a key of its own to every POST, so retryhttp
			// retries Stripe POSTs even when the caller gave none.
			name: "d POST, no key given, SDK off + retryhttp defaults", tries: 1,
			script: Always(stripe503), call: stripeCreate(""), status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(sameHeader("Idempotency-Key", idempotencyKey), sameBody),
		},
		{
			// ...and keeps that key across its own tries.
			name: "d POST, no key given, SDK defaults + retryhttp 1 attempt (HTML)", opts: opts(one),
			script: Always(stripeProxy503), call: stripeCreate(""), untyped: true, promised: 3, want: 3,
			check: checks(sameHeader("Idempotency-Key", idempotencyKey), sameBody),
		},
		{
			name: "e 503,503,200 (GET), both defaults", opts: nil,
			script: FailThen(2, stripe503, stripeCustomer), call: stripeRetrieve, promised: 4, want: 3,
		},

		// The recipe: Stripe's retries off (MaxNetworkRetries 0),
		// retryhttp's defaults. Stripe's own loop skips a 503 whose body is
		// a Stripe error (rows a, c), so retryhttp is the layer that retries
		// it; Stripe's POSTs carry a key, so they are retried too.
		{
			name: "r recipe: SDK off + retryhttp 4: GET, 503 forever", tries: 1,
			script: Always(stripe503), call: stripeRetrieve, status: 503, promised: 4 + rideOut, want: 4 + rideOut,
		},
		{
			name: "r recipe: SDK off + retryhttp 4: GET, 503 HTML forever", tries: 1,
			script: Always(stripeProxy503), call: stripeRetrieve, untyped: true, promised: 4 + rideOut, want: 4 + rideOut,
		},
		{
			name: "r recipe: SDK off + retryhttp 4: GET, 503,503,200", tries: 1,
			script: FailThen(2, stripe503, stripeCustomer), call: stripeRetrieve, promised: 4, want: 3,
		},
		{
			name: "r recipe: SDK off + retryhttp 4: POST + key, 503 forever", tries: 1,
			script: Always(stripe503), call: stripeCreate("order-7"), status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(sameHeader("Idempotency-Key", idempotencyKey), sameBody),
		},

		// The per-request form, the SDK's retries on: each SDK try is sent
		// once, whatever the transport's default (4).
		{
			name:   "p per-request 1 attempt, transport 4, SDK defaults: GET, 503 JSON",
			ctx:    perRequest(retryhttp.WithMaxAttempts(1)),
			script: Always(stripe503), call: stripeRetrieve, status: 503, promised: 3, want: 1,
			inspect: oncePerTry,
		},
		{
			name:   "p per-request 1 attempt, transport 4, SDK defaults: GET, 503 HTML",
			ctx:    perRequest(retryhttp.WithMaxAttempts(1)),
			script: Always(stripeProxy503), call: stripeRetrieve, untyped: true, promised: 3, want: 3,
			inspect: oncePerTry,
		},

		// Idempotency through the context. Stripe keys every POST itself;
		// an empty key (params.IdempotencyKey = "") is sent as an empty
		// header, which is no key: such a POST is sent once, unless the
		// context marks it idempotent.
		{
			name: "i POST, empty key, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			script: Always(stripe503), call: stripeCreateKey(stripe.String("")), status: 503, want: 1,
			check: emptyKey,
		},
		{
			name: "i POST, empty key, idempotent by context, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(always)),
			script: Always(stripe503), call: stripeCreateKey(stripe.String("")), status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(emptyKey, sameBody),
		},
		{
			name: "i GET, not idempotent by context, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(never)),
			script: Always(stripe503), call: stripeRetrieve, status: 503, want: 1,
		},
		{
			name: "i POST + key, not idempotent by context, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(never)),
			script: Always(stripe503), call: stripeCreate("order-8"), status: 503, want: 1,
		},

		// An open circuit. With the local 503 Stripe parses the body as its
		// own api_error and, as for any Stripe error body, does not retry:
		// it reads no Retry-After. Without it Stripe sees a transport error
		// and retries it after its own 0.5 s and about 1 s.
		{
			name: "k local 503, circuit open: SDK off", tries: 1,
			opts: opts(retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen))),
			prep: tripHost, script: withTrip(Always(stripeCustomer)), call: stripeRetrieve,
			status: 503, typed: stripeLocalTyped, unsent: true, inspect: triesN(1),
		},
		{
			name: "k local 503, circuit open: SDK defaults, real delays", real: true,
			opts: opts(retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen))),
			prep: tripHost, script: withTrip(Always(stripeCustomer)), call: stripeRetrieve,
			status: 503, typed: stripeLocalTyped, unsent: true, inspect: triesN(1),
		},
		{
			name: "k local 503, circuit open: POST, SDK defaults, real delays", real: true,
			opts: opts(retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen))),
			prep: tripHost, script: withTrip(Always(stripeCustomer)), call: stripeCreate(""),
			status: 503, typed: stripeLocalTyped, unsent: true, inspect: triesN(1),
		},
		{
			name: "k no local 503, circuit open: SDK off", tries: 1,
			opts: opts(noWait, retryhttp.WithBreaker(quickBreaker(longOpen))),
			prep: tripHost, script: withTrip(Always(stripeCustomer)), call: stripeRetrieve,
			circuitErr: true, unsent: true, inspect: triesAll(1, 0),
		},
		{
			name: "k no local 503, circuit open: SDK defaults, real delays", real: true,
			opts: opts(noWait, retryhttp.WithBreaker(quickBreaker(longOpen))),
			prep: tripHost, script: withTrip(Always(stripeCustomer)), call: stripeRetrieve,
			circuitErr: true, unsent: true, inspect: triesAll(3, 2*time.Second),
		},
	}})
}
