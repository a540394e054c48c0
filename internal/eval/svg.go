package eval

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strings"
)

// Charts are plain SVG written by hand: no dependency, readable in any
// browser, and small enough to commit next to a report.

// palette colours the policies after the baseline (grey).
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

const baselineColor = "#7f7f7f"

func policyColor(i int) string {
	if i == 0 {
		return baselineColor
	}
	return palette[(i-1)%len(palette)]
}

// svgDoc accumulates an SVG document.
type svgDoc struct {
	b    bytes.Buffer
	w, h int
}

func newSVG(w, h int) *svgDoc {
	d := &svgDoc{w: w, h: h}
	fmt.Fprintf(&d.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&d.b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	return d
}

func (d *svgDoc) text(x, y float64, anchor, extra, s string) {
	fmt.Fprintf(&d.b, `<text x="%.1f" y="%.1f" text-anchor="%s"%s>%s</text>`+"\n", x, y, anchor, extra, html.EscapeString(s))
}

func (d *svgDoc) line(x1, y1, x2, y2 float64, stroke string, width float64, extra string) {
	fmt.Fprintf(&d.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", x1, y1, x2, y2, stroke, width, extra)
}

func (d *svgDoc) rect(x, y, w, h float64, fill string) {
	fmt.Fprintf(&d.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, w, h, fill)
}

func (d *svgDoc) bytes() []byte {
	d.b.WriteString("</svg>\n")
	return d.b.Bytes()
}

// niceStep returns a step of 1, 2 or 5 × 10^k that splits [0, max] into
// at most n intervals.
func niceStep(maxV float64, n int) float64 {
	if maxV <= 0 {
		return 1
	}
	raw := maxV / float64(n)
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			return m * pow
		}
	}
	return 10 * pow
}

// shortNumber formats a tick label: 12000 → "12k", 1500000 → "1.5M".
func shortNumber(v float64) string {
	switch {
	case v >= 1e6:
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e6), "0"), ".") + "M"
	case v >= 1e3:
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e3), "0"), ".") + "k"
	}
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", v), "0"), ".0")
}

// TokensChart draws the tokens sent per request of the file's example
// conversation (FileReport.Example: its longest, or the one the user
// named), one line per policy, against the uncompressed line.
func TokensChart(f *FileReport) []byte {
	const W, H = 860, 460
	const left, right, top, bottom = 70.0, 190.0, 50.0, 50.0
	d := newSVG(W, H)
	pw, ph := W-left-right, H-top-bottom

	type series struct {
		name  string
		color string
		ys    []int
	}
	var ss []series
	maxY, maxX := 1, 1
	for i, p := range f.Policies {
		for _, c := range p.Conversations {
			if c.ID != f.Example {
				continue
			}
			s := series{name: p.Policy, color: policyColor(i)}
			for _, t := range c.Turns {
				s.ys = append(s.ys, t.Tokens)
				maxY = max(maxY, t.Tokens, t.TokensIn)
			}
			if i == 0 {
				s.name = "none (uncompressed)"
			}
			maxX = max(maxX, len(s.ys))
			ss = append(ss, s)
		}
	}
	d.text(W/2, 22, "middle", ` font-size="15" font-weight="bold"`, fmt.Sprintf("%s: tokens sent per request", f.File))
	id := f.Example
	if r := []rune(id); len(r) > 64 {
		id = "…" + string(r[len(r)-63:])
	}
	which := "the file's longest"
	if f.ExampleNamed {
		which = "chosen with --chart-conversation"
	}
	d.text(W/2, 40, "middle", ` fill="#555"`, fmt.Sprintf("conversation %s (%s: %d requests)", id, which, maxX))

	step := niceStep(float64(maxY), 6)
	top2 := math.Ceil(float64(maxY)/step) * step
	y := func(v float64) float64 { return top + ph - v/top2*ph }
	x := func(i int) float64 {
		if maxX <= 1 {
			return left
		}
		return left + float64(i)/float64(maxX-1)*pw
	}
	for v := 0.0; v <= top2+step/2; v += step {
		d.line(left, y(v), left+pw, y(v), "#e5e5e5", 1, "")
		d.text(left-6, y(v)+4, "end", "", shortNumber(v))
	}
	xstep := niceStep(float64(maxX), 8)
	for v := 0.0; v <= float64(maxX); v += xstep {
		i := int(v)
		if i == 0 {
			if xstep < 5 {
				continue // 1 would crowd the first step's label
			}
			i = 1
		}
		d.line(x(i-1), top+ph, x(i-1), top+ph+4, "#333", 1, "")
		d.text(x(i-1), top+ph+18, "middle", "", fmt.Sprint(i))
	}
	d.line(left, top, left, top+ph, "#333", 1, "")
	d.line(left, top+ph, left+pw, top+ph, "#333", 1, "")
	d.text(left+pw/2, H-12, "middle", "", "request (turn) number")
	d.text(18, top+ph/2, "middle", fmt.Sprintf(` transform="rotate(-90 18 %.1f)"`, top+ph/2), "tokens sent")

	for si, s := range ss {
		var pts []string
		for i, v := range s.ys {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(float64(v))))
		}
		extra := ""
		width := 2.0
		if si == 0 {
			extra = ` stroke-dasharray="6 4"`
			width = 2.5
		}
		fmt.Fprintf(&d.b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"/>`+"\n", s.color, width, extra, strings.Join(pts, " "))
		ly := top + 10 + float64(si)*20
		d.line(left+pw+15, ly, left+pw+40, ly, s.color, width, extra)
		d.text(left+pw+46, ly+4, "start", "", s.name)
	}
	return d.bytes()
}

