package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// series is one line of a chart.
type series struct {
	Label  string
	Points []point
}

type point struct {
	At time.Time
	V  float64
}

// chartSVG draws series over the last hour as an inline SVG, server-side:
// no JavaScript, no build step. It holds only numbers and escaped labels.
func chartSVG(title string, ss []series, now time.Time) template.HTML {
	const w, h, padL, padB = 320.0, 90.0, 34.0, 14.0
	start := now.Add(-time.Hour)
	maxV := 1.0
	for _, s := range ss {
		for _, p := range s.Points {
			maxV = max(maxV, p.V)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, w, h, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<title>%s</title>`, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<line class="axis" x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/>`, padL, h-padB, w, h-padB)
	fmt.Fprintf(&b, `<line class="axis" x1="%.0f" y1="2" x2="%.0f" y2="%.0f"/>`, padL, padL, h-padB)
	fmt.Fprintf(&b, `<text class="tick" x="%.0f" y="10" text-anchor="end">%s</text>`, padL-3, compact(maxV))
	fmt.Fprintf(&b, `<text class="tick" x="%.0f" y="%.0f" text-anchor="end">0</text>`, padL-3, h-padB)
	fmt.Fprintf(&b, `<text class="tick" x="%.0f" y="%.0f">-60m</text>`, padL, h-2)
	fmt.Fprintf(&b, `<text class="tick" x="%.0f" y="%.0f" text-anchor="end">now</text>`, w, h-2)
	for i, s := range ss {
		if len(s.Points) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.Points {
			x := padL + (w-padL)*float64(p.At.Sub(start))/float64(time.Hour)
			y := (h - padB) - (h-padB-4)*p.V/maxV
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", max(x, padL), y))
		}
		fmt.Fprintf(&b, `<polyline class="line s%d" points="%s"><title>%s</title></polyline>`, i%4, strings.Join(pts, " "),
			template.HTMLEscapeString(s.Label))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// compact prints a count briefly: 950, 1.2k, 3.4M.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// rate turns cumulative counts into a per-minute rate between samples
// (drops, as when the janitor deletes finished jobs, count as zero).
func rate(ps []point) []point {
	var out []point
	for i := 1; i < len(ps); i++ {
		dt := ps[i].At.Sub(ps[i-1].At).Minutes()
		if dt <= 0 {
			continue
		}
		out = append(out, point{At: ps[i].At, V: max(ps[i].V-ps[i-1].V, 0) / dt})
	}
	return out
}
