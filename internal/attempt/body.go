package attempt

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
)

// Body is a request's body across its attempts: the caller's request,
// never modified, how each attempt gets a fresh body, and the next
// attempt's request, queued until it is sent or its body closed. The zero
// Body has nothing queued; First sets it up. It is used by one goroutine,
// and lives inside the transport's per-request state, on the stack.
type Body struct {
	req  *http.Request                 // the caller's request, never modified
	get  func() (io.ReadCloser, error) // a fresh body for each retry; nil: no body
	sent *sentBody                     // the latest attempt's body, when tracked
	// queued is the next attempt's request, until it is sent (Take) or
	// its body closed (Close).
	queued *http.Request
	// tracked: the bodies come from a GetBody that may hand out one shared
	// reader again and again, so each attempt's body is a sentBody,
	// released before the next attempt takes its own.
	tracked bool
	// unreplayable: the body cannot be sent again (no GetBody and not
	// buffered, or larger than the buffer).
	unreplayable bool
}

// First decides whether req may be sent more than once and, if so, how
// each retry gets a fresh body, and queues what the first attempt sends:
// the caller's request as it is, unless its body has to be buffered or
// tracked. maxAttempts is how many attempts may be made; a body with no
// GetBody is buffered in memory when it holds at most bufferLimit bytes.
func (b *Body) First(req *http.Request, maxAttempts int, bufferLimit int64) {
	b.req, b.queued = req, req
	if req.Body != nil && req.Body != http.NoBody { // a GET has nothing to replay: inlined
		b.first(maxAttempts, bufferLimit)
	}
}

// first is First for a request with a body.
func (b *Body) first(maxAttempts int, bufferLimit int64) {
	req := b.req
	switch {
	case req.GetBody != nil && !snapshotGetBody(req.GetBody):
		// A GetBody that may hand out one shared reader again: each
		// attempt's body is tracked, even when the transport will not
		// retry, because the caller may rewind that reader as soon as
		// RoundTrip returns (an SDK that retries by itself calls GetBody
		// then), and a failure handed back must not be read again (see
		// HandBack).
		b.get = req.GetBody
		b.tracked = true
		b.queued = b.track(req, req.Body)
	case maxAttempts <= 1:
		// Nothing to replay.
	case req.GetBody != nil:
		b.get = req.GetBody
	case bufferLimit > 0:
		b.queued = b.bufferBody(bufferLimit)
	default:
		b.unreplayable = true
	}
}

// bufferBody reads up to limit bytes of a body that cannot be replayed.
// A body that fits is kept and replayed from memory; a larger one is sent
// once, whole: the bytes read so far, then the rest of the caller's body.
// It returns what the first attempt sends.
func (b *Body) bufferBody(limit int64) *http.Request {
	req := b.req
	// One byte more than fits tells a body that fits from one that does not;
	// min keeps the limit from overflowing for a limit of math.MaxInt64.
	buf, err := io.ReadAll(io.LimitReader(req.Body, min(limit, math.MaxInt64-1)+1))
	if err != nil || int64(len(buf)) > limit {
		// Too large, or the read failed: stream what was read and the rest
		// once, so the next RoundTripper sees the same body (and the same
		// read error) that it would have seen without this transport.
		first := req.Clone(req.Context())
		first.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(buf), errAfter{req.Body, err}), Closer: req.Body}
		b.unreplayable = true
		return first
	}
	req.Body.Close()
	b.get = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	first, _ := b.clone() // a body from memory: cannot fail
	return first
}

// clone returns a copy of the caller's request with a fresh body.
func (b *Body) clone() (*http.Request, error) {
	c := b.req.Clone(b.req.Context())
	if b.get != nil {
		rc, err := b.get()
		if err != nil {
			return nil, err
		}
		if b.tracked {
			return b.track(c, rc), nil
		}
		c.Body, c.GetBody = rc, b.get
	}
	return c, nil
}

// track returns a shallow copy of req that sends body as a sentBody, and
// keeps that body as the latest attempt's.
func (b *Body) track(req *http.Request, body io.ReadCloser) *http.Request {
	a := &trackedRequest{req: *req}
	a.body = sentBody{rc: body, get: b.get}
	a.req.Body, a.req.GetBody = &a.body, a.body.getBody
	b.sent = &a.body
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

// Readiness says whether Next queued the next attempt's request, and if
// not, why.
type Readiness uint8

const (
	// Ready: the next attempt's request is queued.
	Ready Readiness = iota
	// ContextEnded: the request's context ended while the previous
	// attempt still read its tracked body.
	ContextEnded
	// NoFreshBody: GetBody failed, so the body cannot be sent again.
	NoFreshBody
)

// Next queues the next attempt's request, before anything is drained, so
// that a failure to get a fresh body still leaves the last response
// untouched. A body from a tracked GetBody is taken only once the
// previous attempt can no longer read its own.
func (b *Body) Next() Readiness {
	if b.sent != nil {
		if err := b.sent.release(b.req.Context(), nil); err != nil {
			return ContextEnded
		}
	}
	c, err := b.clone()
	if err != nil {
		return NoFreshBody
	}
	b.queued = c
	return Ready
}

// Take hands the queued request over to be sent: from then on the next
// RoundTripper closes its body.
func (b *Body) Take() *http.Request {
	q := b.queued
	b.queued = nil
	return q
}

// Close closes the body of the queued request, if any: an attempt that
// will not be sent.
func (b *Body) Close() {
	if b.queued != nil { // nothing queued on the success path: inlined
		b.closeQueued()
	}
}

// closeQueued is Close's slow path, kept out of line so that Close inlines.
//
//go:noinline
func (b *Body) closeQueued() {
	CloseRequestBody(b.queued)
	b.queued = nil
}

// Copier makes copies of a request to send beside the attempt in flight
// (a hedge), each with a body of its own.
type Copier struct {
	req *http.Request
	get func() (io.ReadCloser, error)
}

// Copier returns what copies the request while an attempt of it is in
// flight, and false when it cannot be copied then: its body is one
// reader that a GetBody may hand out again (tracked), or it cannot be
// sent again at all.
func (b *Body) Copier() (Copier, bool) {
	hasBody := b.req.Body != nil && b.req.Body != http.NoBody
	if b.tracked || b.unreplayable || (hasBody && b.get == nil) {
		return Copier{}, false
	}
	return Copier{req: b.req, get: b.get}, true
}

// Copy returns a copy of the request with the context ctx and a fresh
// body.
func (c Copier) Copy(ctx context.Context) (*http.Request, error) {
	r := c.req.Clone(ctx)
	if c.get != nil {
		rc, err := c.get()
		if err != nil {
			return nil, err
		}
		r.Body, r.GetBody = rc, c.get
	}
	return r, nil
}

// Replayable reports whether the body may be sent again: there is none,
// or it comes from GetBody or from memory.
func (b *Body) Replayable() bool { return !b.unreplayable }

// CloseRequestBody closes the body of a request that will not be sent.
func CloseRequestBody(req *http.Request) {
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
