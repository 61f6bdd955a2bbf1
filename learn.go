package retryhttp

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/header"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// quotaSample: past its first quotaFirst successes, a key that has never
// advertised a quota has the response of one first attempt in this many
// read for one (per stripe of the requests counter, the first of each
// stripe included), as well as every response that is not a success. So a
// key whose server starts advertising is found within a few dozen
// requests, or at its first 429, and a key that never does pays one header
// scan per quotaSample requests: about 1.5 ns a request on a typical
// response, where reading every one would cost 90.
const quotaSample = 64

// readsQuota reports whether resp is read for the quota it advertises:
// every response that is not a success, every response the key's lane
// reads (perkey.Lane.ReadsQuota), and a sample of the rest.
func (r *retrier) readsQuota(resp *http.Response) bool {
	if len(r.s.throttleOn) == 0 { // WithAdaptiveRate(): nothing shapes the send rate
		return false
	}
	return r.sampled || resp.StatusCode >= 300 || (r.lane != nil && r.lane.ReadsQuota())
}

// applyQuota reads the quota resp advertises and applies it to the
// request's key, whose lane decides what it does to the key (perkey.Lane.Advertise). A cached response (Age above
// zero) tells what the server counted when it was made, not now, and
// changes nothing.
func (r *retrier) applyQuota(resp *http.Response) {
	h := resp.Header
	if age := h["Age"]; len(age) > 0 && age[0] != "0" {
		return
	}
	now := time.Now()
	qs := header.ReadQuotas(h, now, r.s.maxRetryAfter)
	if qs.Len() == 0 {
		return
	}
	l := r.laneOf()
	share := 1.0
	if b := r.t.breaker; b != nil && b.shared() {
		if _, _, paces := qs.Rate(); paces {
			share = b.quotaShare(r.keyOf().String())
		}
	}
	a, trs := l.Advertise(now, &qs, len(h["Retry-After"]) == 0 && len(h["Retry-After-Ms"]) == 0, resp.StatusCode/100 == 2, share)
	if !a.HoldUntil.IsZero() {
		r.t.stats.quota.held.Add(1)
	}
	r.t.stats.quota.count.Add(1)
	r.report(trs)
	if r.hooks.any() {
		v := l.View(now)
		fire(r.hooks, (*Hooks).quota, Event{Request: r.req, Key: r.keyOf().String(), Rate: v.Rate, HeldUntil: a.HoldUntil})
	}
}

// clock is the slow-call rule's part of a request: whether the request
// is one of the sample whose attempts are timed even if its key is not
// watched, and the timing of its latest attempt, while it waits for
// judgeTime.
//
// An attempt that ends because its caller's context ended says, on its
// own, nothing about the host: classify gives it no outcome. Yet a host
// that accepts connections and never answers leaves its callers nothing
// else to see, and with no attempt timeout (none by default) its circuit
// would never open: every caller would wait its whole deadline, with a
// connection held, however long the outage. So the transport times
// attempts of requests whose context can end, and counts one as a failure
// of its key when it was sent, got no response headers before the
// caller's context ended, and ran longer than the key's slow-call
// threshold (see perkey.Lane.Clocked): BreakerConfig.SlowAfter, and twice the
// key's answer time, which the timed successes feed.
//
// Two reads of the clock cost as much as the rest of a successful
// request's way through the transport, so the attempts timed are those
// of one request in timeSample, which keeps a key's answer time known,
// and every attempt to a key that is watched: one whose callers have
// given up on an attempt within the last perkey.WatchFor. A hung host is
// judged on every attempt from its callers' first give-ups on (and on the
// sampled ones among the first), while a key whose callers never give up
// costs a request nothing but a counter it already increments and one
// atomic load. A request whose context cannot end (the Background
// context) and whose attempts have no timeout is never timed: it never
// ends this way, and has no answer to time but its successes'; with an
// attempt timeout, its successes feed the answer time. Nor is one through
// a transport without a breaker, which has no circuit to tell. Timing
// takes no lock, allocation or goroutine.
//
// Only a deadline blames the host, and only for a request with no body:
// see blames.
type clock struct {
	sampled bool
	timed   bool // call holds the latest attempt's timing
	call    perkey.Call
}

