package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunWritesTableAndSVG runs the demo at a small size and checks the
// table names every policy and the chart is well-formed SVG with one line
// per policy.
func TestRunWritesTableAndSVG(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "herd.svg")
	var out bytes.Buffer
	c := config{clients: 100, outage: 300 * time.Millisecond, base: 20 * time.Millisecond, cap: 200 * time.Millisecond, attempts: 8, svg: svg}
	require.NoError(t, run(c, &out))
	t.Log("\n" + out.String())
	for _, p := range policies(c) {
		require.Contains(t, out.String(), p.name)
	}

	f, err := os.Open(svg)
	require.NoError(t, err)
	defer f.Close()
	dec := xml.NewDecoder(f)
	var root string
	lines := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "herd.svg must be well-formed XML")
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				require.Equal(t, "http://www.w3.org/2000/svg", se.Name.Space)
			}
			if se.Name.Local == "polyline" {
				lines++
			}
		}
	}
	require.Equal(t, "svg", root)
	require.Equal(t, len(policies(c)), lines, "one line per policy")
	require.True(t, strings.HasSuffix(svg, ".svg"))
}

func TestRunRejectsBadFlags(t *testing.T) {
	require.Error(t, run(config{clients: 0, attempts: 1, base: 1, cap: 1}, io.Discard))
}
