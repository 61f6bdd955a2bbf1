package perkey

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// A round whose answers take far longer than the quickest round's (the
// host's queue is building) cuts the rate to what the host answered, and
// leaves slow start; rounds answered as quickly grow it.
func TestRecoveryLateAnswersCut(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := newRecovery(t0, 10_000, 0, 0)
	// round sends n at from, answered took later, and reads the rate at
	// end.
	round := func(from, end, n int, took time.Duration) float64 {
		for range n {
			r.released(at(from))
		}
		for range n {
			r.success(at(from).Add(took), took)
		}
		return r.rateAt(at(end))
	}

	assert.Equal(t, 200.0, round(0, 50, 5, 10*time.Millisecond))
	assert.Equal(t, 400.0, round(50, 100, 10, 20*time.Millisecond), "twice the quickest, not half a step more")

	// A host that is slow from the start is not late.
	r = newRecovery(t0, 10_000, 0, 0)
	assert.Equal(t, 200.0, round(0, 250, 5, 200*time.Millisecond))
	assert.Equal(t, 400.0, round(250, 500, 10, 200*time.Millisecond))

	r = newRecovery(t0, 10_000, 0, 0)
	round(0, 50, 5, 10*time.Millisecond)
	got := round(50, 150, 20, 40*time.Millisecond)
	assert.InDelta(t, recoveryBeta*20/0.1, got, 1e-9, "cut to what the host answered, over the round")
	assert.Equal(t, recoveryGrowth, r.growth, "out of slow start")
}

// A recovery that began with a small backlog grows past the backlog's
// rate when requests keep coming and waiting: what it let go over the
// spread counts as demand, as what waits does.
func TestRecoveryFollowsDemand(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	r := newRecovery(t0, 10, 0, 0)
	assert.Equal(t, float64(recoveryRate), r.most)
	for i := range 200 {
		r.released(t0.Add(time.Duration(i) * 2 * time.Millisecond))
	}
	r.backlog(t0.Add(400*time.Millisecond), 50)
	assert.Equal(t, float64(200+50)/recoverySpread.Seconds(), r.most)

	// A second later, the releases have left the spread.
	r.backlog(t0.Add(1400*time.Millisecond), 0)
	assert.Equal(t, float64(250)/recoverySpread.Seconds(), r.most, "the cap never falls")
	r.spread(t0.Add(1400 * time.Millisecond))
	assert.Equal(t, [len(r.sent)]int{}, r.sent, "no release in the past spread")
}

// A release timer that fires late still lets go what fell due meanwhile,
// up to releaseSlack's worth.
func TestSetRateLateTimer(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	lim := rate.NewLimiter(1, 1)
	setRate(lim, t0, 3000)
	assert.True(t, lim.AllowN(t0, 1))
	late := t0.Add(5 * time.Millisecond)
	n := 0
	for lim.AllowN(late, 1) {
		n++
	}
	assert.Equal(t, 15, n, "3,000/s over 5 ms")
	assert.Equal(t, time.Duration(0), nextToken(lim, late.Add(time.Second/3000)))
}

// A rate cut low grows back at the pace of time while the key answers,
// not of its own releases: at 1/s a round lasts a second, and growing a
// tenth a round would take 11 s to reach 100/s again.
func TestRecoveryRegrowsWithTime(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	r := newRecovery(t0, 10_000, 0, 0)
	r.rate, r.growth, r.wasCut = 1, recoveryGrowth, true
	now := t0
	for r.rateAt(now) < recoveryRate {
		// The lane's way: one release per token, answered at once.
		r.released(now)
		r.success(now.Add(time.Millisecond), time.Millisecond)
		now = now.Add(time.Duration(float64(time.Second) / r.rateAt(now)))
		require.Less(t, now.Sub(t0), time.Minute, "the rate never grew back")
	}
	// About 3.2 s: doubling in the rounds of a second or so, then a tenth
	// every recoveryStep (6.7 times a second).
	assert.Less(t, now.Sub(t0), 4*time.Second, "back at the starting rate")
}

// A round that is long because the key answered slowly, not because the
// rate let go little, grows the rate by one step only: a host whose
// answers take a second after a cut is not sent twice as much.
func TestRecoverySlowAnswersGrowOneStep(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	r := newRecovery(t0, 10_000, 0, 0)
	r.rate, r.growth, r.wasCut = 100, recoveryGrowth, true
	r.minTook = time.Second // as slow from the start: not late
	for range 10 {
		r.released(t0)
	}
	for range 10 {
		r.success(t0.Add(time.Second), time.Second)
	}
	assert.InDelta(t, 100*recoveryGrowth, r.rateAt(t0.Add(time.Second)), 1e-9)
}
