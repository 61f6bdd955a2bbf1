// Package retryhttp provides an http.RoundTripper that retries the requests
// it safely can, spreads the retries so that many clients that failed
// together do not come back together, and stops retrying when retrying would
// only deepen an outage.
//
// Use it as an http.Client's Transport, or under any SDK that accepts an
// *http.Client:
//
//	client := &http.Client{Transport: retryhttp.New(nil)}
//
// # Which RoundTripper rule it bends
//
// The http.RoundTripper contract says a RoundTripper should not interpret
// the response. This one looks at the status code, because a 503 or a 429 is
// the commonest failure a retry can mend. It keeps the rest of the contract:
// it never modifies the caller's request (each retry sends a clone with a
// fresh body), closes the request body on every path, returns a response or
// an error but never both, and never invents a response: when retries end on
// a status code, the caller gets that last real response, body unread, and a
// nil error.
//
// # What it retries
//
// Methods GET, HEAD, OPTIONS, TRACE, PUT and DELETE, and POST or PATCH only
// when they carry a non-empty Idempotency-Key header; any method when the
// request provably never reached the server (the dial or the TLS handshake
// failed). A body must be replayable (GetBody, http.NoBody, or buffered by
// WithBodyBuffer). Outcomes: the statuses 408, 429, 500, 502, 503 and 504,
// unless the server's X-Should-Retry or Stripe-Should-Retry header says
// otherwise, and transport errors other than the request's own context
// ending, certificate errors and errors the request itself causes (a
// malformed URL or header, an unsupported scheme). Everything else is
// returned at once.
//
// Before each retry it checks, in this order: are attempts left, may the
// request be sent again, is the host's circuit still closed, does the
// context's deadline leave room for the delay, is the next body ready, does
// the retry budget hold a token. Only then does it sleep, and the sleep
// ends as soon as the request's context ends or the host's circuit opens.
package retryhttp
