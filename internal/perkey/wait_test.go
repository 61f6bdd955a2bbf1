package perkey

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitAll starts n requests that wait for the lane (each in turn, so that
// the queue's order is theirs) and returns a channel that receives each
// one's number as it is let go, with its ticket. The requests' outcomes
// are the caller's to record.
func waitAll(t *testing.T, l *Lane, n int, until time.Time) chan admitted {
	out := make(chan admitted, n)
	for i := range n {
		go func() {
			tk, _, err := l.Wait(t.Context(), Limits{Queue: true}, until)
			out <- admitted{i: i, tk: tk, err: err, at: time.Now()}
		}()
		synctest.Wait() // request i is in the queue before i+1 comes
	}
	return out
}

type admitted struct {
	i   int
	tk  Ticket
	err error
	at  time.Time
}

// While the circuit is open the waiters wait; when it may half-open, the
// oldest becomes the probe; when the probe fails the circuit opens again,
// for longer as the outage goes on; when a probe succeeds, the rest go,
// oldest first, at a rate that starts at recoveryRate and doubles every
// step while they succeed.
func TestWaitProbeThenSlowStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := exact()
		c.OpenFor, c.MaxOpenFor = 250*time.Millisecond, time.Minute
		l := NewSet(c).Lane(Key{Host: "k"})
		start := time.Now()
		trip(t, l)
		const n = 300
		got := waitAll(t, l, n, start.Add(time.Hour))
		assert.Equal(t, n, l.View(time.Now()).Waiting, "waiters")

		// Probes fail for 10 s: each half-open period lets the oldest
		// waiter go as the probe, and it goes back to the queue's end.
		queue := make([]int, n) // the waiters in the order they wait
		for i := range queue {
			queue[i] = i
		}
		var opens []time.Duration
		for time.Since(start) < 10*time.Second {
			a := <-got
			require.NoError(t, a.err)
			require.True(t, a.tk.has(probeFlag), "waiter %d let go as the probe", a.i)
			require.Equal(t, queue[0], a.i, "the oldest waiter is the probe")
			queue = append(queue[1:], a.i)
			l.Done(a.tk, Outcome{Kind: Failure})
			opens = append(opens, time.Until(l.View(time.Now()).OpenUntil))
			go func() {
				tk, _, err := l.Wait(t.Context(), Limits{Queue: true}, start.Add(time.Hour))
				got <- admitted{i: a.i, tk: tk, err: err, at: time.Now()}
			}()
			synctest.Wait()
		}
		// The open time grows with the outage: 250 ms at first, a 64th of
		// its age (10 s: 156 ms, less than OpenFor) so far.
		for _, d := range opens {
			assert.Equal(t, 250*time.Millisecond, d, "open time without jitter, under 16 s of outage")
		}
		assert.GreaterOrEqual(t, len(opens), 30, "probes in 10 s at one per 250 ms")

		// The host is back: the next probe succeeds and the others go, in
		// the order they came, faster and faster.
		a := <-got
		require.True(t, a.tk.has(probeFlag))
		require.Equal(t, queue[0], a.i, "the oldest waiter is the probe")
		queue = queue[1:]
		l.Done(a.tk, Outcome{Kind: Success})
		assert.Equal(t, Closed, l.View(time.Now()).State)
		back := time.Now()
		var order []int
		perStep := map[int]int{}
		for range n - 1 {
			a := <-got
			require.NoError(t, a.err)
			// Let go by the recovery (the last ones after it ended, once
			// nobody waited any more).
			require.False(t, a.tk.has(probeFlag|testFlag), "let go by the recovery")
			order = append(order, a.i)
			perStep[int(a.at.Sub(back)/recoveryStep)]++
			l.Done(a.tk, Outcome{Kind: Success})
		}
		assert.Equal(t, queue, order, "let go oldest first")
		// The rate doubles every step from 100/s: 100·0.05/ln 2 ≈ 7.2 in
		// the first step, twice that in the next, and so on.
		assert.LessOrEqual(t, perStep[0], 8, "the first step: the starting rate")
		assert.GreaterOrEqual(t, perStep[2], 3*perStep[0], "the rate doubles every step while the key answers")
		assert.Less(t, time.Since(back), time.Second, "300 waiters go within a second of the key's return")
		v := l.View(time.Now())
		assert.Zero(t, v.Waiting, "waiters left")
	})
}

// A failure of a request the recovery let go cuts the rate to about what
// the key was seen to answer in the step before: the rate it can take.
func TestWaitCutToWhatTheKeyTakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(exact()).Lane(Key{Host: "k"})
		start := time.Now()
		trip(t, l)
		got := waitAll(t, l, 5000, start.Add(time.Hour))
		a := <-got
		l.Done(a.tk, Outcome{Kind: Success}) // the probe: the key is back

		// The key takes 1,000/s: beyond that, in each 10 ms, it fails.
		const capacity = 1000
		window, served := time.Now(), 0
		var after []time.Time // releases after the first failure
		failed := false
		for range 4000 {
			a := <-got
			if time.Since(window) >= 10*time.Millisecond {
				window, served = time.Now(), 0
			}
			o := Success
			if served++; served > capacity/100 {
				o = Failure
				failed = true
			} else if failed {
				after = append(after, a.at)
			}
			l.Done(a.tk, Outcome{Kind: o})
		}
		require.True(t, failed)
		rate := float64(len(after)-1) / after[len(after)-1].Sub(after[0]).Seconds()
		assert.InDelta(t, capacity, rate, 0.15*capacity, "releases per second after the cut")
	})
}

