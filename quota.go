package retryhttp

import (
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// maxQuotas bounds the policies kept from one response. The IETF examples
// carry up to four (a second, a minute, an hour and a day); the fields that
// describe the current state of a policy are read first, so they are the
// ones kept when a response advertises more.
const maxQuotas = 4

// quota is one quota policy a response advertises.
type quota struct {
	limit     int64         // requests per window (q, or X-RateLimit-Limit); -1 unknown
	window    time.Duration // the policy's window (w); 0 unknown
	remaining int64         // requests left in the current window (r); -1 unknown
	reset     time.Duration // until the window resets (t), clamped; -1 unknown
	clamped   bool          // the reset asked for more than the clamp
	partition string        // pk, or GitHub's x-ratelimit-resource; "" for none

	// asked is the reset before the clamp (saturated; -1 unknown). rate()
	// divides by it: divided by the clamp, 4,000 requests left for the
	// 50 minutes of GitHub's hour would read as 133 a second, not 1.3.
	asked time.Duration
	// refill reports a reset that is when the quota is full again (a
	// bucket refilling continuously: OpenAI, Anthropic), not the end of a
	// fixed window. Such a bucket refills at (limit-remaining)/reset, and
	// one request is free again after reset/limit, not after reset.
	refill bool
}

// quotas is what one response advertises: up to maxQuotas policies.
type quotas struct {
	n    int
	list [maxQuotas]quota
	// clamp is the maxReset the resets were read with: rate() never paces
	// a key slower than one request per clamp, as no header may park a
	// request for longer than the clamp.
	clamp time.Duration
}

// parseQuotas reads the quotas that h advertises, measured from now (or
// from the response's Date); resets are clamped to maxReset.
//
// Header names match in any case. A response of a healthy key holds none
// of them, so the test that every response passes is one pass over the
// map comparing first letters: on a typical response of 8 headers it costs
// a third of looking up each of the 32 canonical names (BenchmarkParseQuotas,
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
func parseQuotas(h http.Header, now time.Time, maxReset time.Duration) quotas {
	for key := range h {
		if mayBeQuotaHeader(key) {
			return readQuotas(h, now, max(maxReset, 0))
		}
	}
	return quotas{clamp: max(maxReset, 0)}
}

// readQuotas is parseQuotas for a header that may hold quotas: its large
// frame is not zeroed for the responses that hold none.
func readQuotas(h http.Header, now time.Time, maxReset time.Duration) quotas {
	r := quotaReader{h: h, now: now, qs: quotas{clamp: maxReset}}
	r.keys.collect(h)
	if r.has(hRateLimit, hAnthropicLimit) {
		r.readIETF()
	}
	if r.has(hXLimit, hXOpenAILimit) {
		r.readXRateLimit()
	}
	r.readVendors()
	return r.qs
}

// mayBeQuotaHeader reports a name that starts as one parseQuotas reads
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

// exhausted reports the wait before the key may send again, when a policy
// has no request left and a known reset: the longest such wait, and that
// policy's partition. For a refilling bucket the wait is the time one
// request takes to refill. A reset of zero asks for no wait.
func (qs quotas) exhausted() (reset time.Duration, partition string, ok bool) {
	for _, q := range qs.list[:qs.n] {
		if q.remaining != 0 || q.reset <= 0 {
			continue
		}
		wait := q.reset
		if q.refill && q.limit > 0 {
			// Rounded up, so at least 1 ns: asked >= reset > 0.
			one := q.asked / time.Duration(q.limit)
			if q.asked%time.Duration(q.limit) != 0 {
				one++
			}
			wait = min(wait, one)
		}
		if !ok || wait > reset {
			reset, partition, ok = wait, q.partition, true
		}
	}
	return reset, partition, ok
}

// rate returns the tightest rate the policies sustain: the least, over
// the policies, of limit/window and of remaining/reset (for a refilling
// bucket, (limit-remaining)/reset, the rate it refills at). burst is the
// least remaining among the policies, at least 1 (1 when none is known):
// the server's own count, which exhausted() then enforces, bounds what a
// burst spends. ok is false when no policy gives a rate, or when the clamp
// is zero (the caller does not wait for servers).
//
// Every division is guarded: a term is used only when both its numerator
// and its denominator are positive, so the result is finite and positive.
// A policy with none left gives no rate (exhausted() holds the key
// instead), and a zero quota gives none either. The rate is never below
// one request per clamp, so no header can stall a key for longer than the
// clamp allows a Retry-After to.
//
// A long window counts as much as a short one: "daily";q=1000;w=86400
// paces the key at one request every 86 s (raised to one per clamp), the
// rate at which the day's quota never runs out, however few requests the
// key has left to send. The draft calls w informative (its FAQ), and
// remaining/reset alone describe the current window; a caller that would
// rather spend a long window's quota in bursts reads the list itself.
func (qs quotas) rate() (perSecond float64, burst int, ok bool) {
	if qs.clamp <= 0 {
		return 0, 0, false
	}
	perSecond = math.Inf(1)
	counted := false // a policy has told its remaining
	for _, q := range qs.list[:qs.n] {
		if q.limit > 0 && q.window > 0 {
			perSecond = min(perSecond, float64(q.limit)/q.window.Seconds())
		}
		switch {
		case q.asked <= 0:
		case q.refill && q.remaining >= 0 && q.limit > q.remaining:
			perSecond = min(perSecond, float64(q.limit-q.remaining)/q.asked.Seconds())
		case !q.refill && q.remaining > 0:
			perSecond = min(perSecond, float64(q.remaining)/q.asked.Seconds())
		}
		if q.remaining >= 0 && (!counted || q.remaining < int64(burst)) {
			burst, counted = int(min(q.remaining, math.MaxInt)), true
		}
	}
	if math.IsInf(perSecond, 1) {
		return 0, 0, false
	}
	return max(perSecond, 1/qs.clamp.Seconds()), max(burst, 1), true
}

// The headers parseQuotas reads, lowercase, grouped by first letter.
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
		"x-rate-limit-limit", "x-rate-limit-remaining", "x-rate-limit-reset",
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
	qs     quotas
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

// count reads header i as a count; -1 when absent, negative or malformed.
// Negative counts are the -1 that Azure OpenAI sends for a limit it does
// not track in OpenAI's headers
// (https://learn.microsoft.com/en-us/answers/questions/5625878/azure-openai-responses-api-x-ratelimit-headers-val),
// and the limit-rate that go-chi/httprate v0.16.1 sends with a 429 whose
// Retry-After already holds the key.
func (r *quotaReader) count(i int) int64 {
	v, _ := r.value(i)
	if n, ok := parseCount(v); ok {
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
func (r *quotaReader) setReset(q *quota, d time.Duration) {
	d = max(d, 0)
	q.asked, q.reset = d, d
	if d > r.qs.clamp {
		q.reset, q.clamped = r.qs.clamp, true
	}
}

// add keeps q if it carries anything and there is room; it returns q's
// index, or -1.
func (r *quotaReader) add(q quota) int {
	if q.limit < 0 && q.remaining < 0 && q.reset < 0 || r.qs.n == maxQuotas {
		return -1
	}
	r.qs.list[r.qs.n] = q
	r.qs.n++
	return r.qs.n - 1
}

// unknownQuota is a quota of which nothing is known yet.
func unknownQuota() quota { return quota{limit: -1, remaining: -1, reset: -1, asked: -1} }

// parseCount reads 1*DIGIT, saturating at the largest int64. A sign, a
// fraction or anything else is malformed.
func parseCount(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		if d := int64(v[i] - '0'); n <= (math.MaxInt64-d)/10 {
			n = n*10 + d
		} else {
			n = math.MaxInt64 // and stays there, while the rest is checked
		}
	}
	return n, true
}

// parseSeconds reads seconds with an optional fraction ("1470173023.123",
// as Discord sends them), saturating.
func parseSeconds(v string) (sec, nsec int64, ok bool) {
	whole, frac, _ := strings.Cut(v, ".")
	sec, ok = parseCount(whole)
	if !ok || !allDigits(frac) {
		return 0, 0, false
	}
	for i, scale := 0, int64(1e8); i < len(frac) && scale > 0; i, scale = i+1, scale/10 {
		nsec += int64(frac[i]-'0') * scale
	}
	return sec, nsec, true
}

// satSeconds returns sec seconds plus nsec nanoseconds (|nsec| < 2e9),
// saturating at the largest Duration; the result may be negative.
func satSeconds(sec, nsec int64) time.Duration {
	const maxSec = math.MaxInt64/int64(time.Second) - 2
	switch {
	case sec > maxSec:
		return math.MaxInt64
	case sec < -maxSec:
		return math.MinInt64 / 2
	}
	return time.Duration(sec)*time.Second + time.Duration(nsec)
}

func trimOWS(s string) string { return strings.Trim(s, " \t") }

// seconds is n seconds, saturating.
func seconds(n int64) time.Duration { return satSeconds(n, 0) }

// readIETF reads the RateLimit fields of every draft of
// draft-ietf-httpapi-ratelimit-headers: the Lists of -08 to -12
// (RateLimit: "burst";r=50;t=30, joined by name with RateLimit-Policy:
// "burst";q=100;w=60), the Dictionary of -07 (RateLimit: limit=100,
// remaining=50, reset=5, with RateLimit-Policy: 100;w=60), and the separate
// RateLimit-Limit, -Remaining and -Reset (delta seconds) of -00 to -06.
// GitLab sends those three with a Unix time as the reset, and marks them
// with RateLimit-Observed and RateLimit-ResetTime; its limit is per minute
// (https://docs.gitlab.com/ee/user/admin_area/settings/user_and_ip_rate_limits.html).
func (r *quotaReader) readIETF() {
	var pol [2 * maxQuotas]sfPolicy
	np, _ := parseSFPolicies(r.joined(hRateLimitPolicy), true, pol[:])
	var cur [maxQuotas]sfPolicy
	unnamed := [2]int{-1, -1} // the quotas of -07's Dictionary and of -00 to -06
	rl := r.joined(hRateLimit)
	if nc, ok := parseSFPolicies(rl, false, cur[:]); ok {
		for _, c := range cur[:nc] {
			q := unknownQuota()
			q.remaining, q.partition = c.r, c.pk
			if c.t >= 0 {
				r.setReset(&q, seconds(c.t))
			}
			if p := findPolicy(pol[:np], c.name); p != nil {
				p.used = true
				if p.other {
					continue // its r counts some other unit
				}
				q.limit, q.window = p.q, seconds(max(p.w, 0))
				if q.partition == "" {
					q.partition = p.pk
				}
			}
			r.add(q)
		}
	} else if limit, remaining, reset, ok := parseDraft7(rl); ok {
		q := unknownQuota()
		q.limit, q.remaining = limit, remaining
		r.setReset(&q, seconds(reset))
		unnamed[0] = r.add(q)
	}

	q := unknownQuota()
	if v, ok := r.value(hRateLimitLimit); ok {
		q.limit, q.window, _ = parseLimit(v)
	}
	q.remaining = r.count(hRateLimitRemaining)
	gitlab := r.keys[hRateLimitObserved] != "" || r.keys[hRateLimitResetTime] != ""
	if v, _ := r.value(hRateLimitReset); gitlab {
		if sec, nsec, ok := parseSeconds(v); ok {
			r.setReset(&q, r.epoch(sec, nsec))
		}
		if q.limit >= 0 && q.window == 0 {
			q.window = time.Minute
		}
	} else if d, ok := parseDeltaSeconds(v); ok && v != "" {
		r.setReset(&q, d)
	}
	unnamed[1] = r.add(q)

	// The policies that no RateLimit member named: -07's Integer members
	// give the window of the quota whose limit they equal, or stand alone.
	for _, p := range pol[:np] {
		if p.used || p.other {
			continue
		}
		if p.num >= 0 {
			if i := r.unnamedWithLimit(unnamed, p.num); i >= 0 {
				r.qs.list[i].window = seconds(p.w)
				continue
			}
			p.q = p.num
		}
		q := unknownQuota()
		q.limit, q.window, q.partition = p.q, seconds(max(p.w, 0)), p.pk
		r.add(q)
	}
}

// unnamedWithLimit returns the index of the quota among idx whose limit is
// limit and whose window is unknown, or -1.
func (r *quotaReader) unnamedWithLimit(idx [2]int, limit int64) int {
	for _, i := range idx {
		if i >= 0 && r.qs.list[i].limit == limit && r.qs.list[i].window == 0 {
			return i
		}
	}
	return -1
}

// joined returns the lines of header i combined as RFC 9651 §4.2 says:
// joined by commas (empty lines, which carry no member, skipped). A
// repeated field allocates once; a single line not at all.
func (r *quotaReader) joined(i int) string {
	if r.keys[i] == "" {
		return ""
	}
	lines, size, last := r.h[r.keys[i]], 0, ""
	for _, v := range lines {
		if v = trimOWS(v); v != "" {
			size, last = size+len(v)+2, v
		}
	}
	if size <= len(last)+2 { // one line, or none
		return last
	}
	var b strings.Builder
	b.Grow(size)
	for _, v := range lines {
		if v = trimOWS(v); v != "" {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(v)
		}
	}
	return b.String()
}

// readXRateLimit reads the X-RateLimit-* headers and Twitter/X's
// X-Rate-Limit-*.
//
// X-RateLimit-Reset is taken as a Unix time unless the header set says
// otherwise. It is one at GitHub, which marks its responses with
// x-ratelimit-resource and x-github-request-id
// (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api),
// at Twitter/X, whose names are x-rate-limit-*
// (https://docs.x.com/fundamentals/rate-limits), in go-chi/httprate
// v0.16.1, which marks nothing (its limiter.go sends
// currentWindow.Add(windowLength).Unix()), and at many other APIs
// (Smartsheet, DevRev, GitBook). It is delta seconds at servers that follow
// the first IETF drafts under an X- prefix, whose X-RateLimit-Limit lists
// policies ("100, 100;window=60":
// https://developer.whoop.com/docs/developing/rate-limiting), and Discord's
// X-RateLimit-Reset-After, delta seconds, takes precedence over its Unix
// time (https://discord.com/developers/docs/topics/rate-limits).
//
// Elsewhere nothing tells, and the value's size is not the rule. Read as a
// Unix time, a delta (Unipile sends one, unmarked) is an instant of 1970:
// past, so the reset is now; the key is not held, and a 429 with its
// Retry-After still stops it, as if the header were absent. Read as a
// delta, a Unix time is 56 years, clamped: a key with requests left would
// be paced at one request per clamp, and held for the clamp at zero. The
// first mistake costs what a missing header costs; the second stalls a
// healthy key. So a Unix time it is.
//
// Azure DevOps counts X-RateLimit-* in TSTUs, not requests, and marks its
// responses with X-RateLimit-Delay
// (https://learn.microsoft.com/azure/devops/integrate/concepts/rate-limits):
// those are skipped, like a policy in another unit.
func (r *quotaReader) readXRateLimit() {
	if r.keys[hXDelay] == "" {
		q := unknownQuota()
		listed := false
		if v, ok := r.value(hXLimit); ok {
			q.limit, q.window, listed = parseLimit(v)
		}
		q.remaining = r.count(hXRemaining)
		if used := r.count(hXUsed); q.remaining < 0 && q.limit >= 0 && used >= 0 {
			q.remaining = max(q.limit-used, 0) // GitHub's x-ratelimit-used
		}
		if v, _ := r.value(hXResetAfter); v != "" {
			if sec, nsec, ok := parseSeconds(v); ok {
				r.setReset(&q, satSeconds(sec, nsec))
			}
		}
		if v, _ := r.value(hXReset); q.reset < 0 {
			if sec, nsec, ok := parseSeconds(v); ok && listed {
				r.setReset(&q, satSeconds(sec, nsec))
			} else if ok {
				r.setReset(&q, r.epoch(sec, nsec))
			}
		}
		if q.partition, _ = r.value(hXResource); q.partition == "" {
			q.partition, _ = r.value(hXBucket) // Discord's bucket
		}
		r.add(q)
	}
	q := unknownQuota()
	q.limit, q.remaining = r.count(hXTwLimit), r.count(hXTwRemaining)
	if v, _ := r.value(hXTwReset); v != "" {
		if sec, nsec, ok := parseSeconds(v); ok {
			r.setReset(&q, r.epoch(sec, nsec))
		}
	}
	r.add(q)
}

// readVendors reads the vendors' own forms.
//
// OpenAI: x-ratelimit-{limit,remaining,reset}-requests, the reset a Go
// duration ("6m0s", "20ms") until the limit "resets to its initial state"
// (https://platform.openai.com/docs/guides/rate-limits): a refilling
// bucket. Its -tokens headers count tokens, not requests, and are skipped.
// Anthropic: anthropic-ratelimit-requests-{limit,remaining,reset}, the
// reset an RFC 3339 time when the bucket is full again
// (https://docs.anthropic.com/en/api/rate-limits). Shopify:
// X-Shopify-Shop-Api-Call-Limit: used/bucket size, no reset
// (https://shopify.dev/docs/api/admin-rest/usage/rate-limits). Azure
// Resource Manager: x-ms-ratelimit-remaining-<scope>, a count only.
func (r *quotaReader) readVendors() {
	if r.has(hXOpenAILimit, hXShopify) {
		q := unknownQuota()
		q.refill = true
		q.limit, q.remaining = r.count(hXOpenAILimit), r.count(hXOpenAIRemaining)
		if v, _ := r.value(hXOpenAIReset); v != "" {
			if d, ok := parseGoDuration(v); ok {
				r.setReset(&q, d)
			}
		}
		r.add(q)
	}

	if r.has(hAnthropicLimit, hXLimit) {
		q := unknownQuota()
		q.refill = true
		q.limit, q.remaining = r.count(hAnthropicLimit), r.count(hAnthropicRemaining)
		if v, _ := r.value(hAnthropicReset); v != "" {
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				r.setReset(&q, t.Sub(r.serverTime()))
			}
		}
		r.add(q)
	}

	if v, ok := r.value(hXShopify); ok {
		used, size, _ := strings.Cut(v, "/")
		u, uok := parseCount(trimOWS(used))
		s, sok := parseCount(trimOWS(size))
		if uok && sok {
			q := unknownQuota()
			q.limit, q.remaining = s, max(s-u, 0)
			r.add(q)
		}
	}

	for i, scope := range azureScopes {
		if r.keys[hXAzure+i] != "" {
			q := unknownQuota()
			q.remaining, q.partition = r.count(hXAzure+i), scope
			r.add(q)
		}
	}
}

// parseLimit reads an X-RateLimit-Limit or RateLimit-Limit value: a count,
// or the List of the first drafts, the expiring limit followed by quota
// policies ("100, 100;w=60, 1000;window=3600"). window is that of the
// policy whose quota is the expiring limit; listed reports policies.
func parseLimit(v string) (limit int64, window time.Duration, listed bool) {
	if n, ok := parseCount(v); ok {
		return n, 0, false
	}
	p := sfScanner{s: v}
	limit = -1
	for more := p.first(); more; more = p.next() {
		it := sfValue{kind: sfInner}
		if p.peek() != '(' {
			it = p.bareItem()
		}
		if it.kind != sfInteger || it.n < 0 {
			return -1, 0, false
		}
		if limit < 0 {
			limit = it.n
		}
		for {
			key, w, ok := p.param()
			if !ok {
				break
			}
			if key != "w" && key != "window" {
				continue
			}
			if w.kind != sfInteger || w.n < 0 {
				return -1, 0, false
			}
			listed = true
			if it.n == limit && window == 0 {
				window = seconds(w.n)
			}
		}
	}
	if p.bad {
		return -1, 0, false
	}
	return limit, window, listed
}

// parseGoDuration reads a duration as OpenAI writes it ("6m0s", "20ms",
// "2m59.56s"): time.ParseDuration's syntax without a sign, saturating
// rather than failing when it is too long.
func parseGoDuration(v string) (time.Duration, bool) {
	if v == "0" {
		return 0, true
	}
	if v == "" {
		return 0, false
	}
	var d time.Duration
	for v != "" {
		i := 0
		for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.') {
			i++
		}
		j := i
		for j < len(v) && (v[j] < '0' || v[j] > '9') && v[j] != '.' {
			j++
		}
		unit := durationUnit(v[i:j])
		sec, nsec, ok := parseSeconds(v[:i])
		if unit == 0 || !ok {
			return 0, false
		}
		// sec.nsec units in nanoseconds, without overflowing: a unit of a
		// second or more is a whole number of seconds.
		frac := nsec * int64(unit) / int64(time.Second)
		if unit >= time.Second {
			frac = nsec * int64(unit/time.Second)
		}
		n := time.Duration(math.MaxInt64)
		if sec <= math.MaxInt64/int64(unit) {
			n = satAdd(time.Duration(sec)*unit, time.Duration(frac))
		}
		d, v = satAdd(d, n), v[j:]
	}
	return d, true
}

