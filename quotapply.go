package retryhttp

import (
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

// quotaShare is the share of an advertised rate that a key is paced at. A
// window's reset comes in whole seconds and the client's clock is not the
// server's, so a key paced at the full rate sends some window one request
// more than its quota, answered 429; a twentieth below it, no window gets
// more, and a batch takes a twentieth longer.
const quotaShare = 0.95

// readsQuota reports whether resp is read for the quota it advertises:
// every response that is not a success, every response the key's lane
// reads (perkey.Lane.ReadsQuota), and a sample of the rest.
func (r *retrier) readsQuota(resp *http.Response) bool {
	if r.t.noQuota {
		return false
	}
	return r.sampled || resp.StatusCode >= 300 || (r.lane != nil && r.lane.ReadsQuota())
}

// applyQuota reads the quota resp advertises and applies it to the
// request's key (its quota partition, with WithQuotaPartition): a policy
// with nothing left holds the key until its reset, unless the response
// says when to come back itself (Retry-After wins), and the rate the
// policies sustain caps the key's send rate. A cached response (Age above
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
	learnWindows(&qs, l.Advertised())
	a := perkey.Advert{At: now, N: qs.Len()}
	if rate, burst, ok := qs.Rate(); ok {
		a.Rate, a.Left = quotaShare*rate, burst
	}
	for i, q := range qs.Policies() {
		p := perkey.Policy{Partition: q.Partition, Limit: q.Limit, Window: q.Window, Remaining: q.Remaining}
		if q.Reset >= 0 {
			p.Reset = now.Add(q.Reset)
			p.ServerReset = qs.Server().Add(q.Asked)
			if a.For == 0 || q.Reset < a.For {
				a.For = q.Reset
			}
		}
		a.Policies[i] = p
	}
	if reset, _, ok := qs.Exhausted(); ok && len(h["Retry-After"]) == 0 && len(h["Retry-After-Ms"]) == 0 {
		a.HoldUntil = now.Add(reset)
		r.t.stats.quotaHeld.Add(1)
	}
	r.t.stats.quotas.Add(1)
	r.report(l.Advertise(a))
	if r.hooks.any() {
		v := l.View(now)
		fire(r.hooks, (*Hooks).quota, QuotaInfo{Request: r.req, Key: r.keyOf().String(), Quotas: quotasOf(a), Rate: v.Rate, HeldUntil: a.HoldUntil})
	}
}

// learnWindows fills in the window of a policy that does not advertise
// one (X-RateLimit-Limit, -Remaining and -Reset say nothing of it) from
// the key's previous answer: a window that has ended moves the reset, on
// the server's clock, by the window's length; the shortest move seen is
// kept. Without it the policy's rate would be its remaining over its
// reset, which a reset in whole seconds reads far too low, and a sliding
// window (go-chi/httprate) lower still.
func learnWindows(qs *header.Quotas, prev perkey.Advert) {
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
