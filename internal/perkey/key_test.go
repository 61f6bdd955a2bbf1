package perkey

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeyOf checks that one host has one key however its URL spells it.
func TestKeyOf(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"http://example.test/x", "http://EXAMPLE.test:80/y"},
		{"https://example.test/", "https://example.test:443/"},
	} {
		ua, err := url.Parse(tc.a)
		require.NoError(t, err)
		ub, err := url.Parse(tc.b)
		require.NoError(t, err)
		require.Equal(t, KeyOf(ua), KeyOf(ub), "%s and %s", tc.a, tc.b)
	}
	ua, _ := url.Parse("http://example.test/")
	ub, _ := url.Parse("https://example.test/")
	require.NotEqual(t, KeyOf(ua), KeyOf(ub), "the scheme is part of the key")
	uc, _ := url.Parse("http://example.test:8080/")
	require.NotEqual(t, KeyOf(ua), KeyOf(uc), "so is a port other than the default")
}

// hasUpper reads eight bytes at a time; it must answer as a byte-by-byte
// loop does, for every byte value at every position and for hosts of every
// length around a word's.
func TestHasUpper(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	naive := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if 'A' <= s[i] && s[i] <= 'Z' {
				return true
			}
		}
		return false
	}
	const base = "abcdefghijklmnopqrstuvw"
	for n := range len(base) + 1 {
		require.False(t, hasUpper(base[:n]), "%q", base[:n])
		for pos := range n {
			for c := range 256 {
				b := []byte(base[:n])
				b[pos] = byte(c)
				require.Equal(t, naive(string(b)), hasUpper(string(b)), "%q", b)
			}
		}
	}
}

// mustParse parses a URL the test wrote.
func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}
