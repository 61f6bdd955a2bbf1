package retryhttp

import (
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/header"
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
	if r.t.noQuota {
		return false
	}
	return r.sampled || resp.StatusCode >= 300 || (r.lane != nil && r.lane.ReadsQuota())
}

// applyQuota reads the quota resp advertises and applies it to the
// request's key (its quota partition, with WithQuotaPartition), whose
// lane decides what it does to the key (perkey.Lane.Advertise). A cached response (Age above
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
	a, trs := l.Advertise(now, &qs, len(h["Retry-After"]) == 0 && len(h["Retry-After-Ms"]) == 0)
	if !a.HoldUntil.IsZero() {
		r.t.stats.quotaHeld.Add(1)
	}
	r.t.stats.quotas.Add(1)
	r.report(trs)
	if r.hooks.any() {
		v := l.View(now)
		fire(r.hooks, (*Hooks).quota, QuotaInfo{Request: r.req, Key: r.keyOf().String(), Quotas: quotasOf(a), Rate: v.Rate, HeldUntil: a.HoldUntil})
	}
}
