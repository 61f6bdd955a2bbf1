package perkey

import (
	"context"
	"time"
)

// Hold holds the key until until: no attempt to it, first or retry, is
// admitted before then (Admit refuses with a *HeldError saying when it
// ends). A hold is never shortened, by a success or by a shorter wait
// asked for later, except by its test (see proof): a longer one extends
// it. It ends at its instant, when the next admission finds it over. A
// short hold is tested as one a response asked for is, and is not applied
// to a key whose short holds were refuted. Hold reports the hold as a
// change to Held when it begins or grows.
func (l *Lane) Hold(until time.Time) Transitions {
	return l.holdAsked(time.Now(), until)
}

// holdLocked holds the key until until, as Hold describes, untested.
// Called with mu held.
func (l *Lane) holdLocked(now, until time.Time) Transitions {
	w := l.word.Load()
	if w&heldBit != 0 && !until.After(l.holdUntil) {
		return Transitions{}
	}
	from, _ := unpack(w)
	if w&heldBit != 0 {
		from = Held
	} else {
		l.heldSince = now
	}
	l.holdUntil = until
	if until.Sub(now) >= holdThreshold {
		// A long hold is the server's statement: a test due of a short
		// one it extends does not go.
		l.holdTestAt = time.Time{}
	}
	l.word.Store(w | heldBit)
	l.set.flag()
	return one(Transition{From: from, To: Held, Until: until})
}

// Route is a route of a key: a method and a path. A server's Retry-After
// speaks for the route it answered, and holds only that route unless the
// evidence is host-wide (see holdFor).
type Route struct{ Method, Path string }

// A short hold is a hypothesis: a server's "come back in a second" may
// be a fixed window that refuses everything until it resets, or a token
// bucket that has a token again in 10 ms and rounds its Retry-After up
// to a whole second (throttled/throttled's GCRA does), or a quota field
// that counts a bucket's burst, not a window. So a short hold a key gets
// (shorter than holdThreshold, asked by a 429 or by a quota with nothing
// left that does not state its window) is tested: a tenth of the
// way into it one attempt goes. Refused, the hold stands, and the next
// short hold is tested again; refused twice, the key's short holds are
// proven and kept from then on without a test. Admitted, it is
// refuted: it ends, the requests it held go (through the key's send rate,
// which a 429 has cut), the policies read from field names are dropped as
// the server's count contradicts them (those that state their window
// stay), and the key's short holds are not applied from then on: the send
// rate, cut by each 429, spaces its requests, and the request answered
// still waits its own Retry-After. A long hold is the server's statement
// of an outage, and a policy that states its window the server's own
// count: neither is tested.
type proof uint8

const (
	holdUntested proof = iota
	holdProven
	holdRefuted
)

// holdTestShare is how far into a short hold its test goes, and
// holdProofs how many tests refused prove the key's short holds.
const (
	holdTestShare = 10
	holdProofs    = 2
)

// holdAsked applies a hold a response asked for, until until (see
// proof): a short one is not applied to a key whose short holds were
// refuted, and is tested until they are proven. Called without mu.
func (l *Lane) holdAsked(now, until time.Time) Transitions {
	l.mu.Lock()
	defer l.mu.Unlock()
	short := until.Sub(now) < holdThreshold
	if short && l.holdProof == holdRefuted {
		return Transitions{}
	}
	trs := l.holdLocked(now, until)
	if short && l.holdProof == holdUntested && !l.holdTesting && l.holdTestAt.IsZero() && l.holdUntil.Equal(until) {
		// Only when the hold in force is this one: a longer one is not
		// tested by the test of a short one.
		l.holdTestAt = now.Add(until.Sub(now) / holdTestShare)
		l.holdWindow = l.adv.windowEnd()
	}
	return trs
}

// holdTestDueLocked reports whether an attempt refused by the key's hold
// at now may go as its test instead: the test is due, none is under way,
// and the hold in force is short. Called with mu held.
func (l *Lane) holdTestDueLocked(now time.Time) bool {
	return !l.holdTestAt.IsZero() && !l.holdTesting && !now.Before(l.holdTestAt) && l.holdUntil.Sub(now) < holdThreshold
}