// durationUnit is the length of a unit of time.ParseDuration, 0 if none.
func durationUnit(u string) time.Duration {
	switch u {
	case "ns":
		return time.Nanosecond
	case "us", "µs", "μs":
		return time.Microsecond
	case "ms":
		return time.Millisecond
	case "s":
		return time.Second
	case "m":
		return time.Minute
	case "h":
		return time.Hour
	}
	return 0
}

// satAdd returns a+b for non-negative a and b, saturating.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// sfPolicy is one member of a RateLimit or RateLimit-Policy List.
type sfPolicy struct {
	name       string // the member's String (or Token), as sent
	num        int64  // an Integer member's value (draft -07's policies); -1 otherwise
	q, r, t, w int64  // the parameters; -1 absent
	pk         string // pk's base64, as sent; "" absent
	other      bool   // qu names a unit other than requests
	used       bool   // a RateLimit member named it
}

// findPolicy returns the named policy called name, or nil.
func findPolicy(pol []sfPolicy, name string) *sfPolicy {
	for i := range pol {
		if pol[i].num < 0 && pol[i].name == name {
			return &pol[i]
		}
	}
	return nil
}

// parseSFPolicies reads a RateLimit (policy false) or RateLimit-Policy
// List into out, keeping the first len(out) members; ok is false for a
// malformed field. A member must be a String, or, as in the draft's own
// earlier examples, a Token; a RateLimit-Policy member may be -07's
// Integer. The REQUIRED parameters are r in RateLimit, q in
// RateLimit-Policy and w for an Integer; those the field defines must be
// non-negative Integers, pk a Byte Sequence and qu a String; the last of
// a repeated parameter counts (RFC 9651 §4.2.3.2). Others are comments.
func parseSFPolicies(v string, policy bool, out []sfPolicy) (n int, ok bool) {
	p := sfScanner{s: v}
	for more := p.first(); more; more = p.next() {
		it := sfPolicy{num: -1, q: -1, r: -1, t: -1, w: -1}
		name := sfValue{kind: sfInner}
		if p.peek() != '(' {
			name = p.bareItem()
		}
		switch {
		case name.kind == sfString || name.kind == sfToken:
			it.name = name.s
		case name.kind == sfInteger && policy && name.n >= 0:
			it.num = name.n
		default:
			return 0, false
		}
		var nums [2]sfValue // q and w, or r and t
		var pk, qu sfValue
		for {
			key, pv, ok := p.param()
			switch {
			case !ok:
			case key == "pk":
				pk = pv
			case key == "qu" && policy:
				qu = pv
			case key == "q" && policy || key == "r" && !policy:
				nums[0] = pv
			case key == "w" && policy || key == "t" && !policy:
				nums[1] = pv
			}
			if !ok {
				break
			}
		}
		for k, dst := range [2]*int64{&it.q, &it.w} {
			if nums[k].kind != 0 && (nums[k].kind != sfInteger || nums[k].n < 0) {
				return 0, false
			}
			if nums[k].kind != 0 {
				*dst = nums[k].n
			}
		}
		if !policy {
			it.r, it.t, it.q, it.w = it.q, it.w, -1, -1
		}
		if pk.kind != 0 && pk.kind != sfBytes || qu.kind != 0 && qu.kind != sfString {
			return 0, false
		}
		it.pk = pk.s
		// "requests" in the text, "request" in the draft's registry table.
		it.other = qu.kind != 0 && qu.s != "requests" && qu.s != "request"
		if p.bad || !policy && it.r < 0 || policy && it.num < 0 && it.q < 0 || it.num >= 0 && it.w < 0 {
			return 0, false
		}
		if n < len(out) {
			out[n] = it
			n++
		}
	}
	if p.bad || v == "" {
		return 0, false // a field that fails after its first members is malformed all the same
	}
	return n, true
}

