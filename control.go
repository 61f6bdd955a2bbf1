package retryhttp

import (
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
)

// hostKey is what per-key state is kept by: scheme://host[:port] by
// default, or what WithKey computes.
type hostKey = perkey.Key

// HostState is what a Breaker holds for one key, as Host and Snapshot
// report it.
type HostState struct {
	Key   string // as hooks and errors report it
	State State  // the circuit's: StateClosed, StateOpen or StateHalfOpen
	// Since is when the circuit entered State; the zero time for a key the
	// breaker does not hold.
	Since time.Time
	// Until is when an open circuit may let a probe through; the zero
	// time while isolated, and for other states.
	Until time.Time
	// HeldUntil is when the key's hold ends: a server asked, with a long
	// Retry-After, for no request before then (a hold is not a state of
	// the circuit, which goes on as it was beside it). The zero time when
	// the key is not held.
	HeldUntil time.Time
	// Isolated reports that an operator opened the circuit with Isolate;
	// it stays open until Reset.
	Isolated bool
	// FailingSince is when the key began failing: the first failure of
	// the failures that opened its circuit, kept while it stays open or
	// half-open, or of a failure period under way on a closed circuit; the
	// zero time for a key that is not failing.
	FailingSince time.Time
	// Quotas is the quota the key's server last advertised in its
	// rate-limit headers (see WithQuotaHeaders); nil if it never did.
	// Rate is the send rate the key is held to, in requests per second,
	// by that quota or by the adaptive rate after a throttle; 0 when it is
	// not paced.
	Quotas []Quota
	Rate   float64
}

// hostState turns a lane's view into what Host and Snapshot report.
func hostState(key string, v perkey.View) HostState {
	s := HostState{Key: key, State: State(v.State), Since: v.Since, Until: v.OpenUntil, Isolated: v.Isolated, FailingSince: v.FailingSince}
	if v.Held {
		s.HeldUntil = v.HoldUntil
	}
	s.Quotas = quotasOf(v.Quota)
	if v.Paced {
		s.Rate = v.Rate
	}
	return s
}

// Host returns the state of one key: "scheme://host[:port]", or a key that
// WithKey computed. A key the breaker does not hold is closed.
func (b *Breaker) Host(key string) HostState {
	l := b.set.Peek(perkey.ParseKey(key))
	if l == nil {
		return HostState{Key: key, State: StateClosed}
	}
	return hostState(l.Key().String(), l.View(time.Now()))
}

// Snapshot returns the state of every key whose circuit is not closed,
// that is held or whose send rate is limited, in no particular order. It is safe to call while requests
// run; each key is read at its own instant.
func (b *Breaker) Snapshot() []HostState {
	now := time.Now()
	var out []HostState
	for _, l := range b.set.Lanes() {
		if s := hostState(l.Key().String(), l.View(now)); s.State != StateClosed || !s.HeldUntil.IsZero() || s.Rate > 0 {
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
	l := b.set.Lane(perkey.ParseKey(key))
	b.changed(l, l.Isolate(time.Now(), maxBreakerDuration), false)
}

// Reset closes the key's circuit and ends its hold and isolation, with the
// failures counted so far and the policy's memory of the key forgotten, as
// after a fix. The changes are reported to BreakerConfig.OnStateChange.
func (b *Breaker) Reset(key string) {
	l := b.set.Peek(perkey.ParseKey(key))
	if l == nil {
		return
	}
	b.changed(l, l.Reset(time.Now()), false)
}

// changed reports the changes a call to the lane made (see notify).
func (b *Breaker) changed(l *perkey.Lane, trs perkey.Transitions, local bool) {
	for _, tr := range trs.List() {
		b.notify(l, tr, local)
	}
}

// notify reports a change of the lane to OnStateChange and, when local is
// set and the breaker is shared through a Fleet, to the other processes:
// local changes are those a request made, not those adopted from another
// process or made by an operator, who acts on each process by itself. It
// is called after the lane's lock is released.
func (b *Breaker) notify(l *perkey.Lane, tr perkey.Transition, local bool) {
	if tr.Circuit() && b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(CircuitChangeInfo{Key: l.Key().String(), From: State(tr.From), To: State(tr.To), Until: tr.Until})
	}
	f := b.fleet.Load()
	if !local || f == nil {
		return
	}
	c := Change{Key: l.Key().String()}
	switch {
	case tr.To == perkey.Open && tr.From != perkey.Open:
		c.Kind, c.For = ChangeOpen, time.Until(tr.Until)
	case tr.To == perkey.Held:
		c.Kind, c.For = ChangeHold, time.Until(tr.Until)
	case tr.To == perkey.Closed && tr.From != perkey.Held && tr.Changed():
		c.Kind = ChangeClose
	case tr.Failing:
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
	k := perkey.ParseKey(c.Key)
	var (
		l   *perkey.Lane
		trs perkey.Transitions
	)
	switch c.Kind {
	case ChangeOpen:
		if l = b.set.Peek(k); l == nil && !quorum {
			return false
		}
		if l == nil {
			l = b.set.Lane(k)
		}
		trs = l.AdoptOpen(now, c.For+perkey.Uniform(0, b.cfg.OpenFor), quorum)
	case ChangeClose:
		if l = b.set.Peek(k); l == nil {
			return false
		}
		trs = l.AdoptClose(now, now.Add(-c.Age))
	case ChangeHold:
		l = b.set.Lane(k)
		trs = l.Hold(now.Add(c.For))
	default:
		return false
	}
	if !trs.Any() {
		return false
	}
	b.changed(l, trs, false)
	return true
}

// requestKey returns the key of req.
func (t *Transport) requestKey(req *http.Request) hostKey {
	var k hostKey
	if t.keyFunc != nil {
		k = perkey.ParseKey(t.keyFunc(req))
	} else {
		k = perkey.KeyOf(req.URL)
	}
	if t.partFunc != nil {
		if p := t.partFunc(req); p != "" {
			k = perkey.Key{Host: k.String() + "#" + p}
		}
	}
	return k
}
