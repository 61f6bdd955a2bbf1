package retryhttp

import (
	"errors"
	"math"
	"net/http"
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
// a circuit's or the budget's instant, by a draw of the policy for a retry
// far into its sequence (up to its cap, 30 s by default), as a retry that
// had waited its whole sequence would be. A success,
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
			if c := later(now, openUntil).Add(t.spread(l)); c.After(at) {
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
			if b = b.Add(t.spread(l)); b.After(at) {
				at, why = b, AdviceBudget
			}
		}
	}
	return at, why
}

// spread returns how far past the instant it advises RetryAt sends a
// caller: a point of the window from 0 to the policy's cap (30 s by
// default), the width over which a retry far into its sequence is drawn.
// The callers of one key get the points of a golden-ratio sequence rather
// than independent draws, so that however many come back, they fill the
// window evenly instead of in random clumps; without a lane, or with a
// Policy of the caller's own, a draw of the policy.
func (t *Transport) spread(l *lane) time.Duration {
	w := policyCap(t.s.policy)
	if l == nil || w <= 0 {
		return max(t.s.policy.Delay(64, 0), 0)
	}
	const golden = 0.6180339887498949
	_, frac := math.Modf(float64(l.advised.Add(1)) * golden)
	return time.Duration(frac * float64(w))
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
