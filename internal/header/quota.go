package header

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// MaxPolicies bounds the policies kept from one response. The IETF examples
// carry up to four (a second, a minute, an hour and a day); the fields that
// describe the current state of a policy are read first, so they are the
// ones kept when a response advertises more.
const MaxPolicies = 4

// Policy is one quota policy a response advertises.
type Policy struct {
	Limit     int64         // requests per window (q, or X-RateLimit-Limit); -1 unknown
	Window    time.Duration // the policy's window (w); 0 unknown
	Remaining int64         // requests left in the current window (r); -1 unknown
	Reset     time.Duration // until the window resets (t), clamped; -1 unknown
	Clamped   bool          // the reset asked for more than the clamp
	Partition string        // pk, or GitHub's x-ratelimit-resource; "" for none

	// Asked is the reset before the clamp (saturated; -1 unknown). Rate
	// divides by it: divided by the clamp, 4,000 requests left for the
	// 50 minutes of GitHub's hour would read as 133 a second, not 1.3.
	Asked time.Duration
	// Refill reports a reset that is when the quota is full again (a
	// bucket refilling continuously: OpenAI, Anthropic), not the end of a
	// fixed window. Such a bucket refills at (limit-remaining)/reset, and
	// one request is free again after reset/limit, not after reset.
	Refill bool
	// Instant reports a reset sent as an instant (a Unix time or a date),
	// the same in every answer of one window; a reset sent as seconds to
	// go is known, against a Date in whole seconds, to a second either way.
	Instant bool
}

// Quotas is what one response advertises: up to four policies.
type Quotas struct {
	n    int
	list [MaxPolicies]Policy
	// clamp is the maxReset the resets were read with: Rate never paces
	// a key slower than one request per clamp, as no header may park a
	// request for longer than the clamp.
	clamp time.Duration
	// server is the response's own clock (its Date, or now without one):
	// server plus a quota's asked reset is when its window ends on the
	// server's clock, the same instant in every response of the window
	// when the reset is an epoch, which is how a window that is not
	// advertised is learned.
	server time.Time
}

// Len returns the number of policies, at most four.
func (qs *Quotas) Len() int { return qs.n }

// Policies returns the policies, in the order they were read; a caller
// may change them in place (a window learned from an earlier response).
func (qs *Quotas) Policies() []Policy { return qs.list[:qs.n] }

// Server returns the response's clock: its Date, or the caller's now
// without a valid one. It is set only when a policy with a limit does not
// advertise its window (the zero time otherwise): Server plus the policy's
// Asked reset is when its window ends on the server's clock, the same
// instant in every response of the window when the reset is a Unix time.
func (qs *Quotas) Server() time.Time { return qs.server }

// ReadQuotas reads the quotas that h advertises, measured from now (or
// from the response's Date); resets are clamped to maxReset.
//
// Header names match in any case. A response of a healthy key holds none
// of them, so the test that every response passes is one pass over the
// map comparing first letters: on a typical response of 8 headers it costs
// a third of looking up each of the 32 canonical names (BenchmarkReadQuotas,
// none against none/lookup_each_canonical_name), and finding the lowercase
// keys a map built by hand may hold would take as many lookups again.
//
// Malformed values are ignored. For the Structured Fields RateLimit and
// RateLimit-Policy that means the whole field, as both the draft
// ("Malformed RateLimit header fields MUST be ignored", §7 of
// draft-ietf-httpapi-ratelimit-headers-11) and RFC 9651 §4.2 (a failed
// parse ignores the entire field value) require: a member of the wrong
// type, or without its REQUIRED parameter, makes the field malformed.
// Unknown parameters are comments; a policy in a unit other than requests
// (qu="content-bytes") is valid but is not about requests, and is skipped.
func ReadQuotas(h http.Header, now time.Time, maxReset time.Duration) Quotas {
	for key := range h {
		if mayBeQuotaHeader(key) {
			return readQuotas(h, now, max(maxReset, 0))
		}
	}
	return Quotas{clamp: max(maxReset, 0)}
}