// costParts are the segments of a cost bar, in drawing order.
var costParts = []struct {
	name, color string
	usd         func(CostReport) float64
}{
	{"input", "#1f4e79", func(c CostReport) float64 { return c.InputUSD }},
	{"cache read", "#8fbce6", func(c CostReport) float64 { return c.CacheReadUSD }},
	{"cache write", "#f0a030", func(c CostReport) float64 { return c.CacheWriteUSD }},
	{"output", "#7b4ea3", func(c CostReport) float64 { return c.OutputUSD }},
	{"summarizer LLM", "#222222", func(c CostReport) float64 { return c.SummarizerUSD }},
}

// CostChart draws each policy's session cost on the file under each cost
// model, as horizontal bars split into what is paid for (uncached input,
// cache reads, cache writes, output, the summarizer's calls), with the
// ratio to no compaction.
func CostChart(f *FileReport, models []CostModelInfo) []byte {
	const W = 860
	const left, right, top = 150.0, 170.0, 78.0
	const barH, gap, groupGap = 18.0, 4.0, 26.0
	n := len(f.Policies)
	groupH := float64(n)*(barH+gap) + 22
	H := int(top + float64(len(models))*(groupH+groupGap) + 6)
	d := newSVG(W, H)
	pw := W - left - right
	d.text(W/2, 22, "middle", ` font-size="15" font-weight="bold"`, fmt.Sprintf("%s: cost of every session, in dollars", f.File))
	d.text(W/2, 40, "middle", ` fill="#555"`, fmt.Sprintf("%d conversations, %s requests, at list prices; the ratio is to no compaction (none)", f.Conversations, thousands(f.Turns)))
	lx := left
	for _, part := range costParts {
		d.rect(lx, 52, 12, 12, part.color)
		d.text(lx+16, 62, "start", "", part.name)
		lx += 22 + float64(len(part.name))*6.5
	}
	y0 := top
	for k, m := range models {
		maxV := 0.0
		for _, p := range f.Policies {
			maxV = math.Max(maxV, p.Costs[k].TotalUSD)
		}
		if maxV == 0 {
			maxV = 1
		}
		d.text(left, y0+12, "start", ` font-weight="bold"`, fmt.Sprintf("%s (%s cache)", m.Model, m.Cache))
		y := y0 + 22
		for _, p := range f.Policies {
			c := p.Costs[k]
			d.text(left-8, y+barH-5, "end", "", p.Policy)
			x := left
			for _, part := range costParts {
				if w := part.usd(c) / maxV * pw; w > 0 {
					d.rect(x, y, w, barH, part.color)
					x += w
				}
			}
			d.text(x+6, y+barH-5, "start", "", fmt.Sprintf("%s  (%.2f×)", money(c.TotalUSD), c.VsNone))
			y += barH + gap
		}
		y0 += groupH + groupGap
	}
	return d.bytes()
}