// parseDraft7 reads draft -07's RateLimit Dictionary: limit and reset are
// REQUIRED, remaining optional, each a non-negative Integer; the last of a
// repeated key counts, and parameters are ignored (RFC 9651 §4.2.2).
func parseDraft7(v string) (limit, remaining, reset int64, ok bool) {
	var vals [3]sfValue // limit, remaining, reset
	p := sfScanner{s: v}
	for more := p.first(); more; more = p.next() {
		key := p.key()
		val := sfValue{kind: sfBoolean, n: 1}
		switch {
		case p.peek() != '=':
		case p.i+1 < len(p.s) && p.s[p.i+1] == '(':
			p.i++
			p.innerList()
			val = sfValue{kind: sfInner}
		default:
			p.i++
			val = p.bareItem()
		}
		p.skipParams()
		switch key {
		case "limit":
			vals[0] = val
		case "remaining":
			vals[1] = val
		case "reset":
			vals[2] = val
		}
	}
	var n [3]int64
	for i, val := range vals {
		n[i] = -1
		if val.kind != 0 && (val.kind != sfInteger || val.n < 0) {
			return 0, 0, 0, false
		}
		if val.kind != 0 {
			n[i] = val.n
		}
	}
	return n[0], n[1], n[2], !p.bad && n[0] >= 0 && n[2] >= 0
}

