package attempt

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// stallBody is an error body that sends a few bytes, then stalls until it is
// closed.
type stallBody struct {
	sent   bool
	closed chan struct{}
	once   sync.Once
}

func newStallBody() *stallBody { return &stallBody{closed: make(chan struct{})} }

func (b *stallBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "error"), nil
	}
	<-b.closed
	return 0, io.ErrClosedPipe
}

func (b *stallBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// A body that stalls is closed when the drain's time runs out; a small
// body is read whole and closed; a large one is read up to DrainLimit.
func TestDrainBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stall := newStallBody()
		start := time.Now()
		Drain(stall, DrainTimeout)
		assert.Equal(t, DrainTimeout, time.Since(start), "a stalled drain ends at its bound")
		select {
		case <-stall.closed:
		default:
			t.Error("the stalled body was not closed")
		}

		stall = newStallBody()
		b, ok := ReadBounded(stall, 60*time.Millisecond)
		assert.False(t, ok, "a stalled read is not whole")
		assert.Equal(t, "error", string(b))

		small := &closeCounter{Reader: strings.NewReader("down")}
		b, ok = ReadBounded(small, DrainTimeout)
		assert.True(t, ok)
		assert.Equal(t, "down", string(b))
		assert.Equal(t, 1, small.closed)

		large := &closeCounter{Reader: strings.NewReader(strings.Repeat("x", DrainLimit+1))}
		_, ok = ReadBounded(large, DrainTimeout)
		assert.False(t, ok, "more than DrainLimit is not kept")
		assert.Equal(t, 1, large.closed)

		rest := strings.NewReader(strings.Repeat("x", 4*DrainLimit))
		Drain(&closeCounter{Reader: rest}, DrainTimeout)
		assert.Equal(t, 3*DrainLimit, rest.Len(), "a drain reads at most DrainLimit")

		none := &closeCounter{Reader: strings.NewReader("x")}
		_, ok = ReadBounded(none, 0)
		assert.False(t, ok, "no time left: nothing read")
		assert.Equal(t, 1, none.closed)

		Drain(http.NoBody, DrainTimeout) // nothing to read, nothing to close
	})
}
