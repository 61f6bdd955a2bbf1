package attempt

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// stallBody returns an error body that sends a few bytes, then stalls
// until it is closed; closed reports whether it has been.
func stallBody() (body io.ReadCloser, closed func() bool) {
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write([]byte("error")) }()
	return pr, func() bool {
		_, err := pw.Write([]byte("x"))
		return errors.Is(err, io.ErrClosedPipe)
	}
}

// A body that stalls is closed when the drain's time runs out; a small
// body is read whole and closed; a large one is read up to DrainLimit.
func TestDrainBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stall, closed := stallBody()
		start := time.Now()
		Drain(stall, DrainTimeout)
		assert.Equal(t, DrainTimeout, time.Since(start), "a stalled drain ends at its bound")
		assert.True(t, closed(), "the stalled body is closed")

		stall, _ = stallBody()
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
