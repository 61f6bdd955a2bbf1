package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// regenerate is the command that rewrites every API file of the
// repository, named in the message of a failed check.
const regenerate = "bash .ci/apicheck -w"

// apiMain prints the exported API of the module in a directory, or, with
// -check, compares it with a file and fails with the lines that differ, or,
// with -o, writes it to a file.
func apiMain(args []string) error {
	fl := flag.NewFlagSet("api", flag.ExitOnError)
	check := fl.String("check", "", "fail, with a diff, if the API differs from this file")
	out := fl.String("o", "", "write the API to this file")
	_ = fl.Parse(args)
	if fl.NArg() != 1 || *check != "" && *out != "" {
		return errors.New("api: need one module directory, and at most one of -check and -o")
	}
	modPath, lines, err := moduleAPI(fl.Arg(0))
	if err != nil {
		return err
	}
	text := strings.Join(lines, "\n") + "\n"
	switch {
	case *out != "":
		return os.WriteFile(*out, []byte(text), 0o644)
	case *check != "":
		old, err := os.ReadFile(*check)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if string(old) == text {
			fmt.Printf("%s: exported API as in %s (%d lines)\n", modPath, *check, len(lines))
			return nil
		}
		fmt.Printf("--- %s\n+++ exported API of the tree\n%s", *check, lineDiff(string(old), text))
		return fmt.Errorf("exported API of %s changed: if deliberate, run %s and add the change to CHANGELOG.md in the same commit", modPath, regenerate)
	default:
		_, err := os.Stdout.WriteString(text)
		return err
	}
}

// listedPackage is what "go list -json" says of a package that this tool
// needs.
type listedPackage struct {
	ImportPath string
	Name       string
	Export     string // the file of its compiled export data
	DepOnly    bool   // a dependency, not matched by the pattern
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// moduleAPI returns the module's path and its exported API, one sorted
// line per declaration, for every package of the module but main packages,
// internal ones and tests. The types come from the compiler's export data,
// which "go list -export" builds (offline once the module cache holds the
// dependencies): the listing then shows what a user's compiler sees, with
// every type resolved and every constant's value computed, and needs no
// type checking of the dependencies from source.
func moduleAPI(dir string) (string, []string, error) {
	m, err := readGoMod(dir)
	if err != nil {
		return "", nil, err
	}
	out, err := goCommand(dir, "list", "-e", "-export", "-deps",
		"-json=ImportPath,Name,Export,DepOnly,Module,Error", "./...")
	if err != nil {
		return "", nil, err
	}
	exports := map[string]string{}
	var targets []string
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			return "", nil, fmt.Errorf("%s: go list: %v", dir, err)
		}
		if p.Error != nil {
			return "", nil, fmt.Errorf("%s: %s: %s", dir, p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly && p.Module != nil && p.Module.Path == m.Module.Path && p.Name != "main" && !internal(p.ImportPath) {
			targets = append(targets, p.ImportPath)
		}
	}
	if len(targets) == 0 {
		return "", nil, fmt.Errorf("%s: no package with an exported API", dir)
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(p string) (io.ReadCloser, error) {
		f := exports[p]
		if f == "" {
			return nil, fmt.Errorf("no export data for %s", p)
		}
		return os.Open(f)
	})
	var lines []string
	for _, t := range targets {
		pkg, err := imp.Import(t)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %v", t, err)
		}
		// "pkg retryhttp" for the module's root, "pkg retryhttp/sub" below.
		label := path.Base(m.Module.Path) + strings.TrimPrefix(t, m.Module.Path)
		lines = append(lines, packageAPI(label, pkg)...)
	}
	slices.Sort(lines)
	return m.Module.Path, slices.Compact(lines), nil
}

// internal reports whether importPath is an internal package, which no
// other module may import.
func internal(importPath string) bool {
	return slices.Contains(strings.Split(importPath, "/"), "internal")
}

// lineDiff lists the lines only in old, marked "-", and the lines only in
// new, marked "+": both are sorted sets of lines, so that is the whole
// difference.
func lineDiff(old, new string) string {
	count := map[string]int{}
	for l := range strings.SplitSeq(strings.TrimSuffix(old, "\n"), "\n") {
		count[l]--
	}
	for l := range strings.SplitSeq(strings.TrimSuffix(new, "\n"), "\n") {
		count[l]++
	}
	var diff []string
	for l, n := range count {
		switch {
		case l == "":
		case n < 0:
			diff = append(diff, "-"+l)
		case n > 0:
			diff = append(diff, "+"+l)
		}
	}
	// Sorted by the line itself, so a changed declaration's - and + sit
	// together.
	slices.SortFunc(diff, func(a, b string) int {
		if c := strings.Compare(a[1:], b[1:]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return strings.Join(diff, "\n") + "\n"
}

// packageAPI returns the lines of the exported declarations of pkg.
func packageAPI(label string, pkg *types.Package) []string {
	w := &apiWriter{p: printer{pkg: pkg}, prefix: "pkg " + label + ", "}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		if obj := scope.Lookup(name); obj.Exported() {
			w.object(obj)
		}
	}
	return w.lines
}
