package attempt

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// HandBack ends the latest attempt's tracked body, if any, when the
// transport hands back a failure (a retryable status it did not retry, or
// an error), and returns the response to hand back.
//
// net/http lets a RoundTripper go on reading a request body after
// RoundTrip has returned: a server that answers before it has read an
// upload leaves the write going. A caller that retries by itself rewinds
// the reader its GetBody shares as soon as a failure comes back (openai-go
// seeks its *bytes.Reader at once), and a write still reading it then
// races with the rewind and sends the next try's bytes short. So once a
// failure is handed back, nothing reads the caller's body again: a read in
// progress is waited for (unless the request's context has ended), and
// every later read fails, which ends the write. A success is never handed
// back this way, so that a body the server is still reading (full-duplex
// streaming over HTTP/2) goes on.
//
// A response handed back with its write still going keeps its body
// readable: failing the write at once would close an HTTP/1 connection
// under a response body not yet read. The write's later reads wait
// instead, without touching the caller's body, until the caller has read
// the response body to its end or closed it, or the request's context
// ends, or ParkLimit has passed; then they fail.
func (b *Body) HandBack(resp *http.Response) *http.Response {
	if b.sent == nil {
		return resp // no tracked body
	}
	ctx := b.req.Context()
	if resp == nil || !b.sent.open() {
		// Nothing to read, or the next RoundTripper is done with the body.
		_ = b.sent.release(ctx, nil)
		return resp
	}
	p := &parking{done: make(chan struct{}), ctxDone: ctx.Done(), limit: time.NewTimer(ParkLimit)}
	_ = b.sent.release(ctx, p)
	resp.Body = &handedBack{ReadCloser: resp.Body, p: p}
	return resp
}

// ParkLimit bounds how long the write's reads wait for the caller to be
// done with the response handed back. A server that answers early and
// then reads the whole upload before it ends its response (full duplex
// over HTTP/1.1) cannot end the response until the write ends, while the
// caller reading it waits for its end; past the limit the write fails,
// and the server sees the upload cut. A second is long enough for a
// caller to read an error body, which has mostly arrived with its
// headers.
const ParkLimit = time.Second

// parking holds the reads of a released body until the response handed
// back with it is done with, the request's context ends, or its limit
// passes.
type parking struct {
	done    chan struct{}
	once    sync.Once
	ctxDone <-chan struct{} // nil: a context that never ends
	limit   *time.Timer
}

// wait blocks until p ends; a nil p does not block.
func (p *parking) wait() {
	if p == nil {
		return
	}
	select {
	case <-p.done:
	case <-p.ctxDone:
	case <-p.limit.C:
		p.end() // the timer ticks once: end p for every later read
	}
}

func (p *parking) end() {
	p.once.Do(func() {
		close(p.done)
		p.limit.Stop()
	})
}

// handedBack is the body of a failure handed back while its request's
// write was still going: its end, a read error, or its Close lets the
// write's reads fail.
type handedBack struct {
	io.ReadCloser
	p *parking
}

func (b *handedBack) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.p.end()
	}
	return n, err
}

// Close ends the park before it closes the response body: HTTP/2's Close
// waits for the request's write to end, which may be parked.
func (b *handedBack) Close() error {
	b.p.end()
	return b.ReadCloser.Close()
}
