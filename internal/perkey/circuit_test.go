package perkey

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exact is defaults() without the open time's jitter, so that half-open
// instants are exact.
func exact() Config {
	c := defaults()
	c.OpenJitter = 0
	return c
}

// feed offers one attempt to the lane and, if it is admitted, records o as
// its outcome. It reports whether the attempt was admitted.
func feed(l *Lane, o Kind) bool {
	tk, _, err := l.Admit(context.Background(), Limits{})
	if err != nil {
		return false
	}
	l.Done(tk, Outcome{Kind: o})
	return true
}

// trip trips a closed lane by its own rule: MinFailures failures now and
// one more a Span later. It sleeps for the Span, so it must run inside a
// bubble.
func trip(t *testing.T, l *Lane) {
	t.Helper()
	c := l.Config()
	for range c.MinFailures {
		require.True(t, feed(l, Failure), "a closed circuit admits")
	}
	time.Sleep(c.Span)
	require.True(t, feed(l, Failure), "a closed circuit admits")
	require.Equal(t, Open, l.View(time.Now()).State, "state after failures over the span")
}

// With two probes, the first success closes the circuit; the second probe,
// still in flight, holds no place afterwards, so the lane can leave memory.
func TestCircuitSecondProbeFreed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := exact()
		c.Probes = 2
		l := NewSet(c).Lane(Key{Host: "k"})
		trip(t, l)
		time.Sleep(c.OpenFor)
		first, _, err := l.Admit(t.Context(), Limits{})
		require.NoError(t, err)
		second, _, err := l.Admit(t.Context(), Limits{})
		require.NoError(t, err)
		require.True(t, first.has(probeFlag) && second.has(probeFlag))
		l.Done(first, Outcome{Kind: Success})
		require.Equal(t, Closed, l.View(time.Now()).State)
		l.Done(second, Outcome{Kind: Success}) // from the half-open period: ignored
		assert.Zero(t, l.View(time.Now()).Probes, "probe places held after closing")
		assert.True(t, l.idle(time.Now()), "a closed lane with nothing in flight is idle")
	})
}
