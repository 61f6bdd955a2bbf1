package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// goMod is what the go command's "go mod edit -json" reports of a go.mod
// file: parsing it through the go command keeps this module free of
// golang.org/x/mod.
type goMod struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
}

// readGoMod reads the go.mod file of the module rooted at dir.
func readGoMod(dir string) (goMod, error) {
	var m goMod
	out, err := goCommand(dir, "mod", "edit", "-json")
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return m, fmt.Errorf("%s: go mod edit -json: %v", dir, err)
	}
	if m.Module.Path == "" {
		return m, fmt.Errorf("%s/go.mod: no module path", dir)
	}
	return m, nil
}

// goCommand runs the go command in dir and returns its standard output; an
// error carries its standard error.
func goCommand(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: go %s: %v\n%s", dir, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
