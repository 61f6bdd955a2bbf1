package retryhttp

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// errPaced is the cause when a throttled key's send rate leaves no room
// for the attempt before the request's deadline; it satisfies
// errors.Is(err, context.DeadlineExceeded).
var errPaced = &pacedError{}

type pacedError struct{}

func (*pacedError) Error() string {
	return "retryhttp: the key's send rate leaves no room before the deadline"
}
func (*pacedError) Is(target error) bool { return target == context.DeadlineExceeded }

// ErrConcurrencyLimit is wrapped by the error of a request refused because
// its key already had as many attempts in flight as WithConcurrencyLimit
// allows, in its refusing mode.
var ErrConcurrencyLimit = errors.New("retryhttp: concurrency limit reached")

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
	queue     []*waiter     // guarded by mu
	timer     *time.Timer   // set while a release is scheduled; guarded by mu
	gen       uint64        // cuts so far: a throttle of an attempt sent before the latest cut is ignored; guarded by mu
	okGen     uint64        // the gen of the latest success; guarded by mu
	cutAt     time.Time     // guarded by mu
	wmax      float64       // the rate at the latest cut; 0 in slow start; guarded by mu
	throttles uint64        // guarded by mu
}

// waiter is one attempt waiting for a release.
type waiter struct {
	ch   chan struct{}
	gen  uint64 // the pacer's gen when released
	gone bool   // its request stopped waiting; guarded by the queue's owner
}

func newPacer(now time.Time) *pacer {
	p := &pacer{cutAt: now}
	p.lim = rate.NewLimiter(rate.Limit(slowStartRate), 1)
	return p
}

// rateAt returns the allowed rate at now. Called with mu held.
func (p *pacer) rateAt(now time.Time) float64 {
	t := now.Sub(p.cutAt).Seconds()
	if p.wmax == 0 {
		return math.Min(slowStartRate*math.Exp2(t/slowStartStep.Seconds()), 2*unpaceAt)
	}
	k := math.Cbrt(p.wmax * (1 - cubicBeta) / cubicC)
	return math.Max(cubicC*math.Pow(t-k, 3)+p.wmax, 1)
}

// free reports that the pacer no longer limits anything: its rate has
// grown far past what was throttled and nobody waits. Called with mu held.
func (p *pacer) free(now time.Time) bool {
	return len(p.queue) == 0 && p.timer == nil && p.rateAt(now) >= max(2*p.wmax, unpaceAt)
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
		p.wmax = p.rateAt(now)
	}
	p.gen++
	p.cutAt = now
	p.lim.SetLimitAt(now, rate.Limit(p.rateAt(now)))
}

// wait waits until the key's rate lets one more attempt go, and returns
// the pacer's gen at its release. It returns errPaced at once if the
// queue ahead cannot be served before the deadline, and the context's
// error if it ends first.
func (p *pacer) wait(ctx context.Context) (uint64, error) {
	p.mu.Lock()
	now := time.Now()
	r := p.rateAt(now)
	p.lim.SetLimitAt(now, rate.Limit(r))
	if len(p.queue) == 0 && p.timer == nil && p.lim.AllowN(now, 1) {
		gen := p.gen
		p.mu.Unlock()
		return gen, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		if !now.Add(p.aheadLocked(now, len(p.queue)+1)).Before(dl) {
			p.mu.Unlock()
			return 0, errPaced
		}
	}
	w := &waiter{ch: make(chan struct{})}
	p.queue = append(p.queue, w)
	p.scheduleLocked(now)
	p.mu.Unlock()
	select {
	case <-w.ch:
		return w.gen, nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		select {
		case <-w.ch:
			// Released as the context ended: the place is used.
			return w.gen, nil
		default:
		}
		w.gone = true
		return 0, ctx.Err()
	}
}

// aheadLocked estimates how long the releases of k more attempts take:
// at the current rate once it follows CUBIC (close to flat), and along the
// doubling curve in slow start, where the current rate would overstate the
// wait many times over.
func (p *pacer) aheadLocked(now time.Time, k int) time.Duration {
	if p.wmax > 0 {
		return time.Duration(float64(k) / p.rateAt(now) * float64(time.Second))
	}
	td := slowStartStep.Seconds()
	t0 := now.Sub(p.cutAt).Seconds()
	// The releases from t0 to t0+T number ∫ R0·2^(t/td) dt.
	end := td * math.Log2(math.Exp2(t0/td)+float64(k)*math.Ln2/(slowStartRate*td))
	return time.Duration((end - t0) * float64(time.Second))
}

// scheduleLocked arranges the release of the queue's head when the
// limiter next has a token.
func (p *pacer) scheduleLocked(now time.Time) {
	if p.timer != nil || len(p.queue) == 0 {
		return
	}
	d := p.lim.ReserveN(now, 1).DelayFrom(now)
	p.timer = time.AfterFunc(d, p.release)
}

// release lets the first waiter still waiting go, and schedules the next.
func (p *pacer) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer = nil
	for len(p.queue) > 0 {
		w := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		if !w.gone {
			w.gen = p.gen
			close(w.ch)
			break
		}
	}
	now := time.Now()
	p.lim.SetLimitAt(now, rate.Limit(p.rateAt(now)))
	p.scheduleLocked(now)
}

// slots limits the attempts in flight to one key.
type slots struct {
	mu       sync.Mutex
	inFlight int       // guarded by mu
	queue    []*waiter // guarded by mu
}

// acquire takes a place among the key's n attempts in flight: at once if
// one is free; else it refuses (refuse), or waits for one in turn, giving
// up when ctx ends.
func (s *slots) acquire(ctx context.Context, n int, refuse bool) error {
	s.mu.Lock()
	if s.inFlight < n {
		s.inFlight++
		s.mu.Unlock()
		return nil
	}
	if refuse {
		s.mu.Unlock()
		return ErrConcurrencyLimit
	}
	w := &waiter{ch: make(chan struct{})}
	s.queue = append(s.queue, w)
	s.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-w.ch:
			// Handed a place as the context ended: give it on.
			s.releaseLocked()
		default:
			w.gone = true
		}
		return ctx.Err()
	}
}

// release gives the place back, to the first waiter still waiting if any.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *slots) releaseLocked() {
	for len(s.queue) > 0 {
		w := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if !w.gone {
			close(w.ch) // the place passes to w: inFlight is unchanged
			return
		}
	}
	s.inFlight--
}
