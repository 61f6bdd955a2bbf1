package perkey

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// The recovery: the rate at which the waiters of a key that has come back
// go, starting low and growing while the key keeps answering.
const (
	// recoveryRate is the rate at which waiters go when the key has just
	// come back: requests/s, five in the first recoveryStep.
	recoveryRate = 100
	// recoveryStep is the shortest round: the rate doubles at most this
	// often, and only once the key has answered what it was sent. 100/s
	// reaches 10,000/s in seven rounds, 0.35 s, from a host that answers
	// at once; so a backlog of 10,000 drains in about half a second from a
	// host that takes it, and a host that cannot is found before the rate
	// has passed what it takes by more than one doubling.
	recoveryStep = 50 * time.Millisecond
	// recoveryBeta is where a failure puts the rate: this share of what
	// the key was seen to answer, the rate it can take.
	recoveryBeta = 0.95
	// recoveryGrowth is how much the rate grows every round after a
	// failure, while the key keeps answering (a round at a rate below one
	// release per recoveryStep grows once per step it took: see rateAt): a
	// tenth, so that a key whose capacity comes back fivefold (the end of a
	// brownout) is sent its full rate again within a second, while a key
	// at its capacity is overshot by a tenth at most, once a round, before
	// the next cut.
	recoveryGrowth = 1.1
	// recoverySpread is the shortest time over which the waiters go: the
	// rate never passes the backlog the recovery began with over this, so
	// that requests that failed together return spread even to a host
	// that could take them at once (10,000 as five slices of 2,000 per
	// 100 ms, not one of 10,000), as clients told one instant by a
	// Retry-After return over the spread added to it; and none waits more
	// than half a second for its turn after the host is back.
	recoverySpread = 500 * time.Millisecond
)

// recovery is the slow start of a key that has come back: the rate at
// which its waiters go. Its rate grows in rounds, as TCP's congestion
// window does per round trip: a round ends when every request let go
// before it began has been answered, and at least recoveryStep has
// passed; then the rate doubles (in slow start) or grows by
// recoveryGrowth (after a cut). So a host that answers slowly is sent no
// more until it has answered what it was sent. And a host whose answers
// take markedly longer than its quickest (its queue is building up, as
// TCP Vegas reads a growing round trip) has its rate cut to what it
// answered: the requests it has queued would otherwise time out, all of
// them, once its queue is longer than their timeout.
type recovery struct {
	lim     *rate.Limiter
	rate    float64   // the current rate
	growth  float64   // what a round multiplies the rate by: 2 in slow start, recoveryGrowth after a cut
	round   time.Time // when the current round began
	mark    int       // requests let go before the current round began
	let     int       // requests let go so far
	done    int       // of those, answered so far
	cutMark int       // requests let go before the latest cut
	wasCut  bool      // the rate was cut since the recovery began
	most    float64   // the rate it never passes (see backlog)
	// flow is how many of the backlog it began with came as a steady
	// flow, at flowRate requests a second (see Lane.newRecoveryLocked).
	flow, flowRate float64
	herd           float64 // the rest of that backlog
	// The time its requests took to be answered: the shortest mean of a
	// round, and this round's sum and count (of successes).
	minTook time.Duration
	tookSum time.Duration
	okRound int
	// slack: the latest round let go less than half of what its rate
	// allowed; newcomers come slower than the recovery lets them go.
	slack bool
	// oks counts the successes of the requests it let go, per
	// recoveryStep, so that a cut knows what the key answered.
	oks stepCount
	// The releases per recoveryStep over the past recoverySpread, the
	// step at index sentStep last.
	sent     [recoverySpread / recoveryStep]int
	sentStep int64
}

// newRecovery begins a recovery with backlog requests waiting, flow of
// which came as a steady flow at flowRate a second.
func newRecovery(now time.Time, backlog int, flow, flowRate float64) *recovery {
	r := &recovery{lim: rate.NewLimiter(recoveryRate, 1), rate: recoveryRate, growth: 2, flow: flow, flowRate: flowRate, herd: float64(backlog) - flow}
	r.begin(now)
	r.backlog(now, backlog)
	return r
}

// backlog raises the rate the recovery may grow to with the demand on
// it at now: the n requests that wait, and those it let go over the past
// recoverySpread (requests that come while it recovers wait too, and they
// must not be held to the rate of the backlog it began with). The herd
// among them goes over recoverySpread; the flow at twice the rate it came
// at, while its newcomers go beside it (see flowOnly), so that a service
// calling the key at a steady rate through an outage sends it about three
// times that rate as it comes back, not its whole backlog within half a
// second, and the backlog drains in half the time it took to build.
func (r *recovery) backlog(now time.Time, n int) {
	r.spread(now)
	recent := 0
	for _, k := range r.sent {
		recent += k
	}
	herd := float64(n+recent) - r.flow
	if r.flowRate > 0 {
		// The flow's releases are within twice its rate: only the herd
		// it began with goes faster.
		herd = min(herd, r.herd)
	}
	r.most = max(r.most, max(herd, 0)/recoverySpread.Seconds()+2*r.flowRate, recoveryRate)
}