// readQuotas is ReadQuotas for a header that may hold quotas: its large
// frame is not zeroed for the responses that hold none.
func readQuotas(h http.Header, now time.Time, maxReset time.Duration) Quotas {
	r := quotaReader{h: h, now: now, qs: Quotas{clamp: maxReset}}
	r.keys.collect(h)
	if r.has(hRateLimit, hAnthropicLimit) {
		r.readIETF()
	}
	if r.has(hXLimit, hXOpenAILimit) {
		r.readXRateLimit()
	}
	r.readVendors()
	for _, q := range r.qs.list[:r.qs.n] {
		if q.Window == 0 && q.Limit > 0 {
			// Server: the caller learns the window from it.
			r.qs.server = r.serverTime()
			break
		}
	}
	return r.qs
}

// mayBeQuotaHeader reports a name that starts as one ReadQuotas reads
// does, in any case: RateLimit*, Anthropic*, X-Rate*, X-Ms-R*, X-Shop*.
func mayBeQuotaHeader(key string) bool {
	if len(key) < len("ratelimit") {
		return false
	}
	switch key[0] | 0x20 {
	case 'r':
		return strings.EqualFold(key[:9], "ratelimit")
	case 'a':
		return strings.EqualFold(key[:9], "anthropic")
	case 'x':
		return key[1] == '-' && (strings.EqualFold(key[2:6], "rate") ||
			strings.EqualFold(key[2:6], "ms-r") || strings.EqualFold(key[2:6], "shop"))
	}
	return false
}

// Exhausted reports the wait before the key may send again, when a policy
// has no request left and a known reset: the longest such wait, and that
// policy's partition. For a refilling bucket the wait is the time one
// request takes to refill. A reset of zero asks for no wait.
func (qs *Quotas) Exhausted() (reset time.Duration, partition string, ok bool) {
	for _, q := range qs.list[:qs.n] {
		if q.Remaining != 0 || q.Reset <= 0 {
			continue
		}
		wait := q.Reset
		if q.Refill && q.Limit > 0 {
			// Rounded up, so at least 1 ns: asked >= reset > 0.
			one := q.Asked / time.Duration(q.Limit)
			if q.Asked%time.Duration(q.Limit) != 0 {
				one++
			}
			wait = min(wait, one)
		}
		if !ok || wait > reset {
			reset, partition, ok = wait, q.Partition, true
		}
	}
	return reset, partition, ok
}

// Rate returns the tightest rate the policies sustain: the least, over
// the policies, of limit/window, or, for a policy whose window is not
// known, of remaining/reset (for a refilling bucket,
// (limit-remaining)/reset, the rate it refills at). burst is the
// least remaining among the policies, at least 1 (1 when none is known):
// the server's own count, which Exhausted then enforces, bounds what a
// burst spends. ok is false when no policy gives a rate, or when the clamp
// is zero (the caller does not wait for servers).
//
// Every division is guarded: a term is used only when both its numerator
// and its denominator are positive, so the result is finite and positive.
// A policy with none left gives no rate (Exhausted holds the key
// instead), and a zero quota gives none either. The rate is never below
// one request per clamp, so no header can stall a key for longer than the
// clamp allows a Retry-After to.
//
// A long window counts as much as a short one: "daily";q=1000;w=86400
// paces the key at one request every 86 s (raised to one per clamp), the
// rate at which the day's quota never runs out, however few requests the
// key has left to send; the burst spends what is left at once, so a batch
// smaller than it is not paced at all.
func (qs *Quotas) Rate() (perSecond float64, burst int, ok bool) {
	if qs.clamp <= 0 {
		return 0, 0, false
	}
	perSecond = math.Inf(1)
	counted := false // a policy has told its remaining
	for _, q := range qs.list[:qs.n] {
		switch {
		case q.Limit > 0 && q.Window > 0:
			// The window's own rate. Its remaining over its reset would
			// say the same of a window spent evenly, but the reset comes
			// in whole seconds (delta-seconds, or epoch seconds against a
			// Date to the second): a 1 s window half spent reads as 50
			// left in 1 s, not in half a second, and pacing by it would
			// send half the quota.
			perSecond = min(perSecond, float64(q.Limit)/q.Window.Seconds())
		case q.Asked <= 0:
		case q.Refill && q.Remaining >= 0 && q.Limit > q.Remaining:
			perSecond = min(perSecond, float64(q.Limit-q.Remaining)/q.Asked.Seconds())
		case !q.Refill && q.Remaining > 0:
			perSecond = min(perSecond, float64(q.Remaining)/q.Asked.Seconds())
		}
		if q.Remaining >= 0 && (!counted || q.Remaining < int64(burst)) {
			burst, counted = int(min(q.Remaining, math.MaxInt)), true
		}
	}
	if math.IsInf(perSecond, 1) {
		return 0, 0, false
	}
	return max(perSecond, 1/qs.clamp.Seconds()), max(burst, 1), true
}

