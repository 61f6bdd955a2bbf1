// Package retryhttp provides an http.RoundTripper that retries the requests
// it safely can, spreads the retries so that many clients that failed
// together do not come back together, and stops retrying when retrying would
// only deepen an outage.
//
//	client := &http.Client{Transport: retryhttp.New(nil)}
//
// By default: full jitter (base 200 ms, cap 30 s), 4 attempts, Retry-After
// clamped to 30 s and spread, a retry budget of a tenth of the traffic, a
// circuit breaker per key (scheme://host[:port]), a send rate that follows
// 429s and advertised quotas, and a wait of up to 30 s for a key to
// recover where the budget or an open circuit would refuse a request.
//
// # What it retries
//
// GET, HEAD, OPTIONS, TRACE, PUT and DELETE; POST and PATCH only with a
// non-empty Idempotency-Key; any method that provably never reached the
// server (the dial or the TLS handshake failed). The body must be
// replayable (GetBody, http.NoBody, or WithBodyBuffer). The statuses 408,
// 429, 500, 502, 503 and 504, unless X-Should-Retry or Stripe-Should-Retry
// says otherwise, and transport errors other than the caller's context
// ending, certificate errors and errors of the request itself.
//
// When a request stops, the caller gets the last response, body unread,
// and a nil error; or, without one, an *Error naming the key, the attempts
// and the Reason. Why a response came back unretried: Transport.Why. When
// to send it again: Transport.RetryAt.
//
// # Settings
//
// Every number, in an option or a config field, follows one rule, and none
// panics, as settings come from configuration files:
//
//   - A negative value turns the setting off where it can be off (no
//     retries, no wait, no jitter, no spread, no buffer, no timeout, no
//     limit, no floor), and means the default where it cannot (a policy's
//     base, a breaker's span).
//   - Zero in an option is the same: an option is given only to set
//     something, so WithMaxAttempts(0) sends once and WithMaxWait(0) waits
//     for nothing. Zero in a config field means the default, so that a
//     config lists only the fields it changes.
//   - A value beyond what the setting can mean is clamped to the nearest
//     that it can (a ratio above 1 is 1; a count or a duration too large to
//     act on is bounded, as the field says), and NaN means the default.
//   - nil turns off a part that can be off (WithBudget, WithBreaker,
//     WithHooks, WithFleet), and restores the default of a choice that
//     cannot (WithPolicy, WithRetryIf, WithIdempotentIf, WithKey).
//
// # Which RoundTripper rule it bends
//
// An http.RoundTripper should not interpret the response. This one reads
// the status, as a 503 or a 429 is the commonest failure a retry mends. It
// keeps the rest: it never modifies the caller's request, closes its body
// on every path, returns a response or an error, never both, and invents
// a response only for WithCircuitOpenResponse.
//
// The order of the checks, the waits and every default with its reason are
// in the repository's README and docs/ (https://github.com/retryhttp/retryhttp).
package retryhttp
