package retryhttp

import (
	"io"
	"net/http"
	"sync"
)

// endSent ends the latest attempt's tracked body when RoundTrip hands back
// a failure (a retryable status it did not retry, or an error), and
// returns the response to hand back.
//
// net/http lets a RoundTripper go on reading a request body after
// RoundTrip has returned: a server that answers before it has read an
// upload leaves the write going. A caller that retries by itself rewinds
// the reader its GetBody shares as soon as a failure comes back (openai-go
// seeks its *bytes.Reader at once), and a write still reading it then
// races with the rewind and sends the next try's bytes short. So once a
// failure is handed back, nothing reads the caller's body again: a read in
// progress is waited for (unless the request's context has ended), and
// every later read fails, which ends the write. A success is left alone,
// so that a body the server is still reading (full-duplex streaming over
// HTTP/2) goes on.
//
// A response handed back with its write still going keeps its body
// readable: failing the write at once would close an HTTP/1 connection
// under a response body not yet read. The write's later reads wait
// instead, without touching the caller's body, until the caller has read
// the response body to its end or closed it, or the request's context
// ends; then they fail.
func (r *retrier) endSent(resp *http.Response) *http.Response {
	ctx := r.req.Context()
	if resp == nil || !r.sent.open() {
		// Nothing to read, or the next RoundTripper is done with the body.
		_ = r.sent.release(ctx, nil)
		return resp
	}
	p := &parking{done: make(chan struct{}), ctxDone: ctx.Done()}
	_ = r.sent.release(ctx, p)
	resp.Body = &handedBack{ReadCloser: resp.Body, p: p}
	return resp
}

// open reports whether the next RoundTripper may still read the body or
// one handed out through its GetBody: one of them is not closed.
func (b *sentBody) open() bool {
	for ; b != nil; b = b.nextBody() {
		b.mu.Lock()
		closed := b.closed
		b.mu.Unlock()
		if !closed {
			return true
		}
	}
	return false
}

// nextBody returns the next body handed out through GetBody, if any.
func (b *sentBody) nextBody() *sentBody {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.more
}

// parking holds the reads of a released body until the response handed
// back with it is done with, or the request's context ends.
type parking struct {
	done    chan struct{}
	once    sync.Once
	ctxDone <-chan struct{} // nil: a context that never ends
}

// wait blocks until p ends; a nil p does not block.
func (p *parking) wait() {
	if p == nil {
		return
	}
	select {
	case <-p.done:
	case <-p.ctxDone:
	}
}

func (p *parking) end() { p.once.Do(func() { close(p.done) }) }

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

func (b *handedBack) Close() error {
	err := b.ReadCloser.Close()
	b.p.end()
	return err
}
