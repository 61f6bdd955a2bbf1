package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// requiresMain reports, for every module of the repository, what it
// requires of the repository's other modules, and fails when a requirement
// is not the version being released. Inside the repository a replace
// directive hides such a requirement; outside, a user's go command fetches
// exactly the version required, so a sub-module requiring anything else
// cannot be installed, or installs against other code than it was tested
// with.
func requiresMain(args []string) error {
	fl := flag.NewFlagSet("requires", flag.ExitOnError)
	repo := fl.String("repo", ".", "the repository's root directory (the root module's)")
	version := fl.String("version", "", "the version being released")
	_ = fl.Parse(args)
	if *version == "" {
		return errors.New("requires: need -version")
	}
	root, err := readGoMod(*repo)
	if err != nil {
		return err
	}
	ours := func(p string) bool { return p == root.Module.Path || strings.HasPrefix(p, root.Module.Path+"/") }

	var dirs []string
	err = filepath.WalkDir(*repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != *repo && (d.Name() == ".git" || d.Name() == "testdata") {
			// testdata holds sample modules of the tools' tests.
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && filepath.Dir(p) != filepath.Clean(*repo) {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		return err
	}

	var bad []string
	for _, dir := range dirs {
		m, err := readGoMod(dir)
		if err != nil {
			return err
		}
		if !ours(m.Module.Path) {
			continue // a tool's own module, such as this one
		}
		rel, _ := filepath.Rel(*repo, dir)
		for _, r := range m.Require {
			if !ours(r.Path) {
				continue
			}
			if r.Version == *version {
				fmt.Printf("%s/go.mod requires %s %s\n", rel, r.Path, r.Version)
				continue
			}
			msg := fmt.Sprintf("%s/go.mod requires %s %s, not %s (the version being released): a user's go command fetches %s@%s for %s and never sees the replace directive; fix: (cd %s && go mod edit -require=%s@%s)",
				rel, r.Path, r.Version, *version, r.Path, r.Version, m.Module.Path, rel, r.Path, *version)
			fmt.Println(msg)
			bad = append(bad, msg)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("requires: %d requirement(s) not on %s", len(bad), *version)
	}
	return nil
}
