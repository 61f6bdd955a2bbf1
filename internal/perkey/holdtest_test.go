package perkey

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tooMany is a 429 asking for wait.
func tooMany(wait time.Duration) Outcome {
	return Outcome{Facts: Throttles | TooMany | RetryAfter, Wait: wait, Asked: wait}
}

// heldErr admits an attempt to l and returns the hold that refused it, or
// nil when it was admitted (its ticket in tk).
func heldErr(t *testing.T, l *Lane) (*HeldError, Ticket) {
	t.Helper()
	tk, _, err := l.Admit(context.Background(), Limits{})
	var he *HeldError
	if errors.As(err, &he) {
		return he, tk
	}
	require.NoError(t, err)
	return nil, tk
}

// A 429's short hold is tested a tenth of the way in: the test admitted,
// the hold ends at once and the key's short holds are not applied again;
// the send rate the 429s cut spaces its requests.
func TestShortHoldRefuted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "bucket"})
		start := time.Now()
		l.Done(Ticket{}, tooMany(time.Second))
		he, _ := heldErr(t, l)
		require.NotNil(t, he)
		assert.Equal(t, start.Add(time.Second), he.Until)
		assert.Equal(t, start.Add(100*time.Millisecond), he.Test, "its test goes a tenth of the way in")
		waited, spread, ok, err := l.HeldWait(context.Background(), he, 0, time.Minute, time.Time{})
		require.NoError(t, err)
		assert.True(t, ok)
		assert.False(t, spread)
		assert.Equal(t, 100*time.Millisecond, waited, "a held request asks again when the test may go")

		he, tk := heldErr(t, l)
		require.Nil(t, he, "the first to ask goes as the test")
		assert.True(t, tk.has(holdFlag))
		he, _ = heldErr(t, l)
		require.NotNil(t, he, "one test at a time")
		assert.True(t, he.Test.IsZero())

		l.Done(tk, Outcome{Kind: Success})
		assert.Nil(t, heldAt(l), "admitted: the hold ends")
		l.Done(Ticket{}, tooMany(time.Second))
		assert.Nil(t, heldAt(l), "a later short hold is not applied")
		assert.True(t, l.Paced(), "the 429s paced the key")
		l.Done(Ticket{}, tooMany(holdThreshold))
		assert.NotNil(t, heldAt(l), "a long hold is")
	})
}

// A test refused leaves the hold standing; the next short hold is tested
// again, and a second refusal proves the key's short holds: later ones
// are kept untested.
func TestShortHoldProven(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "window"})
		for i := range holdProofs {
			start := time.Now()
			l.Done(Ticket{}, tooMany(time.Second))
			time.Sleep(100 * time.Millisecond)
			he, tk := heldErr(t, l)
			require.Nil(t, he, "test %d goes", i+1)
			require.True(t, tk.has(holdFlag))
			l.Done(tk, tooMany(900*time.Millisecond))
			he, _ = heldErr(t, l)
			require.NotNil(t, he)
			assert.Equal(t, start.Add(time.Second), he.Until, "the hold stands")
			time.Sleep(time.Second)
		}
		l.Done(Ticket{}, tooMany(time.Second))
		he, _ := heldErr(t, l)
		require.NotNil(t, he)
		assert.True(t, he.Test.IsZero(), "proven: not tested again")
		time.Sleep(500 * time.Millisecond)
		he, _ = heldErr(t, l)
		require.NotNil(t, he, "and held to its end")
	})
}

// A long hold is the server's statement of an outage: never tested.
func TestLongHoldUntested(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "down"})
		l.Done(Ticket{}, tooMany(30*time.Second))
		for range 10 {
			time.Sleep(time.Second)
			he, _ := heldErr(t, l)
			require.NotNil(t, he)
			assert.True(t, he.Test.IsZero())
		}
	})
}

