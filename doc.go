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
// The defaults: full jitter (base 200 ms, cap 30 s), 4 attempts, Retry-After
// clamped to 30 s and spread over up to 1 s (1 ms per request of the
// crowd that waits for the key beyond its first 100), a retry budget of a tenth of the
// traffic, a circuit per key (scheme://host[:port]), an adaptive send rate
// for 429, and a wait of up to 30 s for a key to recover where the budget or
// an open circuit would refuse a request.
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
// # The order of the checks
//
// Every attempt of a request goes through these steps, in this order.
//
//  1. Admission. The request's key lets the attempt go: a young key
//     (in its first 500 ms, until its 256th answer) lets ten attempts go
//     before its first answer and two more per answer, and the rest wait
//     their turn; a hold (a server's Retry-After of 5 s or more holds the
//     route it answered, method and path, or the whole key on host-wide
//     evidence: a 429, the host's root "/", a second route held, or a key
//     from WithKey; a 429's shorter Retry-After holds the key too, and
//     such a hold is tested with one attempt a tenth of the way in:
//     admitted, it ends, and the key's short holds are not applied again)
//     is waited out, plus a spread, if the deadline and the Retry-After
//     clamp allow, else the request stops (ReasonHeld); an open circuit, or
//     a key an operator isolated, is waited for until the key recovers, as
//     WithMaxWait allows, else the request stops (ReasonCircuitOpen); a
//     throttled key's send rate is waited for in turn, unless the queue
//     ahead cannot fit in the deadline even at the rate a paced attempt was
//     throttled at (ReasonDeadline; a rate its quota headers only
//     advertised never refuses a request unsent); then a place under
//     WithConcurrencyLimit is waited for, or refused
//     (ReasonConcurrencyLimit).
//  2. The attempt goes through the next RoundTripper, bounded by
//     WithAttemptTimeout.
//  3. Classification. An outcome that is not retryable is returned as it
//     is: a success. A failure is recorded for the key (its circuit, its
//     send rate, its hold), and the delay is drawn: the server's
//     Retry-After or Retry-After-Ms, clamped and spread, or the policy's.
//  4. The decision: is the outcome retryable (WithRetryIf); has the
//     caller's context not ended; are attempts left (WithMaxAttempts), or,
//     when they are used, is the key's failure young, so that the request
//     rides it out (see below); may the request be sent again: idempotent
//     (WithIdempotentIf) or never reached; is its body replayable; is the
//     key's circuit closed (if it has opened, the retry waits for the key
//     instead, with no delay and no token, or stops); does the deadline
//     leave room for the delay (if not, the request returns at once,
//     ReasonDeadline).
//  5. The next attempt's body is made ready (ReasonNotReplayable if
//     GetBody fails); then the retry budget must hold a token, unless
//     others already wait for the key while it fails as a whole, whom the
//     retry joins. Without a token the retry waits for a key that fails as
//     a whole (its circuit open, or no success since its failures began;
//     or any key without a breaker), as WithMaxWait allows; otherwise, or
//     when it may not wait, it stops (ReasonBudgetExhausted): a key that
//     answers others would let no wait end on anything.
//  6. The failed response is drained (at most 64 KiB and 100 ms, never
//     past the deadline) and closed, and the transport sleeps the delay,
//     waking early if the context ends or the key's circuit opens.
//
// Patience follows what is known of the key. A failure is young while the
// key has been failing for less than the longest a request would wait for
// it (WithMaxWait, 30 s by default), and sustained after. A request whose
// attempts are used while its key's failure is young rides it out: up to
// two more attempts, the first a quarter to a half of the way into what is
// left of its deadline (or, without one, of 10 s), the second as far again
// into what is left then, and never earlier than a Retry-After asks; it
// goes at once when another request of the key is answered. The key must
// be failing as a whole: its circuit open, its failure period under way
// with no success in it, or its latest 5 outcomes or more failures (so a
// key others find up, or a transport without a breaker, gives no
// ride-out); and no request may have ridden it out in vain since the key
// last answered (then the failure is not young any more).
// WithMaxAttempts(1) and WithMaxWait(0) turn it off. A sustained failure
// fails fast: requests its open circuit refuses return at once, and those
// waiting for it return when it has been failing for that long, not at the
// end of their own wait.
//
// A wait for a key holds no connection and no goroutine of the transport's,
// and is not an attempt; the key lets its waiters go, oldest first, only on
// evidence that it is back, at a rate that starts low and grows while it
// keeps answering. When a request stops, the caller gets the last response,
// its body unread, and a nil error; or, without a response, an *Error that
// names the key, the attempts, the Reason and how long the request waited.
// A dispatcher asks RetryAt when to send such a request again.
//
// # Problems and their options
//
//   - A POST must not be applied twice: send an Idempotency-Key header (it
//     is then retried), or mark requests with WithIdempotentIf, for one
//     request through ContextWithOptions.
//   - Requests hang, or a host black-holes them: WithAttemptTimeout. Even
//     without it, GETs whose callers' deadlines pass unanswered count
//     against the host (BreakerConfig.SlowAfter), so its circuit opens.
//   - A small response's body is cut mid-read: WithResponseBuffer, so
//     that the cut is retried before RoundTrip returns.
//   - A caller must have its answer within a time: a context deadline or
//     http.Client.Timeout; the transport returns at once when the next wait
//     cannot fit.
//   - A dispatcher with its own queue: WithMaxWait(0) and RetryAt, and
//     WithFailingHorizon to give an endpoint up.
//   - An SDK that retries by itself: WithMaxAttempts(1), or the SDK's
//     retries off; ContextWithOptions for one call; WithCircuitOpenResponse
//     so that the SDK sees a refusal as a 503.
//   - A body without GetBody must be retried: WithBodyBuffer.
//   - One failing bucket or tenant on a shared host: WithKey.
//   - One dead host spends every host's retries: NewBudget with
//     BudgetConfig.PerHost, given to WithBudget.
//   - One slow tenant takes every worker: WithConcurrencyLimit.
//   - A rate-limited API answers 429: WithAdaptiveRate, on for 429 by
//     default; add 503 for a host that sheds load with it.
//   - A batch leaves at one instant: WithFirstAttemptJitter.
//   - Many processes each learn an outage alone: WithFleet, with a fleet
//     of package github.com/retryhttp/retryhttp/fleet on the Store of the
//     redisstate module.
//   - A server's Retry-After asks too much: WithMaxRetryAfter and
//     WithRetryAfterSpread.
//   - Other retry rules or another backoff: WithRetryIf (calling
//     DefaultRetryIf), WithPolicy (FullJitter, EqualJitter,
//     DecorrelatedJitter, Exponential).
//   - A different budget or breaker, or none: WithBudget, WithBreaker.
//   - A host to take out by hand: Breaker.Isolate and Breaker.Reset.
//   - To see what happens: WithHooks, Transport.Stats,
//     BreakerConfig.OnStateChange, and the otelretry module.
//   - To test code that uses it: the retryhttptest package.
//
// # Which RoundTripper rule it bends
//
// The http.RoundTripper contract says a RoundTripper should not interpret
// the response. This one looks at the status code, because a 503 or a 429 is
// the commonest failure a retry can mend. It keeps the rest of the contract:
// it never modifies the caller's request (each retry sends a clone with a
// fresh body), closes the request body on every path, returns a response or
// an error but never both, and never invents a response unless
// WithCircuitOpenResponse asks it to: when retries end on a status code, the
// caller gets that last real response, body unread, and a nil error.
package retryhttp