// Kinds of sfValue.
const (
	sfInteger = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplay
	sfInner // an Inner List, where an Item was wanted
)

// sfValue is a bare item of a Structured Field (RFC 9651 §3.3).
type sfValue struct {
	kind int
	n    int64  // an Integer's, Date's or Boolean's value
	s    string // a String's text (escapes kept, so equal text is an equal String), a Token, a Byte Sequence's base64
}

// sfScanner parses Structured Fields (RFC 9651 §4.2) in place, without
// allocating. After an error, bad is set and the input is consumed.
type sfScanner struct {
	s   string
	i   int
	bad bool
}

func (p *sfScanner) fail() { p.bad, p.i = true, len(p.s) }

func (p *sfScanner) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// first starts a List or Dictionary: false if it is empty.
func (p *sfScanner) first() bool {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
	return p.i < len(p.s)
}

// next moves past the comma after a member: false at the end, or on an
// error (a member not followed by a comma, or a trailing comma).
func (p *sfScanner) next() bool {
	p.skipOWS()
	switch {
	case p.i >= len(p.s):
		return false
	case p.s[p.i] != ',':
		p.fail()
		return false
	}
	p.i++
	p.skipOWS()
	if p.i >= len(p.s) {
		p.fail()
	}
	return !p.bad
}

