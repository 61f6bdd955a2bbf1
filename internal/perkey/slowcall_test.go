package perkey

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The answer time rises at once to a slower answer, falls by an eighth at
// each answer under half of it, and is left alone by the answers in
// between.
func TestAnswerTime(t *testing.T) {
	l := NewSet(defaults()).Lane(Key{})
	assert.Zero(t, l.AnswerTime(), "nothing timed yet")
	l.answered(800 * time.Millisecond)
	assert.Equal(t, 800*time.Millisecond, l.AnswerTime(), "the first answer")
	l.answered(500 * time.Millisecond)
	assert.Equal(t, 800*time.Millisecond, l.AnswerTime(), "an answer over half of it changes nothing")
	l.answered(time.Second)
	assert.Equal(t, time.Second, l.AnswerTime(), "a slower answer raises it at once")
	l.answered(100 * time.Millisecond)
	assert.Equal(t, 875*time.Millisecond, l.AnswerTime(), "an answer under half of it lowers it by an eighth")
	for range 100 {
		l.answered(100 * time.Millisecond)
	}
	assert.LessOrEqual(t, l.AnswerTime(), 200*time.Millisecond, "it comes down to within twice what the host now takes")
	assert.Greater(t, l.AnswerTime(), 100*time.Millisecond)
}

// Slow: longer than SlowAfter and than twice the answer time; never when
// SlowAfter is 0 or less.
func TestSlow(t *testing.T) {
	c := defaults()
	c.SlowAfter = time.Second
	l := NewSet(c).Lane(Key{})
	assert.False(t, l.slow(time.Second), "not longer than SlowAfter")
	assert.True(t, l.slow(time.Second+1), "longer than SlowAfter, nothing timed")
	l.answered(1500 * time.Millisecond)
	assert.False(t, l.slow(3*time.Second), "not longer than twice the answer time")
	assert.True(t, l.slow(3*time.Second+1), "longer than both")

	c.SlowAfter = 0
	assert.False(t, NewSet(c).Lane(Key{}).slow(time.Hour), "off")
}

// Recording an answer that changes nothing allocates nothing.
func TestAnsweredAllocs(t *testing.T) {
	l := NewSet(defaults()).Lane(Key{})
	l.answered(time.Second)
	allocs := testing.AllocsPerRun(1000, func() { l.answered(700 * time.Millisecond) })
	assert.Zero(t, allocs)
}

// A give-up watches the key until WatchFor after the latest one; a timed
// attempt that ends past that ends the watch, one that ends before it
// does not.
func TestWatch(t *testing.T) {
	l := NewSet(defaults()).Lane(Key{})
	now := time.Now()
	assert.False(t, l.Watched(), "a new key")
	l.timed(now)
	assert.False(t, l.Watched(), "a timed attempt does not start a watch")
	l.Watch(now)
	l.Watch(now.Add(time.Second))
	assert.True(t, l.Watched())
	l.timed(now.Add(WatchFor))
	assert.True(t, l.Watched(), "within WatchFor of the latest give-up")
	l.timed(now.Add(time.Second + WatchFor + 1))
	assert.False(t, l.Watched(), "past it")
}