// A quota with nothing left holds the key until its reset. When the
// policy does not state its window, the hold is tested, and its test
// admitted drops the policy: the key no longer paces by it. A policy that
// states its window (the IETF fields' w) is the server's word: its hold
// is not tested.
func TestQuotaHoldTested(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "gcra"})
		date := time.Now()
		evAdvertise(l, evHeader(date, 11, 0, "1"), true)
		he, _ := heldErr(t, l)
		require.NotNil(t, he)
		require.False(t, he.Test.IsZero(), "a hold read from field names is tested")
		time.Sleep(time.Until(he.Test))
		he, tk := heldErr(t, l)
		require.Nil(t, he)
		l.Done(tk, Outcome{Kind: Success})
		assert.Nil(t, heldAt(l))
		a := evAdvertise(l, evHeader(date, 11, 0, "1"), true)
		assert.Zero(t, a.Rate, "the policy is dropped: no rate")
		assert.True(t, a.HoldUntil.IsZero(), "the policy is dropped: no hold")
		assert.Nil(t, heldAt(l))

		ietf := NewSet(defaults()).Lane(Key{Host: "ietf"})
		evAdvertise(ietf, http.Header{"Ratelimit-Policy": {`"p";q=10;w=1`}, "Ratelimit": {`"p";r=0;t=1`}}, true)
		he, _ = heldErr(t, ietf)
		require.NotNil(t, he)
		assert.True(t, he.Test.IsZero(), "a stated window's hold is not tested")
	})
}

// Only a short hold is tested: a short 429 within a long hold in force
// schedules no test, and a test due of a short hold that a long one then
// extends does not go.
func TestHoldTestOnlyShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "a"})
		l.Done(Ticket{}, tooMany(30*time.Second))
		l.Done(Ticket{}, tooMany(time.Second))
		time.Sleep(200 * time.Millisecond)
		he, _ := heldErr(t, l)
		require.NotNil(t, he)
		assert.True(t, he.Test.IsZero(), "no test of a long hold")

		l = NewSet(defaults()).Lane(Key{Host: "b"})
		l.Done(Ticket{}, tooMany(time.Second))
		l.Done(Ticket{}, tooMany(20*time.Second))
		time.Sleep(200 * time.Millisecond)
		he, _ = heldErr(t, l)
		require.NotNil(t, he)
		assert.True(t, he.Test.IsZero(), "a short hold extended to a long one is not tested")
		assert.False(t, he.Tested)
	})
}

// A hold's test does not pass a route's own hold: an attempt to a route
// held for 30 s is refused by that hold, and the test waits for another.
func TestHoldTestKeepsRouteHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "a"})
		export := Route{Method: http.MethodPost, Path: "/export"}
		o := Outcome{Facts: RetryAfter, Wait: 30 * time.Second, Asked: 30 * time.Second, Route: export}
		l.Done(Ticket{}, o)
		l.Done(Ticket{}, tooMany(time.Second))
		time.Sleep(100 * time.Millisecond)
		_, _, err := l.Admit(context.Background(), Limits{Route: export})
		var he *HeldError
		require.ErrorAs(t, err, &he)
		assert.Equal(t, time.Now().Add(29900*time.Millisecond), he.Until, "the route's hold")
		tk, _, err := l.Admit(context.Background(), Limits{Route: Route{Method: http.MethodGet, Path: "/healthz"}})
		require.NoError(t, err, "another route goes as the key's test")
		assert.True(t, tk.has(holdFlag))
	})
}

// A request waiting out a long hold is not woken by another route's
// success while the key fails: it waits the hold out, as the server asked.
func TestHeldWaitLongHoldNotWoken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "a"})
		a := Route{Method: http.MethodGet, Path: "/a"}
		l.Done(Ticket{}, Outcome{Kind: Failure, Facts: RetryAfter, Wait: 20 * time.Second, Asked: 20 * time.Second, Route: a})
		_, _, err := l.Admit(context.Background(), Limits{Route: a})
		var he *HeldError
		require.ErrorAs(t, err, &he)
		go func() {
			time.Sleep(time.Second)
			tk, _, err := l.Admit(context.Background(), Limits{Route: Route{Method: http.MethodGet, Path: "/b"}})
			assert.NoError(t, err)
			l.Done(tk, Outcome{Kind: Success})
		}()
		waited, _, ok, err := l.HeldWait(context.Background(), he, 0, time.Minute, time.Time{})
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, 20*time.Second, waited)
	})
}

