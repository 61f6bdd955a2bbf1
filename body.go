package retryhttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"
)

// drainLimit bounds how much of a discarded response body is read so that
// its connection can be reused; a larger body is closed unread past it.
const drainLimit = 64 << 10

// drainTimeout bounds how long a discarded response body is read. Reading
// it only saves setting up a new connection, a TCP and a TLS 1.3 handshake:
// two round trips, about 100 ms between continents. Waiting longer for an
// error page than a new connection takes would cost the retry more than it
// saves.
const drainTimeout = 100 * time.Millisecond

// replayable decides whether the request may be sent more than once and, if
// so, how each retry gets a fresh body. It returns what the first attempt
// sends: the caller's request as it is, unless its body has to be buffered
// or tracked.
func (r *retrier) replayable() *http.Request {
	s, req := r.s, r.req
	r.idempotent = s.idempotentIf(req)
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		// Nothing to replay.
	case req.GetBody != nil && !snapshotGetBody(req.GetBody):
		// A GetBody that may hand out one shared reader again: each
		// attempt's body is tracked, even when the transport will not
		// retry, because the caller may rewind that reader as soon as
		// RoundTrip returns (an SDK that retries by itself calls GetBody
		// then), and a failure handed back must not be read again (see
		// endSent).
		r.body = req.GetBody
		r.tracked = true
		return r.track(req, req.Body)
	case s.maxAttempts <= 1:
		// Nothing to replay.
	case req.GetBody != nil:
		r.body = req.GetBody
	case s.bodyBuffer > 0:
		return r.bufferBody()
	default:
		r.unreplayable = true
	}
	return req
}

// bufferBody reads up to bodyBuffer bytes of a body that cannot be replayed.
// A body that fits is kept and replayed from memory; a larger one is sent
// once, whole: the bytes read so far, then the rest of the caller's body.
// It returns what the first attempt sends.
func (r *retrier) bufferBody() *http.Request {
	req := r.req
	// One byte more than fits tells a body that fits from one that does not;
	// min keeps the limit from overflowing for WithBodyBuffer(math.MaxInt64).
	buf, err := io.ReadAll(io.LimitReader(req.Body, min(r.s.bodyBuffer, math.MaxInt64-1)+1))
	if err != nil || int64(len(buf)) > r.s.bodyBuffer {
		// Too large, or the read failed: stream what was read and the rest
		// once, so the next RoundTripper sees the same body (and the same
		// read error) that it would have seen without this transport.
		first := req.Clone(req.Context())
		first.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(buf), errAfter{req.Body, err}), Closer: req.Body}
		r.unreplayable = true
		return first
	}
	req.Body.Close()
	r.body = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	first, _ := r.clone() // a body from memory: cannot fail
	return first
}

// clone returns a copy of the caller's request with a fresh body.
func (r *retrier) clone() (*http.Request, error) {
	c := r.req.Clone(r.req.Context())
	if r.body != nil {
		b, err := r.body()
		if err != nil {
			return nil, err
		}
		if r.tracked {
			return r.track(c, b), nil
		}
		c.Body, c.GetBody = b, r.body
	}
	return c, nil
}

// track returns a shallow copy of req that sends body as a sentBody, and
// keeps that body as the latest attempt's.
func (r *retrier) track(req *http.Request, body io.ReadCloser) *http.Request {
	a := &trackedRequest{req: *req}
	a.body = sentBody{rc: body, get: r.body}
	a.req.Body, a.req.GetBody = &a.body, a.body.getBody
	r.sent = &a.body
	return &a.req
}

// snapshotGetBodies are the code pointers of the GetBody functions that
// http.NewRequest sets for a *bytes.Buffer, *bytes.Reader and
// *strings.Reader body: each call returns a new reader over a snapshot of
// the bytes, so no two attempts ever share one, and their bodies need no
// tracking.
var snapshotGetBodies = func() (pcs [3]uintptr) {
	for i, body := range []io.Reader{bytes.NewBufferString("0"), bytes.NewReader([]byte{0}), strings.NewReader("0")} {
		req, err := http.NewRequest(http.MethodPut, "http://localhost/", body)
		if err == nil && req.GetBody != nil {
			pcs[i] = reflect.ValueOf(req.GetBody).Pointer()
		}
	}
	return pcs
}()

// snapshotGetBody reports whether f is one of snapshotGetBodies.
func snapshotGetBody(f func() (io.ReadCloser, error)) bool {
	pc := reflect.ValueOf(f).Pointer()
	for _, s := range snapshotGetBodies {
		if s != 0 && pc == s {
			return true
		}
	}
	return false
}

// trackedRequest is an attempt's request and its body in one allocation.
type trackedRequest struct {
	req  http.Request
	body sentBody
}

