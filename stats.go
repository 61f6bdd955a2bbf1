package retryhttp

import (
	"context"
	"math"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/retryhttp/retryhttp/internal/attempt"
)

// Stats is a snapshot of a Transport's counters, each read atomically but
// not all at one instant. Every counter only grows.
type Stats struct {
	Requests          uint64            // calls to RoundTrip that sent an attempt or ended without one
	Attempts          uint64            // attempts sent to the next RoundTripper, hedges included
	Retries           uint64            // attempts after the first
	RetryAfterSeen    uint64            // retryable responses with a Retry-After
	RetryAfterClamped uint64            // of those, above WithMaxRetryAfter
	BudgetDenied      uint64            // retries the budget refused
	CircuitRejected   uint64            // attempts an open circuit refused, and sleeps it ended
	LocalResponses    uint64            // local 503s (WithCircuitOpenResponse)
	Held              uint64            // admissions a hold stopped, to wait or to refuse
	SlowAttempts      uint64            // attempts counted as failures by BreakerConfig.SlowAfter
	ResponsesBuffered uint64            // bodies WithResponseBuffer read whole
	ResponsesCut      uint64            // bodies it found cut mid-read
	ResponsesTooLarge uint64            // bodies larger than its buffer, handed back streaming
	Quotas            uint64            // responses whose advertised quota was applied
	QuotaHeld         uint64            // of those, quotas spent, which held the key
	Paced             uint64            // attempts that waited for their key's send rate
	Hedges            uint64            // second copies sent (WithHedging)
	HedgesWon         uint64            // of those, copies whose answer was used
	Waits             uint64            // waits for a key to recover (WithMaxWait)
	WaitsReleased     uint64            // waits the key let go
	WaitTime          time.Duration     // the waits' total length
	WaitedDelivered   uint64            // requests that waited and succeeded
	WaitedGaveUp      uint64            // requests that waited and gave up
	GiveUps           map[Reason]uint64 // requests that stopped on a failure, by reason
	// Delays holds the delays drawn for each scheduled retry, by retry
	// number: Delays[0] for the first; the last also holds every later.
	Delays []DelayHistogram
}

// DelayHistogram counts the delays drawn before one retry number: under
// FullJitter, evenly up to min(Cap, Base·2^(n−1)).
type DelayHistogram struct {
	Retry  int           // the retry number, 1 for the first; the last histogram holds every later one too
	Count  uint64        // delays counted
	Sum    time.Duration // their sum
	Counts []uint64      // Counts[i]: delays from Bounds()[i-1] (or 0) up to Bounds()[i]
}

// String returns the histogram in a few words, such as "retry 1: 12
// delays, mean 97ms", so that Stats prints readably.
func (h DelayHistogram) String() string {
	if h.Count == 0 {
		return "retry " + strconv.Itoa(h.Retry) + ": no delays"
	}
	n := " delays, mean "
	if h.Count == 1 {
		n = " delay, mean "
	}
	return "retry " + strconv.Itoa(h.Retry) + ": " + strconv.FormatUint(h.Count, 10) + n + (h.Sum / time.Duration(h.Count)).String()
}

// Histogram layout: one bucket for [0, 1 ms), then each octave
// [2^k ms, 2^(k+1) ms) for k = 0..delayOctaves-1 split into delaySubBuckets
// equal parts, then one bucket for everything from 2^delayOctaves ms
// (65.5 s) up. Relative resolution is 1/8 at every scale, from 125 µs near
// 1 ms to 4 s near 30 s.
const (
	delayOctaves    = 16
	delaySubBuckets = 8
	delayBuckets    = 1 + delayOctaves*delaySubBuckets + 1
	delayRetries    = 16 // retry numbers with a histogram of their own
)

// Bounds returns the upper bounds of Counts' buckets: 1 ms, then eight
// steps per doubling up to 65.536 s, then the largest Duration.
func (DelayHistogram) Bounds() []time.Duration {
	b := make([]time.Duration, delayBuckets)
	b[0] = time.Millisecond
	for k := range delayOctaves {
		lo := time.Millisecond << k
		for s := range delaySubBuckets {
			b[1+k*delaySubBuckets+s] = lo + lo*time.Duration(s+1)/delaySubBuckets
		}
	}
	b[delayBuckets-1] = math.MaxInt64
	return b
}

// delayBucket returns the index of the bucket that holds d.
func delayBucket(d time.Duration) int {
	if d < time.Millisecond {
		return 0
	}
	k := bits.Len64(uint64(d/time.Millisecond)) - 1 // d is in [2^k ms, 2^(k+1) ms)
	if k >= delayOctaves {
		return delayBuckets - 1
	}
	lo := time.Millisecond << k
	return 1 + k*delaySubBuckets + int((d-lo)*delaySubBuckets/lo)
}

