package attempt

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
)

// Buffering says what ReadResponse did with a response.
type Buffering uint8

const (
	// Streamed: the response is left as it came (no success with a body
	// to read, or a cut could not be retried).
	Streamed Buffering = iota
	// Buffered: the body was read whole into memory.
	Buffered
	// TooLarge: the body is larger than the buffer, and is handed back
	// streaming.
	TooLarge
	// Cut: the body was cut mid-read; the attempt failed with a cut
	// error.
	Cut
)

// ReadResponse reads the body of a successful response (a 2xx status)
// into memory, up to max bytes, and returns what the attempt came to: the
// response, with its body in memory or handed back streaming; or, for a
// body cut mid-read, no response and the error that cut it, which wraps
// the read error (io.ErrUnexpectedEOF for a body shorter than its
// Content-Length). resp and err are what Send returned; retryable says
// whether a cut could be retried (the request may be sent again and more
// than one attempt is allowed).
func ReadResponse(resp *http.Response, err error, max int64, retryable bool) (*http.Response, Buffering, error) {
	switch {
	case err != nil || resp.StatusCode/100 != 2 || resp.Body == http.NoBody:
		return resp, Streamed, err
	case !retryable:
		// A cut could not be retried: buffering would only delay the
		// response, and hold a full-duplex exchange, whose request body
		// is still being written, until it deadlocks.
		return resp, Streamed, nil
	case resp.ContentLength > max:
		return resp, TooLarge, nil
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
		return nil, Cut, &cutError{read: buf.Len(), err: rerr}
	case int64(buf.Len()) > max:
		resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(buf.Bytes()), resp.Body), Closer: resp.Body}
		return resp, TooLarge, nil
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	resp.ContentLength = int64(buf.Len())
	return resp, Buffered, nil
}

// cutError is the error of an attempt whose response body was cut while
// it was read; it wraps the read error (io.ErrUnexpectedEOF for a body
// shorter than its Content-Length).
type cutError struct {
	read int // body bytes read before the cut
	err  error
}

func (e *cutError) Error() string {
	return fmt.Sprintf("retryhttp: response body cut after %d bytes: %v", e.read, e.err)
}

func (e *cutError) Unwrap() error { return e.err }