// nextRequest prepares the next attempt's request, in r.queued, before
// anything is drained, so that a failure to get a fresh body still returns
// the last response untouched. A body from a tracked GetBody is taken only
// once the previous attempt can no longer read its own.
func (r *retrier) nextRequest() Reason {
	if r.sent != nil {
		if err := r.sent.release(r.req.Context(), nil); err != nil {
			return ReasonContextDone
		}
	}
	c, err := r.clone()
	if err != nil {
		return ReasonBodyNotReplayable
	}
	r.queued = c
	return ReasonNone
}

// errBodyReleased is what the next RoundTripper reads from an attempt's
// body once the transport has moved on to the next attempt.
var errBodyReleased = errors.New("retryhttp: request body released for the next attempt")

// sentBody is a request body from the caller's GetBody, as one attempt hands
// it to the next RoundTripper. Some GetBody functions rewind one shared
// reader and return it again, and the next RoundTripper may still be
// writing an attempt's body after it returned a response (a server that
// answers 503 before it reads the request). Two attempts reading one reader
// at once would send a truncated body, so before the next attempt takes its
// body, release ends this one: it waits for a read in progress, and every
// later read fails. Bodies that the next RoundTripper takes through the
// attempt's GetBody, for a replay of its own, are tracked the same way.
type sentBody struct {
	rc  io.ReadCloser
	get func() (io.ReadCloser, error) // the caller's GetBody

	mu       sync.Mutex
	reading  bool          // a Read of rc is in progress; guarded by mu
	closed   bool          // rc has been closed or is being closed; guarded by mu
	released bool          // the transport has moved on; guarded by mu
	idle     chan struct{} // closed when the read in progress ends; guarded by mu
	more     *sentBody     // bodies handed out through getBody; guarded by mu
	// park, once released, makes reads wait until it ends before they
	// fail (see endSent); nil: they fail at once. Guarded by mu.
	park *parking
}

func (b *sentBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed || b.released {
		park := b.park
		b.mu.Unlock()
		park.wait()
		return 0, errBodyReleased
	}
	b.reading = true
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.reading = false
	if b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
	b.mu.Unlock()
	return n, err
}

// Close closes the body once, whoever asks first.
func (b *sentBody) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	return b.rc.Close()
}

// getBody is the attempt's GetBody: a fresh body from the caller's,
// tracked beside this one, or an error once the transport has moved on.
func (b *sentBody) getBody() (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return nil, errBodyReleased
	}
	rc, err := b.get()
	if err != nil {
		return nil, err
	}
	nb := &sentBody{rc: rc, get: b.get, more: b.more}
	b.more = nb
	return nb, nil
}

// release ends the body and every body handed out through its GetBody: it
// waits for a read in progress (or for ctx to end), fails every later read,
// and closes what the next RoundTripper has not closed, as net/http closes
// a body before it rewinds it. With park set, a later read waits for it to
// end before it fails. Once ctx has ended it waits for no read, but still
// ends every body, and returns the context's error.
func (b *sentBody) release(ctx context.Context, park *parking) error {
	var ended error
	for b != nil {
		b.mu.Lock()
		b.released = true
		b.park = park
		var idle chan struct{}
		if b.reading {
			idle = make(chan struct{})
			b.idle = idle
		}
		more := b.more
		b.mu.Unlock()
		if idle != nil && ended == nil {
			select {
			case <-idle:
			case <-ctx.Done():
				ended = ctx.Err()
			}
		}
		b.Close()
		b = more
	}
	return ended
}

// readBounded reads a body whole if it holds at most drainLimit bytes and
// arrives within d, then closes it; ok reports that it did.
func readBounded(body io.ReadCloser, d time.Duration) (b []byte, ok bool) {
	var err error
	ok = readWithin(body, d, func(r io.Reader) { b, err = io.ReadAll(io.LimitReader(r, drainLimit+1)) })
	return b, ok && err == nil && len(b) <= drainLimit
}

// drain reads at most drainLimit bytes of a discarded body, for at most d,
// so that its connection can be reused, then closes it.
func drain(body io.ReadCloser, d time.Duration) {
	readWithin(body, d, func(r io.Reader) { _, _ = io.CopyN(io.Discard, r, drainLimit) })
}

// readWithin runs read over body for at most d, then closes body. A body
// that stalls is closed when d runs out, which ends a read blocked on it;
// it reports whether read finished in time.
func readWithin(body io.ReadCloser, d time.Duration, read func(io.Reader)) bool {
	if body == http.NoBody {
		return true // nothing to read, nothing to close, no timer to set
	}
	if d <= 0 {
		body.Close()
		return false
	}
	closed := make(chan struct{})
	timer := time.AfterFunc(d, func() {
		body.Close()
		close(closed)
	})
	read(body)
	if timer.Stop() {
		body.Close()
		return true
	}
	<-closed
	return false
}

// closeRequestBody closes the body of a request that will not be sent.
func closeRequestBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}

// prefixedBody is a body made of the bytes already read from another body
// (a caller's request body, a response body too large for the buffer)
// followed by the rest of it; Close closes the other body.
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