// The headers ReadQuotas reads, lowercase, grouped by first letter.
const (
	hRateLimit = iota
	hRateLimitPolicy
	hRateLimitLimit     // drafts -00 to -06
	hRateLimitRemaining // drafts -00 to -06
	hRateLimitReset     // drafts -00 to -06
	hRateLimitObserved  // GitLab
	hRateLimitResetTime // GitLab
	hAnthropicLimit
	hAnthropicRemaining
	hAnthropicReset
	hXLimit
	hXRemaining
	hXReset
	hXUsed       // GitHub
	hXResource   // GitHub
	hXResetAfter // Discord
	hXBucket     // Discord
	hXDelay      // Azure DevOps
	hXTwLimit    // Twitter/X
	hXTwRemaining
	hXTwReset
	hXTwDuration // didip/tollbooth
	hXOpenAILimit
	hXOpenAIRemaining
	hXOpenAIReset
	hXShopify
	hXAzure // the first of the Azure Resource Manager names, in azureScopes' order
	hCount  = hXAzure + len(azureScopes)
)

// azureScopes are the scopes of Azure Resource Manager's
// x-ms-ratelimit-remaining-<scope> headers, each one partition
// (https://learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling).
var azureScopes = [...]string{
	"subscription-reads", "subscription-writes", "subscription-deletes",
	"tenant-reads", "tenant-writes",
	"subscription-resource-requests", "subscription-resource-entities-read",
}

var quotaHeaderNames = func() (n [hCount]string) {
	copy(n[:], []string{
		"ratelimit", "ratelimit-policy", "ratelimit-limit", "ratelimit-remaining",
		"ratelimit-reset", "ratelimit-observed", "ratelimit-resettime",
		"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining",
		"anthropic-ratelimit-requests-reset",
		"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
		"x-ratelimit-used", "x-ratelimit-resource", "x-ratelimit-reset-after",
		"x-ratelimit-bucket", "x-ratelimit-delay",
		"x-rate-limit-limit", "x-rate-limit-remaining", "x-rate-limit-reset", "x-rate-limit-duration",
		"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
		"x-ratelimit-reset-requests", "x-shopify-shop-api-call-limit",
	})
	for i, s := range azureScopes {
		n[hXAzure+i] = "x-ms-ratelimit-remaining-" + s
	}
	return n
}()

// quotaKeys holds the map key each header is under, "" when absent.
type quotaKeys [hCount]string

// collect finds the keys in one pass over h. When two spellings of one
// name are both present (a map built by hand), the one that sorts first
// wins, the same one every time.
func (k *quotaKeys) collect(h http.Header) {
	for key := range h {
		if !mayBeQuotaHeader(key) {
			continue
		}
		lo, hi := 0, 0
		switch key[0] | 0x20 {
		case 'r':
			lo, hi = hRateLimit, hAnthropicLimit
		case 'a':
			lo, hi = hAnthropicLimit, hXLimit
		case 'x':
			lo, hi = hXLimit, hCount
		}
		for i := lo; i < hi; i++ {
			if len(key) == len(quotaHeaderNames[i]) && strings.EqualFold(key, quotaHeaderNames[i]) {
				if k[i] == "" || key < k[i] {
					k[i] = key
				}
				break
			}
		}
	}
}

