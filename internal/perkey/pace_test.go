package perkey

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pacer's edges: an attempt whose deadline the queue ahead cannot fit
// is refused at once; one whose context ends while waiting returns its
// error; a pacer that has grown far past what was throttled lets the key
// go, and the key costs nothing again.
func TestPaceEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "k"})
		l.Done(Ticket{}, Outcome{Facts: Throttles}) // paced from now, at 10/s
		throttledPaced(t, l)
		l.pace.Load().lim.AllowN(time.Now(), 1)

		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		defer cancel()
		_, _, err := l.Admit(ctx, Limits{})
		require.ErrorIs(t, err, ErrPaced)

		ctx, cancel = context.WithCancel(t.Context())
		done := make(chan error)
		go func() {
			_, _, err := l.Admit(ctx, Limits{})
			done <- err
		}()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)

		time.Sleep(time.Minute) // the curve has long passed 10,000/s
		tk, _, err := l.Admit(t.Context(), Limits{})
		require.NoError(t, err)
		l.Done(tk, Outcome{Kind: Success})
		assert.Nil(t, l.pace.Load(), "the pacer is dropped")
		assert.Zero(t, l.word.Load()&pacedBit, "the paced flag is clear")
		assert.True(t, l.idle(time.Now()))
	})
}

// A waiter for a place among the key's attempts in flight gives up with
// its context; a busy key is not idle.
func TestPaceSlotsEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s slots
		require.NoError(t, s.acquire(t.Context(), 1, false))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- s.acquire(ctx, 1, false) }()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		l := NewSet(defaults()).Lane(Key{})
		l.slots.Store(&s)
		assert.False(t, l.idle(time.Now()), "an attempt in flight")
		s.release()
		assert.True(t, l.idle(time.Now()))
	})
}

// In slow start the wait ahead is estimated along the doubling curve: 100
// requests queued at 10/s doubling every 200 ms are served in about 1.03 s,
// not 10 s.
func TestPaceSlowStartEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(time.Now())
		p.throttles = 1 // as the throttle that started it
		d := p.aheadLocked(time.Now(), 100)
		assert.InDelta(t, 1.03, d.Seconds(), 0.01) // 0.2·log2(1 + 100·ln2/(10·0.2))
	})
}

// rateBeside counts what was admitted over the time the key could send:
// a hold inside the span is left out of it, one outside changes nothing.
func TestTallyRateBeside(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var c tally
	for i := range 40 {
		c.add(t0.Add(time.Duration(i) * 25 * time.Millisecond)) // 40/s over the first second
	}
	now := t0.Add(2*time.Second - time.Millisecond) // the span's oldest slot still holds t0's
	assert.InDelta(t, 20, c.rate(now, admittedSpan), 0.5, "40 over the 2 s span")
	assert.InDelta(t, 20, c.rateBeside(now, admittedSpan, now, now.Add(time.Second)), 0.5, "a hold after now")
	assert.InDelta(t, 20, c.rateBeside(now, admittedSpan, t0.Add(-3*time.Second), t0.Add(-time.Second)), 0.5, "a hold before the span")
	assert.InDelta(t, 40, c.rateBeside(now, admittedSpan, t0.Add(time.Second), now), 1, "held the second half of the span: 40 over 1 s")
	assert.InDelta(t, 40, c.rateBeside(now, admittedSpan, t0.Add(time.Second), now.Add(time.Hour)), 1, "a hold still going counts up to now")
	assert.InDelta(t, 20, c.rateBeside(now, admittedSpan, time.Time{}, now), 0.5, "no hold")
	var empty tally
	assert.Zero(t, empty.rateBeside(now, admittedSpan, t0, now), "nothing admitted")
}

