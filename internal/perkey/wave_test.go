package perkey

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// young is a lane of a Set that sees every success, as the root package's
// default breaker's does: it starts in its young phase.
func young() *Lane {
	c := defaults()
	c.SeesEverySuccess = true
	return NewSet(c).Lane(Key{})
}

// admitAll starts n admissions to l and returns a channel that receives
// each ticket as its admission returns, and a wait for them all.
func admitAll(t *testing.T, l *Lane, n int) (<-chan Ticket, func()) {
	got := make(chan Ticket, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			tk, _, err := l.Admit(context.Background(), Limits{})
			assert.NoError(t, err)
			got <- tk
		})
	}
	return got, wg.Wait
}

// A young key lets ten attempts go before its first answer, then two for
// each answer, and the rest when its young phase ends.
func TestFirstWave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := young()
		got, wait := admitAll(t, l, 100)
		synctest.Wait()
		require.Len(t, got, firstWave, "before any answer")
		for i := range 3 {
			l.Done(<-got, Outcome{Kind: Success})
			synctest.Wait()
			assert.Len(t, got, firstWave-(i+1)+2*(i+1), "after %d answers", i+1)
		}
		time.Sleep(coldWait)
		synctest.Wait()
		assert.Len(t, got, 100-3, "after the young phase")
		wait()
		for len(got) > 0 {
			l.Done(<-got, Outcome{Kind: Success})
		}
		// Past its young phase the key admits with one load.
		tk, _, err := l.Admit(context.Background(), Limits{})
		require.NoError(t, err)
		assert.True(t, tk.plain())
		assert.Zero(t, l.word.Load()&coldBit)
	})
}

// A quota the first answer advertises ends the young phase: the waiting
// attempts go to the key's send rate, which lets them go at its pace
// from the answer on, not at the end of the young phase.
func TestFirstWaveEndsWhenPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := young()
		got, wait := admitAll(t, l, 50)
		synctest.Wait()
		require.Len(t, got, firstWave)
		start := time.Now()
		a := Advert{At: start, Rate: 100, Left: 1, For: time.Second}
		l.advertise(a)
		l.Done(<-got, Outcome{Kind: Success})
		var last atomic.Int64
		go func() {
			wait()
			last.Store(int64(time.Since(start)))
		}()
		time.Sleep(coldWait)
		synctest.Wait()
		assert.Positive(t, last.Load(), "all admitted within the young phase's time")
		// 40 waiters at 100 a second, one free: about 0.39 s.
		assert.InDelta(t, 0.39, time.Duration(last.Load()).Seconds(), 0.02)
	})
}

// The young phase lasts coldWait at most, whether or not the key answers.
func TestFirstWaveEndsInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := young()
		start := time.Now()
		_, wait := admitAll(t, l, 30)
		wait()
		assert.Equal(t, coldWait, time.Since(start))
	})
}

// An attempt whose deadline comes before the young phase ends goes at
// once: waiting would end it unsent.
func TestFirstWaveDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := young()
		_, wait := admitAll(t, l, firstWave)
		wait()
		ctx, cancel := context.WithTimeout(context.Background(), coldWait/2)
		defer cancel()
		_, _, err := l.Admit(ctx, Limits{})
		assert.NoError(t, err)
		ctx2, cancel2 := context.WithTimeout(context.Background(), 2*coldWait)
		defer cancel2()
		start := time.Now()
		_, _, err = l.Admit(ctx2, Limits{})
		assert.NoError(t, err)
		assert.Equal(t, coldWait, time.Since(start), "a later deadline waits its turn")
	})
}

// A key answered quotaFirst times is past its young phase, however soon:
// a caller that sends one request at a time is not kept on the locked path
// for coldWait.
func TestFirstWaveEndsWithAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := young()
		for range quotaFirst {
			tk, _, err := l.Admit(context.Background(), Limits{})
			require.NoError(t, err)
			l.Done(tk, Outcome{Kind: Success})
		}
		assert.Zero(t, l.word.Load()&coldBit)
	})
}

// An attempt of the first wave refused after its turn (a limit in flight
// refuses it) gives its place back: the next goes at once.
func TestFirstWaveRefusedGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := young()
		lim := Limits{MaxInFlight: 2, RefuseInFlight: true}
		admitted := 0
		for range firstWave {
			if _, _, err := l.Admit(context.Background(), lim); err == nil {
				admitted++
			} else {
				require.ErrorIs(t, err, ErrSlots)
			}
		}
		require.Equal(t, 2, admitted)
		start := time.Now()
		_, _, err := l.Admit(context.Background(), Limits{})
		require.NoError(t, err)
		assert.Zero(t, time.Since(start), "eight places given back: no wait")
	})
}
