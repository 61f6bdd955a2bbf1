package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
// chart is well-formed SVG with one panel per policy. Both say the settings
// the run used beside the library's defaults and what "wasted" counts, and
// the chart counts in the unit of its y axis.
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
	require.Equal(t, c.clients, waited.delivered, "the default set-up: every delivery waits for the server, and is made")
	guarded := results[len(results)-3]
	require.Equal(t, "full jitter + budget + breaker, no wait", guarded.name)
	require.Less(t, guarded.delivered, c.clients, "without the wait or a dispatcher the budget hands failures back")
	line := tableLine(t, out.String(), redriveName)
	require.Equal(t, strconv.Itoa(c.clients), line[len(line)-4], "the printed row's delivered column")

	// The table says what the run used, beside the library's defaults,
	// and what each column counts.
	settings := "100 deliveries per policy, endpoint down 300 ms; policies with base 20 ms, cap 200 ms, 8 attempts " +
		"(the library's defaults: base 200 ms, cap 30 s, 4 attempts)"
	require.Equal(t, settings, settingsLine(c))
	require.Contains(t, out.String(), settings)
	require.Contains(t, out.String(), layersLine)
	require.Contains(t, out.String(), "\nwasted         "+wastedDef+"\n")
	require.Contains(t, out.String(), "\npeak recov.    the busiest 100 ms of all attempts from its recovery on, in requests per second\n")

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
		lines, rects []int    // per panel
		texts        []string // every text's content, in order
		inText       bool
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
			if tok.Name.Local == "text" {
				texts, inText = append(texts, ""), true
			}
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
			if inText {
				texts[len(texts)-1] += string(tok)
			}
		case xml.EndElement:
			if tok.Name.Local == "text" {
				inTitle, inText = false, false
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

	// The legend: the settings beside the library's defaults, which rows
	// have the library's budget, breaker and wait, and what "wasted"
	// counts, as the server counts it.
	require.Contains(t, texts, settings)
	require.Contains(t, texts, layersLine)
	require.Contains(t, texts, "Shaded: endpoint down. Dashed: 99% delivered. Wasted: "+wastedDef+".")
	require.Contains(t, wastedDef, "after a delivery's first")
	require.Contains(t, wastedDef, "while it was down")
	// One unit for counts, the y axis's, and one for times, the x axis's:
	// nothing per second, and each panel's peak is its plotted peak.
	require.Contains(t, texts, "Attempts reaching the endpoint per 100 ms under each retry policy")
	require.Contains(t, texts, "attempts per 100 ms, same scale in every panel")
	require.Contains(t, texts, "seconds since the outage began")
	for _, s := range texts {
		require.NotContains(t, s, "/s", "a count per second on a chart that counts per 100 ms")
	}
	recovery := int(c.outage / bucket)
	for _, r := range results {
		peak := 0
		for _, n := range r.perBucket[min(recovery, len(r.perBucket)):] {
			peak = max(peak, n)
		}
		require.Contains(t, texts, summary(r, c.clients))
		require.Contains(t, summary(r, c.clients), fmt.Sprintf("peak after recovery %s per 100 ms", thousands(peak)), r.name)
		require.Contains(t, summary(r, c.clients), fmt.Sprintf("wasted %s ", thousands(r.wasted)), r.name)
		if r.t99 >= 0 {
			require.Contains(t, texts, fmt.Sprintf("99%% delivered at %.1f s", r.t99.Seconds()), r.name)
		}
	}
}

// TestLibraryDefaults holds the defaults that the labels quote to the
// library's: a zero base and cap mean the defaults, and a transport that
// retries at once makes the default number of attempts. It may not wait,
// which leaves out the ride-out of a young failure: up to two attempts
// more, part of the default wait, not of the attempts.
func TestLibraryDefaults(t *testing.T) {
	require.Equal(t, libBase, retryhttp.Exponential{}.Delay(1, 0), "the first retry's bound is the base")
	require.Equal(t, libCap, retryhttp.FullJitter{}.MaxDelay())
	var calls atomic.Int64
	next := roundTripper(func(req *http.Request) (*http.Response, error) {
		calls.Add(1)
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	})
	req, err := http.NewRequest(http.MethodGet, "http://tenant.example/hook", nil)
	require.NoError(t, err)
	resp, err := retryhttp.New(next, retryhttp.WithPolicy(noBackoff{}), retryhttp.WithMaxWait(0)).RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.EqualValues(t, libAttempts, calls.Load(), "attempts by default")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0 s", 75 * time.Millisecond: "75 ms", 200 * time.Millisecond: "200 ms", 1500 * time.Millisecond: "1.5 s",
		3 * time.Second: "3 s", 30 * time.Second: "30 s", 500 * time.Microsecond: "500µs",
	} {
		require.Equal(t, want, span(d), "span(%v)", d)
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
