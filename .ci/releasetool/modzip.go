package main

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Limits of a module zip that the go command enforces when it downloads
// one (go.dev/ref/mod#zip-path-size-constraints).
const (
	maxZipFile = 500 << 20 // the zip, and the sum of its files' sizes
	maxGoMod   = 16 << 20
	maxLICENSE = 16 << 20
)

// zipFile is one file of a module zip: its path relative to the module
// root, and its contents.
type zipFile struct {
	name string
	data []byte
}

// moduleFiles returns the files of the module rooted at dir, at version,
// as the module proxy would serve them: the files git would commit (those
// tracked, and those untracked but not ignored, as they are in the working
// tree), or, outside a git work tree, every file; less the files of nested
// modules (any directory with a go.mod of its own), of vendored packages,
// symbolic links and other irregular files. When the module is in a
// subdirectory of repo and has no LICENSE, the repository's root LICENSE
// is added, as the go command does when it builds a nested module's zip
// from the repository. A file the go command would refuse to extract (its
// name, a case-insensitive collision, a size) is an error.
func moduleFiles(repo, dir string) ([]zipFile, error) {
	names, err := listFiles(dir)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)

	// A go.mod below the root makes its directory another module.
	nested := map[string]bool{}
	for _, p := range names {
		if d, base := path.Split(p); d != "" && strings.EqualFold(base, "go.mod") {
			if info, err := os.Lstat(filepath.Join(dir, p)); err == nil && info.Mode().IsRegular() {
				nested[d] = true
			}
		}
	}
	inNested := func(p string) bool {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if nested[d+"/"] {
				return true
			}
		}
		return false
	}

	var (
		files   []zipFile
		invalid []string
		total   int64
	)
	seen := collisions{}
	for _, p := range names {
		info, err := os.Lstat(filepath.Join(dir, p))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // tracked, but deleted from the working tree
		case err != nil:
			return nil, err
		case inNested(p), vendored(p), p == ".hg_archival.txt", !info.Mode().IsRegular():
			// Left out of the zip by the go command too: another
			// module's files, vendored packages, hg's archive stamp,
			// symbolic links.
			continue
		}
		if err := checkFilePath(p); err != nil {
			invalid = append(invalid, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		if strings.EqualFold(p, "go.mod") && p != "go.mod" {
			invalid = append(invalid, p+": the go.mod file must be named go.mod")
			continue
		}
		if err := seen.add(p, false); err != nil {
			invalid = append(invalid, err.Error())
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		files = append(files, zipFile{name: p, data: data})
		total += int64(len(data))
	}

	sub, err := filepath.Rel(repo, dir)
	if err != nil {
		return nil, err
	}
	if sub != "." && !slices.ContainsFunc(files, func(f zipFile) bool { return f.name == "LICENSE" }) {
		data, err := os.ReadFile(filepath.Join(repo, "LICENSE"))
		switch {
		case err == nil:
			files = append(files, zipFile{name: "LICENSE", data: data})
			total += int64(len(data))
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
	}

	for _, f := range files {
		switch {
		case f.name == "go.mod" && len(f.data) > maxGoMod:
			invalid = append(invalid, fmt.Sprintf("go.mod: %d bytes, above the %d the go command accepts", len(f.data), maxGoMod))
		case f.name == "LICENSE" && len(f.data) > maxLICENSE:
			invalid = append(invalid, fmt.Sprintf("LICENSE: %d bytes, above the %d the go command accepts", len(f.data), maxLICENSE))
		}
	}
	if total > maxZipFile {
		invalid = append(invalid, fmt.Sprintf("the files hold %d bytes, above the %d a module may hold", total, maxZipFile))
	}
	if len(invalid) > 0 {
		return nil, fmt.Errorf("%s: not a valid module zip:\n\t%s", dir, strings.Join(invalid, "\n\t"))
	}
	if !slices.ContainsFunc(files, func(f zipFile) bool { return f.name == "go.mod" }) {
		return nil, fmt.Errorf("%s: no go.mod", dir)
	}
	slices.SortFunc(files, func(a, b zipFile) int { return strings.Compare(a.name, b.name) })
	return files, nil
}

// writeZip returns the module zip of files for modPath at version: each
// file under "<modPath>@<version>/", in name order, compressed, with no
// time stamps or permissions, so that the same files always make the same
// bytes.
func writeZip(modPath, version string, files []zipFile) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: modPath + "@" + version + "/" + f.name, Method: zip.Deflate})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if buf.Len() > maxZipFile {
		return nil, fmt.Errorf("%s@%s: the zip is %d bytes, above the %d the go command accepts", modPath, version, buf.Len(), maxZipFile)
	}
	return buf.Bytes(), nil
}

// listFiles returns the slash paths, relative to dir, of the files git
// would commit under dir, or of every file when dir is not in a git work
// tree (or git is missing).
func listFiles(dir string) ([]string, error) {
	probe := exec.Command("git", "rev-parse", "--is-inside-work-tree")
	probe.Dir = dir
	if out, err := probe.Output(); err == nil && strings.TrimSpace(string(out)) == "true" {
		cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: git ls-files: %v", dir, err)
		}
		var names []string
		for p := range strings.SplitSeq(string(out), "\x00") {
			if p != "" {
				names = append(names, p)
			}
		}
		return names, nil
	}
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".hg", ".bzr", ".svn":
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	return names, err
}

// vendored reports whether the go command leaves p out of a module zip as
// part of a vendor directory: vendor/modules.txt, and the files of the
// packages below any directory named vendor (the rule of modules whose
// go.mod says go 1.24 or later, as every module here does).
func vendored(p string) bool {
	if p == "vendor/modules.txt" {
		return true
	}
	rest, ok := strings.CutPrefix(p, "vendor/")
	if !ok {
		i := strings.Index(p, "/vendor/")
		if i < 0 {
			return false
		}
		rest = p[i+len("/vendor/"):]
	}
	return strings.Contains(rest, "/")
}

// collisions finds paths that would be one on a case-insensitive file
// system, and paths that are both a file and a directory.
type collisions map[string]struct {
	path  string
	isDir bool
}

func (c collisions) add(p string, isDir bool) error {
	k := fold(p)
	if other, ok := c[k]; ok {
		switch {
		case other.path != p:
			return fmt.Errorf("%s: same name as %s on a case-insensitive file system", p, other.path)
		case other.isDir != isDir:
			return fmt.Errorf("%s: both a file and a directory", p)
		case !isDir:
			return fmt.Errorf("%s: listed twice", p)
		}
		return nil // a directory already seen through another file
	}
	c[k] = struct {
		path  string
		isDir bool
	}{p, isDir}
	if d := path.Dir(p); d != "." {
		return c.add(d, true)
	}
	return nil
}