// spread moves the per-step counts of releases to now's step.
func (r *recovery) spread(now time.Time) {
	s := now.UnixNano() / int64(recoveryStep)
	for i := r.sentStep + 1; i <= s && i <= r.sentStep+int64(len(r.sent)); i++ {
		r.sent[i%int64(len(r.sent))] = 0
	}
	r.sentStep = s
}

// begin begins a round at now.
func (r *recovery) begin(now time.Time) {
	r.round, r.mark, r.okRound, r.tookSum = now, r.let, 0, 0
}

// rateAt returns the rate at now, ending the round if it is over: the
// rate grows, unless the round's answers took more than twice as long as
// the quickest round's, and half a step more; then it is cut to what the
// key answered.
func (r *recovery) rateAt(now time.Time) float64 {
	if r.done >= r.mark && now.Sub(r.round) >= recoveryStep {
		d := now.Sub(r.round)
		var took time.Duration
		if r.okRound > 0 {
			took = r.tookSum / time.Duration(r.okRound)
			if r.minTook == 0 || took < r.minTook {
				r.minTook = max(took, 1)
			}
		}
		r.slack = float64(r.let-r.mark) < min(r.rate, r.most)*d.Seconds()/2
		if took > 2*r.minTook && took > r.minTook+recoveryStep/2 {
			r.rate = max(recoveryBeta*float64(r.okRound)/d.Seconds(), 1)
			r.growth, r.slack = recoveryGrowth, false
		} else {
			// Once per recoveryStep of the time its own release took, and
			// at most doubling: a round at a rate cut low lasts a second or
			// more for one release, and the rate must grow back at the pace
			// of time while the key answers, not of its releases; a round
			// long because its answers were slow grows by one step.
			steps := max(min(d.Seconds(), 1/r.rate), recoveryStep.Seconds()) / recoveryStep.Seconds()
			g := min(math.Pow(r.growth, steps), 2)
			r.rate = min(r.rate*g, r.most, 2*unpaceAt)
		}
		r.begin(now)
	}
	return min(r.rate, r.most)
}

// flowOnly reports a recovery whose backlog came as a steady flow alone:
// newcomers then go beside the waiters instead of queueing behind them,
// where they would wait as long as the backlog takes to drain.
func (r *recovery) flowOnly() bool { return r.flowRate > 0 && r.herd <= 0 }

// released counts a request let go at now.
func (r *recovery) released(now time.Time) {
	r.let++
	r.spread(now)
	r.sent[r.sentStep%int64(len(r.sent))]++
}

// answered counts the answer, or the end, of a request it let go.
func (r *recovery) answered() { r.done++ }

// finished reports whether the recovery limits nothing any more, with
// waiting requests in its queue: none wait, and its rate has reached its
// backlog's over the spread or what limits anything, or newcomers come
// slower than it lets them go.
func (r *recovery) finished(now time.Time, waiting int) bool {
	rt := r.rateAt(now)
	return waiting == 0 && (rt >= min(r.most, unpaceAt) || r.slack)
}

// nextIn returns how long until the limiter has a token at the current
// rate.
func (r *recovery) nextIn(now time.Time) time.Duration {
	setRate(r.lim, now, r.rateAt(now))
	return nextToken(r.lim, now)
}

// success records a success of a request the recovery let go, answered
// took after it went.
func (r *recovery) success(now time.Time, took time.Duration) {
	r.answered()
	r.tookSum += took
	r.oks.roll(now, recoveryStep)
	r.oks.n++
	r.okRound++
}

// stepCount counts events per step of time: in the current step, and in
// the one before.
type stepCount struct {
	step    int64 // the current step's index, from the Unix epoch
	n, prev int
}

// roll moves the counts to now's step, of width w.
func (c *stepCount) roll(now time.Time, w time.Duration) {
	s := now.UnixNano() / int64(w)
	switch {
	case s == c.step:
	case s == c.step+1:
		c.prev, c.n = c.n, 0
	default:
		c.prev, c.n = 0, 0
	}
	c.step = s
}

// took returns the rate of successes the key was seen to answer: over the
// step before now's, or over the part of now's step gone by, when that is
// at least a quarter of a step and the higher (the rate went up at the
// step's start, and the key answered more of it than it had been sent
// before).
func (r *recovery) took(now time.Time) float64 {
	r.oks.roll(now, recoveryStep)
	took := float64(r.oks.prev) / recoveryStep.Seconds()
	if part := time.Duration(now.UnixNano() % int64(recoveryStep)); part >= recoveryStep/4 {
		took = max(took, float64(r.oks.n)/part.Seconds())
	}
	return took
}

// cut records a failure of a request the recovery let go, and lowers the
// rate: to recoveryBeta of what the key was seen to answer, the rate it
// can take; with no success to go by, to half the rate. From there it grows
// by recoveryGrowth a round, and the round begins again: it ends once what
// was let go before the cut has been answered. Until then, failures answer
// requests let go before the cut, at the old rate (a host whose queue
// built up answers a whole burst of them late), and cut nothing more.
func (r *recovery) cut(now time.Time) {
	r.answered()
	if r.wasCut && r.done <= r.cutMark {
		return
	}
	from := r.rate / 2
	if took := r.took(now); took > 0 {
		from = recoveryBeta * took
	}
	r.rate, r.growth, r.wasCut, r.cutMark = max(from, 1), recoveryGrowth, true, r.let
	r.begin(now)
	setRate(r.lim, now, r.rateAt(now))
}
