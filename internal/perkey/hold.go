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
