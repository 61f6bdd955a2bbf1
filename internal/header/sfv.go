package header

import (
	"strings"
	"unicode/utf8"
)

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

// isTokenChar reports tchar (RFC 9110 §5.6.2), ":" or "/".
func isTokenChar(c byte) bool {
	return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'z' || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
