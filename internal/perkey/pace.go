package perkey

import (
	"context"
	"math"
	"sync"
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
	throttles uint64        // guarded by mu
}

func newPacer(now time.Time) *pacer {
	p := &pacer{cutAt: now}
	p.lim = rate.NewLimiter(rate.Limit(slowStartRate), 1)
	return p
}

// rateAtLocked returns the allowed rate at now. Called with mu held.
func (p *pacer) rateAtLocked(now time.Time) float64 {
	t := now.Sub(p.cutAt).Seconds()
	if p.wmax == 0 {
		return math.Min(slowStartRate*math.Exp2(t/slowStartStep.Seconds()), 2*unpaceAt)
	}
	return cubic(p.wmax, t)
}

// cubic returns CUBIC's rate t seconds after a cut from wmax to
// cubicBeta of it: back at wmax after K seconds, flat around it, then
// probing beyond (RFC 9438 §4.2).
func cubic(wmax, t float64) float64 {
	k := math.Cbrt(wmax * (1 - cubicBeta) / cubicC)
	return math.Max(cubicC*math.Pow(t-k, 3)+wmax, 1)
}

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

// success records a normal answer to an attempt sent at gen.
func (p *pacer) success(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.okGen = max(p.okGen, gen)
}

// throttle cuts the rate after a throttling answer to an attempt sent at
// gen. Answers to attempts sent before the latest cut were caused by the
// old rate, and answers before the server has admitted anything at the
// current rate may be the tail of an earlier burst (its own bucket still
// refilling): both are ignored.
func (p *pacer) throttle(now time.Time, gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.throttles++
	if gen != p.gen || (p.throttles > 1 && p.okGen != p.gen) {
		return
	}
	if p.throttles > 1 {
		// The first throttle only started pacing, in slow start; from the
		// next, the curve is CUBIC's around the rate just throttled.
		p.wmax = p.rateAtLocked(now)
	}
	p.gen++
	p.cutAt = now
	setRate(p.lim, now, p.rateAtLocked(now))
}

// wait waits until the key's rate lets one more attempt go, and returns
// the pacer's gen at its release. It returns ErrPaced at once if the queue
// ahead cannot be served before the deadline, and the context's error if
// it ends first.
func (p *pacer) wait(ctx context.Context) (uint64, error) {
	p.mu.Lock()
	now := time.Now()
	setRate(p.lim, now, p.rateAtLocked(now))
	if p.queue.len() == 0 && p.timer == nil && p.lim.AllowN(now, 1) {
		gen := p.gen
		p.mu.Unlock()
		return gen, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		if !now.Add(p.aheadLocked(now, p.queue.len()+1)).Before(dl) {
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
	return w.gen, nil
}

// handOnLocked passes a release its waiter could not use to the next in
// line. Called with mu held.
func (p *pacer) handOnLocked(*waiter) { p.queue.letNext(p.gen) }

// aheadLocked estimates how long the releases of k more attempts take:
// at the current rate once it follows CUBIC (close to flat), and along the
// doubling curve in slow start, where the current rate would overstate the
// wait many times over. Called with mu held.
func (p *pacer) aheadLocked(now time.Time, k int) time.Duration {
	if p.wmax > 0 {
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
	setRate(p.lim, now, p.rateAtLocked(now))
	for p.queue.len() > 0 && p.lim.AllowN(now, 1) {
		p.queue.letNext(p.gen)
	}
	p.scheduleLocked(now)
}

// throttle cuts the key's send rate after a throttling answer to an
// attempt sent at pacer generation gen, and starts pacing the key if it
// was not.
func (l *Lane) throttle(now time.Time, gen uint64) {
	p := l.pace.Load()
	if p == nil {
		l.mu.Lock()
		if p = l.pace.Load(); p == nil {
			p = newPacer(now)
			l.pace.Store(p)
			l.word.Store(l.word.Load() | pacedBit)
			l.set.flag()
		}
		l.mu.Unlock()
	}
	p.throttle(now, gen)
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
