package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild() // the program itself, for TestMainWritesOnlyTheTableToStdout
	}
	goleak.VerifyTestMain(m)
}

// TestRunWritesTableAndSVG runs the demo at a small size and checks the
// table names every policy, the redrive row made every delivery, and the
// chart is well-formed SVG with one panel per policy.
func TestRunWritesTableAndSVG(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "herd.svg")
	var out bytes.Buffer
	c := config{clients: 100, outage: 300 * time.Millisecond, base: 20 * time.Millisecond, cap: 200 * time.Millisecond,
		attempts: 8, redrive: 5 * time.Second, svg: svg}
	results, err := run(c, &out)
	require.NoError(t, err)
	t.Log("\n" + out.String())
	ps := policies(c)
	require.Len(t, results, len(ps))
	for i, p := range ps {
		require.Contains(t, out.String(), p.name)
		require.Equal(t, p.name, results[i].name)
	}

	// The redrive row: a dispatcher that sends every failure again at the
	// instant RetryAt advises delivers all, where the same transport
	// without it delivers none within its attempts. The 300 ms outage is
	// too short to trip the default breaker (2 s of failures), so RetryAt
	// advises by the budget only.
	last := results[len(results)-1]
	require.Equal(t, redriveName, last.name)
	require.NotNil(t, last.redrive)
	require.Equal(t, c.clients, last.delivered, "redrive: every delivery made, by the server's count")
	require.Zero(t, last.redrive.gaveUp)
	require.Positive(t, last.redrive.redrives)
	require.Positive(t, last.redrive.advice[retryhttp.ReasonBudgetExhausted.String()], "redrive: RetryAt advised by the budget")
	require.Greater(t, last.wasted, 0)
	// Every first attempt failed, so each delivery's 200 came on a later
	// attempt, redriven or retried: the rest of those failed.
	require.Equal(t, c.clients+last.wasted+last.delivered, last.attempts, "redrive: attempts = first attempts + wasted + the 200s")
	waited := results[len(results)-2]
	require.Equal(t, waitName, waited.name)
	require.Equal(t, c.clients, waited.delivered, "the defaults: every delivery waits for the server, and is made")
	guarded := results[len(results)-3]
	require.Equal(t, "full jitter + budget + breaker, no wait", guarded.name)
	require.Less(t, guarded.delivered, c.clients, "without the wait or a dispatcher the budget hands failures back")
	line := tableLine(t, out.String(), redriveName)
	require.Equal(t, strconv.Itoa(c.clients), line[len(line)-4], "the printed row's delivered column")

	// The chart: root svg; one panel per policy, titled with its name,
	// with one line and one shaded outage each.
	f, err := os.Open(svg)
	require.NoError(t, err)
	defer f.Close()
	dec := xml.NewDecoder(f)
	var (
		root         string
		depth        int  // inside a panel: its depth; 0 outside
		wantTitle    bool // in a panel whose title has not been read
		inTitle      bool // in the panel's first text: its title
		titles       []string
		lines, rects []int // per panel
	)
	for level := 0; ; {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "herd.svg must be well-formed XML")
		switch tok := tok.(type) {
		case xml.StartElement:
			level++
			if root == "" {
				root = tok.Name.Local
				require.Equal(t, "http://www.w3.org/2000/svg", tok.Name.Space)
			}
			class := attr(tok, "class")
			switch {
			case tok.Name.Local == "text" && wantTitle:
				// The panel's first text is its title.
				wantTitle, inTitle = false, true
			case tok.Name.Local == "g" && class == "panel":
				require.Zero(t, depth, "panels do not nest")
				depth = level
				lines, rects = append(lines, 0), append(rects, 0)
				titles = append(titles, "")
				wantTitle = true
			case tok.Name.Local == "polyline":
				require.NotZero(t, depth, "every line is in a panel")
				lines[len(lines)-1]++
				points := strings.Fields(attr(tok, "points"))
				require.Greater(t, len(points), 2)
				for _, p := range points {
					xy := strings.Split(p, ",")
					require.Len(t, xy, 2, "point %q", p)
					for _, v := range xy {
						_, err := strconv.ParseFloat(v, 64)
						require.NoError(t, err, "point %q", p)
					}
				}
			case tok.Name.Local == "rect" && class == "outage":
				require.NotZero(t, depth, "every shaded outage is in a panel")
				rects[len(rects)-1]++
				w, err := strconv.ParseFloat(attr(tok, "width"), 64)
				require.NoError(t, err)
				require.Positive(t, w, "the outage has a width")
			}
		case xml.CharData:
			if inTitle {
				titles[len(titles)-1] += string(tok)
			}
		case xml.EndElement:
			if tok.Name.Local == "text" {
				inTitle = false
			}
			if level == depth {
				depth = 0
			}
			level--
		}
	}
	require.Equal(t, "svg", root)
	require.Len(t, titles, len(ps), "one panel per policy")
	for i, p := range ps {
		require.Equal(t, p.name, titles[i], "panel %d's title", i)
		require.Equal(t, 1, lines[i], "panel %q: one line", p.name)
		require.Equal(t, 1, rects[i], "panel %q: one shaded outage", p.name)
	}
}

// tableLine returns the fields after the policy's name on its line of the
// printed table.
func tableLine(t *testing.T, out, name string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return strings.Fields(strings.TrimPrefix(l, name))
		}
	}
	t.Fatalf("no table line for %q", name)
	return nil
}

func attr(se xml.StartElement, name string) string {
	for _, a := range se.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func TestRunRejectsBadFlags(t *testing.T) {
	_, err := run(config{clients: 0, attempts: 1, base: 1, cap: 1}, io.Discard)
	require.Error(t, err)
	_, err = run(config{clients: 1, attempts: 1, base: 1, cap: 1, redrive: -1}, io.Discard)
	require.Error(t, err)
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct {
		v    float64
		n    int
		want float64
	}{{3037, 4, 1000}, {845, 4, 250}, {1, 4, 0.25}, {15.2, 10, 2}, {4.1, 10, 0.5}, {10, 10, 1}, {0, 4, 1}} {
		require.InDelta(t, c.want, niceStep(c.v, c.n), 1e-9, "niceStep(%v, %d)", c.v, c.n)
	}
	require.Equal(t, "12,345", thousands(12345))
	require.Equal(t, "999", thousands(999))
	require.Equal(t, "1,000,000", thousands(1_000_000))
	require.Equal(t, "-1,000", thousands(-1000))
}