// A key's first burst meets a window limiter: 100 admitted, then a 429
// with Retry-After: 1. When the hold ends the key goes on at flatShare of
// the 100 a second it was admitted, not at slow start's 10/s, also when
// its first request came half a second before the burst. A key whose
// first request came longer before than the hold lasts, a Set whose lanes
// do not see every success, and a burst too small to tell all come back
// in slow start.
func TestPaceSettlesOnFirstBurst(t *testing.T) {
	// comeBack runs the burst on a lane of a Set configured by cfg, after
	// the lane has waited idle, and returns the key's rate when the
	// hold ends.
	comeBack := func(cfg Config, idle time.Duration, admitted int) (r float64) {
		synctest.Test(t, func(t *testing.T) {
			l := NewSet(cfg).Lane(Key{Host: "k"})
			time.Sleep(idle)
			for range admitted {
				tk, _, err := l.Admit(t.Context(), Limits{})
				require.NoError(t, err)
				l.Done(tk, Outcome{Kind: Success})
			}
			l.Hold(time.Now().Add(time.Second))
			l.Done(Ticket{}, Outcome{Facts: Throttles | TooMany})
			time.Sleep(time.Second)
			p := l.pace.Load()
			require.NotNil(t, p)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.setRateLocked(time.Now())
			r = p.rateAtLocked(time.Now())
		})
		return r
	}
	every := defaults()
	every.SeesEverySuccess = true
	assert.InDelta(t, flatShare*100, comeBack(every, 0, 100), 0.01, "the first burst: 100 admitted in the 1 s to the hold's end")
	assert.InDelta(t, flatShare*200, comeBack(every, 0, 200), 0.01, "200 admitted")
	assert.InDelta(t, flatShare*100, comeBack(every, 500*time.Millisecond, 100), 0.01, "the first request half a second before the burst")
	assert.InDelta(t, slowStartRate, comeBack(every, 1500*time.Millisecond, 100), 0.01, "the first request longer before the burst than the hold")
	assert.InDelta(t, slowStartRate, comeBack(defaults(), 0, 100), 0.01, "a Set whose lanes do not see every success")
	assert.InDelta(t, slowStartRate, comeBack(every, 0, 5), 0.01, "5 admitted: too few to tell")
}

// A lane counts its successes, its admissions and the other outcomes of
// those up to earlyMax, so that it knows its attempts in flight while it
// is young; past earlyMax it only reads the counts, and knows none in
// flight.
func TestLaneEarlyCount(t *testing.T) {
	cfg := defaults()
	cfg.SeesEverySuccess = true
	l := NewSet(cfg).Lane(Key{Host: "k"})
	var tks []Ticket
	for range 5 {
		tk, _, err := l.Admit(t.Context(), Limits{})
		require.NoError(t, err)
		tks = append(tks, tk)
	}
	assert.Equal(t, 5, l.inFlight())
	l.Done(tks[0], Outcome{Kind: Success})
	l.Done(tks[1], Outcome{Kind: Success})
	l.Done(tks[2], Outcome{Kind: Failure})
	assert.EqualValues(t, 2, l.early.Load(), "successes")
	assert.Equal(t, 2, l.inFlight())
	l.early.Store(earlyMax)
	l.Done(tks[3], Outcome{Kind: Success})
	assert.EqualValues(t, earlyMax, l.early.Load(), "past earlyMax, only read")
	l.sent.Store(earlyMax)
	assert.Zero(t, l.inFlight(), "past earlyMax admissions: not known")
	blind := NewSet(defaults()).Lane(Key{Host: "k"})
	_, _, err := blind.Admit(t.Context(), Limits{})
	require.NoError(t, err)
	assert.EqualValues(t, earlyMax, blind.early.Load(), "a Set whose lanes do not see every success: as if past the count")
	assert.Zero(t, blind.inFlight())
}

// In a key's first burst the quota a response advertises is shared with
// every attempt the lane has in flight, which the server may not have
// counted when it answered: 200 admitted, the first answer saying 50 are
// left, and the key has a burst of 1, not 50. A key with nothing in flight
// has the 50.
func TestAdvertiseSharedWithInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaults()
		cfg.SeesEverySuccess = true
		// burst returns how many attempts the key's send rate lets go at
		// once after the advert.
		burst := func(l *Lane) int {
			l.advertise(Advert{At: time.Now(), Rate: 20, Left: 50, For: time.Second})
			p := l.pace.Load()
			require.NotNil(t, p)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.setRateLocked(time.Now())
			n := 0
			for p.lim.AllowN(time.Now(), 1) {
				n++
			}
			return n
		}
		busy := NewSet(cfg).Lane(Key{Host: "busy"})
		for range 200 {
			_, _, err := busy.Admit(t.Context(), Limits{})
			require.NoError(t, err)
		}
		assert.Equal(t, 1, burst(busy), "200 in flight")
		assert.Equal(t, 50, burst(NewSet(cfg).Lane(Key{Host: "idle"})), "none in flight")
	})
}

