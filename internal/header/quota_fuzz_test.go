package header

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// qtMaxAllocs bounds what ReadQuotas may allocate for any header: one
// join for each of the two Structured Fields when they repeat, the errors
// of http.ParseTime for an invalid Date (9 in Go 1.26, read once), and those
// of time.Parse for an invalid RFC 3339 reset; 24 leaves room for the
// standard library to change without hiding a per-header allocation.
const qtMaxAllocs = 24

// FuzzQuotas feeds ReadQuotas arbitrary header names and values (one per
// line of names and values), any clock and any clamp.
func FuzzQuotas(f *testing.F) {
	date := qtNow.Format(http.TimeFormat)
	for _, seed := range []struct{ names, values string }{
		{"RateLimit-Policy\nRateLimit", `"burst";q=100;w=60, "daily";q=1000;w=86400` + "\n" + `"burst";r=50;t=30;pk=:YWJj:`},
		{"RateLimit\nRateLimit-Policy", "limit=100, remaining=50, reset=5\n100;w=60, 10;w=1"},
		{"RateLimit-Limit\nRateLimit-Remaining\nRateLimit-Reset\nRateLimit-Observed", "10, 10;window=1\n0\n1772600787\n6"},
		{"Date\nX-RateLimit-Limit\nX-RateLimit-Remaining\nX-RateLimit-Reset\nX-RateLimit-Resource", date + "\n5000\n0\n1772600787\ncore"},
		{"x-rate-limit-remaining\nx-rate-limit-reset\nX-RateLimit-Reset-After", "0\n99999999999999999999\n1.5"},
		{"x-ratelimit-limit-requests\nx-ratelimit-remaining-requests\nx-ratelimit-reset-requests", "60\n0\n2m59.56s"},
		{"anthropic-ratelimit-requests-remaining\nanthropic-ratelimit-requests-reset", "0\n2026-03-04T05:06:08Z"},
		{"X-Shopify-Shop-Api-Call-Limit\nx-ms-ratelimit-remaining-tenant-reads", "39/40\n-1"},
		{"X-RateLimit-Limit\nX-RateLimit-Remaining\nX-RateLimit-Reset\nRetry-After", "11\n0\n1\n1"},
		{"X-RateLimit-Limit\nX-RateLimit-Reset\nDate", "100\n" + qtNow.Add(time.Second).Format(time.RFC1123) + "\n" + qtNow.Format(time.RFC1123Z)},
		{"X-Rate-Limit-Limit\nX-Rate-Limit-Duration\nRateLimit-Limit\nRateLimit-Remaining\nRateLimit-Reset", "100.00\n1\n100\n9\n1"},
		{"RateLimit\nRateLimit", `"a";r=1;d=%"%c3%a9";e=@-5;f=(1 "x");g=?0` + "\n" + `b;r=2`},
	} {
		f.Add(seed.names, seed.values, qtNow.Unix(), int64(qtMax))
	}
	f.Fuzz(func(t *testing.T, names, values string, nowSec, maxReset int64) {
		h := http.Header{}
		vs := strings.Split(values, "\n")
		for i, name := range strings.Split(names, "\n") {
			if name == "" {
				continue
			}
			v := ""
			if i < len(vs) {
				v = vs[i]
			}
			h[name] = append(h[name], v)
		}
		now := time.Unix(nowSec%(1<<40), 0)
		max := time.Duration(maxReset)
		var qs Quotas
		allocs := testing.AllocsPerRun(1, func() { qs = ReadQuotas(h, now, max) })
		qtCheck(t, qs, max)
		require.LessOrEqual(t, allocs, float64(qtMaxAllocs))
		// The same header reads the same every time.
		require.Equal(t, qs, ReadQuotas(h, now, max))
		// A malformed Structured Field is ignored whole: RateLimit or
		// RateLimit-Policy ending in a byte that no RFC 9651 syntax allows
		// reads as if it were absent.
		for _, field := range []string{"ratelimit", "ratelimit-policy"} {
			broken, absent, found := http.Header{}, http.Header{}, false
			for k, v := range h {
				if !strings.EqualFold(k, field) {
					broken[k], absent[k] = v, v
					continue
				}
				found = true
				v = slices.Clone(v)
				v[len(v)-1] += "\x01"
				broken[k] = v
			}
			if found {
				require.Equal(t, ReadQuotas(absent, now, max), ReadQuotas(broken, now, max), field)
			}
		}
	})
}