func (p *sfScanner) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// param reads the next parameter of an item: ok is false when there is
// none (or on an error). A parameter without a value is Boolean true.
func (p *sfScanner) param() (key string, v sfValue, ok bool) {
	if p.bad || p.peek() != ';' {
		return "", sfValue{}, false
	}
	p.i++
	for p.peek() == ' ' {
		p.i++
	}
	key, v = p.key(), sfValue{kind: sfBoolean, n: 1}
	if p.peek() == '=' {
		p.i++
		v = p.bareItem()
	}
	return key, v, !p.bad
}

func (p *sfScanner) skipParams() {
	for _, _, ok := p.param(); ok; _, _, ok = p.param() {
	}
}

// key reads a key: lcalpha or "*", then lcalpha, DIGIT, "_-.*".
func (p *sfScanner) key() string {
	start := p.i
	if c := p.peek(); c != '*' && (c < 'a' || c > 'z') {
		p.fail()
		return ""
	}
	for p.i++; p.i < len(p.s); p.i++ {
		if c := p.s[p.i]; (c < 'a' || c > 'z') && !isDigit(c) && strings.IndexByte("_-.*", c) < 0 {
			break
		}
	}
	return p.s[start:p.i]
}

// innerList skips an Inner List and its parameters.
func (p *sfScanner) innerList() {
	p.i++ // "("
	for !p.bad && p.i < len(p.s) {
		for p.peek() == ' ' {
			p.i++
		}
		if p.peek() == ')' {
			p.i++
			p.skipParams()
			return
		}
		p.bareItem()
		p.skipParams()
		if c := p.peek(); c != ' ' && c != ')' {
			p.fail()
		}
	}
	p.fail()
}

