package loadbench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// WriteLoadTables writes the results of one run as markdown: a summary in
// the shape of issue 13's table, then one table per set. A run of several
// rounds (every target measured once a round, the targets taking turns)
// summarizes each target by the median over the rounds: its req/s, its p99,
// and its ratio to each round's json and echo (a target is compared with
// the baseline measured beside it, so a drift in the machine's load between
// rounds moves both); the range of the ratios follows it. The sets' tables
// list every round.
func WriteLoadTables(w io.Writer, sets []*Set, results []*Result) {
	rounds := 1
	var targets []string
	for _, r := range results {
		rounds = max(rounds, r.Round)
		if !contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
	}
	find := func(set, target string, round int) *Result {
		for _, r := range results {
			if r.Set == set && r.Target == target && max(r.Round, 1) == round {
				return r
			}
		}
		return nil
	}
	// ratios returns target's ratio to baseline in each round both ran.
	ratios := func(set, target, baseline string) []float64 {
		var out []float64
		for k := 1; k <= rounds; k++ {
			r, b := find(set, target, k), find(set, baseline, k)
			if r != nil && b != nil && b.ReqPerSec > 0 {
				out = append(out, r.ReqPerSec/b.ReqPerSec)
			}
		}
		return out
	}
	clients := 0
	if len(results) > 0 {
		clients = results[0].Clients
	}
	if rounds == 1 {
		fmt.Fprintf(w, "Every turn prefix of the real traces, %d clients, over the Unix socket (one run; each target a separate process):\n\n", clients)
	} else {
		fmt.Fprintf(w, "Every turn prefix of the real traces, %d clients, over the Unix socket (one run of %d rounds, the targets taking turns in each; each target a separate process). A cell is the median over the rounds, and a ratio the median of each round's ratio, with its range:\n\n", clients, rounds)
	}
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
			var rps []float64
			var p99 []time.Duration
			for k := 1; k <= rounds; k++ {
				if r := find(s.Name, t, k); r != nil {
					rps, p99 = append(rps, r.ReqPerSec), append(p99, r.P99)
				}
			}
			if len(rps) == 0 {
				fmt.Fprint(w, " - |")
				continue
			}
			cell := fmt.Sprintf("%s req/s", thousands(median(rps)))
			if !isBaseline(t) {
				cell += fmt.Sprintf(", p99 %s", ms(median(p99)))
				if x := ratios(s.Name, t, "json"); len(x) > 0 {
					cell += fmt.Sprintf(", **%.2f×** json%s", median(x), spread(x))
				}
				if x := ratios(s.Name, t, "echo"); len(x) > 0 {
					cell += fmt.Sprintf(", %.2f× echo%s", median(x), spread(x))
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
		for k := 1; k <= rounds; k++ {
			for _, t := range targets {
				r := find(s.Name, t, k)
				if r == nil {
					continue
				}
				xj, xe := "-", "-"
				if j := find(s.Name, "json", k); j != nil {
					xj = fmt.Sprintf("%.2f", r.ReqPerSec/j.ReqPerSec)
				}
				if e := find(s.Name, "echo", k); e != nil {
					xe = fmt.Sprintf("%.2f", r.ReqPerSec/e.ReqPerSec)
				}
				label := targetLabel(t)
				if rounds > 1 {
					label += fmt.Sprintf(", round %d", k)
				}
				fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", label, r.Requests, thousands(r.ReqPerSec),
					ms(r.P50), ms(r.P99), us(r.CPUPerRequest()), xj, xe, mb(r.Memory.RSS))
			}
		}
	}
}

// median returns the middle value of xs (the mean of the two middle ones
// for an even count); xs is not modified.
func median[T float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// spread is " (lo–hi)" for more than one ratio, "" otherwise.
func spread(xs []float64) string {
	if len(xs) < 2 {
		return ""
	}
	return fmt.Sprintf(" (%.2f–%.2f)", slices.Min(xs), slices.Max(xs))
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
