package perkey

import (
	"time"

	"github.com/retryhttp/retryhttp/internal/header"
	"golang.org/x/time/rate"
)

// Policy is one quota policy a response advertised, as a View reports it.
type Policy struct {
	Partition string        // the server's name for the quota's partition; "" for none
	Limit     int64         // requests per window; -1 unknown
	Window    time.Duration // 0 unknown
	Remaining int64         // requests left in the window; -1 unknown
	Reset     time.Time     // when the window resets; the zero time unknown
	// ServerReset is when the window resets on the server's clock: the
	// same instant in every answer of one window, when the server sends
	// its reset as a Unix time. Window, when the server does not say it,
	// is learned from how far it moves when a window ends.
	ServerReset time.Time
}

// Advert is what one response advertised of the key's quota.
type Advert struct {
	At time.Time // when the response was read
	// Rate is the rate the policies sustain, in requests per second, and
	// Left the requests the tightest has left; Rate 0: none given.
	Rate float64
	Left int
	// For is how long until the window resets: Rate holds until then,
	// and quotaHold more.
	For time.Duration
	// HoldUntil is set when a policy has no request left: none may go
	// before then.
	HoldUntil time.Time
	Policies  [header.MaxPolicies]Policy
	N         int
	seq       uint64 // the answer's number among those checked (see evidence)
	guess     bool   // a policy with nothing left does not state its window (see guessedEmpty)
	stated    bool   // a policy states its window (see statesWindow)
}

// windowEnd returns the earliest reset, on the server's clock, of the
// policies a advertised; the zero time for none (see Policy.ServerReset).
func (a *Advert) windowEnd() time.Time {
	var end time.Time
	for _, p := range a.Policies[:a.N] {
		if !p.ServerReset.IsZero() && (end.IsZero() || p.ServerReset.Before(end)) {
			end = p.ServerReset
		}
	}
	return end
}

// statesWindow reports a policy that states its window or refills: the
// server's own statement of its rate. Called before learnWindows.
func statesWindow(qs *header.Quotas) bool {
	for _, q := range qs.Policies() {
		if q.Limit > 0 && (q.Window > 0 || q.Refill) {
			return true
		}
	}
	return false
}

// guessedEmpty reports a policy with nothing left whose window the server
// did not state: its hold is read from field names, a hypothesis its test
// checks (see proof). A policy that states its window (IETF's w,
// tollbooth's X-Rate-Limit-Duration), or says it refills, is the server's
// own statement. Called before learnWindows fills the windows in.
func guessedEmpty(qs *header.Quotas) bool {
	for _, q := range qs.Policies() {
		if q.Remaining == 0 && q.Reset > 0 && q.Window == 0 && !q.Refill {
			return true
		}
	}
	return false
}

// quotaHold is how long past its window's reset an advertised rate is
// kept without a fresher one: the rate of a window that has reset still
// paces the requests sent until the next answer brings the new window's,
// and a key held until the reset is not let go unpaced.
const quotaHold = time.Second

// Advertise applies the quotas a response read at now advertised to the
// key, and returns them as the key keeps them: a policy with nothing left
// holds the key until it resets, unless the response said when to come
// back itself (mayHold false: Retry-After wins); and the rate the policies
// sustain, at quotaShare of it, caps the key's send rate, with the
// requests left as the burst. A policy that does not say its window has it
// learned from the key's previous answers (see learnWindows). served
// reports a response the server's limiter counted (a 2xx): the count that
// checks each policy against what the server admits (see evidence); a
// policy the server has been seen to exceed is dropped. An advert read
// before another answer refuted a policy is not applied: it may carry the
// policy refuted. share is the part of the quota this process may spend,
// in (0, 1]: the processes of a fleet that spend one quota divide it, its
// rate and what it has left alike.
func (l *Lane) Advertise(now time.Time, qs *header.Quotas, mayHold, served bool, share float64) (Advert, Transitions) {
	l.mu.Lock()
	l.seen.checks++
	seq := l.seen.checks
	refuted := l.seen.check(qs, served)
	if refuted {
		l.seen.refutedAt = seq
	}
	guess, stated := guessedEmpty(qs), statesWindow(qs)
	learnWindows(qs, l.adv)
	l.mu.Unlock()
	if refuted {
		if p := l.pace.Load(); p != nil {
			p.refute(now)
		}
	}
	a := Advert{At: now, N: qs.Len(), seq: seq, guess: guess, stated: stated}
	if rate, burst, ok := qs.Rate(); ok {
		share = min(max(share, minShare), 1)
		a.Rate, a.Left = quotaShare*rate*share, int(float64(burst)*share)
	}
	for i, q := range qs.Policies() {
		p := Policy{Partition: q.Partition, Limit: q.Limit, Window: q.Window, Remaining: q.Remaining}
		if q.Reset >= 0 {
			p.Reset = now.Add(q.Reset)
			p.ServerReset = qs.Server().Add(q.Asked)
			if a.For == 0 || q.Reset < a.For {
				a.For = q.Reset
			}
		}
		a.Policies[i] = p
	}
	if reset, _, ok := qs.Exhausted(); ok && mayHold {
		a.HoldUntil = now.Add(reset)
	}
	return a, l.advertise(a)
}

