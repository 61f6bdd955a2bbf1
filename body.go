package retryhttp

import (
	"bytes"
	"context"
	"io"
)

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
