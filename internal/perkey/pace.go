package perkey

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// The adaptive send rate follows the CUBIC curve that TCP (RFC 9438) and
// the AWS SDKs' adaptive retry mode use: on a throttle the rate is cut to
// cubicBeta of what it was, then grows back along a cubic that is flat
// near the rate that was throttled (so it stays close to what the server
// admits for most of each cycle, where additive increase would spend half
// of it well below) and probes beyond it slowly. Until the first throttle
// after pacing begins, the rate doubles every slowStartStep from
// slowStartRate, to find what the server admits in about a second.
const (
	cubicBeta     = 0.7
	cubicC        = 0.4 // requests/s per s³
	slowStartRate = 10  // requests/s
	slowStartStep = 200 * time.Millisecond
	// unpaceAt: pacing ends when the allowed rate has grown past twice the
	// rate last throttled (or this, in slow start): the key is no longer
	// what limits it, and its requests go back to costing nothing.
	unpaceAt = 10_000 // requests/s
)

// pacer limits the rate of attempts to one throttled key. Attempts wait in
// one queue, first come first served, and a timer releases them at the
// rate the limiter allows; so a change of rate applies to the next
// release, not to a queue of reservations made at the old rate.
type pacer struct {
	mu        sync.Mutex
	lim       *rate.Limiter // the bucket: its limit follows rateAt; guarded by mu
	queue     queue         // guarded by mu
	timer     *time.Timer   // set while a release is scheduled; guarded by mu
	gen       uint64        // cuts so far: a throttle of an attempt sent before the latest cut is ignored; guarded by mu
	okGen     uint64        // the gen of the latest success; guarded by mu
	cutAt     time.Time     // guarded by mu
	wmax      float64       // the rate at the latest cut; 0 in slow start; guarded by mu
	refused   float64       // the rate a paced attempt was last throttled at, before any cut; 0 none; guarded by mu
	throttles uint64        // guarded by mu
	admitted  tally         // successes of paced attempts; guarded by mu
	flat      bool          // the curve since the latest cut is the flat one (see flatShare); guarded by mu
	heldFrom  time.Time     // when the latest Retry-After's hold that cut began (it ends at cutAt); guarded by mu
	// The latest hold any throttle came with, counted or ignored (see
	// noteHoldLocked): the key sent nothing then. Guarded by mu.
	sawFrom, sawTo time.Time
	settled        bool // the end of the latest Retry-After's hold has been looked at (see settleLocked); guarded by mu
	// The key's lane's birth and its count of successes since (see
	// burstRateLocked); nil early for none. Set before the pacer is
	// shared.
	born     time.Time
	early    *atomic.Int64
	inflight int // attempts it let go whose outcome has not come back; guarded by mu
	// The quota the server advertised (see Advertise): the rate it
	// sustains, until when that holds, and the requests it has left,
	// which bound the burst. Zero quota: none advertised. Guarded by mu.
	quota      float64
	quotaUntil time.Time
	quotaLeft  int
}

func newPacer(now time.Time) *pacer {
	p := &pacer{cutAt: now}
	p.lim = rate.NewLimiter(rate.Limit(slowStartRate), 1)
	return p
}

// rateAtLocked returns the allowed rate at now: the adaptive rate, once
// the key has throttled, and never more than the quota it advertises.
// Called with mu held.
func (p *pacer) rateAtLocked(now time.Time) float64 {
	r := p.curveLocked(now)
	if p.quotaOnLocked(now) {
		r = math.Min(r, p.quota)
	}
	return r
}

