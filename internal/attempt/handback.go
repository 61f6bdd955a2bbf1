package attempt

import (
	"context"
	"errors"
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

// ErrBodyReleased is what the next RoundTripper reads from an attempt's
// body once the transport has moved on to the next attempt, or handed a
// failure back.
var ErrBodyReleased = errors.New("retryhttp: request body released for the next attempt")

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
	// fail (see HandBack); nil: they fail at once. Guarded by mu.
	park *parking
}

func (b *sentBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed || b.released {
		park := b.park
		b.mu.Unlock()
		park.wait()
		return 0, ErrBodyReleased
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
		return nil, ErrBodyReleased
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

// DrainLimit bounds how much of a discarded response body is read so that
// its connection can be reused; a larger body is closed unread past it.
const DrainLimit = 64 << 10

// DrainTimeout bounds how long a discarded response body is read. Reading
// it only saves setting up a new connection, a TCP and a TLS 1.3 handshake:
// two round trips, about 100 ms between continents. Waiting longer for an
// error page than a new connection takes would cost the retry more than it
// saves.
const DrainTimeout = 100 * time.Millisecond

// ReadBounded reads a body whole if it holds at most DrainLimit bytes and
// arrives within d, then closes it; ok reports that it did.
func ReadBounded(body io.ReadCloser, d time.Duration) (b []byte, ok bool) {
	var err error
	ok = readWithin(body, d, func(r io.Reader) { b, err = io.ReadAll(io.LimitReader(r, DrainLimit+1)) })
	return b, ok && err == nil && len(b) <= DrainLimit
}

// Drain reads at most DrainLimit bytes of a discarded body, for at most d,
// so that its connection can be reused, then closes it.
func Drain(body io.ReadCloser, d time.Duration) {
	readWithin(body, d, func(r io.Reader) { _, _ = io.CopyN(io.Discard, r, DrainLimit) })
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
