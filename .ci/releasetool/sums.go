package main

import (
	"archive/zip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// sumsMain checks that a go.sum records, for each MODULE@VERSION given,
// the hashes of the zip and the go.mod that the proxy directory serves:
// proof that the build fetched these files, not a copy cached earlier or
// served by another proxy.
func sumsMain(args []string) error {
	fl := flag.NewFlagSet("sums", flag.ExitOnError)
	proxy := fl.String("proxy", "", "the proxy directory")
	gosum := fl.String("gosum", "", "the go.sum file to check")
	_ = fl.Parse(args)
	if *proxy == "" || *gosum == "" || fl.NArg() == 0 {
		return errors.New("sums: need -proxy, -gosum and at least one MODULE@VERSION")
	}
	sums, err := readGoSum(*gosum)
	if err != nil {
		return err
	}
	var bad []string
	for _, mv := range fl.Args() {
		mod, version, ok := strings.Cut(mv, "@")
		if !ok {
			return fmt.Errorf("sums: %q is not MODULE@VERSION", mv)
		}
		zipHash, modHash, err := proxyHashes(*proxy, mod, version)
		if err != nil {
			return err
		}
		for _, kw := range [][2]string{{mod + " " + version, zipHash}, {mod + " " + version + "/go.mod", modHash}} {
			key, want := kw[0], kw[1]
			switch got := sums[key]; got {
			case want:
				fmt.Printf("go.sum: %s %s, as built\n", key, got)
			case "":
				bad = append(bad, fmt.Sprintf("%s: no line in go.sum", key))
			default:
				bad = append(bad, fmt.Sprintf("%s: go.sum has %s, the zip built from the tree hashes to %s", key, got, want))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("sums: the build did not use the modules built from the tree:\n\t%s", strings.Join(bad, "\n\t"))
	}
	return nil
}

// readGoSum returns a go.sum's hashes by "module version" and
// "module version/go.mod".
func readGoSum(file string) (map[string]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			sums[f[0]+" "+f[1]] = f[2]
		}
	}
	return sums, nil
}

// proxyHashes returns the h1 hashes of the zip and the go.mod that the
// proxy directory serves for mod at version.
func proxyHashes(proxy, mod, version string) (zipHash, modHash string, err error) {
	ep, err := escapePath(mod)
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(proxy, filepath.FromSlash(ep), "@v")
	gomod, err := os.ReadFile(filepath.Join(dir, version+".mod"))
	if err != nil {
		return "", "", err
	}
	zr, err := zip.OpenReader(filepath.Join(dir, version+".zip"))
	if err != nil {
		return "", "", err
	}
	defer zr.Close()
	prefix := mod + "@" + version + "/"
	var files []zipFile
	for _, zf := range zr.File {
		name, ok := strings.CutPrefix(zf.Name, prefix)
		if !ok {
			return "", "", fmt.Errorf("%s: %s is outside %s", dir, zf.Name, prefix)
		}
		rc, err := zf.Open()
		if err != nil {
			return "", "", err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return "", "", err
		}
		files = append(files, zipFile{name: name, data: data})
	}
	return hash1(prefix, files), hash1("", []zipFile{{name: "go.mod", data: gomod}}), nil
}