// A key paced at the quota it advertises, its pacer made after its first
// burst had come back. A 429 to an attempt of that burst changes nothing;
// one with a Retry-After to a paced attempt leaves the rate at the quota
// and the rest to the hold; one without cuts, from the quota the key was
// paced at, not from slow start's first rate.
func TestPaceQuotaThrottles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaults()
		cfg.SeesEverySuccess = true
		l := NewSet(cfg).Lane(Key{Host: "k"})
		send := func(o Outcome) {
			tk, _, err := l.Admit(t.Context(), Limits{})
			require.NoError(t, err)
			l.Done(tk, o)
		}
		for range 100 {
			send(Outcome{Kind: Success})
		}
		time.Sleep(100 * time.Millisecond)
		l.advertise(Advert{At: time.Now(), Rate: 95, Left: 2, For: 10 * time.Second})
		send(Outcome{Kind: Success}) // paced, at the pacer's generation
		p := l.pace.Load()
		rate := func() float64 {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.rateAtLocked(time.Now())
		}
		l.throttle(time.Now(), 0) // an unpaced attempt's 429
		assert.InDelta(t, 95, rate(), 0.01, "a 429 to the first burst")
		p.throttle(time.Now(), time.Now().Add(time.Second), p.gen) // with a Retry-After
		assert.InDelta(t, 95, rate(), 0.01, "a paced attempt's 429 with a Retry-After")
		p.throttle(time.Now(), time.Now(), p.gen) // without
		p.mu.Lock()
		defer p.mu.Unlock()
		assert.InDelta(t, 95, p.wmax, 0.01, "cut from the quota's rate")
		assert.Less(t, p.rateAtLocked(time.Now()), 95.0, "and below it")
	})
}

// The attempts in flight stay right through every way an admission ends:
// refused by the send rate after the circuit let it go (never sent, not
// counted), a half-open probe's success, a throttled attempt.
func TestLaneInFlightPaths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := exact()
		cfg.SeesEverySuccess = true
		l := NewSet(cfg).Lane(Key{Host: "k"})
		tk, _, err := l.Admit(t.Context(), Limits{})
		require.NoError(t, err)
		l.Done(tk, Outcome{Facts: Throttles | TooMany}) // paced from now, at 10/s
		assert.Zero(t, l.inFlight(), "a throttled attempt")
		throttledPaced(t, l)
		l.pace.Load().lim.AllowN(time.Now(), 1) // the bucket's one token
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		_, _, err = l.Admit(ctx, Limits{})
		cancel()
		require.ErrorIs(t, err, ErrPaced)
		assert.Zero(t, l.inFlight(), "refused by the send rate")
		assert.Zero(t, l.ended.Load()-l.sent.Load()+l.early.Load(), "nothing counted as ended that was not sent")

		time.Sleep(time.Minute) // slow start has long let the key go
		trip(t, l)
		time.Sleep(cfg.OpenFor)
		probe, _, err := l.Admit(t.Context(), Limits{})
		require.NoError(t, err)
		require.True(t, probe.has(probeFlag))
		assert.Equal(t, 1, l.inFlight(), "the probe")
		l.Done(probe, Outcome{Kind: Success})
		require.Equal(t, Closed, l.View(time.Now()).State)
		assert.Zero(t, l.inFlight(), "after the probe's success")
	})
}

// A key's first quotaFirst successes are all read for a quota, then only
// the responses of a key that has advertised one.
func TestReadsQuota(t *testing.T) {
	l := NewSet(Config{SeesEverySuccess: true}).Lane(Key{Host: "api.test"})
	for range quotaFirst {
		require.True(t, l.ReadsQuota(), "among the key's first quotaFirst successes")
		tk, _, err := l.Admit(t.Context(), Limits{})
		require.NoError(t, err)
		l.Done(tk, Outcome{Kind: Success})
	}
	assert.False(t, l.ReadsQuota(), "past them")
	l.advertise(Advert{At: time.Now(), N: 1})
	assert.True(t, l.ReadsQuota(), "a key that advertised a quota")
}

// A rate a server only advertised never hands a request back unsent: with
// one request a second advertised and its token spent, a request whose
// deadline is half a second away waits its turn and ends with its
// context. Once a paced attempt has been throttled, the rate is one the
// server held the key to, and the same request is refused at once.
func TestPaceRefusesOnlyOnObservedRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "k"})
		l.advertise(Advert{At: time.Now(), Rate: 1, Left: 1, For: time.Minute})
		tk, _, err := l.Admit(t.Context(), Limits{})
		require.NoError(t, err, "the token the quota left")
		l.Done(tk, Outcome{Kind: Success})

		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		_, _, err = l.Admit(ctx, Limits{})
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "waited: the rate was only advertised")
		assert.Equal(t, 500*time.Millisecond, time.Since(start))

		tk, _, err = l.Admit(t.Context(), Limits{})
		require.NoError(t, err)
		l.Done(tk, Outcome{Facts: Throttles}) // a paced attempt throttled
		start = time.Now()
		ctx, cancel = context.WithTimeout(t.Context(), 500*time.Millisecond)
		_, _, err = l.Admit(ctx, Limits{})
		cancel()
		require.ErrorIs(t, err, ErrPaced, "the server held the key to its rate")
		assert.Zero(t, time.Since(start), "refused at once")
	})
}

