package retryhttp

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// HostState is what a Breaker holds for one key, as Host and Snapshot
// report it.
type HostState struct {
	Key   string // as hooks and errors report it
	State State  // StateClosed, StateOpen, StateHalfOpen or StateHeld
	// Since is when the key entered State; the zero time for a key the
	// breaker does not hold.
	Since time.Time
	// Until is when an open circuit may let a probe through, or a hold
	// ends; the zero time while isolated, and for other states.
	Until time.Time
	// Isolated reports that an operator opened the circuit with Isolate;
	// it stays open until Reset.
	Isolated bool
}

// Host returns the state of one key: "scheme://host[:port]", or a key that
// WithKey computed. A key the breaker does not hold is closed.
func (b *Breaker) Host(key string) HostState {
	l := b.lanes.peek(parseKey(key))
	if l == nil {
		return HostState{Key: key, State: StateClosed}
	}
	return l.state(time.Now())
}

// Snapshot returns the state of every key whose circuit is not closed or
// that is held, in no particular order. It is safe to call while requests
// run; each key is read at its own instant.
func (b *Breaker) Snapshot() []HostState {
	now := time.Now()
	var out []HostState
	for _, l := range b.lanes.values() {
		if s := l.state(now); s.State != StateClosed {
			out = append(out, s)
		}
	}
	return out
}

// Isolate opens the key's circuit until Reset: every request to it is
// refused with an error wrapping ErrCircuitOpen that names the isolation,
// and requests sleeping toward it wake, as when a circuit trips. The change
// is reported to BreakerConfig.OnStateChange.
func (b *Breaker) Isolate(key string) {
	l := b.lane(parseKey(key))
	l.mu.Lock()
	l.isolated = true
	tr := l.openLocked(time.Now(), maxBreakerDuration)
	tr.until = time.Time{}
	l.mu.Unlock()
	b.changed(l, tr)
}

// Reset closes the key's circuit and ends its hold and isolation, with the
// failures counted so far forgotten, as after a fix. The changes are
// reported to BreakerConfig.OnStateChange.
func (b *Breaker) Reset(key string) {
	l := b.lanes.peek(parseKey(key))
	if l == nil {
		return
	}
	var trs transitions
	l.mu.Lock()
	now := time.Now()
	if l.word.Load()&heldBit != 0 {
		trs.add(l.unholdLocked())
	}
	l.isolated = false
	l.resetPeriodLocked()
	l.probes = 0
	if state, _ := unpack(l.word.Load()); state != StateClosed {
		trs.add(l.setLocked(StateClosed, now))
	}
	l.mu.Unlock()
	b.changed(l, trs[0])
	b.changed(l, trs[1])
}

// changed reports a change an operator made: to OnStateChange only, as an
// operator acts on each process by itself.
func (b *Breaker) changed(l *lane, tr transition) {
	b.notify(l, tr, false)
}

// notify reports a change of the lane to OnStateChange and, when local is
// set and the breaker is shared through a Fleet, to the other processes.
// It is called after the lane's lock is released.
func (b *Breaker) notify(l *lane, tr transition, local bool) {
	if tr.from != tr.to && b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(CircuitChangeInfo{Key: l.key.String(), From: tr.from, To: tr.to, Until: tr.until})
	}
	f := b.fleet.Load()
	if !local || f == nil {
		return
	}
	c := Change{Key: l.key.String()}
	switch {
	case tr.to == StateOpen && tr.from != StateOpen:
		c.Kind, c.For = ChangeOpen, time.Until(tr.until)
	case tr.to == StateHeld:
		c.Kind, c.For = ChangeHold, time.Until(tr.until)
	case tr.to == StateClosed && tr.from != StateHeld:
		c.Kind = ChangeClose
	case tr.failing:
		c.Kind, c.For = ChangeFailing, 2*b.cfg.Span
	default:
		return
	}
	f.announce(c)
}

// adopt applies a change another process announced: an open (extending
// an open circuit here, never shortening it; opening a closed one only
// when quorum is set), a close newer than this process's open episode, or
// a hold. Adopted opens add a random extra of up to OpenFor, so that the
// fleet half-opens with about one probe per open period, not one per
// process. It reports whether anything changed.
func (b *Breaker) adopt(c Change, quorum bool, now time.Time) bool {
	k := parseKey(c.Key)
	var (
		l  *lane
		tr transition
	)
	switch c.Kind {
	case ChangeOpen:
		if l = b.lanes.peek(k); l == nil && !quorum {
			return false
		}
		if l == nil {
			l = b.lane(k)
		}
		tr = l.adoptOpen(now, c.For+uniform(0, b.cfg.OpenFor), quorum)
	case ChangeClose:
		if l = b.lanes.peek(k); l == nil {
			return false
		}
		tr = l.adoptClose(now, now.Add(-c.Age))
	case ChangeHold:
		l = b.lane(k)
		tr = l.hold(now.Add(c.For))
	default:
		return false
	}
	if tr.from == tr.to && !tr.extended {
		return false
	}
	b.notify(l, tr, false)
	return true
}

// state returns the lane's state as an operator sees it; a hold whose time
// has come is over.
func (l *lane) state(now time.Time) HostState {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.word.Load()
	state, _ := unpack(w)
	s := HostState{Key: l.key.String(), State: state, Since: l.changed, Isolated: l.isolated}
	if state == StateOpen && !l.isolated {
		s.Until = l.openUntil
	}
	if w&heldBit != 0 && now.Before(l.holdUntil) && state != StateOpen {
		s.State, s.Since, s.Until = StateHeld, l.heldSince, l.holdUntil
	}
	return s
}

// parseKey turns a key as reported back into the table's key: the default
// form scheme://host[:port] (normalised as keyOf does), or any other string
// from WithKey as it is.
func parseKey(s string) hostKey {
	if i := strings.Index(s, "://"); i > 0 && !strings.ContainsAny(s[i+3:], "/?#") {
		return keyOf(&url.URL{Scheme: s[:i], Host: s[i+3:]})
	}
	return hostKey{host: s}
}

// requestKey returns the key of req.
func (t *Transport) requestKey(req *http.Request) hostKey {
	if t.keyFunc != nil {
		return parseKey(t.keyFunc(req))
	}
	return keyOf(req.URL)
}
