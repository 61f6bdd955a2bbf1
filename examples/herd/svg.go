package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// The chart's layout, in pixels: small multiples, one panel per policy,
// stacked, on shared axes.
const (
	svgWidth    = 960
	svgLeft     = 78 // room for the y tick labels and the axis title
	svgRight    = 24
	svgHeader   = 90 // the chart's title, its settings and its legend
	svgTitleH   = 20 // each panel's title, above its plot
	svgPlotH    = 72 // each panel's plot
	svgGap      = 14 // between a plot and the next panel's title
	svgFooter   = 46 // the x tick labels and the axis title
	svgPlotW    = svgWidth - svgLeft - svgRight
	svgPanelH   = svgTitleH + svgPlotH + svgGap
	svgLine     = "#1f4e79"
	svgArea     = "#c6dbef"
	svgDown     = "#f6d5d1"
	svgGrid     = "#e3e3e3"
	svgMaxTicks = 4 // at most this many intervals on the y axis
)

// writeSVG draws, for each policy, the attempts that reached the endpoint
// in each 100 ms bucket, as small multiples: one panel per policy, stacked,
// on one y scale with round ticks and one x scale in seconds, the outage
// shaded in every panel, the policy's name as the panel's title. Above the
// panels, the settings every row ran with, beside the library's defaults,
// and what the marks and the figures mean; every count is per 100 ms, as
// on the y axis, and every time in seconds since the outage began, as on
// the x axis. The SVG is self-contained: a browser or an image converter
// opens it as it is.
func writeSVG(w io.Writer, rs []result, c config) {
	outage, deliveries := c.outage, c.clients
	buckets, peak := 1, 1
	for _, r := range rs {
		buckets = max(buckets, len(r.perBucket))
		for _, n := range r.perBucket {
			peak = max(peak, n)
		}
	}
	// The x axis runs to a whole tick past the longest run.
	span := float64(buckets) * bucket.Seconds()
	xStep := niceStep(span, 10)
	xEnd := math.Ceil(span/xStep-1e-9) * xStep
	yStep := max(niceStep(float64(peak), svgMaxTicks), 1) // counts: whole ticks
	yTop := math.Ceil(float64(peak)/yStep-1e-9) * yStep

	height := svgHeader + len(rs)*svgPanelH + svgFooter
	x := func(seconds float64) float64 { return svgLeft + seconds*svgPlotW/xEnd }

	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, height)
	fmt.Fprintf(&s, `<text x="%d" y="22" font-size="15" font-weight="bold">Attempts reaching the endpoint per 100 ms under each retry policy</text>`+"\n", svgLeft)
	for k, line := range []string{settingsLine(c), layersLine, "Shaded: endpoint down. Dashed: 99% delivered. Wasted: " + wastedDef + "."} {
		fmt.Fprintf(&s, `<text class="legend" x="%d" y="%d" fill="#555">%s</text>`+"\n", svgLeft, 40+16*k, html.EscapeString(line))
	}

	for i, r := range rs {
		top := float64(svgHeader + i*svgPanelH + svgTitleH) // the plot's top
		bot := top + svgPlotH
		y := func(n float64) float64 { return bot - n*svgPlotH/yTop }
		fmt.Fprintf(&s, `<g class="panel">`+"\n")
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", svgLeft, top-6, html.EscapeString(r.name))
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", svgWidth-svgRight, top-6, html.EscapeString(summary(r, deliveries)))
		fmt.Fprintf(&s, `<rect class="outage" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n",
			x(0), top, x(min(outage.Seconds(), xEnd))-x(0), svgPlotH, svgDown)
		for k := 0; float64(k)*yStep <= yTop+yStep/2; k++ {
			v := float64(k) * yStep
			fmt.Fprintf(&s, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", svgLeft, y(v), svgWidth-svgRight, y(v), svgGrid)
			fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", svgLeft-6, y(v)+4, thousands(int(v)))
		}
		for k := 0; float64(k)*xStep <= xEnd+xStep/2; k++ {
			v := float64(k) * xStep
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x(v), top, x(v), bot, svgGrid)
		}
		// One bucket is one step: a flat segment over its 100 ms. The
		// line starts and ends on the baseline, so its fill is the area
		// under it.
		var pts strings.Builder
		fmt.Fprintf(&pts, "%.1f,%.1f", x(0), bot)
		for b, n := range r.perBucket {
			t0, t1 := float64(b)*bucket.Seconds(), float64(b+1)*bucket.Seconds()
			fmt.Fprintf(&pts, " %.1f,%.1f %.1f,%.1f", x(t0), y(float64(n)), x(t1), y(float64(n)))
		}
		fmt.Fprintf(&pts, " %.1f,%.1f", x(float64(len(r.perBucket))*bucket.Seconds()), bot)
		fmt.Fprintf(&s, `<polyline fill="%s" stroke="%s" stroke-width="1.2" stroke-linejoin="round" points="%s"/>`+"\n", svgArea, svgLine, pts.String())
		if r.t99 >= 0 {
			// When 99% had their 200: a mark that reads where the line is
			// too low to see on the shared scale.
			t := x(r.t99.Seconds())
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#2a7a2a" stroke-dasharray="3 2"/>`+"\n", t, top, t, bot)
			lx, anchor := t+3, "start"
			if lx+125 > svgWidth-svgRight {
				lx, anchor = t-3, "end" // no room on the right: label on the left
			}
			fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" font-size="10" fill="#2a7a2a" text-anchor="%s" %s>99%% delivered at %s</text>`+"\n",
				lx, top+11, anchor, halo("white"), fmt.Sprintf("%.1f s", r.t99.Seconds()))
		}
		if i == 0 && outage > 0 {
			fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="10" fill="#a33" %s>endpoint down</text>`+"\n",
				x(min(outage.Seconds(), xEnd))-4, top+12, halo(svgDown))
		}
		fmt.Fprintf(&s, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#888"/>`+"\n", svgLeft, bot, svgWidth-svgRight, bot)
		fmt.Fprintf(&s, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#888"/>`+"\n", svgLeft, top, svgLeft, bot)
		s.WriteString("</g>\n")
	}

	// The x axis, once, under the last panel.
	axis := float64(svgHeader + len(rs)*svgPanelH - svgGap)
	for k := 0; float64(k)*xStep <= xEnd+xStep/2; k++ {
		v := float64(k) * xStep
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888"/>`+"\n", x(v), axis, x(v), axis+4)
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x(v), axis+17, seconds(v))
	}
	fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle">seconds since the outage began</text>`+"\n", svgLeft+svgPlotW/2.0, axis+36)
	mid := float64(svgHeader) + float64(len(rs)*svgPanelH)/2
	fmt.Fprintf(&s, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">attempts per 100 ms, same scale in every panel</text>`+"\n", mid)
	s.WriteString("</svg>\n")
	_, _ = io.WriteString(w, s.String())
}

// halo is the attributes that outline a label in its background's colour,
// so that a grid line behind it does not cross it.
func halo(background string) string {
	return fmt.Sprintf(`stroke="%s" stroke-width="3" paint-order="stroke"`, background)
}

// niceStep returns a round step (1, 2, 2.5 or 5 times a power of ten) that
// divides [0, v] into at most n intervals.
func niceStep(v float64, n int) float64 {
	if v <= 0 {
		return 1
	}
	raw := v / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw-1e-9 {
			return m * mag
		}
	}
	return 10 * mag
}

// summary is a panel's figures, after its title. The peak is in the y
// axis's unit, attempts per 100 ms, so that it reads off the panel; the
// table has it per second. When 99% were delivered is on the dashed line.
func summary(r result, deliveries int) string {
	peak := int(math.Round(r.peakRecoveryRPS * bucket.Seconds()))
	return fmt.Sprintf("delivered %s of %s · wasted %s · peak after recovery %s per 100 ms",
		thousands(r.delivered), thousands(deliveries), thousands(r.wasted), thousands(peak))
}

// seconds formats a tick in seconds: whole seconds without decimals.
func seconds(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f s", v)
	}
	return fmt.Sprintf("%.1f s", v)
}

// thousands formats n with commas: 12,345.
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