// curveLocked returns the adaptive rate at now, which throttles set:
// what the key was refused at, never what a server only advertised.
// Called with mu held.
func (p *pacer) curveLocked(now time.Time) float64 {
	r := 2.0 * unpaceAt // nothing limits it
	if p.throttles > 0 {
		t := now.Sub(p.cutAt).Seconds()
		switch {
		case p.wmax == 0 && p.flat:
			// Slow start after a Retry-After: a window limiter refuses
			// all that is sent past its quota, and the key has waited
			// out a window; the rate grows to no more than a quarter
			// above what the server admitted over the past two seconds,
			// counted over the time the key could send (the hold left
			// out: counted in, it would halve the rate the key comes
			// back at), so that the window it first overfills is
			// refused a few requests, not hundreds.
			r = math.Min(slowStartRate*math.Exp2(t/slowStartStep.Seconds()), r)
			if a := p.admitted.rateBeside(now, admittedSpan, p.heldFrom, p.cutAt); a > 0 && p.admitted.from.Before(p.cutAt) {
				r = math.Min(r, math.Max(1.25*a, slowStartRate))
			}
		case p.wmax == 0:
			r = math.Min(slowStartRate*math.Exp2(t/slowStartStep.Seconds()), r)
		case p.flat:
			r = cubicWith(p.wmax, 1, flatC, t)
		default:
			r = cubic(p.wmax, t)
		}
	}
	return r
}

// quotaOnLocked reports an advertised quota in force at now. Called with
// mu held.
func (p *pacer) quotaOnLocked(now time.Time) bool {
	return p.quota > 0 && now.Before(p.quotaUntil)
}

// quotaOn is quotaOnLocked for a caller that does not hold mu.
func (p *pacer) quotaOn(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quotaOnLocked(now)
}

// setRateLocked brings the bucket to the rate at now. While a quota is
// advertised, the burst is what the server has left, so that a key with
// plenty of quota sends a short batch at once, not paced to a trickle
// (the bucket fills only while the key sends less than the rate: a key
// that has been paced goes on at the rate across a window's reset).
// Called with mu held.
func (p *pacer) setRateLocked(now time.Time) {
	p.settleLocked(now)
	least := 1
	if p.quotaOnLocked(now) {
		least = max(p.quotaLeft, 1)
	}
	setRateBurst(p.lim, now, p.rateAtLocked(now), least)
}

// settleLocked, at the end of the hold that a Retry-After put on a key's
// first burst, reads what the server admitted of it: a window limiter
// admits its quota at once, refuses the rest and says by its Retry-After
// when its window resets, so the burst's successes over the hold are its
// quota per window. The rate goes onto the flat curve at flatShare of
// that, as after a later cut, where slow start would take most of a
// window to climb to it and then overfill the next. When the refusal did
// not end the key's first burst (see burstRateLocked), or the burst was
// admitted less than slowStartRate per second, slow start finds the rate.
// It runs before the first release after the hold, so every success it
// counts is from an attempt sent before the refusal. Called with mu held.
func (p *pacer) settleLocked(now time.Time) {
	if p.early == nil || p.settled || p.throttles == 0 || p.wmax != 0 || !p.flat || now.Before(p.cutAt) {
		return
	}
	p.settled = true
	if a, known := p.burstRateLocked(p.heldFrom, p.cutAt); known && a >= slowStartRate {
		p.wmax = flatShare * a
	}
}

// burstRateLocked returns the key's successes per second of the hold of a
// refusal at refused until until, when that refusal ended the key's first
// burst: it came after the key's first request (its lane's birth) no
// later than the hold lasts, so that the successes fit in the window the
// hold closes, and within firstBurst of it; and every success was counted
// (earlyMax). Over a window longer than its hold the rate reads high: that
// costs a refusal and a cut, where a rate read low would keep the key
// below its quota for the tens of seconds the flat curve takes to climb.
// Called with mu held.
func (p *pacer) burstRateLocked(refused, until time.Time) (float64, bool) {
	if p.early == nil {
		return 0, false
	}
	n, hold := p.early.Load(), until.Sub(refused)
	if n >= earlyMax || hold <= 0 || refused.Sub(p.born) > hold || until.Sub(p.born) > firstBurst {
		return 0, false
	}
	return float64(n) / hold.Seconds(), true
}

// firstBurst bounds how long after a key's first request its first burst
// may end: two of the one-second windows of most rate limiters.
const firstBurst = 2 * time.Second

