package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/compactd/compactd/internal/requestlog"
)

// timelineLimit is how many of a conversation's latest requests its page
// lists and charts.
const timelineLimit = 200

// Chart geometry of the timeline (SVG user units).
const (
	chartW, chartH  = 800.0, 160.0
	chartPadX       = 8.0
	chartPadTop     = 8.0
	chartPadBottom  = 4.0
	chartMaxPoints  = timelineLimit
	chartMinTokenTo = 1000 // the y axis spans at least this many tokens
)

// timeline is the conversation page's request log section.
type timeline struct {
	Requests []requestlog.Record // oldest first
	Money    Money
	Saved    float64 // FullUSD - PaidUSD
	Warning  string
	// Chart: polyline points of the tokens sent before and after
	// compaction per request, the window's line (its y, or -1), and the
	// y axis's top.
	Before, After string
	WindowY       float64
	Top           int
	W, H          float64
}

// timelineOf reads a conversation's latest records for its page (nil
// without a request log).
func (s *Server) timelineOf(ctx context.Context, id string) *timeline {
	if s.opts.Requests == nil {
		return nil
	}
	p, err := s.opts.Requests.List(ctx, id, timelineLimit, "")
	if err != nil {
		return &timeline{Warning: err.Error()}
	}
	recs := p.Requests
	for i, j := 0, len(recs)-1; i < j; i, j = i+1, j-1 {
		recs[i], recs[j] = recs[j], recs[i]
	}
	t := &timeline{Requests: recs, Money: moneyOf(recs), Warning: p.Warning, W: chartW, H: chartH, WindowY: -1}
	t.Saved = t.Money.FullUSD - t.Money.PaidUSD
	t.chart()
	return t
}

// chart computes the chart's points.
func (t *timeline) chart() {
	n := len(t.Requests)
	if n == 0 {
		return
	}
	top, window := chartMinTokenTo, 0
	for _, r := range t.Requests {
		top = max(top, r.TokensBefore)
		if r.ContextWindow > 0 {
			window = r.ContextWindow
		}
	}
	if window > 0 && window < top*2 {
		top = max(top, window)
	}
	t.Top = top
	x := func(i int) float64 {
		if n == 1 {
			return chartW / 2
		}
		return chartPadX + float64(i)*(chartW-2*chartPadX)/float64(n-1)
	}
	y := func(v int) float64 {
		return chartPadTop + (1-float64(v)/float64(top))*(chartH-chartPadTop-chartPadBottom)
	}
	var before, after strings.Builder
	for i, r := range t.Requests {
		sent := r.TokensBefore
		if r.Compacted {
			sent = r.TokensAfter
		}
		fmt.Fprintf(&before, "%s,%s ", coord(x(i)), coord(y(r.TokensBefore)))
		fmt.Fprintf(&after, "%s,%s ", coord(x(i)), coord(y(sent)))
	}
	t.Before, t.After = strings.TrimSpace(before.String()), strings.TrimSpace(after.String())
	if window > 0 && window <= top {
		t.WindowY = y(window)
	}
}

func coord(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// formatUSD writes dollars to the cent, or to four decimals
// under a cent ("$0.0012").
func formatUSD(v float64) string {
	if v != 0 && v < 0.01 && v > -0.01 {
		return "$" + strconv.FormatFloat(v, 'f', 4, 64)
	}
	return "$" + strconv.FormatFloat(v, 'f', 2, 64)
}