// quotaReader accumulates the quotas of one response.
type quotaReader struct {
	h      http.Header
	now    time.Time
	keys   quotaKeys
	server time.Time // the response's clock, read when an epoch reset needs it
	dated  bool
	qs     Quotas
}

// has reports whether any header of the range [lo, hi) is present.
func (r *quotaReader) has(lo, hi int) bool {
	for _, k := range r.keys[lo:hi] {
		if k != "" {
			return true
		}
	}
	return false
}

// value returns the first line of header i, as Header.Get would: a field
// defined as a single value that a response repeats is read as its first.
func (r *quotaReader) value(i int) (string, bool) {
	if r.keys[i] == "" {
		return "", false
	}
	if vs := r.h[r.keys[i]]; len(vs) > 0 {
		return trimOWS(vs[0]), true
	}
	return "", false
}

// count reads header i as a count (a zero fraction allowed: parseWhole);
// -1 when absent, negative or malformed.
// Negative counts are the -1 that Azure OpenAI sends for a limit it does
// not track in OpenAI's headers
// (https://learn.microsoft.com/en-us/answers/questions/5625878/azure-openai-responses-api-x-ratelimit-headers-val),
// and the limit-rate that go-chi/httprate v0.16.1 sends with a 429 whose
// Retry-After already holds the key.
func (r *quotaReader) count(i int) int64 {
	v, _ := r.value(i)
	if n, ok := parseWhole(v); ok {
		return n
	}
	return -1
}

// serverTime is the response's clock (serverNow), read at most once.
func (r *quotaReader) serverTime() time.Time {
	if !r.dated {
		r.server, r.dated = serverNow(r.h, r.now), true
	}
	return r.server
}

// resetAt reads a reset field that holds a Unix time, seconds until the
// reset or an HTTP date (see parseDate), and records it on q. A number
// below half the server's clock in Unix seconds is delta seconds: as a
// Unix time it would be decades past, no instant a server could mean for
// a window still running (Unipile and throttled/throttled v2 send a
// delta under X-RateLimit-Reset, unmarked), while a delta that large is
// decades ahead, past any clamp. A larger number is a Unix time, and a
// date an instant, both measured on the server's clock. An unreadable
// value leaves q as it was.
func (r *quotaReader) resetAt(q *Policy, v string) {
	sec, nsec, ok := parseSeconds(v)
	switch {
	case ok && sec < r.serverTime().Unix()/2:
		r.setReset(q, satSeconds(sec, nsec))
	case ok:
		r.setReset(q, r.epoch(sec, nsec))
		q.Instant = true
	default:
		if t, ok := parseDate(v); ok {
			r.setReset(q, t.Sub(r.serverTime()))
			q.Instant = true
		}
	}
}

// epoch returns the time until a Unix time read by parseSeconds, measured
// on the server's clock; a past instant is now.
func (r *quotaReader) epoch(sec, nsec int64) time.Duration {
	now := r.serverTime()
	ns := now.Unix()
	if ns < 0 && sec > math.MaxInt64+ns {
		return math.MaxInt64
	}
	return satSeconds(sec-ns, nsec-int64(now.Nanosecond()))
}

// setReset records a reset d (negative: past, so now) and clamps it.
func (r *quotaReader) setReset(q *Policy, d time.Duration) {
	d = max(d, 0)
	q.Asked, q.Reset = d, d
	if d > r.qs.clamp {
		q.Reset, q.Clamped = r.qs.clamp, true
	}
}

// add keeps q if it carries anything and there is room; it returns q's
// index, or -1.
func (r *quotaReader) add(q Policy) int {
	if q.Limit < 0 && q.Remaining < 0 && q.Reset < 0 || r.qs.n == MaxPolicies {
		return -1
	}
	r.qs.list[r.qs.n] = q
	r.qs.n++
	return r.qs.n - 1
}

// unknownQuota is a quota of which nothing is known yet.
func unknownQuota() Policy { return Policy{Limit: -1, Remaining: -1, Reset: -1, Asked: -1} }
