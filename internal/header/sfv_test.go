package header

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseQuotasStructuredFields checks the RFC 9651 syntax through the
// fields that carry it: a bare item as an unknown parameter of a policy,
// which must parse for the policy to be read, and list, dictionary and
// inner-list syntax.
func TestParseQuotasStructuredFields(t *testing.T) {
	valid := []string{"1", "-1", "-0", "123456789012345", "1.5", "-1.5", "123456789012.123",
		`"a"`, `""`, `"\\"`, `"\""`, `" ~"`, "tok", "*tok", "t:/x!#$%&'*+-.^_`|~", ":YWJj:", "::", ":YWI=:", ":YQ==:",
		"?0", "?1", "@1659578233", "@-1", `%"caf%c3%a9"`, `%""`, `%"%f0%9f%98%80"`, `%"a%22b"`}
	invalid := []string{"1234567890123456", "1.1234", "1.", "1234567890123.1", "1.2.3", "-", "-a", ".5",
		`"a`, `"\a"`, "\"\x7f\"", "?2", "?", "@1.5", "@", "@x", `%"%C3%A9"`, `%"%c3"`, `%"%c3%28"`, `%"%ff"`,
		`%"%e2%82"`, `%"a`, `%a`, `%"%g0"`, `%"%2"`, ":YWJj", ":YW=j:", ":Y:", ":YWJ===:", ":YW!j:", "&", "(", ""}
	for _, item := range valid {
		h := qtHeader("RateLimit-Policy", `"a";q=1;x=`+item)
		require.Equal(t, 1, ReadQuotas(h, qtNow, qtMax).n, "valid %q", item)
	}
	for _, item := range invalid {
		h := qtHeader("RateLimit-Policy", `"a";q=1;x=`+item)
		require.Equal(t, 0, ReadQuotas(h, qtNow, qtMax).n, "invalid %q", item)
	}
	for _, c := range []struct {
		field, value string
		n            int
	}{
		{"RateLimit-Policy", `"a";q=1 , "b";q=2`, 2},
		{"RateLimit-Policy", "\"a\";q=1,\t\"b\";q=2", 2},
		{"RateLimit-Policy", `"a";q=1; x=1`, 1},
		{"RateLimit-Policy", `"a";q=1,,"b";q=2`, 0},
		{"RateLimit-Policy", `,"a";q=1`, 0},
		{"RateLimit-Policy", `"a" ;q=1`, 0},
		{"RateLimit-Policy", `"a";q=1 "b"`, 0},
		{"RateLimit-Policy", `"a";q=1;`, 0},
		{"RateLimit-Policy", `"a";q=1;x-=2`, 1},
		{"RateLimit-Policy", `"a";q=1;9x=2`, 0},
		{"RateLimit", "limit=10, reset=7, x=(1 \"a\" tok);p=1", 1},
		{"RateLimit", "limit=10, reset=7, x=();p", 1},
		{"RateLimit", "limit=10, reset=7, x=( 1  2 )", 1},
		{"RateLimit", "limit=10,reset=7,x", 1},
		{"RateLimit", "limit=10, reset=7, x=(1 2", 0},
		{"RateLimit", "limit=10, reset=7, x=(1,2)", 0},
		{"RateLimit", "limit=10, reset=7, x=(1 2)3", 0},
		{"RateLimit", "limit=(10), reset=7", 0},
		{"RateLimit", "limit=10, reset=7, X=1", 0},
		{"RateLimit", "limit=10, reset=7, limit=?1", 0},
		{"RateLimit", "limit=?1, reset=7, limit=10", 1},
		{"RateLimit-Limit", "10;w=1.5", 0},
		{"RateLimit-Limit", "10, (1 2)", 0},
		{"RateLimit-Limit", `10, "x"`, 0},
		{"RateLimit-Limit", "10;w=1, 20;w=2,", 0},
	} {
		require.Equal(t, c.n, ReadQuotas(qtHeader(c.field, c.value), qtNow, qtMax).n, "%s: %s", c.field, c.value)
	}
}