// bareItem reads a bare item of any type.
func (p *sfScanner) bareItem() sfValue {
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || c|0x20 >= 'a' && c|0x20 <= 'z':
		start := p.i
		for p.i++; p.i < len(p.s) && isTokenChar(p.s[p.i]); p.i++ {
		}
		return sfValue{kind: sfToken, s: p.s[start:p.i]}
	case c == ':':
		return p.bytes()
	case c == '?' && p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1'):
		p.i += 2
		return sfValue{kind: sfBoolean, n: int64(p.s[p.i-1] - '0')}
	case c == '@':
		p.i++
		if v := p.number(); v.kind == sfInteger {
			return sfValue{kind: sfDate, n: v.n}
		}
	case c == '%':
		return p.display()
	}
	p.fail()
	return sfValue{}
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a dot, 1 to 3 digits).
func (p *sfScanner) number() sfValue {
	sign := int64(1)
	if p.peek() == '-' {
		sign, p.i = -1, p.i+1
	}
	if !isDigit(p.peek()) {
		p.fail()
		return sfValue{}
	}
	start, dot := p.i, -1
	var n int64
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case isDigit(c) && dot < 0:
			n = n*10 + int64(c-'0')
		case isDigit(c):
		case c == '.' && dot < 0 && p.i-start <= 12:
			dot = p.i
		case c == '.' && dot < 0:
			p.fail()
			return sfValue{}
		default:
			goto end
		}
		if dot < 0 && p.i+1-start > 15 || p.i+1-start > 16 {
			p.fail()
			return sfValue{}
		}
	}