// stats holds a Transport's counters. Only first is touched on the success
// path: one atomic add to a striped counter, no lock, no allocation. The
// rest are derived: a request is counted when it sends its first attempt
// (first) or ends without one (notSent), and every attempt is a first
// attempt or a retry.
type stats struct {
	first           stripedCounter // first attempts sent
	notSent         atomic.Uint64  // requests that ended before their first attempt
	retries         atomic.Uint64
	budgetDenied    atomic.Uint64
	circuitRejected atomic.Uint64
	localResponses  atomic.Uint64
	held            atomic.Uint64
	slowAttempts    atomic.Uint64
	paced           atomic.Uint64
	hedges          atomic.Uint64
	hedgesWon       atomic.Uint64
	retryAfter      struct{ seen, clamped atomic.Uint64 }
	quota           struct{ count, held atomic.Uint64 }
	resp            struct{ buffered, cut, tooLarge atomic.Uint64 }
	// wait counts the waits for a key, those released, their total time,
	// and the requests that waited and were delivered, or gave up.
	wait struct {
		count, released, nanos, delivered, gaveUp atomic.Uint64
	}
	giveUps [len(reasonNames)]atomic.Uint64
	delays  [delayRetries]delayCounts
}

type delayCounts struct {
	sum     atomic.Int64
	buckets [delayBuckets]atomic.Uint64
}

func (s *stats) recordDelay(retry int, d time.Duration) {
	h := &s.delays[min(retry, delayRetries)-1]
	h.sum.Add(int64(d))
	h.buckets[delayBucket(d)].Add(1)
}

// countBuffering counts what the response buffer did with an attempt's
// response. A cut counts only while the caller's context has not ended:
// then the host's connection cut the body.
func (s *stats) countBuffering(b attempt.Buffering, ctx context.Context) {
	switch b {
	case attempt.Buffered:
		s.resp.buffered.Add(1)
	case attempt.TooLarge:
		s.resp.tooLarge.Add(1)
	case attempt.Cut:
		if ctx.Err() == nil {
			s.resp.cut.Add(1)
		}
	}
}

// Stats returns a snapshot of the transport's counters.
func (t *Transport) Stats() Stats {
	s := &t.stats
	first := s.first.load()
	out := Stats{
		Requests:          first + s.notSent.Load(),
		Retries:           s.retries.Load(),
		RetryAfterSeen:    s.retryAfter.seen.Load(),
		RetryAfterClamped: s.retryAfter.clamped.Load(),
		BudgetDenied:      s.budgetDenied.Load(),
		CircuitRejected:   s.circuitRejected.Load(),
		LocalResponses:    s.localResponses.Load(),
		Held:              s.held.Load(),
		SlowAttempts:      s.slowAttempts.Load(),
		ResponsesBuffered: s.resp.buffered.Load(),
		ResponsesCut:      s.resp.cut.Load(),
		ResponsesTooLarge: s.resp.tooLarge.Load(),
		Quotas:            s.quota.count.Load(),
		QuotaHeld:         s.quota.held.Load(),
		Paced:             s.paced.Load(),
		Hedges:            s.hedges.Load(),
		HedgesWon:         s.hedgesWon.Load(),
		Waits:             s.wait.count.Load(),
		WaitsReleased:     s.wait.released.Load(),
		WaitTime:          time.Duration(s.wait.nanos.Load()),
		WaitedDelivered:   s.wait.delivered.Load(),
		WaitedGaveUp:      s.wait.gaveUp.Load(),
		GiveUps:           map[Reason]uint64{},
	}
	out.Attempts = first + out.Retries + out.Hedges
	for r := range s.giveUps {
		if n := s.giveUps[r].Load(); n > 0 {
			out.GiveUps[Reason(r)] = n
		}
	}
	for i := range s.delays {
		h := DelayHistogram{Retry: i + 1, Sum: time.Duration(s.delays[i].sum.Load()), Counts: make([]uint64, delayBuckets)}
		for b := range h.Counts {
			h.Counts[b] = s.delays[i].buckets[b].Load()
			h.Count += h.Counts[b]
		}
		out.Delays = append(out.Delays, h)
	}
	return out
}

// cacheLine is the stride that keeps two counters off one cache line: 128
// bytes, as adjacent-line prefetching pairs 64-byte lines on x86.
const cacheLine = 128

// counterStripes is how many cache lines a stripedCounter spreads over.
const counterStripes = 32

// stripedCounter is a count that every request adds to, exact, spread over
// cache lines so that requests on different cores do not contend for one
// line (one shared atomic counter made every request of a transport wait
// for the line to come back from the other core). An add goes to the
// stripe of its goroutine's stack: goroutines' stacks lie at least 2 KiB
// apart, and a goroutine's frames are at the same depth from one request
// to the next, so each goroutine keeps to its own stripe and different
// goroutines mostly to different ones. The address is only read, never
// turned back into a pointer. load sums the stripes.
type stripedCounter struct {
	_       [cacheLine]byte // off the line of whatever comes before
	stripes [counterStripes]struct {
		n atomic.Uint64
		_ [cacheLine - 8]byte
	}
}

// add counts one, and returns its stripe's count so far.
func (c *stripedCounter) add() uint64 {
	var anchor byte
	i := uintptr(unsafe.Pointer(&anchor)) >> 11
	return c.stripes[i%counterStripes].n.Add(1)
}

func (c *stripedCounter) load() uint64 {
	var n uint64
	for i := range c.stripes {
		n += c.stripes[i].n.Load()
	}
	return n
}
