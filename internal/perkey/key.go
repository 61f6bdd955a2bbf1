package perkey

import (
	"net/url"
	"strings"
)

// Key names what a lane is kept for: scheme, host and port, with the
// scheme's default port left out and the host in lower case, so that
// http://Example.com and http://example.com:80 are one key; or a string a
// caller computed (Scheme empty, the whole string in Host). It is small and
// comparable, and building it allocates nothing for a URL already in that
// form.
type Key struct {
	Scheme string // "" for a key the caller computed, which Host holds whole
	Host   string // host[:port], port omitted when it is the scheme's default
}

// String returns the key as hooks, errors and snapshots report it:
// scheme://host[:port], or a computed key as it is.
func (k Key) String() string {
	if k.Scheme == "" {
		return k.Host
	}
	return k.Scheme + "://" + k.Host
}

// KeyOf returns the key of u.
func KeyOf(u *url.URL) Key {
	if u == nil {
		return Key{}
	}
	h := u.Host
	switch {
	case u.Scheme == "http" && strings.HasSuffix(h, ":80"):
		h = h[:len(h)-len(":80")]
	case u.Scheme == "https" && strings.HasSuffix(h, ":443"):
		h = h[:len(h)-len(":443")]
	}
	if hasUpper(h) {
		h = strings.ToLower(h)
	}
	return Key{Scheme: u.Scheme, Host: h}
}

// ParseKey turns a key as String reports it back into a Key: the default
// form scheme://host[:port] (normalised as KeyOf does), or any other string
// as a computed key.
func ParseKey(s string) Key {
	if i := strings.Index(s, "://"); i > 0 && !strings.ContainsAny(s[i+3:], "/?#") {
		return KeyOf(&url.URL{Scheme: s[:i], Host: s[i+3:]})
	}
	return Key{Host: s}
}

// clone returns k with its own copy of its bytes: a key kept in a table
// must not pin the caller's URL string, query secrets included.
func (k Key) clone() Key {
	return Key{Scheme: strings.Clone(k.Scheme), Host: strings.Clone(k.Host)}
}

// hasUpper reports whether s holds a byte in 'A'..'Z'. It looks at eight
// bytes at a time: every request's key is computed from its host, so this
// is on the success path.
func hasUpper(s string) bool {
	if len(s) < 8 {
		for i := 0; i < len(s); i++ {
			if 'A' <= s[i] && s[i] <= 'Z' {
				return true
			}
		}
		return false
	}
	for i := 0; i+8 < len(s); i += 8 {
		if upperIn(word(s[i:])) {
			return true
		}
	}
	return upperIn(word(s[len(s)-8:])) // the last eight, overlapping or not
}

// word returns the first eight bytes of s as one little-endian word.
func word(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// upperIn reports whether one of x's bytes is in 'A'..'Z': the test for a
// byte strictly between two values from Sean Eron Anderson's "Bit
// Twiddling Hacks" (https://graphics.stanford.edu/~seander/bithacks.html),
// exact for any byte, with 'A'-1 and 'Z'+1 as the bounds.
func upperIn(x uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = ones * 0x80
		low7  = ones * 0x7f
		lo    = 'A' - 1
		hi    = 'Z' + 1
	)
	return (ones*(127+hi)-(x&low7))&^x&((x&low7)+ones*(127-lo))&highs != 0
}
