package attempt

import (
	"io"
	"net/http"
	"time"
)

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
