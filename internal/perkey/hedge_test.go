package perkey

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// histogram counts the times of n answers drawn by draw.
func histogram(n int, draw func(r *rand.Rand) time.Duration) []uint64 {
	r := rand.New(rand.NewPCG(1, 2))
	c := make([]uint64, latencyBuckets)
	for range n {
		c[latencyBucket(draw(r))]++
	}
	return c
}

// bimodal answers in 5 to 7 ms, but a share of stragglers at 100 ms.
func bimodal(share float64) func(r *rand.Rand) time.Duration {
	return func(r *rand.Rand) time.Duration {
		if r.Float64() < share {
			return 100*time.Millisecond + time.Duration(r.Int64N(int64(5*time.Millisecond)))
		}
		return 5*time.Millisecond + time.Duration(r.Int64N(int64(2*time.Millisecond)))
	}
}

// Where stragglers are about maxExtraLoad of the answers, the quantile
// p(1 − maxExtraLoad) falls among them or among the fast answers by the
// luck of their count. The delay does not: it stays just after the fast
// answers, far from the stragglers' 100 ms, whether they are a little
// under or a little over the share, and whether few or many answers are
// known.
func TestHedgeDelayOnTheEdge(t *testing.T) {
	for _, share := range []float64{0.03, 0.045, 0.05, 0.055, 0.065} {
		for _, n := range []int{100, 400, 4000} {
			d := hedgeDelay(histogram(n, bimodal(share)), 0, 0.05)
			assert.GreaterOrEqual(t, d, 7*time.Millisecond, "share %v, %d answers", share, n)
			assert.Less(t, d, 10*time.Millisecond, "share %v, %d answers", share, n)
		}
	}
	// Attempts cancelled because their hedge won count beyond every
	// bucket: the delay stays where it was.
	c := histogram(4000, bimodal(0.01))
	assert.Less(t, hedgeDelay(c, 160, 0.05), 10*time.Millisecond)
}

// Without a gap, the delay is Finagle's: the time by which all but
// maxExtraLoad of the answers have come.
func TestHedgeDelayIsTheQuantileWithoutAGap(t *testing.T) {
	lognormal := func(r *rand.Rand) time.Duration {
		return time.Duration(float64(10*time.Millisecond) * math.Exp(r.NormFloat64()))
	}
	c := histogram(20000, lognormal)
	d := hedgeDelay(c, 0, 0.05)
	// The lognormal's p95 is 10 ms · e^1.645, about 51.8 ms; a bucket is
	// an eighth of a doubling wide.
	assert.InDelta(t, 51.8, float64(d)/float64(time.Millisecond), 51.8/8+1)
}

// The tokens bound the hedges to the share earned, with at most ten saved
// up.
func TestHedgeTokens(t *testing.T) {
	h := &Hedger{}
	assert.False(t, h.Spend())
	for range 1000 {
		h.Earn(0.05)
	}
	n := 0
	for h.Spend() {
		n++
	}
	assert.Equal(t, 10, n, "at most ten saved up")
	for range 100 {
		h.Earn(0.05)
	}
	n = 0
	for h.Spend() {
		n++
	}
	assert.Equal(t, 5, n, "a twentieth of a hedge per request")
}

// record records n answers after d each.
func record(h *Hedger, n int, d time.Duration) {
	for range n {
		h.Record(d, false, 0.05)
	}
}

// A key whose median rises by half, and by 2 ms at least, is slowed, and is not hedged for slowedFor after; noise on a fast key is
// not a slowdown.
func TestHedgerSlowed(t *testing.T) {
	l := NewSet(Config{}).Lane(Key{Host: "a.test"})
	h := l.Hedger()
	for i := range 400 {
		h.Record(5*time.Millisecond+time.Duration(i%3)*100*time.Microsecond, false, 0.05)
	}
	_, ok := h.Delay()
	assert.True(t, ok, "a steady key is hedged")
	record(h, 100, 9*time.Millisecond)
	_, ok = h.Delay()
	assert.False(t, ok, "slowed by four fifths")
	record(h, 400, 5*time.Millisecond)
	_, ok = h.Delay()
	assert.False(t, ok, "still within slowedFor of the slowdown")

	noisy := NewSet(Config{}).Lane(Key{Host: "c.test"}).Hedger()
	record(noisy, 400, 5*time.Millisecond)
	record(noisy, 100, 6500*time.Microsecond)
	_, ok = noisy.Delay()
	assert.True(t, ok, "a rise by 30%, 1.5 ms, is a loaded machine's noise")

	fast := NewSet(Config{}).Lane(Key{Host: "b.test"}).Hedger()
	record(fast, 400, 300*time.Microsecond)
	record(fast, 100, 600*time.Microsecond)
	_, ok = fast.Delay()
	assert.True(t, ok, "a rise of 300 µs is noise")
}

// A key is hedged only in plain health: not while it is young, held, or
// failing.
func TestHedgePlain(t *testing.T) {
	young := NewSet(Config{SeesEverySuccess: true}).Lane(Key{Host: "young.test"})
	assert.False(t, young.HedgePlain(), "a young key")
	l := NewSet(Config{}).Lane(Key{Host: "a.test"})
	assert.True(t, l.HedgePlain())
	l.Hold(time.Now().Add(time.Minute))
	assert.False(t, l.HedgePlain(), "a held key")
	f := NewSet(Config{Circuits: true}).Lane(Key{Host: "f.test"})
	tk, _, err := f.Admit(t.Context(), Limits{})
	assert.NoError(t, err)
	f.Done(tk, Outcome{Kind: Failure})
	assert.False(t, f.HedgePlain(), "a key whose failure period is under way")
}
