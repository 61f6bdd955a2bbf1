package retryhttp

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
)

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

// bufferResponse reads the body of a successful response into memory as
// WithResponseBuffer says, and returns what the attempt came to: the
// response, with its body in memory or handed back streaming; or, for a
// body cut mid-read, no response and the error that cut it.
func (r *retrier) bufferResponse(resp *http.Response, err error) (*http.Response, error) {
	if r.s.responseBuffer <= 0 {
		return resp, err // off: the one check on the success path, inlined
	}
	return r.readResponse(resp, err)
}

// readResponse is bufferResponse with the buffer on.
func (r *retrier) readResponse(resp *http.Response, err error) (*http.Response, error) {
	max := r.s.responseBuffer
	switch {
	case err != nil || resp.StatusCode/100 != 2 || resp.Body == http.NoBody:
		return resp, err
	case !r.idempotent || r.unreplayable || r.s.maxAttempts <= 1:
		// A cut could not be retried: buffering would only delay the
		// response, and hold a full-duplex exchange, whose request body
		// is still being written, until it deadlocks.
		return resp, nil
	case resp.ContentLength > max:
		r.t.stats.respTooLarge.Add(1)
		return resp, nil
	}
	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	// One byte more than fits tells a body that fits from one that does
	// not; min keeps the limit from overflowing.
	_, rerr := buf.ReadFrom(io.LimitReader(resp.Body, min(max, math.MaxInt64-1)+1))
	switch {
	case rerr != nil:
		resp.Body.Close()
		if r.req.Context().Err() == nil {
			// Not the caller's context ending: the host's connection cut
			// the body.
			r.t.stats.respCut.Add(1)
		}
		return nil, &cutError{read: buf.Len(), err: rerr}
	case int64(buf.Len()) > max:
		r.t.stats.respTooLarge.Add(1)
		resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(buf.Bytes()), resp.Body), Closer: resp.Body}
		return resp, nil
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	resp.ContentLength = int64(buf.Len())
	r.t.stats.respBuffered.Add(1)
	return resp, nil
}

// cutError is the error of an attempt whose response body was cut while
// the transport read it; it wraps the read error (io.ErrUnexpectedEOF for
// a body shorter than its Content-Length).
type cutError struct {
	read int // body bytes read before the cut
	err  error
}

func (e *cutError) Error() string {
	return fmt.Sprintf("retryhttp: response body cut after %d bytes: %v", e.read, e.err)
}

func (e *cutError) Unwrap() error { return e.err }
