package header

import (
	"strings"
	"time"
)

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
	var pol [2 * MaxPolicies]sfPolicy
	np, _ := parseSFPolicies(r.joined(hRateLimitPolicy), true, pol[:])
	var cur [MaxPolicies]sfPolicy
	unnamed := [2]int{-1, -1} // the quotas of -07's Dictionary and of -00 to -06
	rl := r.joined(hRateLimit)
	if nc, ok := parseSFPolicies(rl, false, cur[:]); ok {
		for _, c := range cur[:nc] {
			q := unknownQuota()
			q.Remaining, q.Partition = c.r, c.pk
			if c.t >= 0 {
				r.setReset(&q, seconds(c.t))
			}
			if p := findPolicy(pol[:np], c.name); p != nil {
				p.used = true
				if p.other {
					continue // its r counts some other unit
				}
				q.Limit, q.Window = p.q, seconds(max(p.w, 0))
				if q.Partition == "" {
					q.Partition = p.pk
				}
			}
			r.add(q)
		}
	} else if limit, remaining, reset, ok := parseDraft7(rl); ok {
		q := unknownQuota()
		q.Limit, q.Remaining = limit, remaining
		r.setReset(&q, seconds(reset))
		unnamed[0] = r.add(q)
	}

	q := unknownQuota()
	if v, ok := r.value(hRateLimitLimit); ok {
		q.Limit, q.Window, _ = parseLimit(v)
	}
	q.Remaining = r.count(hRateLimitRemaining)
	gitlab := r.keys[hRateLimitObserved] != "" || r.keys[hRateLimitResetTime] != ""
	if v, _ := r.value(hRateLimitReset); gitlab {
		r.resetAt(&q, v)
		if q.Limit >= 0 && q.Window == 0 {
			q.Window = time.Minute
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
				r.qs.list[i].Window = seconds(p.w)
				continue
			}
			p.q = p.num
		}
		q := unknownQuota()
		q.Limit, q.Window, q.Partition = p.q, seconds(max(p.w, 0)), p.pk
		r.add(q)
	}
}

// unnamedWithLimit returns the index of the quota among idx whose limit is
// limit and whose window is unknown, or -1.
func (r *quotaReader) unnamedWithLimit(idx [2]int, limit int64) int {
	for _, i := range idx {
		if i >= 0 && r.qs.list[i].Limit == limit && r.qs.list[i].Window == 0 {
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
