package retryhttp

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Callers sent back over windows that overlap come back evenly: a second
// batch, spread from halfway through the first batch's window, fills the
// slots past the first window before it adds to the slots they share, so
// no slot of its window ends with more than one caller above another.
// Spread over each window alone, the shared half would hold both batches:
// 94 callers a slot against 47.
func TestAdviceCalendarEven(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const w = 30 * time.Second
		const n = 3000
		start := time.Now()
		c := newCalendar(start, w)
		width := w / calSlots
		per := map[int]int{} // callers per slot, from start
		place := func(base time.Time) {
			for range n {
				at := c.place(base, w)
				require.False(t, at.Before(base), "before its base")
				require.True(t, at.Before(base.Add(w)), "past its window")
				per[int(at.Sub(start)/width)]++
			}
		}
		place(start)
		place(start.Add(w / 2))

		// The first window alone: n over 64 slots, 46 or 47 each.
		lo, hi := n, 0
		for s := range calSlots / 2 {
			lo, hi = min(lo, per[s]), max(hi, per[s])
		}
		assert.LessOrEqual(t, hi-lo, 1, "the first half of the first window: %d to %d a slot", lo, hi)
		// The second window, half shared: level to within one caller.
		lo, hi = n, 0
		for s := calSlots / 2; s < calSlots/2+calSlots; s++ {
			lo, hi = min(lo, per[s]), max(hi, per[s])
		}
		assert.LessOrEqual(t, hi-lo, 1, "the second window: %d to %d a slot", lo, hi)
		assert.Equal(t, 2*n, sum(per), "every caller placed")
	})
}

func sum(m map[int]int) int {
	s := 0
	for _, v := range m {
		s += v
	}
	return s
}