// advertise applies a to the key: a policy with nothing left holds the
// key until it resets (Hold), and the rate the policies sustain caps the
// key's send rate, with the requests left as the burst. A key that was
// not paced starts with the whole burst free, so that a batch smaller than
// what is left goes at once.
func (l *Lane) advertise(a Advert) Transitions {
	l.mu.Lock()
	if a.seq < l.seen.refutedAt {
		l.mu.Unlock()
		return Transitions{}
	}
	l.adv = a
	l.mu.Unlock()
	l.advertises.Store(true)
	var trs Transitions
	if !a.HoldUntil.IsZero() && a.HoldUntil.After(a.At) {
		if a.guess {
			trs = l.holdAsked(a.At, a.HoldUntil)
		} else {
			// A policy that states its window is the server's count.
			l.mu.Lock()
			trs = l.holdLocked(a.At, a.HoldUntil)
			l.mu.Unlock()
		}
	}
	if a.Rate > 0 && a.Rate < unpaceAt {
		// A rate past unpaceAt limits nothing a pacer would.
		left := max(a.Left, 1)
		p := l.pacerOf(a.At, func() *pacer {
			// Generation 1: a throttle of an attempt sent before the
			// key was paced (gen 0) was caused by no rate of this
			// pacer's, and cuts nothing.
			p := &pacer{cutAt: a.At, gen: 1}
			p.lim = rate.NewLimiter(rate.Limit(a.Rate), left)
			return p
		})
		sending := 0
		if a.At.Sub(l.born) <= firstBurst {
			sending = l.inFlight()
		}
		p.advertise(a.At, a.Rate, left, sending, a.At.Add(a.For+quotaHold))
	}
	return trs
}

// quotaFirst: a key's first successes, this many, are all read for a
// quota. A batch's first wave is where the quota matters most: the answers
// that come back first say how much is left before the workers they free
// send again, and a sample would read a few of them, in whatever order
// they come back.
const quotaFirst = 256

// ReadsQuota reports whether every response of the key is to be read for
// the quota it advertises: once one has advertised it, and for the key's
// first quotaFirst successes.
func (l *Lane) ReadsQuota() bool {
	return l.advertises.Load() || l.early.Load() < quotaFirst
}

// advertise sets the quota the pacer keeps the key to. sending is how many
// attempts the key's lane has in flight in its first burst (within
// firstBurst of its first request: see Lane.inFlight), or 0.
func (p *pacer) advertise(now time.Time, r float64, left, sending int, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// What the server has left is shared with the attempts already on
	// their way, which it may not have counted yet: those the pacer let
	// go, or, in a key's first burst, every attempt the lane let go (the
	// answers of the first to come back count only what the server had
	// seen when it answered, not the hundreds sent beside them).
	p.quota, p.quotaLeft, p.quotaUntil = r, max(left-max(p.inflight, sending), 1), until
	// The burst becomes what the server has left (and the tokens no more
	// than that, from the bucket's next use): the server's count is the
	// truth.
	p.setRateLocked(now)
	p.scheduleLocked(now)
}

// minShare is the least part of a quota a process paces to, whatever the
// size of its fleet: a thousand processes on one quota each keep a
// thousandth.
const minShare = 1e-3

