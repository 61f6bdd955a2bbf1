package perkey

import "time"

// WatchFor is how long every attempt to a key is timed after a caller
// last gave up on one: long enough to span a hung host's failure period
// (twice the breaker's span by default) and its open circuit's first
// probes.
const WatchFor = time.Minute

// Watch records that, at now, a caller gave up on an attempt to the key:
// every attempt to it is timed until WatchFor after now.
func (l *Lane) Watch(now time.Time) {
	// The end is kept as a wall-clock instant: a step of the clock only
	// lengthens or shortens a watch, which decides which attempts are
	// timed, never what counts.
	l.watch.Store(now.Add(WatchFor).UnixNano())
}

// Watched reports whether every attempt to the key is to be timed.
func (l *Lane) Watched() bool { return l.watch.Load() != 0 }

// Call is one timed attempt to the key: when it was sent, how long it
// waited for its response headers or its error, and whether headers came.
type Call struct {
	Start    time.Time
	Took     time.Duration
	Answered bool
}

// Clocked records what a timed attempt says of the key once its outcome
// is known, and reports whether the attempt counts as a failure of the
// key, a slow call. An attempt that got no answer before its caller gave
// up (gaveUp: the caller's context ended) starts or prolongs the key's
// watch, and counts against the key when blames (the caller's deadline
// passed, with nothing of its own to wait for) and it ran longer than the
// slow-call threshold (see slow). Any other timed attempt may end the
// key's watch, and a timed success feeds the key's answer time.
func (l *Lane) Clocked(c Call, o Kind, gaveUp, blames bool) (slow bool) {
	end := c.Start.Add(c.Took)
	if !c.Answered && gaveUp {
		l.Watch(end)
		return blames && l.slow(c.Took)
	}
	l.timed(end)
	if c.Answered && o == Success {
		l.answered(c.Took)
	}
	return false
}

// timed records that a timed attempt to the key ended at now: past the
// end of its watch, the key is no longer watched.
func (l *Lane) timed(now time.Time) {
	if w := l.watch.Load(); w != 0 && now.UnixNano() > w {
		l.watch.CompareAndSwap(w, 0)
	}
}

// answered records that an attempt to the key was answered after d.
//
// A key's answer time is the circuit's guard against blaming a host for
// its callers' own deadlines. An attempt that was sent and got no answer
// before its caller's context ended counts as a failure of the key only
// when it ran longer than Config.SlowAfter and longer than twice the
// key's answer time: a caller that gives up sooner than the host usually
// answers says nothing against the host.
//
// The answer time follows the slowest of the key's recent answers: it
// rises at once to any answer slower than itself (a host that has just
// been that slow is not to be blamed for being that slow again), and
// falls by an eighth at each answer under half of it, so that it comes
// down, over a few dozen answers, to within twice what the host now
// takes. Most answers change nothing, and only an answer that does is
// written: the lane is shared by every request to the key, and a write
// on every answer would make the cores take the line from each other.
//
// It is fed only by answers that were timed anyway, and it is an
// estimate: two answers recorded at once may lose one's update, which the
// next answer makes up for.
//
// Timing an attempt costs two reads of the clock, as much as the rest of
// a request's way through the transport, so not every attempt is timed:
// a sample of the requests, which keeps the answer time known, and every
// attempt to a key while it is watched. A key is watched from the moment
// a caller gives up on one of its attempts (its context ends first), for
// WatchFor after the latest such moment: a host that stops answering is
// then judged on every attempt, from its callers' first give-ups on, and
// a key whose callers never give up costs its requests no clock.
func (l *Lane) answered(d time.Duration) {
	a := l.answer.Load()
	switch {
	case int64(d) > a:
		l.answer.Store(int64(d))
	case int64(d) < a/2:
		l.answer.Store(a - a/8)
	}
}

// AnswerTime returns the key's answer time: 0 until an answer is timed.
func (l *Lane) AnswerTime() time.Duration { return time.Duration(l.answer.Load()) }

// slow reports whether an attempt that waited d for an answer that never
// came, until its caller's context ended, counts against the key: d is
// longer than Config.SlowAfter, and longer than twice the key's answer
// time. A SlowAfter of 0 or less: never.
func (l *Lane) slow(d time.Duration) bool {
	floor := l.set.cfg.SlowAfter
	return floor > 0 && d > floor && d > 2*l.AnswerTime()
}