// cubic returns CUBIC's rate t seconds after a cut from wmax to
// cubicBeta of it: back at wmax after K seconds, flat around it, then
// probing beyond (RFC 9438 §4.2).
func cubic(wmax, t float64) float64 { return cubicWith(wmax, cubicBeta, cubicC, t) }

// cubicWith is cubic for a cut to beta of wmax, growing with constant c.
func cubicWith(wmax, beta, c, t float64) float64 {
	k := math.Cbrt(wmax * (1 - beta) / c)
	return math.Max(c*math.Pow(t-k, 3)+wmax, 1)
}

// After a throttle that came with a Retry-After (the server said when to
// come back, as a fixed window's limiter does), the rate is set a little
// below what the server admitted over the past second and probes beyond
// it slowly: a window limiter admits its quota at once and refuses the
// rest, so a curve that grows back within seconds would be refused again
// at every few windows, each time losing what is left of a window to the
// Retry-After. flatShare of the admitted rate, growing by flatC·t³: 5
// requests/s more after 21 s, 40 after 43 s.
const (
	flatShare = 0.95
	flatC     = 0.0005
)

// freeLocked reports that the pacer no longer limits anything: its rate
// has grown far past what was throttled and nobody waits. Called with mu
// held.
func (p *pacer) freeLocked(now time.Time) bool {
	return p.queue.len() == 0 && p.timer == nil && p.rateAtLocked(now) >= max(2*p.wmax, unpaceAt)
}

// free is freeLocked for a caller that does not hold mu.
func (p *pacer) free(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.freeLocked(now)
}

// success records a normal answer, at now, to an attempt: one the pacer
// let go (paced) at gen, or one sent before it paced the key.
func (p *pacer) success(now time.Time, gen uint64, paced bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if paced {
		p.okGen = max(p.okGen, gen)
	}
	p.admitted.add(now)
}

// answered records that an attempt it let go has its outcome.
func (p *pacer) answered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight = max(p.inflight-1, 0)
}

// admittedSpan is how far back the pacer counts what the server admitted:
// two of the one-second windows of most rate limiters, so that a count
// taken when a window has just filled spans a whole window before it.
const admittedSpan = 2 * time.Second

// tally counts events per twentieth of admittedSpan over the past
// admittedSpan.
type tally struct {
	n    [20]int
	at   int64 // the slot of the latest event
	from time.Time
}

func (c *tally) slot(now time.Time) int64 {
	return now.UnixNano() / int64(admittedSpan/time.Duration(len(c.n)))
}

// move clears the slots that have fallen out of the span since the latest
// event.
func (c *tally) move(now time.Time) {
	s := c.slot(now)
	for i := c.at + 1; i <= s && i <= c.at+int64(len(c.n)); i++ {
		c.n[i%int64(len(c.n))] = 0
	}
	c.at = max(c.at, s)
}

func (c *tally) add(now time.Time) {
	if c.from.IsZero() {
		c.from = now
	}
	c.move(now)
	c.n[c.at%int64(len(c.n))]++
}

// rate returns the events per second over the past d (at most
// admittedSpan), or over the time since the first event when that is
// shorter (at least a slot); 0 for none.
func (c *tally) rate(now time.Time, d time.Duration) float64 {
	if c.from.IsZero() {
		return 0
	}
	c.move(now)
	per := admittedSpan / time.Duration(len(c.n))
	k := min(int(d/per), len(c.n))
	total := 0
	for i := range k {
		total += c.n[(c.at-int64(i))%int64(len(c.n))]
	}
	span := min(max(now.Sub(c.from), per), time.Duration(k)*per)
	return float64(total) / span.Seconds()
}

// lastStep returns the events per second over the latest slot gone by
// and the part of the current one: the rate of the past 100 to 200 ms.
func (c *tally) lastStep(now time.Time) float64 {
	if c.from.IsZero() {
		return 0
	}
	c.move(now)
	per := admittedSpan / time.Duration(len(c.n))
	l := int64(len(c.n))
	total := c.n[c.at%l] + c.n[(c.at-1+l)%l]
	span := per + time.Duration(now.UnixNano()%int64(per))
	span = min(span, max(now.Sub(c.from), per))
	return float64(total) / span.Seconds()
}