// quotaShare is the share of an advertised rate that a key is paced at. A
// window's reset comes in whole seconds and the client's clock is not the
// server's, so a key paced at the full rate sends some window one request
// more than its quota, answered 429; a twentieth below it, no window gets
// more, and a batch takes a twentieth longer.
const quotaShare = 0.95

// learnWindows fills in the window of a policy that does not advertise
// one (X-RateLimit-Limit, -Remaining and -Reset say nothing of it) from
// the key's previous answer: a window that has ended moves the reset, on
// the server's clock, by the window's length; the shortest move seen is
// kept. Without it the policy's rate would be its remaining over its
// reset, which a reset in whole seconds reads far too low, and a sliding
// window (go-chi/httprate) lower still.
func learnWindows(qs *header.Quotas, prev Advert) {
	policies := qs.Policies()
	for i := range policies {
		q := &policies[i]
		if q.Window > 0 || q.Limit <= 0 || q.Asked < 0 {
			continue
		}
		at := qs.Server().Add(q.Asked)
		for _, p := range prev.Policies[:prev.N] {
			if p.Partition != q.Partition || p.Limit != q.Limit || p.ServerReset.IsZero() {
				continue
			}
			moved := at.Sub(p.ServerReset)
			switch {
			case moved >= time.Second && (p.Window == 0 || moved < p.Window):
				q.Window = moved
			case p.Window > 0:
				q.Window = p.Window
			}
			break
		}
	}
}

// evidence checks each quota policy a key's headers advertise without a
// window against what the server was seen to admit. Such a policy reads
// as "Limit requests per window, the window ending at the reset": every
// answer of one window carries the same reset instant on the server's
// clock, so the answers the limiter let through with that instant count
// what the window admitted, and their least remaining says how far into
// the window the server had counted. Header names do not say what they
// count: throttled/throttled's X-RateLimit-Limit is a token bucket's burst
// and its reset the time until the bucket is full, so at 100 a second
// with a burst of 10 the "limit" reads as 11 a second, and a key paced by
// it would send a tenth of what the server admits; didip/tollbooth's
// RateLimit-Remaining is what its bucket holds, not what a window has
// left.
//
// A count refutes the reading, and cannot refute a true one, in any
// order the answers come back. In a window of limit L the answer the
// server counted k-th has L-k left (L-k+1 where it counts before), and
// the n answers received have distinct counts, so n is at most the
// largest k, whose answer has the least left r: n ≤ L and n+r ≤ L+1. A
// bucket that refills breaks the second: it has more left than that.
// Where the reset is an instant (a Unix time, a date), every answer of a
// window carries the same one, so answers of two windows are never
// counted together, and those two bounds are the tests. Where it is
// seconds to go, measured from a Date in whole seconds, the end is known
// to a second either way: answers of two adjacent windows of a second or
// two may share it (an answer the limiter counted just before its window
// ended, dated just after), so only n+r is tested, with half a window
// more: n+r > L+1+L/2. Two windows merged give n+r ≤ 2L+1 only where both
// are more than half spent, with answers from the end of the first, which
// a key paced below the quota does not send. The GCRA above, paced at 10
// a second, shows 10 left after 8 answers of one second, 18 > 11+1+5.
//
// Only answers the limiter counted are counted: 2xx (GitHub does not
// count a 304 to a conditional request). A quota shared with other
// clients leaves less, never more. A bucket the headers say refills
// (OpenAI, Anthropic) is read as one already, and is not tested. A
// refuted policy is dropped for the key's life, its rate and its holds
// with it; a policy that advertises its window (IETF's w, tollbooth's
// X-Rate-Limit-Duration) is the server's own statement, and is kept. The
// key's rate then follows what the server admits (pacer.refute).
type evidence struct {
	windows [header.MaxPolicies]window
	n       int
	// checks numbers the answers checked; refutedAt is the number of the
	// latest that refuted a policy. An advert of an earlier answer may
	// carry the policy refuted, and is not applied (see advertise).
	checks, refutedAt uint64
}

// window is one policy's current window, as the key's answers showed it.
type window struct {
	partition string
	limit     int64
	end       time.Time // the reset on the server's clock
	instant   bool      // the reset was sent as an instant
	served    int64     // answers counted with that reset
	least     int64     // the least remaining among them; -1 none told
	refuted   bool
}