// heldAt returns the hold in force on l now, or nil; it takes no test.
func heldAt(l *Lane) *HeldError {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, he := l.heldLocked(time.Now(), false)
	return he
}

// An attempt the send rate lets go while the key is held takes the
// hold's test when it is due, as one that asks at admission does: the
// requests of a paced key wait in its pacer, and none would ask otherwise.
func TestHoldTestTakenFromThePacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "gcra"})
		date := time.Now()
		evAdvertise(l, evHeader(date, 11, 10, "1"), true) // paced at 9.5/s, ten left
		require.True(t, l.Paced())
		got := make(chan Ticket, 15)
		for range 15 {
			go func() {
				tk, _, err := l.Admit(context.Background(), Limits{})
				if err == nil {
					got <- tk
				}
			}()
		}
		synctest.Wait() // ten go; five wait in the pacer
		require.Len(t, got, 10)
		for range 10 {
			l.Done(<-got, Outcome{Kind: Success})
		}
		evAdvertise(l, evHeader(date, 11, 0, "1"), true) // none left: held 1 s, tested at 100 ms
		require.NotNil(t, heldAt(l))
		time.Sleep(300 * time.Millisecond)
		synctest.Wait()
		require.Len(t, got, 1, "one attempt, let go by the pacer, is the test")
		assert.True(t, (<-got).has(holdFlag))
		time.Sleep(2 * time.Second) // the rest go, or are refused by the hold
		synctest.Wait()
	})
}

// A test admitted in a window the server counts anew (its reset instant
// has moved: the window reset sooner than a reset read in whole seconds
// said) ends the hold and refutes nothing: the next window's "none left"
// holds the key again, and is tested again.
func TestHoldTestAcrossAWindowsReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "window"})
		date := time.Now().Truncate(time.Second)
		reset := strconv.FormatInt(date.Add(time.Second).Unix(), 10)
		evAdvertise(l, evHeader(date, 100, 0, reset), true)
		next := testInANewWindow(t, l, date)
		assert.Nil(t, heldAt(l), "the hold is over")
		a := evAdvertise(l, evHeader(date.Add(time.Second), 100, 0, next), true)
		assert.False(t, a.HoldUntil.IsZero(), "not refuted: the policy still holds the key")
		he, _ := heldErr(t, l)
		require.NotNil(t, he)
		assert.False(t, he.Test.IsZero(), "and its next hold is tested")
	})
}

// A 429's hold that a new window ends restarts the send rate it cut, as a
// refuted hold does: the rate's curve would otherwise wait for the end of
// the hold it was cut with.
func TestHoldEndedByANewWindowFreesThePace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSet(defaults()).Lane(Key{Host: "window"})
		date := time.Now().Truncate(time.Second)
		reset := strconv.FormatInt(date.Add(time.Second).Unix(), 10)
		evAdvertise(l, evHeader(date, 100, 0, reset), false) // the 429's headers
		l.Done(Ticket{}, tooMany(time.Second))               // held 1 s, the rate cut until then
		require.True(t, l.Paced())
		testInANewWindow(t, l, date)
		require.Nil(t, heldAt(l))
		start := time.Now()
		for range 3 {
			tk, _, err := l.Admit(context.Background(), Limits{})
			require.NoError(t, err)
			l.Done(tk, Outcome{Kind: Success})
		}
		// Slow start from now: 10/s, doubling every 200 ms.
		assert.Less(t, time.Since(start), 300*time.Millisecond, "paced from now, not from the hold's end")
	})
}

// testInANewWindow waits for the test of l's hold, in the window that
// ends a second after date, and answers it 200 in the next window: the
// reset it returns, a Unix time, is that window's end.
func testInANewWindow(t *testing.T, l *Lane, date time.Time) (next string) {
	t.Helper()
	he, _ := heldErr(t, l)
	require.NotNil(t, he)
	time.Sleep(time.Until(he.Test))
	he, tk := heldErr(t, l)
	require.Nil(t, he)
	require.True(t, tk.has(holdFlag))
	next = strconv.FormatInt(date.Add(2*time.Second).Unix(), 10)
	evAdvertise(l, evHeader(date.Add(time.Second), 100, 99, next), true)
	l.Done(tk, Outcome{Kind: Success})
	return next
}
