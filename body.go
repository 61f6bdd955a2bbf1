package retryhttp

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
)

// replayable decides whether the request may be sent more than once and, if
// so, how each retry gets a fresh body. The caller's request is sent as it is
// by the first attempt unless its body had to be buffered.
func (r *retrier) replayable() {
	t, req := r.t, r.req
	switch {
	case t.maxAttempts <= 1:
		r.stop = ReasonAttemptsUsed
	case !t.idempotentIf(req):
		r.stop = ReasonNotIdempotent
	case req.Body == nil || req.Body == http.NoBody:
		// Nothing to replay.
	case req.GetBody != nil:
		r.body = req.GetBody
	case t.bodyBuffer > 0:
		r.bufferBody()
	default:
		r.stop = ReasonBodyNotReplayable
	}
}

// bufferBody reads up to bodyBuffer bytes of a body that cannot be replayed.
// A body that fits is kept and replayed from memory; a larger one is sent
// once, whole: the bytes read so far, then the rest of the caller's body.
func (r *retrier) bufferBody() {
	req := r.req
	// One byte more than fits tells a body that fits from one that does not;
	// min keeps the limit from overflowing for WithBodyBuffer(math.MaxInt64).
	buf, err := io.ReadAll(io.LimitReader(req.Body, min(r.t.bodyBuffer, math.MaxInt64-1)+1))
	if err != nil || int64(len(buf)) > r.t.bodyBuffer {
		// Too large, or the read failed: stream what was read and the rest
		// once, so the next RoundTripper sees the same body (and the same
		// read error) that it would have seen without this transport.
		first := req.Clone(req.Context())
		first.Body = &prefixedBody{Reader: io.MultiReader(bytesReader(buf), errAfter{req.Body, err}), Closer: req.Body}
		r.first, r.stop = first, ReasonBodyNotReplayable
		return
	}
	req.Body.Close()
	r.body = func() (io.ReadCloser, error) { return io.NopCloser(bytesReader(buf)), nil }
	r.first, _ = r.clone()
}

// clone returns a copy of the caller's request with a fresh body.
func (r *retrier) clone() (*http.Request, error) {
	c := r.req.Clone(r.req.Context())
	if r.body != nil {
		b, err := r.body()
		if err != nil {
			return nil, err
		}
		c.Body, c.GetBody = b, r.body
	}
	return c, nil
}

// nextRequest prepares the next attempt's request before anything is
// drained, so that a failure to get a fresh body still returns the last
// response untouched.
func (r *retrier) nextRequest() (*http.Request, Reason) {
	c, err := r.clone()
	if err != nil {
		return nil, ReasonBodyNotReplayable
	}
	return c, ReasonNone
}

// drain reads at most drainLimit bytes of a discarded body, so its
// connection can be reused, then closes it.
func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, drainLimit)
	_ = body.Close()
}

// closeRequestBody closes the body of a request that will not be sent.
func closeRequestBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}

// bytesReader returns a reader over b; it exists so that the buffered-body
// code reads as what it does.
func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// prefixedBody is a request body made of the bytes already read from the
// caller's body followed by the rest of it; Close closes the caller's body.
type prefixedBody struct {
	io.Reader
	io.Closer
}

// errAfter is a reader that yields err at its end: it carries a read error
// met while buffering a body to the next RoundTripper, in its place.
type errAfter struct {
	r   io.Reader
	err error
}

func (e errAfter) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return e.r.Read(p)
}

// cancelOnClose wraps a response body so that closing it ends the attempt's
// context. A body that is also an io.Writer (a 101 Switching Protocols
// response) stays one.
func cancelOnClose(body io.ReadCloser, cancel context.CancelFunc) io.ReadCloser {
	if rwc, ok := body.(io.ReadWriteCloser); ok {
		return &cancelReadWriteCloser{cancelBody{rwc, cancel}, rwc}
	}
	return &cancelBody{body, cancel}
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

type cancelReadWriteCloser struct {
	cancelBody
	w io.Writer
}

func (b *cancelReadWriteCloser) Write(p []byte) (int, error) { return b.w.Write(p) }
