package main

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The names a module zip may hold are those the go command accepts when it
// extracts one (golang.org/x/mod/module.CheckFilePath): a name it refuses
// makes the whole module unusable, so the check refuses it first.

// windowsReserved are the device names Windows refuses as a file name,
// whatever the extension: a module holding one could not be extracted
// there.
var windowsReserved = []string{"CON", "PRN", "AUX", "NUL",
	"COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9",
	"LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9"}

// checkFilePath reports why p, a slash-separated path relative to the
// module root, cannot be a file of a module zip, or nil.
func checkFilePath(p string) error {
	if !utf8.ValidString(p) {
		return errors.New("invalid UTF-8")
	}
	if p == "" {
		return errors.New("empty path")
	}
	if p[0] == '/' || p[len(p)-1] == '/' {
		return errors.New("leading or trailing slash")
	}
	for elem := range strings.SplitSeq(p, "/") {
		if err := checkElem(elem); err != nil {
			return fmt.Errorf("path element %q: %v", elem, err)
		}
	}
	return nil
}

func checkElem(elem string) error {
	switch {
	case elem == "":
		return errors.New("empty (a double slash)")
	case strings.Trim(elem, ".") == "":
		return errors.New("only dots")
	case strings.HasSuffix(elem, "."):
		// Windows drops a trailing dot, so two names could become one.
		return errors.New("trailing dot")
	}
	for _, r := range elem {
		if !fileNameRune(r) {
			return fmt.Errorf("character %q is not allowed", r)
		}
	}
	short, _, _ := strings.Cut(elem, ".")
	for _, bad := range windowsReserved {
		if strings.EqualFold(short, bad) {
			return fmt.Errorf("%q is a reserved name on Windows", short)
		}
	}
	return nil
}

// fileNameRune reports whether r may appear in a file name: ASCII letters,
// digits and a set of punctuation that no common file system or shell
// treats specially (no quotes, no * ? < > | `, no separators : \), and any
// non-ASCII letter.
func fileNameRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' ||
			strings.ContainsRune("!#$%&()+,-.=@[]^_{}~ ", r)
	}
	return unicode.IsLetter(r)
}

// fold maps s to a key shared by every string equal to it under Unicode
// simple case folding: two files whose keys are equal would be one file on
// a case-insensitive file system.
func fold(s string) string {
	var b strings.Builder
	for _, r := range s {
		// The smallest rune of r's folding orbit stands for all of them.
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b.WriteRune(min)
	}
	return b.String()
}

// escapePath encodes a module path or version as the module proxy
// protocol requires (go.dev/ref/mod#goproxy-protocol): each upper-case
// letter becomes '!' and its lower case, so that paths differing only in
// case stay apart on case-insensitive file systems.
func escapePath(s string) (string, error) {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '!' || r >= utf8.RuneSelf:
			return "", fmt.Errorf("%q: cannot be escaped for a proxy (%q)", s, r)
		case 'A' <= r && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}
