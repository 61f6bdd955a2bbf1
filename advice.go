package retryhttp

import (
	"errors"
	"math"
	"net/http"
	"sync"
	"time"
)

// Advice says why RetryAt gave the instant it gave.
type Advice int

// The reasons RetryAt gives.
const (
	// AdviceNone: nothing suggests waiting; the zero time.
	AdviceNone Advice = iota
	// AdviceServer: the server asked, with Retry-After or Retry-After-Ms.
	AdviceServer
	// AdviceHeld: the key is held by a server's long Retry-After.
	AdviceHeld
	// AdviceCircuit: the key's circuit is open until then.
	AdviceCircuit
	// AdviceBudget: the retry budget holds no token until then.
	AdviceBudget
	// AdviceRate: the key's send rate, cut after it throttled, lets this
	// request go about then; a request sent earlier would wait its turn.
	AdviceRate
)

var adviceNames = [...]string{"none", "server", "held", "circuit", "budget", "rate"}

// String returns the advice's name, such as "circuit".
func (a Advice) String() string {
	if a >= 0 && int(a) < len(adviceNames) {
		return adviceNames[a]
	}
	return "Advice(?)"
}

// RetryAt tells a caller that got resp or err back from RoundTrip (or from
// an http.Client over this transport) the earliest instant worth sending
// the request again, and why: when the server asked (Retry-After, not
// clamped: a queue can wait where a request could not), when the key's
// hold ends, when its circuit may let a probe through, when the send rate
// of a throttled key lets it through, or when the retry budget holds a
// token again; the latest of those that apply. It reads the
// transport's state now, so call it when the request comes back.
//
// Many callers refused together would get the same instant, and return as
// a herd; so each answer is spread: by up to the Retry-After spread after a
// server's instant or a hold, where the server named the instant, and, after
// a circuit's or the budget's instant, over the policy's cap (30 s by
// default), as a retry that had waited its whole sequence would be, into
// the part of that window where the fewest callers of the key are already
// due: callers turned back at different times come back evenly, not piled
// where their windows overlap. A success,
// an answer that is not a failure, and an error nothing explains give the
// zero time and AdviceNone: retry at once, or not at all, as the caller's
// own policy says. An isolated key gives the zero time and AdviceCircuit:
// no instant is known.
func (t *Transport) RetryAt(resp *http.Response, err error) (time.Time, Advice) {
	var (
		k     hostKey
		limit bool // the budget may be why: a failure handed back at once
		at    time.Time
		why   Advice
	)
	now := time.Now()
	switch {
	case resp != nil:
		if resp.Request == nil || resp.Request.URL == nil || !t.s.retryIf(resp, nil) {
			return time.Time{}, AdviceNone
		}
		k = t.requestKey(resp.Request)
		if resp.Header.Get(LocalHeader) == "" {
			if w := parseServerWait(resp.Header, now, math.MaxInt64); w.ok {
				at, why = now.Add(w.withSpread(t.s.retryAfterSpread)), AdviceServer
			}
		}
		limit = true
	default:
		var e *Error
		if !errors.As(err, &e) || e.key == (hostKey{}) {
			return time.Time{}, AdviceNone
		}
		k = e.key
		limit = e.Reason == ReasonBudgetExhausted
	}
	l := t.lanes.lanes.peek(k)
	if l != nil {
		l.mu.Lock()
		w := l.word.Load()
		state, _ := unpack(w)
		isolated, openUntil, holdUntil := l.isolated, l.openUntil, l.holdUntil
		l.mu.Unlock()
		if isolated {
			return time.Time{}, AdviceCircuit
		}
		if w&heldBit != 0 && holdUntil.After(now) {
			if h := holdUntil.Add(uniform(0, t.s.retryAfterSpread)); h.After(at) {
				at, why = h, AdviceHeld
			}
		}
		if state != StateClosed {
			// Open (till its open time, or already past it), or half-open
			// with its probe in flight: come back after the circuit may
			// let a probe through, spread as widely as the policy's longest
			// delay, so that the many callers an open circuit refused do not
			// come back as one herd when it closes.
			if c := t.spread(l, later(now, openUntil)); c.After(at) {
				at, why = c, AdviceCircuit
			}
		}
	}
	if l != nil && why == AdviceNone {
		if p := l.pace.Load(); p != nil {
			// A throttled key is sent to at the rate it admits: the budget
			// and the policy's spread would only leave it idle. Come back
			// about when the queue ahead is through.
			p.mu.Lock()
			ahead := p.aheadLocked(now, len(p.queue)+1)
			p.mu.Unlock()
			return now.Add(ahead), AdviceRate
		}
	}
	if limit && t.budget != nil {
		// Spread as widely too: the next token is one retry's, and every
		// caller handed back by an empty budget would come for it.
		if b, _ := t.budget.tokenAt(k, now); b.After(now) {
			if b = t.spread(l, b); b.After(at) {
				at, why = b, AdviceBudget
			}
		}
	}
	return at, why
}

// spread returns the instant, at or after base, that RetryAt sends a
// caller back at: a point of the window from base to base plus the
// policy's cap (30 s by default), the width over which a retry far into
// its sequence is drawn. With a lane, the point is in the slot of the
// window where the fewest callers of the key are already due (see
// calendar), so that callers sent back at different times, over windows
// that overlap, still come back evenly rather than piled where the windows
// meet; without one, or with a Policy of the caller's own, a draw of the
// policy.
func (t *Transport) spread(l *lane, base time.Time) time.Time {
	w := policyCap(t.s.policy)
	if l == nil || w <= 0 {
		return base.Add(max(t.s.policy.Delay(64, 0), 0))
	}
	c := l.due.Load()
	if c == nil {
		epoch := time.Now()
		if base.Before(epoch) {
			epoch = base // base may be RetryAt's now, read a moment ago
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

// calendar counts, for one key, the callers RetryAt has sent back per slot
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
// costs 1 KiB, kept with the lane, on a key whose callers RetryAt has
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
	at := c.epoch.Add(time.Duration(best)*c.width + uniform(0, c.width))
	if at.Before(base) {
		at = at.Add(calSlots * c.width)
	}
	return at
}

// policyCap returns the longest delay of the policies this package
// defines, or 0 for another Policy.
func policyCap(p Policy) time.Duration {
	switch p := p.(type) {
	case FullJitter:
		return bound(64, p.Base, p.Cap)
	case EqualJitter:
		return bound(64, p.Base, p.Cap)
	case Exponential:
		return bound(64, p.Base, p.Cap)
	case DecorrelatedJitter:
		_, c := defaults(p.Base, p.Cap)
		return c
	}
	return 0
}
