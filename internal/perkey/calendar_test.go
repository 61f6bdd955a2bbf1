package perkey

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
		per := map[int]int{} // callers per slot, from start
		for _, base := range []time.Time{start, start.Add(w / 2)} {
			for _, at := range placeAll(t, c, base, w, n) {
				per[int(at.Sub(start)/(w/calSlots))]++
			}
		}

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
	})
}

// A window whose base falls just before a slot's end: the slot's part
// before base stands for the end of the window, so the few microseconds
// left of that slot get no more callers than their share. (Drawn within
// the part after base only, a slot's worth of callers, 101 of 6,400,
// came back within 10 ms of base: at the instant a circuit half-opens.)
func TestAdviceCalendarBaseWithinSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const w = 30 * time.Second
		const n = 6400
		start := time.Now()
		c := newCalendar(start, w)
		base := start.Add(w/calSlots - time.Microsecond)
		near := 0
		for _, at := range placeAll(t, c, base, w, n) {
			if at.Sub(base) < 10*time.Millisecond {
				near++
			}
		}
		// An even spread puts 6,400 x 10 ms / 30 s, about 2, in the first
		// 10 ms.
		assert.LessOrEqual(t, near, 10, "callers within 10 ms of base")
	})
}

// placeAll places n callers in c's window from base to base+w, and
// checks that each instant falls in it.
func placeAll(t *testing.T, c *calendar, base time.Time, w time.Duration, n int) []time.Time {
	t.Helper()
	out := make([]time.Time, n)
	for i := range out {
		out[i] = c.place(base, w)
		require.False(t, out[i].Before(base), "before its base")
		require.True(t, out[i].Before(base.Add(w)), "past its window")
	}
	return out
}
