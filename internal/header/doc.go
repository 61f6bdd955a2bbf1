// Package header parses what a response's headers say about when to send
// again: the wait a Retry-After asks for (RFC 9110 §10.2.3: delta-seconds
// or an HTTP-date), or the more precise Retry-After-Ms, and the quotas a
// server advertises in its rate-limit headers: the RateLimit and
// RateLimit-Policy fields of every draft of the IETF RateLimit header
// fields (draft-ietf-httpapi-ratelimit-headers), read as Structured Field
// Values (RFC 8941, revised by RFC 9651), the X-RateLimit-* headers and
// the vendors' own forms.
//
// Parsing is pure: a header in, a value out, nothing kept. Malformed values
// are ignored rather than reported, and every number saturates rather than
// overflows, so that no header, however hostile, can yield a negative or
// wrapped wait; waits and resets are clamped by the caller's bound. The
// common responses are read without allocating.
package header
