package header

import (
	"strings"
	"time"
)

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
// Elsewhere no marker tells, but the value does: a number below half the
// server's clock in Unix seconds is no Unix time a server could mean for
// a running window, and is delta seconds (Unipile, and throttled/throttled v2, whose
// reset is the time until its bucket is full). A larger one is a Unix
// time; a date (sethvargo/go-limiter v0.7.1 sends time.RFC1123 in UTC)
// is read as parseDate reads it. Twitter/X's X-Rate-Limit-Reset and
// GitLab's RateLimit-Reset are read the same way.
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
			q.Limit, q.Window, listed = parseLimit(v)
		}
		q.Remaining = r.count(hXRemaining)
		if used := r.count(hXUsed); q.Remaining < 0 && q.Limit >= 0 && used >= 0 {
			q.Remaining = max(q.Limit-used, 0) // GitHub's x-ratelimit-used
		}
		if v, _ := r.value(hXResetAfter); v != "" {
			if sec, nsec, ok := parseSeconds(v); ok {
				r.setReset(&q, satSeconds(sec, nsec))
			}
		}
		if v, _ := r.value(hXReset); q.Reset < 0 {
			if sec, nsec, ok := parseSeconds(v); ok && listed {
				r.setReset(&q, satSeconds(sec, nsec))
			} else {
				r.resetAt(&q, v)
			}
		}
		if q.Partition, _ = r.value(hXResource); q.Partition == "" {
			q.Partition, _ = r.value(hXBucket) // Discord's bucket
		}
		r.add(q)
	}
	q := unknownQuota()
	q.Limit, q.Remaining = r.count(hXTwLimit), r.count(hXTwRemaining)
	if v, _ := r.value(hXTwReset); v != "" {
		r.resetAt(&q, v)
	}
	if v, _ := r.value(hXTwDuration); v != "" && q.Limit > 0 {
		// didip/tollbooth v7 sends its window in a field of its own,
		// in seconds.
		if sec, nsec, ok := parseSeconds(v); ok && (sec > 0 || nsec > 0) {
			q.Window = satSeconds(sec, nsec)
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
		q.Refill = true
		q.Limit, q.Remaining = r.count(hXOpenAILimit), r.count(hXOpenAIRemaining)
		if v, _ := r.value(hXOpenAIReset); v != "" {
			if d, ok := parseGoDuration(v); ok {
				r.setReset(&q, d)
			}
		}
		r.add(q)
	}

	if r.has(hAnthropicLimit, hXLimit) {
		q := unknownQuota()
		q.Refill = true
		q.Limit, q.Remaining = r.count(hAnthropicLimit), r.count(hAnthropicRemaining)
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
			q.Limit, q.Remaining = s, max(s-u, 0)
			r.add(q)
		}
	}

	for i, scope := range azureScopes {
		if r.keys[hXAzure+i] != "" {
			q := unknownQuota()
			q.Remaining, q.Partition = r.count(hXAzure+i), scope
			r.add(q)
		}
	}
}

func trimOWS(s string) string { return strings.Trim(s, " \t") }

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
		for i < len(v) && (isDigit(v[i]) || v[i] == '.') {
			i++
		}
		j := i
		for j < len(v) && !isDigit(v[j]) && v[j] != '.' {
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
		d, v = satAdd(d, satAdd(satMul(sec, unit), time.Duration(frac))), v[j:]
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