// contradicted reports counts no window of w's limit can show (see
// evidence). Saturated values do not wrap: served ≥ 1, and least ≤ limit
// is checked before limit-least.
func (w *window) contradicted() bool {
	if w.served > w.limit && w.instant {
		return true
	}
	if w.least < 0 || w.least > w.limit {
		return false
	}
	slack := int64(0)
	if !w.instant {
		slack = w.limit / 2
	}
	return w.served-1 > w.limit-w.least && w.served-1-(w.limit-w.least) > slack
}

// check counts a response that advertised qs (served: let through)
// against each policy's window, drops from qs the policies refuted that
// did not advertise their window, and reports whether this response
// refuted one. It runs before learnWindows, so a window not advertised
// is still zero.
func (e *evidence) check(qs *header.Quotas, served bool) (refuted bool) {
	policies := qs.Policies()
	// Server is set when a policy does not advertise its window: the
	// readings a count can refute.
	if qs.Server().IsZero() {
		return false
	}
	var counted uint8 // the windows this response has counted in
	for i := range policies {
		q := &policies[i]
		if q.Limit <= 0 || q.Refill {
			continue
		}
		k := e.find(q.Partition, q.Limit)
		if k < 0 {
			continue
		}
		w := &e.windows[k]
		if served && q.Asked >= 0 {
			end := qs.Server().Add(q.Asked)
			if counted&(1<<k) == 0 {
				// Two policies alike (the same limit in two header
				// sets) are one window, counted once.
				counted |= 1 << k
				if !end.Equal(w.end) {
					w.end, w.instant, w.served, w.least = end, q.Instant, 0, -1
				}
				w.served++
			}
			if end.Equal(w.end) && q.Remaining >= 0 && (w.least < 0 || q.Remaining < w.least) {
				w.least = q.Remaining
			}
		}
		if !w.refuted && w.contradicted() {
			w.refuted, refuted = true, true
		}
		if w.refuted && q.Window == 0 {
			*q = header.Policy{Limit: -1, Remaining: -1, Reset: -1, Asked: -1, Partition: q.Partition}
		}
	}
	return refuted
}

// refuteAll refutes every policy counted: a hold one asked for was seen
// to admit (see proof). An advert read before now is not applied.
func (e *evidence) refuteAll() {
	for i := range e.windows[:e.n] {
		e.windows[i].refuted = true
	}
	e.refutedAt = e.checks
}

// find returns the index of the window of the policy (partition, limit),
// making one if there is room; -1 when every slot holds another policy.
func (e *evidence) find(partition string, limit int64) int {
	for i := range e.windows[:e.n] {
		if w := &e.windows[i]; w.partition == partition && w.limit == limit {
			return i
		}
	}
	if e.n == len(e.windows) {
		return -1
	}
	e.windows[e.n] = window{partition: partition, limit: limit}
	e.n++
	return e.n - 1
}

// holdThreshold is the shortest Retry-After that holds its key. A server
// that asks for 5 s or more has said what the breaker would need seconds
// of failures to learn, and every request to the key, not only the one
// answered, should wait. A shorter wait paces that one request, which its
// retry's delay obeys.
const holdThreshold = 5 * time.Second

// holds reports whether the response holds its route, or the whole key
// (see holdFor), until its wait ends: a long wait asked for, never past
// the clamp; or any wait a 429 asks for, since the server refuses the
// key's requests until then, not only this one's.
func (o Outcome) holds() bool {
	return o.Facts&RetryAfter != 0 && o.Wait > 0 && (o.Asked >= holdThreshold || o.Facts&TooMany != 0)
}

// Throttled reports a 429 among the adaptive rate's statuses: the host is
// up and asks for less, so the send rate, not a backoff, spaces the
// request's retries.
func (o Outcome) Throttled() bool { return o.Facts&(Throttles|TooMany) == Throttles|TooMany }

// cuts reports whether the response cuts the key's send rate: a status
// the send rate follows with no usable Retry-After, which is then the
// server's whole answer; or a 429 with a short one, which says when the
// next attempt may go, while the rate says how many may. A long one holds
// the key instead, and its requests return spread, as the server
// scheduled them.
func (o Outcome) cuts() bool {
	return o.Facts&Throttles != 0 && (o.Facts&RetryAfter == 0 || o.Facts&TooMany != 0 && o.Asked < holdThreshold)
}