// throttledPaced has a paced key's server hold it to its rate: a success
// at the pacer's generation, then a paced attempt throttled, so that the
// rate is one the server was seen to refuse beyond (a request may then be
// refused unsent when the queue cannot meet its deadline).
func throttledPaced(t *testing.T, l *Lane) {
	t.Helper()
	tk, _, err := l.Admit(t.Context(), Limits{})
	require.NoError(t, err)
	l.Done(tk, Outcome{Kind: Success})
	tk, _, err = l.Admit(t.Context(), Limits{})
	require.NoError(t, err)
	l.Done(tk, Outcome{Facts: Throttles})
	p := l.pace.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Positive(t, p.wmax, "throttled while paced")
}

// A hold that came with a throttle the pacer ignored (a 429 to an attempt
// sent before the current rate) still kept the key from sending: at the
// next cut, what the server admitted is counted beside it. 50 successes
// in the 100 ms after a 1 s hold read as 500 a second, not 51.
func TestPaceCountsBesideAnIgnoredThrottlesHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(time.Now())
		p.throttles, p.gen = 1, 1       // in slow start, at generation 1
		p.success(time.Now(), 0, false) // the first burst's one success
		p.throttle(time.Now(), time.Now().Add(time.Second), 0)
		require.Equal(t, uint64(1), p.throttles, "generation 0's throttle cuts nothing")
		time.Sleep(time.Second)
		admitEvery(p, 50, 2*time.Millisecond)
		p.throttle(time.Now(), time.Now().Add(time.Second), 1)
		p.mu.Lock()
		defer p.mu.Unlock()
		assert.Greater(t, p.wmax, 200.0, "the held second is left out of the admitted rate")
	})
}

// The rate a request is refused on is the most the evidence allows: a key
// throttled at 95 a second whose curve was then cut far below it (to what
// the server admitted over a second it spent mostly held) does not refuse
// a request 100th in line with 5 s left, which 95 a second serves in
// about a second; at 5 a second it would take 20 s.
func TestPaceRefusesAtTheRateRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(time.Now())
		p.mu.Lock()
		p.throttles, p.wmax, p.refused, p.flat = 2, 5, 95, true
		p.cutAt = time.Now()
		for range 99 {
			p.queue.push()
		}
		d, known := p.observedAheadLocked(time.Now(), p.queue.len()+1)
		p.mu.Unlock()
		require.True(t, known)
		assert.Less(t, d, 5*time.Second, "divided by the rate refused, not the curve's 5 a second")
	})
}

// A throttle with a Retry-After that ends slow start reads the server's
// rate from the latest step, not from the second behind it: over most of
// that second the key's own rate limited what it sent. Here the key was
// admitted 20 a second for 800 ms, then 100 a second for 200 ms: its flat
// curve starts near flatShare of 100, not of the 36 the second averages.
func TestPaceSlowStartReadsItsLatestStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(time.Now())
		p.throttles, p.gen = 1, 1 // in slow start, at generation 1
		admitEvery(p, 16, 50*time.Millisecond)
		admitEvery(p, 20, 10*time.Millisecond)
		p.throttle(time.Now(), time.Now().Add(time.Second), 1)
		p.mu.Lock()
		defer p.mu.Unlock()
		require.True(t, p.flat)
		assert.InDelta(t, flatShare*100, p.wmax, flatShare*15, "the latest step's rate")
	})
}

// admitEvery records n successes of paced attempts of generation 1, gap
// apart.
func admitEvery(p *pacer, n int, gap time.Duration) {
	for range n {
		p.success(time.Now(), 1, true)
		time.Sleep(gap)
	}
}

// lastStep counts the slot gone by and the part of the current one: 50 ms
// into a slot, 15 events over those 150 ms are 100 a second.
func TestTallyLastStep(t *testing.T) {
	t0 := time.Unix(1_000_000, 0) // on a slot's start
	var c tally
	for i := range 10 {
		c.add(t0.Add(time.Duration(i) * 10 * time.Millisecond)) // the slot gone by
	}
	for i := range 5 {
		c.add(t0.Add(100*time.Millisecond + time.Duration(i)*10*time.Millisecond))
	}
	assert.InDelta(t, 100, c.lastStep(t0.Add(150*time.Millisecond)), 1e-9)
	assert.Zero(t, c.lastStep(t0.Add(time.Minute)), "nothing in the past 200 ms")
}
