package main

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

var colours = []string{"#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// writeSVG draws req/s over time, one line per policy, with the outage
// shaded, in a self-contained SVG that a browser opens.
func writeSVG(w io.Writer, rs []result, outage time.Duration) {
	const (
		width, height         = 960, 480
		left, right, top, bot = 70, 220, 30, 50
		plotW, plotH          = width - left - right, height - top - bot
		perSecond             = float64(time.Second / bucket)
	)
	buckets, peak := 1, 1.0
	for _, r := range rs {
		buckets = max(buckets, len(r.perBucket))
		for _, n := range r.perBucket {
			peak = max(peak, float64(n)*perSecond)
		}
	}
	x := func(b float64) float64 { return left + b*plotW/float64(buckets) }
	y := func(rps float64) float64 { return top + plotH - rps*plotH/peak }

	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&s, `<text x="%d" y="18" font-size="14">Attempts reaching the endpoint (req/s, 100 ms buckets); shaded: endpoint down</text>`+"\n", left)
	fmt.Fprintf(&s, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#eee"/>`+"\n", x(0), top, x(float64(outage/bucket))-x(0), plotH)
	// Axes and ticks: a log-free linear scale, five steps each way.
	fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, top+plotH)
	for i := 0; i <= 5; i++ {
		v := peak * float64(i) / 5
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
		b := float64(buckets) * float64(i) / 5
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle">%.1f s</text>`+"\n", x(b), top+plotH+18, b/perSecond)
	}
	for i, r := range rs {
		c := colours[i%len(colours)]
		var pts strings.Builder
		for b := range buckets {
			n := 0
			if b < len(r.perBucket) {
				n = r.perBucket[b]
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(float64(b)+0.5), y(float64(n)*perSecond))
		}
		fmt.Fprintf(&s, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", c, strings.TrimSpace(pts.String()))
		ly := top + 16*i + 10
		fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", width-right+10, ly, width-right+30, ly, c)
		fmt.Fprintf(&s, `<text x="%d" y="%d">%s</text>`+"\n", width-right+36, ly+4, html.EscapeString(r.name))
	}
	s.WriteString("</svg>\n")
	_, _ = io.WriteString(w, s.String())
}