// heldTested records the outcome of a hold's test: a 429 proves the
// key's short holds; a success refutes them, ends the hold (if the hold
// in force is still short) and drops the policies read from field names.
// Anything else says nothing, and another attempt may test the hold. The
// root package's requests waiting for a short hold wake at once
// (wakeBack) and ask again.
func (l *Lane) heldTested(now time.Time, o Outcome) Transitions {
	var trs Transitions
	l.mu.Lock()
	l.holdTesting = false
	switch {
	case o.Facts&TooMany != 0:
		// A bucket may refuse one test by chance (a token another
		// request took): the next short hold is tested again, and a
		// second refusal proves them.
		if l.holdRefusals++; l.holdRefusals >= holdProofs {
			l.holdProof = holdProven
		}
	case o.Kind == Success:
		// The hold is over, if it is still the short one tested.
		if l.word.Load()&heldBit != 0 && l.holdUntil.Sub(now) < holdThreshold {
			trs.add(l.unholdLocked())
		}
		// Admitted in a window the server counts anew (its reset, on the
		// server's clock, has moved), the window the hold waited for has
		// reset, sooner than a reset read in whole seconds said: nothing
		// is refuted. Otherwise the key's short holds are, and the
		// policies read from field names go too, whichever asked for the
		// hold: read as a window, they say the server admits nothing until
		// the window resets, and it did. A policy that states its window
		// stays, and the next answer paces the key by it alone. Without
		// one, a key paced by what it read has its rate found from what
		// the server admits (pacer.refute).
		refuted := l.holdWindow.IsZero() || l.adv.windowEnd().Equal(l.holdWindow)
		stated := l.adv.stated
		if refuted {
			l.holdProof = holdRefuted
			l.seen.refuteAll()
		}
		l.mu.Unlock()
		if p := l.pace.Load(); p != nil {
			p.unhold(now)
			if refuted && !stated && p.quotaOn(now) {
				p.refute(now)
			}
		}
		l.wakeBack()
		return trs
	default:
		if l.word.Load()&heldBit != 0 {
			l.holdTestAt = now
		}
	}
	l.mu.Unlock()
	return trs
}

// HeldWait waits for the hold that refused a request with e: to the
// hold's end, or, while its test is due, to the test's time, when the
// request asks again and may go as the test; a short hold under test is
// waited for until its test ends it, if it does. It returns how long it
// waited, and whether a spread is to follow (drawn by the root package by
// the crowd then): when the hold ran its course, unless the key is paced
// at the quota it advertises, whose pacer lets the held requests go one
// after another at that rate, which a spread on top would only slow. ok
// is false, and nothing is waited, when held plus the wait would pass
// patience, or the wait would reach deadline (the zero time: none); err
// is ctx's error when it ended the wait. It starts no goroutine.
func (l *Lane) HeldWait(ctx context.Context, e *HeldError, held, patience time.Duration, deadline time.Time) (waited time.Duration, spread, ok bool, err error) {
	now := time.Now()
	wait := e.Until.Sub(now)
	if held+wait > patience || !deadline.IsZero() && !now.Add(wait).Before(deadline) {
		return 0, false, false, nil
	}
	if !e.Test.IsZero() && e.Test.Before(e.Until) {
		wait = max(e.Test.Sub(now), 0)
	}
	var back chan struct{}
	l.mu.Lock()
	if e.Tested {
		if l.word.Load()&heldBit == 0 || !l.holdUntil.Equal(e.Until) {
			// Ended or changed since it refused the request: ask again.
			l.mu.Unlock()
			return 0, false, true, nil
		}
		back = l.backLocked()
	}
	l.sleepers++ // the lane does not leave memory under its sleeper
	l.mu.Unlock()
	err = sleep(ctx, wait, nil, back)
	l.mu.Lock()
	l.sleepers--
	l.mu.Unlock()
	waited = time.Since(now)
	spread = !time.Now().Before(e.Until) && !(l.Paced() && l.advertises.Load())
	return waited, spread, true, err
}

