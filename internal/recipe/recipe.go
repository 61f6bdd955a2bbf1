// Package recipe checks that the Go code blocks of the repository's
// README.md and docs/*.md are run by its tests as written: each block
// stands, verbatim, between the lines
//
//	// recipe: README.md 3
//	...
//	// end recipe
//
// (or, for a block that two files give alike, "// recipe: README.md 5,
// docs/fleet.md 1") of a _test.go file somewhere in the repository (the third ```go block of
// README.md here), where a test runs it against a loopback server that
// misbehaves the way the recipe is for, or an Example compiles it. A doc
// block changed without its test, or a test's copy changed without the doc,
// then fails.
package recipe

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A Block is one Go code block of a Markdown file: the n-th (from 1) of
// the file, as a test's marker names it.
type Block struct {
	File string // relative to the repository's root, with slashes
	N    int
	Line int // where the block starts, for messages
	Code string
}

func (b Block) String() string { return fmt.Sprintf("%s %d", b.File, b.N) }

// Blocks returns the Go code blocks of README.md and docs/*.md under root.
func Blocks(root string) ([]Block, error) {
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, filepath.ToSlash(rel))
	}
	sort.Strings(files[1:])
	var out []Block
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		var cur *Block
		n := 0
		for i, line := range strings.Split(string(data), "\n") {
			switch {
			case cur == nil && strings.TrimSpace(line) == "```go":
				n++
				cur = &Block{File: f, N: n, Line: i + 1}
			case cur != nil && strings.TrimSpace(line) == "```":
				cur.Code = strings.TrimSuffix(cur.Code, "\n")
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.Code += line + "\n"
			}
		}
	}
	return out, nil
}

var (
	begin = regexp.MustCompile(`^\s*// recipe: (\S+ \d+(?:, \S+ \d+)*)\s*$`)
	end   = regexp.MustCompile(`^\s*// end recipe\s*$`)
)

// Copies returns each recipe region found in the _test.go files under
// root, by the block it names ("README.md 3"), dedented, with where it is.
func Copies(root string) (map[string][]Copy, error) {
	out := map[string][]Copy{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		var (
			name  string
			lines []string
			at    int
		)
		sc := bufio.NewScanner(f)
		for i := 1; sc.Scan(); i++ {
			line := sc.Text()
			switch {
			case name == "":
				if m := begin.FindStringSubmatch(line); m != nil {
					name, lines, at = m[1], nil, i
				}
			case end.MatchString(line):
				rel, _ := filepath.Rel(root, path)
				c := Copy{Where: fmt.Sprintf("%s:%d", filepath.ToSlash(rel), at), Code: dedent(lines)}
				for _, n := range strings.Split(name, ", ") {
					out[n] = append(out[n], c)
				}
				name = ""
			default:
				lines = append(lines, line)
			}
		}
		return sc.Err()
	})
	return out, err
}

// A Copy is a test's copy of a block.
type Copy struct {
	Where string // file:line of its marker
	Code  string
}

// dedent removes the tabs that every non-empty line starts with.
func dedent(lines []string) string {
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if common < 0 || n < common {
			common = n
		}
	}
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			lines[i] = l[common:]
		}
		lines[i] = strings.TrimRight(lines[i], " \t")
	}
	return strings.Join(lines, "\n")
}
