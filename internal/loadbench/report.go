package loadbench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteLoadTables writes the results of one run as markdown: a summary in
// the shape of issue 13's table, then one table per set.
func WriteLoadTables(w io.Writer, sets []*Set, results []*Result) {
	find := func(set, target string) *Result {
		for _, r := range results {
			if r.Set == set && r.Target == target {
				return r
			}
		}
		return nil
	}
	var targets []string
	for _, r := range results {
		if !contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
	}
	clients := 0
	if len(results) > 0 {
		clients = results[0].Clients
	}
	fmt.Fprintf(w, "Every turn prefix of the real traces, %d clients, over the Unix socket (one run; each target a separate process):\n\n", clients)
	fmt.Fprint(w, "| target |")
	for _, s := range sets {
		fmt.Fprintf(w, " %s prefixes (%s) |", s.Name, kb(s.MeanBytes))
	}
	fmt.Fprint(w, "\n|---|")
	for range sets {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, t := range targets {
		fmt.Fprintf(w, "| %s |", targetLabel(t))
		for _, s := range sets {
			r := find(s.Name, t)
			if r == nil {
				fmt.Fprint(w, " - |")
				continue
			}
			cell := fmt.Sprintf("%s req/s", thousands(r.ReqPerSec))
			if !isBaseline(t) {
				cell += fmt.Sprintf(", p99 %s", ms(r.P99))
				if j := find(s.Name, "json"); j != nil {
					cell += fmt.Sprintf(", **%.2f×** json", r.ReqPerSec/j.ReqPerSec)
				}
				if e := find(s.Name, "echo"); e != nil {
					cell += fmt.Sprintf(", %.2f× echo", r.ReqPerSec/e.ReqPerSec)
				}
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	for _, s := range sets {
		fmt.Fprintf(w, "\n%s (`%s`): %s requests per pass, mean %s of messages\n\n", s.Name, s.File, thousands(float64(s.Requests)), kb(s.MeanBytes))
		fmt.Fprintln(w, "| target | requests | req/s | p50 | p99 | server CPU per request | × json | × echo | server RSS after |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, t := range targets {
			r := find(s.Name, t)
			if r == nil {
				continue
			}
			xj, xe := "-", "-"
			if j := find(s.Name, "json"); j != nil {
				xj = fmt.Sprintf("%.2f", r.ReqPerSec/j.ReqPerSec)
			}
			if e := find(s.Name, "echo"); e != nil {
				xe = fmt.Sprintf("%.2f", r.ReqPerSec/e.ReqPerSec)
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", targetLabel(t), r.Requests, thousands(r.ReqPerSec),
				ms(r.P50), ms(r.P99), us(r.CPUPerRequest()), xj, xe, mb(r.Memory.RSS))
		}
	}
}

func isBaseline(t string) bool { return t == "echo" || t == "json" }

func targetLabel(t string) string {
	switch t {
	case "echo":
		return "echo server (read body, write it back)"
	case "json":
		return "Go service: `encoding/json` decode + re-encode of the messages"
	}
	if p, ok := strings.CutSuffix(t, "@before"); ok {
		return "compactd `/v1/compact` " + p + " (before)"
	}
	return "compactd `/v1/compact` " + t
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func kb(b float64) string { return fmt.Sprintf("%.1f KB", b/1000) }

func mb(b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MB", float64(b)/(1<<20))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func us(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

// thousands formats a non-negative number rounded, with commas.
func thousands(f float64) string {
	s := fmt.Sprintf("%.0f", f)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