// holdFor applies the hold a response asks for, until until: to the route
// the attempt went to, or to the whole key when the evidence is
// host-wide:
//   - the zero Route (the root package's key function names the key
//     itself as the scope);
//   - a 429: the server refuses the caller's requests, not one route's,
//     until then (a rate limit counts the client's requests to the host);
//   - a hold for the host's root, "/" or no path;
//   - another route of the key held already: two routes answering "come
//     back later" at once say the host is busy, not a route.
//
// A route's hold is this process's own: it is no change of the key's
// state, so no hook hears of it and no fleet shares it. Called without mu.
func (l *Lane) holdFor(o Outcome, until time.Time) Transitions {
	r := o.Route
	if r == (Route{}) || o.Facts&TooMany != 0 || r.Path == "/" || r.Path == "" {
		return l.Hold(until)
	}
	l.mu.Lock()
	now := time.Now()
	if l.routeHeldLocked(now) {
		for other := range l.routes {
			if other != r {
				l.mu.Unlock()
				return l.Hold(until)
			}
		}
	}
	if l.routes == nil {
		l.routes = make(map[Route]time.Time)
	}
	if until.After(l.routes[r]) {
		l.routes[r] = until
	}
	l.word.Store(l.word.Load() | routeBit)
	l.set.flag()
	l.mu.Unlock()
	return Transitions{}
}

// RoutesHeld reports whether some route of the key may be held, with one
// atomic load.
func (l *Lane) RoutesHeld() bool { return l.word.Load()&routeBit != 0 }

// routeHeldLocked forgets the route holds that are over, clears the route
// bit when none is left, and reports whether any is. Called with mu held.
func (l *Lane) routeHeldLocked(now time.Time) bool {
	for r, until := range l.routes {
		if !now.Before(until) {
			delete(l.routes, r)
		}
	}
	if len(l.routes) == 0 {
		l.routes = nil
		if w := l.word.Load(); w&routeBit != 0 {
			l.word.Store(w &^ routeBit)
		}
		return false
	}
	return true
}

// unholdLocked ends a hold whose time has come. Called with mu held.
func (l *Lane) unholdLocked() Transition {
	w := l.word.Load()
	l.word.Store(w &^ heldBit)
	l.holdUntil, l.heldSince, l.holdTestAt = time.Time{}, time.Time{}, time.Time{}
	to, _ := unpack(w)
	return Transition{From: Held, To: to}
}

// heldNow returns a *HeldError while the key is held, nil otherwise: or
// nil with tk marked as the hold's test, when its test is due (an attempt
// that waited its turn for the send rate may be the test as well as any).
func (l *Lane) heldNow(tk *Ticket) error {
	if l.word.Load()&heldBit == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	test, he := l.heldLocked(time.Now(), true)
	if test {
		tk.set(holdFlag)
		return nil
	}
	if he != nil {
		return he
	}
	return nil
}

// heldLocked is the key's hold as an attempt meets it at now: a nil error
// when none is in force; test, when the hold's test is due and the
// attempt may take it (may: it was not let go by the key's queue) and
// takes it; else the HeldError, which says when a test is due and
// whether the hold is under test. Called with mu held.
func (l *Lane) heldLocked(now time.Time, may bool) (test bool, he *HeldError) {
	if l.word.Load()&heldBit == 0 || !now.Before(l.holdUntil) {
		return false, nil
	}
	if may && l.word.Load()&stateMask == uint64(Closed) && l.holdTestDueLocked(now) {
		l.holdTesting, l.holdTestAt = true, time.Time{}
		return true, nil
	}
	tested := (l.holdTesting || !l.holdTestAt.IsZero()) && l.holdUntil.Sub(now) < holdThreshold
	return false, &HeldError{Until: l.holdUntil, Test: l.holdTestAt, Tested: tested}
}