end:
	if dot < 0 {
		return sfValue{kind: sfInteger, n: sign * n}
	}
	if frac := p.i - dot - 1; frac < 1 || frac > 3 {
		p.fail()
		return sfValue{}
	}
	return sfValue{kind: sfDecimal}
}

// str reads a String: printable ASCII, with \" and \\ escapes only.
func (p *sfScanner) str() sfValue {
	start := p.i + 1
	for p.i++; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			return sfValue{kind: sfString, s: p.s[start : p.i-1]}
		case c == '\\' && p.i+1 < len(p.s) && (p.s[p.i+1] == '"' || p.s[p.i+1] == '\\'):
			p.i++
		case c == '\\' || c < 0x20 || c > 0x7e:
			p.fail()
			return sfValue{}
		}
	}
	p.fail()
	return sfValue{}
}

// bytes reads a Byte Sequence, ":" base64 ":". As RFC 9651 §4.2.7 asks,
// missing "=" padding and non-zero pad bits are accepted; other base64
// errors fail.
func (p *sfScanner) bytes() sfValue {
	start := p.i + 1
	end := strings.IndexByte(p.s[start:], ':')
	if end < 0 {
		p.fail()
		return sfValue{}
	}
	b64 := p.s[start : start+end]
	body := strings.TrimRight(b64, "=")
	pad := len(b64) - len(body)
	for i := 0; i < len(body); i++ {
		if c := body[i]; !isDigit(c) && (c|0x20 < 'a' || c|0x20 > 'z') && c != '+' && c != '/' {
			p.fail()
			return sfValue{}
		}
	}
	if pad > 2 || len(body)%4 == 1 || pad > 0 && len(b64)%4 != 0 {
		p.fail()
		return sfValue{}
	}
	p.i = start + end + 1
	return sfValue{kind: sfBytes, s: b64}
}

