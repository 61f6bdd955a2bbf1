package attempt

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

// Send sends one attempt, req, through next, and normalises what next
// returned: exactly one of the response and the error is non-nil. A
// timeout above 0 bounds the wait for the response headers (see
// sendWithTimeout); callerCtx is the caller's request's context, which
// tells a timeout from the caller's own end.
func Send(next http.RoundTripper, req *http.Request, timeout time.Duration, callerCtx context.Context) (*http.Response, error) {
	if timeout > 0 {
		return sendWithTimeout(next, req, timeout, callerCtx)
	}
	return send(next, req)
}

func send(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := next.RoundTrip(req)
	switch {
	case err != nil && resp != nil:
		// A RoundTripper must not return both; keep the error, as
		// http.Client does, and release the response.
		if resp.Body != nil {
			resp.Body.Close()
		}
		return nil, err
	case err == nil && resp == nil:
		return nil, ErrNilResponse
	case resp != nil && resp.Body == nil:
		// A nil Body is an empty one, as http.Client treats it (Go issue
		// 38095: RoundTrippers written for tests return it).
		resp.Body = http.NoBody
	}
	return resp, err
}

// ErrNilResponse is the error of an attempt whose next RoundTripper
// returned neither a response nor an error.
var ErrNilResponse = errors.New("retryhttp: next RoundTripper returned a nil response and a nil error")

// sendWithTimeout gives the attempt its own deadline for the response
// headers. The attempt's context stays alive until the response body is
// closed, so a slow body read after a timely response is not cut off.
func sendWithTimeout(next http.RoundTripper, req *http.Request, d time.Duration, callerCtx context.Context) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	timer := time.AfterFunc(d, cancel)
	resp, err := send(next, req.WithContext(ctx))
	fired := !timer.Stop()
	if err == nil && fired {
		// The timer ended the attempt just as its response arrived: the
		// response's context is cancelled, so its body cannot be read. It
		// is a timed-out attempt, never a success.
		resp.Body.Close()
		resp, err = nil, context.Canceled
	}
	if err != nil {
		cancel()
		if fired && callerCtx.Err() == nil {
			err = &timeoutError{d: d, err: err}
		}
		return nil, err
	}
	resp.Body = CancelOnClose(resp.Body, cancel)
	return resp, nil
}

// timeoutError is the cause when an attempt's timeout ended it before its
// response headers arrived. It satisfies
// errors.Is(err, context.DeadlineExceeded) and still reaches the error that
// the next RoundTripper returned.
type timeoutError struct {
	d   time.Duration
	err error
}

func (e *timeoutError) Error() string {
	return "attempt timed out after " + e.d.String() + ": " + e.err.Error()
}

func (e *timeoutError) Unwrap() []error {
	return []error{context.DeadlineExceeded, e.err}
}

func (e *timeoutError) Timeout() bool { return true }

// CancelOnClose wraps a response body so that closing it ends the attempt's
// context. A body that is also an io.Writer (a 101 Switching Protocols
// response) stays one.
func CancelOnClose(body io.ReadCloser, cancel context.CancelFunc) io.ReadCloser {
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