// A request that waits for a closed key (its retry found no budget) is let
// go as the one test once an open circuit would let its probe through;
// another request's success lets every waiter go.
func TestWaitClosedKeyTests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(exact()).Lane(Key{Host: "k"})
		start := time.Now()
		var mu sync.Mutex
		var lets []admitted
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				tk, _, err := l.Queue(t.Context(), Limits{Queue: true}, start.Add(time.Minute))
				mu.Lock()
				lets = append(lets, admitted{i: i, tk: tk, err: err, at: time.Now()})
				mu.Unlock()
			})
			synctest.Wait()
		}
		time.Sleep(exact().OpenFor)
		synctest.Wait()
		mu.Lock()
		require.Len(t, lets, 1, "one test at a time")
		first := lets[0]
		mu.Unlock()
		require.True(t, first.tk.has(testFlag))
		assert.Equal(t, exact().OpenFor, first.at.Sub(start), "the test goes when a probe would")
		l.Done(first.tk, Outcome{Kind: Failure})

		// A request that is not waiting succeeds: the waiters go.
		tk, _, err := l.Admit(t.Context(), Limits{Queue: true})
		require.NoError(t, err)
		require.True(t, tk.has(watchFlag), "admitted beside waiters")
		l.Done(tk, Outcome{Kind: Success})
		wg.Wait()
		require.Len(t, lets, 3)
		for _, a := range lets[1:] {
			require.NoError(t, a.err)
			assert.False(t, a.tk.has(probeFlag|testFlag), "let go by the recovery")
			l.Done(a.tk, Outcome{Kind: Success})
		}
	})
}

// A wait ends with the refusal it waited out when its time is up, with the
// context's error when that ends first; a waiter that leaves holds nothing,
// and a probe's place it was given passes to the next in line.
func TestWaitEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(exact()).Lane(Key{Host: "k"})
		trip(t, l)
		_, _, err := l.Wait(t.Context(), Limits{Queue: true}, time.Now().Add(100*time.Millisecond))
		assert.ErrorIs(t, err, ErrOpen, "a wait whose time is up")
		_, _, err = l.Queue(t.Context(), Limits{Queue: true}, time.Now().Add(100*time.Millisecond))
		assert.ErrorIs(t, err, errWaitedOut, "a queue whose time is up")
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, _, err = l.Wait(ctx, Limits{Queue: true}, time.Now().Add(time.Hour))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Zero(t, l.View(time.Now()).Waiting, "waiters left")

		// A waiter given the probe's place just as it stopped waiting
		// passes the place on: to the next in line, or back to the lane.
		got := waitAll(t, l, 1, time.Now().Add(time.Hour))
		l.mu.Lock()
		l.handOnLocked(&waiter{grant: grantProbe, tk: Ticket{gen: 7, pace: probeFlag}})
		l.probes++ // the place it was given
		l.mu.Unlock()
		a := <-got
		require.NoError(t, a.err)
		assert.Equal(t, Ticket{gen: 7, pace: probeFlag}, a.tk, "the next waiter takes the probe's place")
		l.mu.Lock()
		l.handOnLocked(&waiter{grant: grantProbe})
		assert.Equal(t, 0, l.probes, "with nobody waiting, the place is given back")
		l.mu.Unlock()
	})
}

// A request the recovery let go that never reached the host (its dial was
// refused: the host went away again) does not cut the recovery's rate,
// which is about how much the host can take; the circuit counts it. A
// failure from the host does cut it.
func TestWaitUnreachedDoesNotCut(t *testing.T) {
	drain := func(five Outcome) time.Duration {
		var took time.Duration
		synctest.Test(t, func(t *testing.T) {
			l := NewSet(exact()).Lane(Key{Host: "k"})
			start := time.Now()
			trip(t, l)
			const n = 1000
			got := waitAll(t, l, n, start.Add(time.Hour))
			a := <-got
			l.Done(a.tk, Outcome{Kind: Success}) // the probe: the key is back
			back := time.Now()
			for i := range n - 1 {
				a := <-got
				require.NoError(t, a.err)
				o := Outcome{Kind: Success}
				if i >= 20 && i < 25 {
					o = five
				}
				l.Done(a.tk, o)
			}
			require.Equal(t, Closed, l.View(time.Now()).State)
			took = time.Since(back)
		})
		return took
	}
	none := drain(Outcome{Kind: Success})
	unreached := drain(Outcome{Kind: Failure, Facts: Unreached})
	failed := drain(Outcome{Kind: Failure})
	t.Logf("1,000 waiters go in %v; with 5 unreached failures, %v; with 5 of the host's, %v", none, unreached, failed)
	assert.LessOrEqual(t, unreached, none+recoveryStep, "unreached failures: as with none")
	assert.Greater(t, failed, 2*none, "a failure from the host cuts the rate")
}