// judgeTime applies what the latest attempt's time says to its verdict,
// once classify has given it: the key's lane judges a timed attempt
// (perkey.Lane.Clocked), and one that got no answer before its caller's
// deadline passed, after longer than the key's slow-call threshold,
// becomes a failure of the key if blames says so (still not retried: the
// caller has gone). Any attempt that its caller gave up on starts, or
// prolongs, its key's watch.
func (r *retrier) judgeTime(v *verdict) {
	if r.clock.timed || v.why == ReasonContextDone {
		r.judgeTimed(v) // the untimed success path stops at two checks, inlined
	}
}

func (r *retrier) judgeTimed(v *verdict) {
	if !r.clock.timed {
		if r.s.slowCalls && r.lane != nil {
			r.lane.Watch(time.Now())
		}
		return
	}
	r.clock.timed = false
	gaveUp := v.why == ReasonContextDone
	if r.lane.Clocked(r.clock.call, v.host, gaveUp, gaveUp && r.blames()) {
		v.host = perkey.Failure
		r.t.stats.slowAttempts.Add(1)
	}
}

// blames reports whether the end of the caller's context, with no answer,
// can say anything against the host: its deadline passed (a cancellation
// may be the caller's own business: a hedged request won elsewhere, a
// sibling in an errgroup failed), and the request had no body to send
// (the wait may have gone into the caller's own slow upload, which the
// host was still reading).
func (r *retrier) blames() bool {
	return (r.req.Body == nil || r.req.Body == http.NoBody) &&
		errors.Is(r.req.Context().Err(), context.DeadlineExceeded)
}

// learn tells the key what the latest attempt's outcome, as classify
// judged it in v, says of it: the attempt's time (which may make v a
// failure of the key), the quota its response advertises, and its success
// or failure; a failure's response is kept in r.fail.
//
// verdict keeps to four fields, so that the compiler keeps the verdict of
// the success path in registers.
func (r *retrier) learn(v *verdict, resp *http.Response) {
	r.judgeTime(v)
	if resp != nil && r.readsQuota(resp) {
		r.applyQuota(resp)
	}
	if v.success() {
		r.record(*v, 0)
		return
	}
	r.fail = r.recordFailure(*v, resp)
}

// failure is what a failed attempt's response asked of its key: the wait
// its Retry-After asked for, and whether it was throttled
// (perkey.Outcome.Throttled), so that its retry takes no budget token and
// waits for the key's send rate after its delay (see delay).
type failure struct {
	wait      header.Wait
	throttled bool
}

// record tells the key what the latest attempt's outcome says about it,
// through the ticket that admitted the attempt: for an outcome that is not
// a retryable response, all there is to tell (recordFailure tells the
// rest).
func (r *retrier) record(v verdict, f perkey.Facts) {
	if r.adm.ok {
		r.adm.ok = false
		r.report(r.lane.Done(r.adm.ticket, perkey.Outcome{Kind: v.host, Facts: f}))
	}
}

// recordFailure records a failed attempt and returns the wait its
// response asks for. A retryable response's Retry-After is counted whether
// or not a retry follows (a rising rate is the early sign that a tenant is
// rate-limiting the caller); the key hears of the rest through the
// outcome: its circuit, its hold and its send rate (see perkey.Outcome).
func (r *retrier) recordFailure(v verdict, resp *http.Response) failure {
	if !v.retry || resp == nil {
		var f perkey.Facts
		if v.reach == notThere {
			f = perkey.Unreached
		}
		r.record(v, f)
		return failure{}
	}
	w := header.RetryAfter(resp.Header, time.Now(), r.s.maxRetryAfter)
	if w.Seen {
		r.t.stats.retryAfter.seen.Add(1)
	}
	if w.Clamped {
		r.t.stats.retryAfter.clamped.Add(1)
	}
	o := perkey.Outcome{Kind: v.host, Wait: w.Duration, Asked: w.Asked, Route: r.route()}
	if throttles(r.s.throttleOn, resp.StatusCode) {
		o.Facts |= perkey.Throttles
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		o.Facts |= perkey.TooMany
	}
	if w.OK {
		o.Facts |= perkey.RetryAfter
	}
	if r.adm.ok {
		r.adm.ok = false
		r.report(r.lane.Done(r.adm.ticket, o))
	} else if l, trs := r.t.lanes.Heard(r.keyOf(), o); l != nil {
		// Sent before its key had a lane: its hold and send rate hear of it.
		r.lane = l
		r.report(trs)
	}
	return failure{wait: w, throttled: o.Throttled()}
}

func throttles(statuses []int, status int) bool {
	for _, s := range statuses {
		if s == status {
			return true
		}
	}
	return false
}
