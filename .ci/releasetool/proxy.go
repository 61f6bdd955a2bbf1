package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// proxyMain builds the zip of each module directory at one version and
// lays them out as a GOPROXY directory: for a module path M (escaped) and
// version V, M/@v/V.info, V.mod, V.zip, and M/@v/list naming V
// (go.dev/ref/mod#goproxy-protocol). The go command reads it through
// GOPROXY=file://DIR.
func proxyMain(args []string) error {
	fl := flag.NewFlagSet("proxy", flag.ExitOnError)
	repo := fl.String("repo", ".", "the repository's root directory")
	version := fl.String("version", "", "the version to build, such as v0.1.0")
	out := fl.String("out", "", "the proxy directory to write")
	stamp := fl.String("time", "", "the version's time in the .info files (RFC 3339); default: the repository's HEAD commit time")
	_ = fl.Parse(args)
	if *version == "" || *out == "" || fl.NArg() == 0 {
		return errors.New("proxy: need -version, -out and at least one module directory")
	}
	if !validVersion(*version) {
		return fmt.Errorf("proxy: %q is not a release version like v1.2.3", *version)
	}
	t, err := versionTime(*repo, *stamp)
	if err != nil {
		return err
	}
	for _, dir := range fl.Args() {
		m, err := readGoMod(dir)
		if err != nil {
			return err
		}
		files, err := moduleFiles(*repo, dir)
		if err != nil {
			return err
		}
		zipData, err := writeZip(m.Module.Path, *version, files)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(files, func(f zipFile) bool { return f.name == "go.mod" })
		if err := writeVersion(*out, m.Module.Path, *version, t, files[i].data, zipData); err != nil {
			return err
		}
		fmt.Printf("%s@%s: %d files, %d bytes zipped, %s\n", m.Module.Path, *version, len(files), len(zipData), hash1(m.Module.Path+"@"+*version+"/", files))
	}
	return nil
}

// writeVersion writes the files that serve modPath at version from a
// proxy directory, and adds version to the module's list.
func writeVersion(out, modPath, version string, t time.Time, gomod, zipData []byte) error {
	ep, err := escapePath(modPath)
	if err != nil {
		return err
	}
	ev, err := escapePath(version)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(ep), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return err
	}
	list, err := os.ReadFile(filepath.Join(dir, "list"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(list))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	slices.Sort(versions)
	for name, data := range map[string][]byte{
		ev + ".info": append(info, '\n'),
		ev + ".mod":  gomod,
		ev + ".zip":  zipData,
		"list":       []byte(strings.Join(versions, "\n") + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// versionTime is the time the .info files give: stamp when set, else the
// commit time of the repository's HEAD, else a fixed instant, so that a
// rebuild of the same tree writes the same bytes.
func versionTime(repo, stamp string) (time.Time, error) {
	if stamp != "" {
		return time.Parse(time.RFC3339, stamp)
	}
	cmd := exec.Command("git", "log", "-1", "--format=%cI", "HEAD")
	cmd.Dir = repo
	if out, err := cmd.Output(); err == nil {
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out))); err == nil {
			return t, nil
		}
	}
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), nil
}

// validVersion reports whether v is a release version vMAJOR.MINOR.PATCH
// with no pre-release or build suffix: the only kind this repository tags.
func validVersion(v string) bool {
	rest, ok := strings.CutPrefix(v, "v")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" || len(p) > 1 && p[0] == '0' {
			return false
		}
	}
	return true
}

// hash1 is the "h1:" hash that go.sum records for a set of files
// (golang.org/x/mod/sumdb/dirhash.Hash1): the SHA-256 of the lines
// "<SHA-256 of the file, hex>  <prefix><name>\n", sorted by name, in
// base64. For a module's zip the prefix is "<module>@<version>/"; for its
// go.mod line the one file is named "go.mod" with no prefix.
func hash1(prefix string, files []zipFile) string {
	names := make([]string, 0, len(files))
	data := map[string][]byte{}
	for _, f := range files {
		names = append(names, prefix+f.name)
		data[prefix+f.name] = f.data
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%x  %s\n", sha256.Sum256(data[n]), n)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(h.Sum(nil))
}
