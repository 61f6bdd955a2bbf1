package perkey

import (
	"math"
	"sync"
	"time"
)

// Spread returns an instant at or after base, within the window from base
// to base+w, to send one of the key's callers back at: in the slot of the
// window where the fewest of its callers are already due (see calendar),
// so that callers sent back at different times, over windows that
// overlap, still come back evenly rather than piled where the windows
// meet. The calendar is made on the key's first spread.
func (l *Lane) Spread(base time.Time, w time.Duration) time.Time {
	c := l.due.Load()
	if c == nil {
		epoch := time.Now()
		if base.Before(epoch) {
			epoch = base // base may be the caller's now, read a moment ago
		}
		c = newCalendar(epoch, w)
		if !l.due.CompareAndSwap(nil, c) {
			c = l.due.Load()
		}
	}
	return c.place(base, w)
}

// calSlots is how many slots a calendar divides a spread window into, and
// calRing how many it remembers: two windows, enough for a base that moves
// forward by up to a window, as an open circuit's does. 64 slots of a 30 s
// window are 470 ms wide: fine enough that the callers due in one slot,
// drawn uniformly within it, arrive as evenly as a uniform spread would.
const (
	calSlots = 64
	calRing  = 2 * calSlots
)

// calendar counts, for one key, the callers Spread has sent back per slot
// of time, so that each new caller goes to the slot of its window where
// the fewest are due: when windows of different bases overlap (callers
// refused by the budget at t = 0 are spread to 30 s; those the circuit
// refuses later, from when it may close), the later callers fill the
// slots the earlier left empty instead of doubling the load where the
// windows meet. Among slots equally loaded, the scan starts at the next
// point of a golden-ratio sequence, so a window filled from empty gets its
// callers evenly.
//
// A slot is named by its index from epoch; the ring keeps the latest 2
// windows' worth, and a slot whose remembered index is not the one asked
// for counts as empty (its callers are past, or a base far ahead overwrote
// it: the calendar is an estimate, and only evenness depends on it). It
// costs 1 KiB, kept with the lane, on a key whose callers have been
// spread.
type calendar struct {
	epoch time.Time
	width time.Duration // a slot's width: the window over calSlots
	mu    sync.Mutex
	n     uint64 // callers placed; guarded by mu
	ring  [calRing]struct {
		slot uint32 // index of the slot counted, from epoch, modulo 2^32
		due  uint32 // callers sent back to it
	} // guarded by mu
}

func newCalendar(epoch time.Time, w time.Duration) *calendar {
	return &calendar{epoch: epoch, width: w / calSlots}
}

// place returns an instant in the window from base to base+w, in its
// least-loaded slot, and counts the caller there. A window of another
// width than the calendar's (a Breaker shared by transports with different
// policies), or narrower than 64 ns, gets a golden-ratio point of it,
// uncounted.
func (c *calendar) place(base time.Time, w time.Duration) time.Time {
	const golden = 0.6180339887498949
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	_, frac := math.Modf(float64(c.n) * golden)
	if w < calSlots || c.width != w/calSlots || base.Before(c.epoch) {
		return base.Add(time.Duration(frac * float64(w)))
	}
	first := uint64(base.Sub(c.epoch) / c.width)
	start := uint64(frac * calSlots)
	best, least := first+start, uint32(math.MaxUint32)
	for i := range uint64(calSlots) {
		s := first + (start+i)%calSlots
		e := &c.ring[s%calRing]
		due := uint32(0)
		if e.slot == uint32(s) {
			due = e.due
		}
		if due < least {
			best, least = s, due
		}
	}
	e := &c.ring[best%calRing]
	if e.slot != uint32(best) {
		e.slot, e.due = uint32(best), 0
	}
	if e.due < math.MaxUint32 {
		e.due++
	}
	// Uniformly within the slot. The window's first slot begins before
	// base, and the part of it before base stands for the part of the next
	// window's first slot that the window ends with: a draw there goes
	// one window on. So every slot is a whole slot wide, and the instant
	// falls in [base, base+w).
	at := c.epoch.Add(time.Duration(best)*c.width + Uniform(0, c.width))
	if at.Before(base) {
		at = at.Add(calSlots * c.width)
	}
	return at
}
