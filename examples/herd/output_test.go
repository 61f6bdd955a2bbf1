package main

import (
	"bytes"
	"context"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// childEnv, when set, makes the test binary run main with the arguments
// it holds (space-separated) instead of the tests.
const childEnv = "HERD_TEST_MAIN_ARGS"

func runChild() {
	os.Args = append([]string{os.Args[0]}, strings.Fields(os.Getenv(childEnv))...)
	main()
	os.Exit(0)
}

// TestMainWritesOnlyTheTableToStdout runs the program itself, stdout and
// stderr each a pipe (not a terminal), as "go run ./examples/herd >
// table.txt" has them: stdout must hold the table and nothing of the
// progress, and stderr one plain progress line per policy, no carriage
// return anywhere.
func TestMainWritesOnlyTheTableToStdout(t *testing.T) {
	dir := t.TempDir()
	const clients = 50
	args := "-clients " + strconv.Itoa(clients) + " -outage 200ms -base 10ms -cap 100ms -attempts 6 -redrive 2s -svg " + filepath.Join(dir, "herd.svg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	// Without the race runtime's exit sleep, which only slows the child.
	cmd.Env = append(os.Environ(), childEnv+"="+args, "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("herd %s: %v\nstderr:\n%s", args, err, stderr.String())
	}
	t.Log("stdout:\n" + stdout.String())
	t.Log("stderr:\n" + stderr.String())

	out := stdout.String()
	if strings.Contains(out, "\r") || strings.Contains(out, " done ") || strings.Contains(out, ": done") {
		t.Errorf("progress text on stdout:\n%q", out)
	}
	ps := policies(config{redrive: 2 * time.Second})
	for _, p := range ps {
		line := tableLine(t, out, p.name) // fails the test if the row is missing
		if len(line) < 5 {
			t.Errorf("table row of %q: %q", p.name, line)
		}
	}
	if !strings.Contains(out, "chart: "+filepath.Join(dir, "herd.svg")) {
		t.Errorf("stdout does not name the chart:\n%s", out)
	}
	// The table's words are the chart's: the settings beside the
	// library's defaults, and what "wasted" counts.
	for _, want := range []string{
		"50 deliveries per policy, endpoint down 200 ms; policies with base 10 ms, cap 100 ms, 6 attempts (the library's defaults: base 200 ms, cap 30 s, 4 attempts)",
		layersLine,
		"wasted         " + wastedDef,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout does not say %q:\n%s", want, out)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "herd.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "Wasted: "+html.EscapeString(wastedDef)) {
		t.Errorf("the chart does not say what wasted counts")
	}

	errLines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if strings.Contains(stderr.String(), "\r") {
		t.Errorf("stderr is not a terminal, yet a line was redrawn in place:\n%q", stderr.String())
	}
	if len(errLines) != len(ps) {
		t.Fatalf("stderr: %d lines, want one per policy (%d):\n%s", len(errLines), len(ps), stderr.String())
	}
	for i, p := range ps {
		if want := p.name + ": done " + strconv.Itoa(clients) + "/" + strconv.Itoa(clients); errLines[i] != want {
			t.Errorf("stderr line %d: %q, want %q", i, errLines[i], want)
		}
	}
}

// TestProgressLiveRedrawsInPlace: on a terminal the progress is one line,
// redrawn with a carriage return, ended with a newline when the policy is
// done; the table's writer gets none of it.
func TestProgressLiveRedrawsInPlace(t *testing.T) {
	var progress bytes.Buffer
	c := config{clients: 20, outage: 0, base: 10 * time.Millisecond, cap: 100 * time.Millisecond, attempts: 3,
		progress: &progress, live: true}
	ep := newEndpoint(c.outage)
	defer ep.srv.Close()
	p := policies(c)[3]
	if _, err := runPolicy(c, ep, p); err != nil {
		t.Fatal(err)
	}
	got := progress.String()
	last := got[strings.LastIndex(got, "\r"):]
	if !strings.HasPrefix(last, "\r"+p.name) || !strings.Contains(last, "done 20/20") || !strings.HasSuffix(last, "\n") {
		t.Errorf("live progress %q: want it to end with a redrawn %q line and a newline", got, p.name+" done 20/20")
	}
	if strings.Count(got, "\n") != 1 {
		t.Errorf("live progress %q: want a single line, redrawn", got)
	}
}

// TestTerminal: a regular file is not a terminal, so a run whose stderr is
// redirected to one writes plain lines; a character device is taken for
// one (/dev/null is one too, and discards the redraws).
func TestTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if !terminal(null) {
		t.Errorf("%s, a character device, is not taken for a terminal", os.DevNull)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if terminal(f) {
		t.Error("a regular file is taken for a terminal")
	}
}