// rateBeside is rate over the past d, leaving out of the span the time
// from held to until, when nothing could be admitted.
func (c *tally) rateBeside(now time.Time, d time.Duration, held, until time.Time) float64 {
	r := c.rate(now, d)
	if r == 0 || held.IsZero() || !until.After(held) {
		return r
	}
	per := admittedSpan / time.Duration(len(c.n))
	span := min(max(now.Sub(c.from), per), min(d, admittedSpan))
	start := now.Add(-span)
	end := until
	if now.Before(end) {
		end = now
	}
	overlap := end.Sub(later(held, start))
	if overlap <= 0 {
		return r
	}
	return r * span.Seconds() / max(span-overlap, per).Seconds()
}

// throttle cuts the rate after a throttling answer to an attempt sent at
// gen. Answers to attempts sent before the latest cut were caused by the
// old rate, and answers before the server has admitted anything at the
// current rate may be the tail of an earlier burst (its own bucket still
// refilling): both are ignored, and not counted (a pacer that had only an
// advertised quota would be put into slow start by them). The first
// throttle counts: a pacer that a throttle started is at that attempt's
// generation. A throttle that came with a hold to a key paced at the
// quota it advertises is ignored too: the server has said both the rate
// it sustains and when to come back, and the hold answers it (cut, the
// rate would stay below the quota the next windows grant, as the flat
// curve takes tens of seconds to climb). Without a hold, it cuts: another
// limiter than the advertised quota is refusing.
func (p *pacer) throttle(now, from time.Time, gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen || (p.okGen != p.gen && p.throttles > 0) || (from.After(now) && p.quotaOnLocked(now)) {
		// It cuts nothing, but a hold it came with kept the key from
		// sending all the same.
		p.noteHoldLocked(now, from)
		return
	}
	// The rate throttled: read before the count, which puts a pacer that
	// had only an advertised quota into slow start.
	was := p.rateAtLocked(now)
	p.throttles++
	if p.throttles > 1 || p.quotaOnLocked(now) {
		// The first throttle only started pacing, in slow start; from the
		// next, the curve is CUBIC's around the rate just throttled. After
		// a Retry-After it is the flat curve around what the server
		// admitted over the past second, when that is less: a fixed
		// window admits its quota at once and refuses the rest, whatever
		// the rate it is sent, and a curve around the rate sent would
		// take many cuts to come down to it. A key paced at its
		// advertised quota has its rate already: the first throttle
		// without a Retry-After cuts it (one with a Retry-After was left
		// to its hold, above).
		slow := p.wmax == 0 && !p.flat
		p.wmax, p.refused = was, was
		if p.flat = from.After(now); p.flat {
			// A pacer younger than the second has in its tally only the
			// successes since it began; the key's first burst may hold
			// more. A hold within the second is left out: the key
			// sent nothing then, which says nothing of the server.
			ok := p.admitted.rateBeside(now, time.Second, p.sawFrom, p.sawTo)
			if a, known := p.burstRateLocked(now, from); known {
				ok = max(ok, a)
			}
			if slow && p.throttles > 1 {
				// In slow start the key's own rate limited what it sent
				// over most of the second, and what the server admitted
				// then reads that ramp, not the server's limit: the
				// latest step, sent at over half the rate refused, reads
				// it. A fixed window admits all it is sent until it
				// fills, so there the step may read the rate sent, above
				// the window: its next refusal, on the flat curve, reads
				// the second again and cuts to the window's rate.
				ok = max(ok, p.admitted.lastStep(now))
			}
			if ok > 0 {
				p.wmax = min(p.wmax, ok)
			}
			p.wmax = max(flatShare*p.wmax, 1)
		}
	} else {
		p.flat = from.After(now)
	}
	if from.After(now) {
		p.noteHoldLocked(now, from)
		p.heldFrom, p.settled = now, false
	}
	p.gen++
	// The curve starts when the next attempt may go: after the hold a
	// Retry-After put on the key, if any.
	p.cutAt = later(now, from)
	p.setRateLocked(now)
}

