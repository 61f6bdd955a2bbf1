package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeTree creates the files under dir, by slash path.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sampleRepo is a repository with a root module and a nested one; it holds
// what a module zip must leave out: the nested module's files in the
// root's zip, vendored packages, a symbolic link, a VCS directory.
func sampleRepo(t *testing.T) string {
	repo := t.TempDir()
	writeTree(t, repo, map[string]string{
		"go.mod":                    "module example.com/m\n\ngo 1.26.0\n",
		"m.go":                      "package m\n",
		"LICENSE":                   "the license\n",
		"docs/notes.txt":            "notes\n",
		"sub/go.mod":                "module example.com/m/sub\n\ngo 1.26.0\n\nrequire example.com/m v1.0.0\n",
		"sub/sub.go":                "package sub\n\nimport _ \"example.com/m\"\n",
		"vendor/modules.txt":        "# vendored\n",
		"vendor/example.org/x/x.go": "package x\n",
		".hg/store":                 "not a module file\n",
	})
	if err := os.Symlink("m.go", filepath.Join(repo, "link.go")); err != nil {
		t.Fatal(err)
	}
	return repo
}

func zipNames(files []zipFile) []string {
	var names []string
	for _, f := range files {
		names = append(names, f.name)
	}
	return names
}

func TestModuleFilesLeavesOutWhatTheGoCommandDoes(t *testing.T) {
	repo := sampleRepo(t)
	root, err := moduleFiles(repo, repo)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := zipNames(root), []string{"LICENSE", "docs/notes.txt", "go.mod", "m.go"}; !slices.Equal(got, want) {
		t.Errorf("root module: %q, want %q", got, want)
	}
	sub, err := moduleFiles(repo, filepath.Join(repo, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := zipNames(sub), []string{"LICENSE", "go.mod", "sub.go"}; !slices.Equal(got, want) {
		t.Errorf("nested module (the root LICENSE added): %q, want %q", got, want)
	}
}

// TestModuleFilesFromGit: in a git work tree, ignored files stay out and
// untracked ones that git would commit are in.
func TestModuleFilesFromGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed: the install check lists files through it")
	}
	repo := sampleRepo(t)
	writeTree(t, repo, map[string]string{".gitignore": "*.out\n", "run.out": "output\n", "new.go": "package m\n"})
	cmd := exec.Command("git", "init", "-q", repo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	files, err := moduleFiles(repo, repo)
	if err != nil {
		t.Fatal(err)
	}
	// .hg/store is in: git would commit it, and the go command leaves out
	// VCS directories only when it zips a plain directory.
	if got, want := zipNames(files), []string{".gitignore", ".hg/store", "LICENSE", "docs/notes.txt", "go.mod", "m.go", "new.go"}; !slices.Equal(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}
}

func TestModuleFilesRejectsWhatTheGoCommandRefuses(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"a:b.go":       {"a:b.go": ""},
		"con.go":       {"con.go": ""},
		"trailing.":    {"trailing.": ""},
		"a star":       {"docs/a*.txt": ""},
		"only dots":    {"docs/.../x": ""},
		"case collide": {"README": "", "readme": ""},
		"GO.MOD":       {"GO.MOD": ""},
	} {
		t.Run(name, func(t *testing.T) {
			repo := t.TempDir()
			files["go.mod"] = "module example.com/m\n"
			writeTree(t, repo, files)
			_, err := moduleFiles(repo, repo)
			if err == nil || !strings.Contains(err.Error(), "not a valid module zip") {
				t.Fatalf("got %v, want the tree refused", err)
			}
		})
	}
}

func TestEscapePath(t *testing.T) {
	// The protocol's own example: upper case becomes '!' and lower case.
	got, err := escapePath("github.com/Azure/azure-sdk-for-go")
	if err != nil || got != "github.com/!azure/azure-sdk-for-go" {
		t.Errorf("escapePath: %q, %v", got, err)
	}
	if _, err := escapePath("example.com/a!b"); err == nil {
		t.Error("a '!' cannot be escaped, and must be refused")
	}
}

func TestValidVersion(t *testing.T) {
	for v, want := range map[string]bool{"v0.1.0": true, "v1.20.3": true, "0.1.0": false, "v0.1": false,
		"v0.01.0": false, "v0.1.0-rc.1": false, "v0.1.0+x": false, "v0..0": false} {
		if validVersion(v) != want {
			t.Errorf("validVersion(%q) = %v", v, !want)
		}
	}
}

// TestProxyServesTheGoCommand builds the sample's two modules into a proxy
// directory twice (the bytes must not change), then has the go command
// download both from it into a fresh module cache: it must accept the
// zips, and its hashes must be the ones hash1 computes, which the install
// check compares with go.sum.
func TestProxyServesTheGoCommand(t *testing.T) {
	repo := sampleRepo(t)
	build := func() string {
		out := t.TempDir()
		if err := proxyMain([]string{"-repo", repo, "-version", "v1.0.0", "-out", out, "-time", "2026-01-02T03:04:05Z",
			repo, filepath.Join(repo, "sub")}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	proxy, again := build(), build()
	for _, f := range []string{"example.com/m/@v/v1.0.0.zip", "example.com/m/sub/@v/v1.0.0.zip", "example.com/m/@v/v1.0.0.info"} {
		a, errA := os.ReadFile(filepath.Join(proxy, f))
		b, errB := os.ReadFile(filepath.Join(again, f))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: two builds differ (%v, %v)", f, errA, errB)
		}
	}

	cmd := exec.Command("go", "mod", "download", "-json", "example.com/m@v1.0.0", "example.com/m/sub@v1.0.0")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOPROXY=file://"+filepath.ToSlash(proxy), "GOMODCACHE="+t.TempDir(),
		"GOFLAGS=-modcacherw", "GONOSUMDB=example.com", "GOWORK=off", "GOTOOLCHAIN=local", "GO111MODULE=on")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for _, sub := range []string{"", "sub"} {
		var d struct {
			Path, Version, Info, Sum, GoModSum, Dir, Error string
		}
		if err := dec.Decode(&d); err != nil {
			t.Fatal(err)
		}
		if d.Error != "" {
			t.Fatalf("%s: %s", d.Path, d.Error)
		}
		zipHash, modHash, err := proxyHashes(proxy, d.Path, d.Version)
		if err != nil {
			t.Fatal(err)
		}
		if d.Sum != zipHash || d.GoModSum != modHash {
			t.Errorf("%s: the go command hashes %s and %s, hash1 %s and %s", d.Path, d.Sum, d.GoModSum, zipHash, modHash)
		}
		var info struct {
			Version string
			Time    time.Time
		}
		if data, err := os.ReadFile(d.Info); err != nil || json.Unmarshal(data, &info) != nil {
			t.Fatalf("%s: the .info file: %v", d.Path, err)
		}
		if info.Version != "v1.0.0" || !info.Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("%s: .info says %+v", d.Path, info)
		}
		license, err := os.ReadFile(filepath.Join(d.Dir, "LICENSE"))
		if err != nil || string(license) != "the license\n" {
			t.Errorf("%s (%q): LICENSE %q, %v", d.Path, sub, license, err)
		}
	}
}
