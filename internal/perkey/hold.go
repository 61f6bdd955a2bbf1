package perkey

import "time"

// Hold holds the key until until: no attempt to it, first or retry, is
// admitted before then (Admit refuses with a *HeldError saying when it
// ends). A hold is never shortened, by a success or by a shorter wait
// asked for later; a longer one extends it. It ends at its instant, when
// the next admission finds it over. Hold reports the hold as a change to
// Held when it begins or grows.
func (l *Lane) Hold(until time.Time) Transitions {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.word.Load()
	if w&heldBit != 0 && !until.After(l.holdUntil) {
		return Transitions{}
	}
	from, _ := unpack(w)
	if w&heldBit != 0 {
		from = Held
	} else {
		l.heldSince = time.Now()
	}
	l.holdUntil = until
	l.word.Store(w | heldBit)
	l.set.flag()
	return one(Transition{From: from, To: Held, Until: until})
}

// Route is a route of a key: a method and a path. A server's Retry-After
// speaks for the route it answered, and holds only that route unless the
// evidence is host-wide (see holdFor).
type Route struct{ Method, Path string }

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
	l.holdUntil, l.heldSince = time.Time{}, time.Time{}
	to, _ := unpack(w)
	return Transition{From: Held, To: to}
}

// heldNow returns a *HeldError while the key is held, nil otherwise.
func (l *Lane) heldNow() error {
	if l.word.Load()&heldBit == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if until := l.holdUntil; l.word.Load()&heldBit != 0 && time.Now().Before(until) {
		return &HeldError{Until: until}
	}
	return nil
}