// unhold restarts the curve at now when the hold a throttle came with
// was refuted (see proof): the server admits again, so the curve is not
// kept waiting for the hold's end, and it is CUBIC's, as after a throttle
// without one (the flat curve is a window limiter's, and this is none).
func (p *pacer) unhold(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cutAt.After(now) {
		return
	}
	p.cutAt, p.flat, p.sawTo = now, false, now
	if p.timer != nil && p.timer.Stop() {
		p.timer = nil
	}
	p.setRateLocked(now)
	p.scheduleLocked(now)
}

// refute drops the advertised quota at now, when the server was seen to
// admit more than it says (see evidence), and has the rate find what the
// server admits: slow start from the rate it admitted over the past
// second (at least slowStartRate), until the next throttle. The curve the
// key followed goes too: it was set around what a window of the refuted
// size admits (see throttle), and would take minutes to climb to a rate
// the server admitted within one window. Answers to attempts sent before
// now cut nothing (a new generation).
func (p *pacer) refute(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.quota, p.quotaLeft = 0, 0
	p.throttles, p.wmax, p.flat = max(p.throttles, 1), 0, false
	p.gen++
	// Slow start's rate at t is slowStartRate·2^(t/slowStartStep): the
	// curve starts at the admitted rate, when the key may next send (after
	// a hold under way).
	a := math.Max(p.admitted.rateBeside(now, time.Second, p.sawFrom, p.sawTo), slowStartRate)
	p.cutAt = later(now, p.sawTo).Add(-time.Duration(math.Log2(a/slowStartRate) * float64(slowStartStep)))
	p.setRateLocked(now)
	p.scheduleLocked(now)
}

// noteHoldLocked records a hold from now until from that a throttle came
// with (none when from is not after now): what the server admitted is
// counted beside it, as the key sent nothing then. A hold that extends
// the one recorded keeps its start. Called with mu held.
func (p *pacer) noteHoldLocked(now, from time.Time) {
	switch {
	case !from.After(now):
	case now.Before(p.sawTo):
		p.sawTo = later(p.sawTo, from)
	default:
		p.sawFrom, p.sawTo = now, from
	}
}

// wait waits until the key's rate lets one more attempt go, and returns
// the pacer's gen at its release. It returns ErrPaced at once if the queue
// ahead cannot be served before the deadline, and the context's error if
// it ends first.
func (p *pacer) wait(ctx context.Context) (uint64, error) {
	p.mu.Lock()
	now := time.Now()
	p.setRateLocked(now)
	if p.queue.len() == 0 && p.timer == nil && p.lim.AllowN(now, 1) {
		gen := p.gen
		p.inflight++
		p.mu.Unlock()
		return gen, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		if ahead, known := p.observedAheadLocked(now, p.queue.len()+1); known && !now.Add(ahead).Before(dl) {
			p.mu.Unlock()
			return 0, ErrPaced
		}
	}
	w := p.queue.push()
	p.scheduleLocked(now)
	p.mu.Unlock()
	if err := p.queue.wait(ctx, &p.mu, w, nil, p.handOnLocked); err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.inflight++
	p.mu.Unlock()
	return w.gen, nil
}

// handOnLocked passes a release its waiter could not use to the next in
// line. Called with mu held.
func (p *pacer) handOnLocked(*waiter) { p.queue.letNext(p.gen) }

