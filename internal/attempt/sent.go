package attempt

import (
	"context"
	"errors"
	"io"
	"sync"
)

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
