package retryhttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp/internal/testhttp"
)

// reply is what scriptedNext answers to one attempt. A response is made
// only when status is non-zero; err is returned as it is, so a reply with
// both a status and an error returns both, and the zero reply returns
// nil, nil.
type reply struct {
	status int
	header http.Header
	body   string
	err    error
	// hang blocks the attempt until its request's context ends, then
	// returns the context's error, as a real transport does.
	hang bool
	// newBody, if set, makes the response body instead of body.
	newBody func(req *http.Request) io.ReadCloser
	// before, if set, runs when the attempt arrives, after it is recorded.
	before func(req *http.Request)
}

// received is what scriptedNext saw of one attempt.
type received struct {
	method string
	url    string
	header http.Header
	body   []byte
	ctx    context.Context
	at     time.Time // virtual time inside a synctest bubble
}

// scriptedNext is an in-memory next RoundTripper. Attempt i (0-based,
// counted over the fake's lifetime) is answered by script[i]; the last reply
// repeats. It reads and closes every request body it receives, as
// http.Transport does, and records each attempt. It is safe for concurrent
// use, but a script is only meaningful for one request at a time.
type scriptedNext struct {
	script []reply

	mu     sync.Mutex
	reqs   []received      // guarded by mu
	bodies []*countingBody // response bodies handed out, in order; guarded by mu
}

func newNext(script ...reply) *scriptedNext { return &scriptedNext{script: script} }

func (n *scriptedNext) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := received{
		method: req.Method,
		url:    req.URL.String(),
		header: req.Header.Clone(),
		ctx:    req.Context(),
		at:     time.Now(),
	}
	if req.Body != nil {
		rec.body, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
	}
	n.mu.Lock()
	r := n.script[min(len(n.reqs), len(n.script)-1)]
	n.reqs = append(n.reqs, rec)
	n.mu.Unlock()

	if r.before != nil {
		r.before(req)
	}
	if r.hang {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if r.status == 0 {
		return nil, r.err
	}
	resp := &http.Response{
		Status:     http.StatusText(r.status),
		StatusCode: r.status,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     r.header.Clone(),
		Request:    req,
	}
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	if r.newBody != nil {
		resp.Body = r.newBody(req)
	} else {
		b := newCountingBody(r.body)
		n.mu.Lock()
		n.bodies = append(n.bodies, b)
		n.mu.Unlock()
		resp.Body = b
	}
	return resp, r.err
}

// calls returns how many attempts reached the fake.
func (n *scriptedNext) calls() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.reqs)
}

// requests returns what each attempt carried, in order.
func (n *scriptedNext) requests() []received {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]received(nil), n.reqs...)
}

// respBodies returns the response bodies handed out, in order.
func (n *scriptedNext) respBodies() []*countingBody {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*countingBody(nil), n.bodies...)
}

// countingBody is a response body that records how many bytes were read
// from it and how many times it was closed.
type countingBody struct {
	r      *strings.Reader
	size   int
	read   atomic.Int64
	closed atomic.Int32
}

func newCountingBody(s string) *countingBody {
	return &countingBody{r: strings.NewReader(s), size: len(s)}
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error {
	b.closed.Add(1)
	return nil
}

// trackedBody is a caller's request body that records whether it was
// closed.
type trackedBody struct {
	r      io.Reader
	closed atomic.Int32
}

func newTrackedBody(s string) *trackedBody { return &trackedBody{r: strings.NewReader(s)} }

func (b *trackedBody) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *trackedBody) Close() error {
	b.closed.Add(1)
	return nil
}

// herdNext answers every attempt made at the virtual instant t0 with the
// response first makes, and every later attempt with 200 OK, recording how
// long after t0 each later attempt came. It serves many concurrent requests
// that all failed together at t0.
type herdNext struct {
	t0    time.Time
	first func() *http.Response

	mu    sync.Mutex
	early int             // attempts at t0; guarded by mu
	later []time.Duration // guarded by mu
}

func (n *herdNext) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	since := time.Since(n.t0)
	n.mu.Lock()
	defer n.mu.Unlock()
	if since == 0 {
		n.early++
		resp := n.first()
		resp.Request = req
		return resp, nil
	}
	n.later = append(n.later, since)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// retries returns when, after t0, each later attempt came.
func (n *herdNext) retries() []time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]time.Duration(nil), n.later...)
}

// newResponse is a response to req with status and body, as a next
// RoundTripper returns it.
var newResponse = testhttp.Response