// observedAheadLocked is aheadLocked at a rate the server was seen to
// hold the key to: the rate a paced attempt was last throttled at, or the
// curve or what the server admitted over the past admittedSpan when more,
// so the most the evidence allows and the fewest refusals. known is false
// until a paced attempt has been throttled: a rate a server only
// advertised is a reading of its headers, which the same names make
// ambiguous (a burst, a rate, a window), and slow start's is a probe the
// server has not refused. A request is never handed back unsent on those;
// it waits its turn instead. Called with mu held.
func (p *pacer) observedAheadLocked(now time.Time, k int) (d time.Duration, known bool) {
	if p.refused == 0 {
		return 0, false
	}
	p.setRateLocked(now)
	k -= int(p.lim.TokensAt(now))
	if k <= 0 {
		return 0, true
	}
	r := max(p.refused, p.curveLocked(now), p.admitted.rate(now, admittedSpan))
	return time.Duration(float64(k) / r * float64(time.Second)), true
}

// aheadLocked estimates how long the releases of k more attempts take:
// none for those the bucket holds tokens for; the rest at the current rate
// once it follows CUBIC (close to flat) or the advertised quota, and along
// the doubling curve in slow start, where the current rate would overstate
// the wait many times over. Called with mu held.
func (p *pacer) aheadLocked(now time.Time, k int) time.Duration {
	p.setRateLocked(now)
	k -= int(p.lim.TokensAt(now))
	if k <= 0 {
		return 0
	}
	if p.wmax > 0 || p.throttles == 0 {
		// Flat: CUBIC's curve near its rate, or the advertised quota.
		return time.Duration(float64(k) / p.rateAtLocked(now) * float64(time.Second))
	}
	td := slowStartStep.Seconds()
	t0 := now.Sub(p.cutAt).Seconds()
	// The releases from t0 to t0+T number ∫ R0·2^(t/td) dt.
	end := td * math.Log2(math.Exp2(t0/td)+float64(k)*math.Ln2/(slowStartRate*td))
	return time.Duration((end - t0) * float64(time.Second))
}

// scheduleLocked arranges the release of the queue's head when the
// limiter next has a token. Called with mu held.
func (p *pacer) scheduleLocked(now time.Time) {
	if p.timer != nil || p.queue.len() == 0 {
		return
	}
	p.timer = time.AfterFunc(nextToken(p.lim, now), p.release)
}

// release lets go the waiters the limiter has tokens for (at least the
// first: its timer was set for its token), and schedules the next.
func (p *pacer) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer = nil
	now := time.Now()
	p.setRateLocked(now)
	for p.queue.len() > 0 && p.lim.AllowN(now, 1) {
		p.queue.letNext(p.gen)
	}
	p.scheduleLocked(now)
}

// throttle cuts the key's send rate after a throttling answer to an
// attempt sent at pacer generation gen, and starts pacing the key if it
// was not.
func (l *Lane) throttle(now time.Time, gen uint64) {
	from := now
	l.mu.Lock()
	if l.word.Load()&heldBit != 0 {
		from = l.holdUntil
	}
	l.mu.Unlock()
	l.pacerOf(now, nil).throttle(now, from, gen)
}

// pacerOf returns the key's pacer, starting one (made by mk, or newPacer
// when mk is nil) and pacing the key if it had none.
func (l *Lane) pacerOf(now time.Time, mk func() *pacer) *pacer {
	if p := l.pace.Load(); p != nil {
		return p
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pace.Load()
	if p == nil {
		if mk != nil {
			p = mk()
		} else {
			p = newPacer(now)
		}
		p.born, p.early = l.born, &l.early
		l.pace.Store(p)
		l.word.Store(l.word.Load() | pacedBit)
		l.set.flag()
	}
	return p
}

// waitPace waits for the key's send rate, and returns the generation to
// send at. A pacer that no longer limits anything is dropped, and the key
// costs nothing again.
func (l *Lane) waitPace(ctx context.Context) (uint64, error) {
	p := l.pace.Load()
	if p == nil {
		return 0, nil
	}
	gen, err := p.wait(ctx)
	if err == nil && p.free(time.Now()) {
		l.mu.Lock()
		if l.pace.CompareAndSwap(p, nil) {
			l.word.Store(l.word.Load() &^ pacedBit)
		}
		l.mu.Unlock()
	}
	return gen, err
}