// display reads a Display String, %"...", whose %xx (lowercase hex)
// escapes must decode to UTF-8.
func (p *sfScanner) display() sfValue {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' {
		p.fail()
		return sfValue{}
	}
	var u utf8Check
	for p.i += 2; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case c < 0x20 || c > 0x7e:
		case c == '"':
			if u.n == 0 {
				p.i++
				return sfValue{kind: sfDisplay}
			}
		case c != '%':
			if u.add(c) {
				continue
			}
		case p.i+2 < len(p.s):
			hi, lo := lowerHex(p.s[p.i+1]), lowerHex(p.s[p.i+2])
			p.i += 2
			if hi >= 0 && lo >= 0 && u.add(byte(hi<<4|lo)) {
				continue
			}
		}
		break
	}
	p.fail()
	return sfValue{}
}

// utf8Check validates UTF-8 a byte at a time.
type utf8Check struct {
	buf     [4]byte
	n, want int
}

func (u *utf8Check) add(b byte) bool {
	if u.n == 0 {
		switch {
		case b < 0x80:
			return true
		case b >= 0xc2 && b <= 0xdf:
			u.want = 2
		case b >= 0xe0 && b <= 0xef:
			u.want = 3
		case b >= 0xf0 && b <= 0xf4:
			u.want = 4
		default:
			return false
		}
	}
	u.buf[u.n] = b
	if u.n++; u.n < u.want {
		return true
	}
	u.n = 0
	return utf8.Valid(u.buf[:u.want])
}

func lowerHex(c byte) int {
	switch {
	case isDigit(c):
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isTokenChar reports tchar (RFC 9110 §5.6.2), ":" or "/".
func isTokenChar(c byte) bool {
	return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'z' || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
