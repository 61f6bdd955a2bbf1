// Package attempt holds the mechanics of one attempt of a request, apart
// from the decision whether to make another, which is the transport's:
//
//   - replaying a request body, as net/http's rewindBody does: a fresh body
//     from GetBody for each attempt, or one buffered in memory, and bodies
//     tracked so that two attempts never read one shared reader at once
//     (body.go, and the tracked bodies in handback.go);
//   - sending an attempt through the next RoundTripper, with its own
//     deadline for the response headers (send.go);
//   - what becomes of an attempt's bodies once it has failed: the bounded
//     drain of a discarded response body, and handing a failure back
//     without a write still going racing the caller's rewind of its body
//     (handback.go);
//   - reading a successful response body into memory before it is handed
//     back, so that a body cut mid-read can be retried (respbuffer.go);
//   - how far a request provably got: never past the dial or the TLS
//     handshake, or never processed by an HTTP/2 server (reach.go).
//
// Hooks, stats and every decision stay with the transport, which calls
// in here.
package attempt
