package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/retryhttp/retryhttp"
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
	return func(ctx context.Context, e env) error {
		p := &stripe.CustomerCreateParams{Email: stripe.String("a@example.com")}
		if key != "" {
			p.IdempotencyKey = stripe.String(key)
		}
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

var idempotencyKey = func(r Request) string { return r.IdempotencyKey }

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
			script: Always(stripe503), call: stripeRetrieve, status: 503, promised: 3 * 4, want: 4,
		},
		{
			// A body Stripe cannot parse is "not a Stripe error": retried.
			name: "a defaults, fast delays (GET, 503 HTML from a proxy)", opts: opts(fast),
			script: Always(stripeProxy503), call: stripeRetrieve, untyped: true, promised: 3 * 4, want: 3 * 4,
		},
		{
			name: "b SDK off + retryhttp defaults (GET)", tries: 1,
			script: Always(stripe503), call: stripeRetrieve, status: 503, promised: 4, want: 4,
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
			script: Always(stripe503), call: stripeCreate("order-42"), status: 503, promised: 4, want: 4,
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
			script: Always(stripe503), call: stripeCreate(""), status: 503, promised: 4, want: 4,
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
	}})
}
