package perkey

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Hedger is what a key knows for hedging (see the root package's
// WithHedging): how long its attempts take to answer, the delay after
// which an unanswered attempt is sent again, whether the key as a whole
// has slowed, and the hedges it has earned. It takes no lock but to start
// a new generation of its histogram, once in hedgeRecompute answers.
type Hedger struct {
	cur    atomic.Pointer[latencies] // the generation being counted
	delay  atomic.Int64              // the hedge delay in nanoseconds; 0: none known
	recent atomic.Uint64             // float64 bits: the median of log2 of recent answer times, as it moves
	normal atomic.Uint64             // float64 bits: the key's usual median, in log2 (see recompute)
	tokens atomic.Int64              // hedges earned, in millionths
	calmAt atomic.Int64              // Unix nanoseconds: no hedge before then, the key having slowed (see slowedFor)
	mu     sync.Mutex                // guards prev and the recompute
	prev   *latencies                // the previous generation
	normAt time.Time                 // when normal was last set
}

// latencies is one generation of a key's answer times: a histogram with
// eight buckets per doubling, from latencyMin up.
type latencies struct {
	born   time.Time
	n      atomic.Uint64
	counts [latencyBuckets]atomic.Uint32
	// beyond counts the attempts cancelled unanswered because their hedge
	// won: slower than any bucket can say, since all that is known is that
	// they had not answered when the hedge did.
	beyond atomic.Uint32
}

const (
	latencyMin     = 8 * time.Microsecond
	latencyOctaves = 24 // up to 8 µs·2^24, about 134 s
	latencySubs    = 8
	latencyBuckets = 1 + latencyOctaves*latencySubs + 1

	// hedgeRecompute: the delay is worked out again every this many answers.
	hedgeRecompute = 32
	// A generation ends once it holds genMax answers, or genMin answers
	// and genAge has passed: the delay follows the last one or two.
	genMax = 4096
	genMin = 256
	genAge = 10 * time.Second
	// medianStep is how far, in doublings, each answer moves the recent
	// median toward itself: a slowdown by half again shows within about
	// thirty answers. A median, not a mean, so that more stragglers, which
	// hedging is for, do not look like a slowdown of the key.
	medianStep = 1.0 / 50
	// slowedBy: the key has slowed as a whole when its recent median is
	// half as long again as its usual one (in log2: log2(1.5)): a server
	// near its capacity queues every copy, and its median doubles and
	// more as the queue fills, while the noise of a loaded machine moves
	// it by a fifth.
	slowedBy = 0.585
	// slowedMin: a rise of less than this is the scheduler's and the
	// network's noise on a fast key, not a queue.
	slowedMin = 2 * time.Millisecond
	// slowedFor is how long a key that slowed is not hedged after it was
	// last seen slowed: a server near its capacity slows and recovers by
	// turns as its queue fills and drains, and a hedge sent in a lull
	// fills it again.
	slowedFor = 5 * time.Second
	// normalDrift is how fast the key's usual time may rise, in doublings
	// per second: a slowdown that lasts a minute becomes the new usual.
	normalDrift = 1.0 / 60
	// maxHedgeTokens bounds the hedges a key saves up: enough for the
	// stragglers' own bunching (at 5%, ten come within a hundred requests
	// about once in two thousand), little beside a long run's share.
	maxHedgeTokens = 10 * tokenUnit
	tokenUnit      = 1_000_000
)

// Hedger returns the key's hedging state, made on first use.
func (l *Lane) Hedger() *Hedger {
	if h := l.hedger.Load(); h != nil {
		return h
	}
	h := &Hedger{}
	h.cur.Store(&latencies{born: time.Now()})
	if !l.hedger.CompareAndSwap(nil, h) {
		return l.hedger.Load()
	}
	return h
}

// HedgePlain reports whether the key may be hedged at all: its circuit is
// closed, it is not held, paced or waited for, it is past its young phase,
// and no failure period is under way. One atomic load, two when it is.
func (l *Lane) HedgePlain() bool {
	return l.word.Load()&fastMask == 0 && !l.failing.Load()
}

// Earn credits the key with share of a hedge: each request that may be
// hedged earns maxExtraLoad, and a hedge spends one.
func (h *Hedger) Earn(share float64) {
	add := int64(share * tokenUnit)
	if v := h.tokens.Add(add); v > maxHedgeTokens {
		h.tokens.Add(-min(v-maxHedgeTokens, add))
	}
}

// Earned reports whether the key has a hedge to spend; one atomic load.
func (h *Hedger) Earned() bool { return h.tokens.Load() >= tokenUnit }

// Spend takes one hedge, if the key has earned one.
func (h *Hedger) Spend() bool {
	for {
		v := h.tokens.Load()
		if v < tokenUnit {
			return false
		}
		if h.tokens.CompareAndSwap(v, v-tokenUnit) {
			return true
		}
	}
}

// Delay returns the hedge delay, and false when there is none: too few
// answers are known, or the key has slowed as a whole, when a second copy
// would only queue behind the first.
func (h *Hedger) Delay() (time.Duration, bool) {
	d := time.Duration(h.delay.Load())
	if d <= 0 || h.slowed() {
		return 0, false
	}
	if calm := h.calmAt.Load(); calm != 0 && time.Now().UnixNano() < calm {
		return 0, false
	}
	return d, true
}

// Record counts an attempt that answered after d, or, censored, one
// cancelled unanswered because its hedge won. share is the request's
// maxExtraLoad, which the delay is worked out for.
//
// A censored attempt is counted beyond every bucket, not at the time it
// was cancelled: it would have answered later, how much later is not
// known, and counted at its cancel time it would put a crowd just past
// the delay, which the gap rule (see recompute) would then step over,
// raising the delay each time. Nor does it move the recent median, which
// the key's usual one is compared with, and which also leaves those
// attempts out.
func (h *Hedger) Record(d time.Duration, censored bool, share float64) {
	g := h.cur.Load()
	if censored {
		g.beyond.Add(1)
		h.count(g, share)
		return
	}
	g.counts[latencyBucket(d)].Add(1)
	lg := math.Log2(float64(max(d, latencyMin)))
	for {
		old := h.recent.Load()
		v := math.Float64frombits(old)
		switch {
		case old == 0:
			v = lg
		case lg > v:
			v += min(medianStep, lg-v)
		case lg < v:
			v -= min(medianStep, v-lg)
		}
		if h.recent.CompareAndSwap(old, math.Float64bits(v)) {
			break
		}
	}
	if h.slowed() {
		h.calmAt.Store(time.Now().Add(slowedFor).UnixNano())
	}
	h.count(g, share)
}

// slowed reports whether the key's recent median is above its usual one
// by slowedBy, and by slowedMin at least.
func (h *Hedger) slowed() bool {
	u := h.normal.Load()
	if u == 0 {
		return false
	}
	usual, recent := math.Float64frombits(u), math.Float64frombits(h.recent.Load())
	return recent > usual+slowedBy && math.Exp2(recent)-math.Exp2(usual) > float64(slowedMin)
}

// count counts one answer in generation g, and works the delay out again
// every hedgeRecompute answers.
func (h *Hedger) count(g *latencies, share float64) {
	if g.n.Add(1)%hedgeRecompute == 0 && h.mu.TryLock() {
		h.recompute(share)
		h.mu.Unlock()
	}
}

// recompute works out the delay from the last generation or two, and
// starts a new one when the current is full or old. Called with mu held.
//
// The delay is the time after which at most maxExtraLoad of the answers
// are still to come: Finagle's rule, the quantile p(1 − maxExtraLoad).
// Where the answers fall into a fast crowd and slow stragglers, and the
// stragglers are about maxExtraLoad of them, that quantile sits on the
// edge between the two: a little more than maxExtraLoad of stragglers
// puts it among them, and a hedge then goes just as the straggler answers,
// gaining nothing. So the delay is moved down to the start of a gap, where
// one it lies below: a doubling of time in which few answers fall (a
// quarter of maxExtraLoad), where no more than one and a half times
// maxExtraLoad is still to come (more while few answers are known). A
// hedge then goes as soon as the fast crowd has answered; what it would
// send over maxExtraLoad the key's tokens refuse.
func (h *Hedger) recompute(share float64) {
	now := time.Now()
	g := h.cur.Load()
	var c [latencyBuckets]uint64
	var n, beyond uint64 // answers in the buckets; censored ones
	for _, gen := range [2]*latencies{h.prev, g} {
		if gen == nil {
			continue
		}
		for i := range gen.counts {
			v := uint64(gen.counts[i].Load())
			c[i] += v
			n += v
		}
		beyond += uint64(gen.beyond.Load())
	}
	if n := g.n.Load(); n >= genMax || (n >= genMin && now.Sub(g.born) >= genAge) {
		h.prev = g
		h.cur.Store(&latencies{born: now})
	}
	// Enough answers to see a tail of share: five of them beyond it.
	if share <= 0 || float64(n+beyond)*share < 5 || n == 0 {
		h.delay.Store(0)
		return
	}
	h.delay.Store(int64(hedgeDelay(c[:], beyond, share)))
	// The key's usual time: the median of its answer times, which may
	// fall at once but rises by at most normalDrift a second, so that a
	// key that slows as a whole shows as slowed (see Delay) for a while
	// before its slowness becomes its usual.
	var below uint64
	median := 0
	for i, v := range c {
		if below += v; 2*below >= n {
			median = i
			break
		}
	}
	usual := math.Log2(float64(latencyMid(median)))
	if old := h.normal.Load(); old != 0 {
		usual = min(usual, math.Float64frombits(old)+normalDrift*now.Sub(h.normAt).Seconds())
	} else {
		// The recent median starts from here, not from the first answers,
		// which a new connection's handshake slowed.
		h.recent.Store(math.Float64bits(usual))
	}
	h.normal.Store(math.Float64bits(usual))
	h.normAt = now
}

// hedgeDelay returns the hedge delay for the histogram c, with beyond
// answers slower than all of its buckets, and a share of extra load (see
// recompute).
func hedgeDelay(c []uint64, beyond uint64, share float64) time.Duration {
	n := beyond
	for _, v := range c {
		n += v
	}
	allowed := share * float64(n)
	// tail[i]: the answers beyond bucket i.
	var tail [latencyBuckets]float64
	above := float64(beyond)
	for i := len(c) - 1; i >= 0; i-- {
		tail[i] = above
		above += float64(c[i])
	}
	q := len(c) - 1 // the quantile's bucket
	for i := range c {
		if tail[i] <= allowed {
			q = i
			break
		}
	}
	// How far above maxExtraLoad the stragglers may be and still be
	// stepped below: half as many again, or three standard deviations of
	// their count while few answers are known.
	slack := max(1.5*allowed, allowed+3*math.Sqrt(allowed))
	for i := range q {
		if tail[i] > slack {
			continue
		}
		// A doubling of time past bucket i with almost no answer in it.
		var next float64
		for j := i + 1; j <= min(i+latencySubs, len(c)-1); j++ {
			next += float64(c[j])
		}
		if next <= allowed/4 {
			return latencyUpper(i)
		}
	}
	return latencyUpper(q)
}

// latencyBucket returns the bucket that holds d.
func latencyBucket(d time.Duration) int {
	if d < latencyMin {
		return 0
	}
	k := bits.Len64(uint64(d/latencyMin)) - 1
	if k >= latencyOctaves {
		return latencyBuckets - 1
	}
	lo := latencyMin << k
	return 1 + k*latencySubs + int((d-lo)*latencySubs/lo)
}

// latencyUpper returns the upper bound of bucket i.
func latencyUpper(i int) time.Duration {
	if i == 0 {
		return latencyMin
	}
	if i >= latencyBuckets-1 {
		return latencyMin << latencyOctaves
	}
	k, s := (i-1)/latencySubs, (i-1)%latencySubs
	lo := latencyMin << k
	return lo + lo*time.Duration(s+1)/latencySubs
}

// latencyMid returns a time in the middle of bucket i.
func latencyMid(i int) time.Duration {
	if i == 0 {
		return latencyMin / 2
	}
	lo := latencyUpper(i - 1)
	return lo + (latencyUpper(i)-lo)/2
}
