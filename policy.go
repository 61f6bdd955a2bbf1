package retryhttp

import (
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
)

// Default policy parameters. A policy field that is zero or negative takes
// these values.
const (
	// defaultBase is the interval bound of the first retry: a small multiple
	// of a webhook endpoint's normal response time (100–250 ms): retrying
	// faster than the endpoint can answer only wastes the retry.
	defaultBase = 200 * time.Millisecond
	// defaultCap bounds every drawn delay, below a delivery's usefulness
	// horizon: an event delivered minutes late is a log entry, not a
	// delivery, so 30 s, with a bounded number of attempts.
	defaultCap = 30 * time.Second
)

// Policy draws the delay before retry n (1 for the first retry) from n and
// prev, the previous delay drawn for the key (0 for none), safely for
// concurrent use, never negative. A MaxDelay() time.Duration method tells
// RetryAt over how long to spread the callers it sends back (else 30 s).
type Policy interface {
	// Delay returns the wait before retry n, given prev.
	Delay(n int, prev time.Duration) time.Duration
}

// maxDelay returns the longest delay p draws, as its MaxDelay method
// reports it, or the default cap for a Policy without one.
func maxDelay(p Policy) time.Duration {
	if m, ok := p.(interface{ MaxDelay() time.Duration }); ok {
		return m.MaxDelay()
	}
	return defaultCap
}

// FullJitter, the default, draws the delay uniformly from
// [0, min(Cap, Base·2^(n−1))): the best at dispersing a herd that failed
// together. Base 0 means 200 ms, Cap 0 means 30 s.
type FullJitter struct {
	Base, Cap time.Duration
}

// Delay implements Policy.
func (p FullJitter) Delay(n int, _ time.Duration) time.Duration {
	return uniform(0, bound(n, p.Base, p.Cap))
}

// MaxDelay returns the longest delay p draws: its cap.
func (p FullJitter) MaxDelay() time.Duration { return bound(64, p.Base, p.Cap) }

// EqualJitter draws the delay uniformly from [d/2, d), where
// d = min(Cap, Base·2^(n−1)): half FullJitter's variance, with a floor.
// Base 0 means 200 ms, Cap 0 means 30 s.
type EqualJitter struct {
	Base, Cap time.Duration
}

// Delay implements Policy.
func (p EqualJitter) Delay(n int, _ time.Duration) time.Duration {
	d := bound(n, p.Base, p.Cap)
	return d/2 + uniform(0, d-d/2)
}

// MaxDelay returns the longest delay p draws: its cap.
func (p EqualJitter) MaxDelay() time.Duration { return bound(64, p.Base, p.Cap) }

// DecorrelatedJitter draws the delay uniformly from [Base, 3·prev], capped
// at Cap: it grows from the delays taken, so it follows how long an outage
// has lasted. Base 0 means 200 ms, Cap 0 means 30 s; a Cap below Base is
// Base.
type DecorrelatedJitter struct {
	Base, Cap time.Duration
}

// Delay implements Policy.
func (p DecorrelatedJitter) Delay(_ int, prev time.Duration) time.Duration {
	base, maxd := defaults(p.Base, p.Cap)
	maxd = max(maxd, base) // a Cap below Base is raised to Base
	if prev < base {
		prev = base
	}
	hi := maxd
	// 3·prev, computed so that it cannot overflow: prev <= maxd/3 exactly
	// when 3·prev <= maxd.
	if prev <= maxd/3 {
		hi = 3 * prev
	}
	// Inclusive of hi, as the interval is closed.
	return base + uniform(0, hi-base+1)
}

// MaxDelay returns the longest delay p draws: its cap, or its base when
// that is larger.
func (p DecorrelatedJitter) MaxDelay() time.Duration {
	base, maxd := defaults(p.Base, p.Cap)
	return max(maxd, base)
}

// Exponential is plain backoff, exactly min(Cap, Base·2^(n−1)): every
// client that failed together retries together. It is for comparison, and
// for callers that spread their own. Base 0 means 200 ms, Cap 0 means
// 30 s.
type Exponential struct {
	Base, Cap time.Duration
}

// Delay implements Policy.
func (p Exponential) Delay(n int, _ time.Duration) time.Duration {
	return bound(n, p.Base, p.Cap)
}

// MaxDelay returns the longest delay p draws: its cap.
func (p Exponential) MaxDelay() time.Duration { return bound(64, p.Base, p.Cap) }

// defaults returns base and cap with the defaults applied to fields that are
// zero or negative.
func defaults(base, maxd time.Duration) (time.Duration, time.Duration) {
	if base <= 0 {
		base = defaultBase
	}
	if maxd <= 0 {
		maxd = defaultCap
	}
	return base, maxd
}

// bound returns min(cap, base·2^(n−1)) with defaults applied, for any n
// (n < 1 counts as 1), without overflow: the doubling stops as soon as it
// would pass the cap.
func bound(n int, base, maxd time.Duration) time.Duration {
	base, maxd = defaults(base, maxd)
	d := min(base, maxd)
	for i := 1; i < n && d < maxd; i++ {
		if d > maxd-d {
			// 2d would pass the cap (and might overflow).
			return maxd
		}
		d *= 2
	}
	return d
}

// uniform returns a duration drawn uniformly from [lo, lo+width); width <= 0
// yields lo (see perkey.Uniform: seeded per process, safe for concurrent
// use).
func uniform(lo, width time.Duration) time.Duration { return perkey.Uniform(lo, width) }
