package eval

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// table is a header and rows of cells, rendered aligned for a terminal or
// as Markdown.
type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) text(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.head, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func (t *table) markdown(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.head, " | "))
	seps := make([]string, len(t.head))
	for i := range seps {
		seps[i] = "---"
		if i > 0 {
			seps[i] = "---:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}

// mainTable is tokens, validity, cache reuse, retention and latency.
func mainTable(f *FileReport) *table {
	t := &table{head: []string{"policy", "tokens sent", "ratio", "median", "peak", "invalid", "task kept", "compacted", "prefix reuse", "prev kept", "retention", "p50", "p99", "llm calls"}}
	for _, p := range f.Policies {
		p50, p99, calls := "-", "-", "-"
		if p.Policy != Baseline {
			p50, p99 = ms(p.Latency.P50), ms(p.Latency.P99)
			calls = thousands(p.LLM.Calls)
			if p.LLM.Failed > 0 {
				calls += fmt.Sprintf(" (%s failed)", thousands(p.LLM.Failed))
			}
		}
		t.add(p.Policy, thousands(p.Tokens.Sent), fmt.Sprintf("%.3f", p.Tokens.Ratio), fmt.Sprintf("%.3f", p.Tokens.MedianTurnRatio),
			thousands(p.Tokens.Peak), thousands(p.Validity.Turns-p.Validity.Valid), share(p.Task.Kept, p.Task.Turns), share(p.CompactedTurns, p.Tokens.Turns),
			pct(p.Prefix.Share), pct(p.Prefix.KeptShare), share(p.Retention.Retained, p.Retention.Probes), p50, p99, calls)
	}
	return t
}

// costTable is the session cost under each cost model.
func costTable(f *FileReport, models []CostModelInfo) *table {
	t := &table{head: []string{"policy"}}
	for _, m := range models {
		t.head = append(t.head, m.Model+" cost", "vs none", "input vs none", "cached")
		if m.Cache == CacheBreakpoints {
			t.head = append(t.head, "written")
		}
	}
	for _, p := range f.Policies {
		row := []string{p.Policy}
		for k, m := range models {
			c := p.Costs[k]
			cost := money(c.TotalUSD)
			if c.SummarizerUSD > 0 {
				cost += " (LLM " + money(c.SummarizerUSD) + ")"
			}
			row = append(row, cost, fmt.Sprintf("%.3f", c.VsNone), fmt.Sprintf("%.3f", c.InputVsNone), pct(c.CacheShare))
			if m.Cache == CacheBreakpoints {
				row = append(row, pct(c.WriteShare))
			}
		}
		t.add(row...)
	}
	return t
}

// retentionTable is retention overall, by position in the history and by
// kind: a first row with the probes' counts, then each policy's share
// kept.
func retentionTable(f *FileReport) *table {
	t := &table{head: []string{"policy", "all", "first third", "middle third", "last third"}}
	t.head = append(t.head, ProbeKinds...)
	if len(f.Policies) == 0 {
		return t
	}
	base := f.Policies[0].Retention
	row := []string{"(probes)", thousands(base.Probes)}
	for _, pos := range Positions {
		row = append(row, thousands(base.ByPosition[pos][0]))
	}
	for _, k := range ProbeKinds {
		row = append(row, thousands(base.ByKind[k][0]))
	}
	t.add(row...)
	for _, p := range f.Policies {
		row := []string{p.Policy, share(p.Retention.Retained, p.Retention.Probes)}
		for _, pos := range Positions {
			v := p.Retention.ByPosition[pos]
			row = append(row, share(v[1], v[0]))
		}
		for _, k := range ProbeKinds {
			v := p.Retention.ByKind[k]
			row = append(row, share(v[1], v[0]))
		}
		t.add(row...)
	}
	return t
}

func fileTitle(f *FileReport) string {
	s := fmt.Sprintf("%s: %d conversations, %s requests", f.File, f.Conversations, thousands(f.Turns))
	if len(f.Skipped) > 0 {
		s += fmt.Sprintf(" (%d skipped)", len(f.Skipped))
	}
	return s
}

// nothingEvaluated says why a file has no figures.
func nothingEvaluated(f *FileReport) string {
	if len(f.Skipped) > 0 {
		return fmt.Sprintf("NO CONVERSATION EVALUATED: all %d were skipped", len(f.Skipped))
	}
	return "NO CONVERSATION EVALUATED: the file holds none"
}

// retentionNote explains the retention table in one line.
const retentionNote = "retention: probes kept, by the third of each request's history they were last seen in, and by kind:"

// WriteText writes the report as tables for a terminal.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "compactd eval: %s; tokens %s; pricing %q (%s); %s\n", rep.describeModel(), rep.Tokenizer, rep.Pricing.Name, rep.Pricing.AsOf, rep.DurationNS.Round(time.Millisecond))
	for i := range rep.Files {
		f := &rep.Files[i]
		fmt.Fprintf(w, "\n%s\n\n", fileTitle(f))
		if f.Conversations == 0 {
			fmt.Fprintln(w, nothingEvaluated(f))
			for _, s := range f.Skipped {
				fmt.Fprintf(w, "skipped %s: %s\n", s.Conversation, s.Reason)
			}
			continue
		}
		mainTable(f).text(w)
		fmt.Fprintln(w)
		costTable(f, rep.CostModels).text(w)
		fmt.Fprintln(w)
		fmt.Fprintln(w, retentionNote)
		retentionTable(f).text(w)
		for _, p := range f.Policies {
			var fails []string
			for _, fl := range p.Validity.Failures {
				fails = append(fails, fmt.Sprintf("%s@%d: %s", fl.Conversation, fl.At, fl.Reason))
				if len(fails) == 3 {
					break
				}
			}
			if len(fails) > 0 {
				fmt.Fprintf(w, "INVALID %s: %d of %d requests; %s\n", p.Policy, p.Validity.Turns-p.Validity.Valid, p.Validity.Turns, strings.Join(fails, "; "))
			}
			if d := p.Task.Turns - p.Task.Kept; d > 0 {
				fmt.Fprintf(w, "TASK DROPPED by %s: %d of %d requests, e.g. %s@%d\n", p.Policy, d, p.Task.Turns, p.Task.Dropped[0].Conversation, p.Task.Dropped[0].At)
			}
			if p.StageErrors > 0 {
				fmt.Fprintf(w, "%s: %d stage failures (input kept)\n", p.Policy, p.StageErrors)
			}
			if ex := lostExamples(p, 3); ex != "" {
				fmt.Fprintf(w, "lost by %s, e.g.: %s\n", p.Policy, ex)
			}
		}
		for _, s := range f.Skipped {
			fmt.Fprintf(w, "skipped %s: %s\n", s.Conversation, s.Reason)
		}
	}
}

// WriteMarkdown writes the report's tables as Markdown (summary.md).
func (rep *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "Model %s (tokens: %s), context window %s; pricing %q as of %s; %d workers; run took %s.\n",
		rep.describeModel(), rep.Tokenizer, thousands(rep.ContextWindow), rep.Pricing.Name, rep.Pricing.AsOf, rep.Workers, rep.DurationNS.Round(time.Millisecond))
	if rep.Command != "" {
		fmt.Fprintf(w, "\n```sh\n%s\n```\n", rep.Command)
	}
	for i := range rep.Files {
		f := &rep.Files[i]
		fmt.Fprintf(w, "\n#### %s\n\n", fileTitle(f))
		if f.Conversations == 0 {
			fmt.Fprintf(w, "**%s.**\n", nothingEvaluated(f))
			continue
		}
		mainTable(f).markdown(w)
		fmt.Fprintln(w)
		costTable(f, rep.CostModels).markdown(w)
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%s\n\n", strings.TrimSuffix(strings.ToUpper(retentionNote[:1])+retentionNote[1:], ":")+".")
		retentionTable(f).markdown(w)
		for _, p := range f.Policies {
			if ex := lostExamples(p, 3); ex != "" {
				fmt.Fprintf(w, "\nLost by %s, e.g.: %s\n", p.Policy, ex)
			}
		}
	}
}

func (rep *Report) describeModel() string {
	if rep.Model == "" {
		return "(no model)"
	}
	return rep.Model
}

// lostExamples describes up to n lost probes, one per position (the
// earliest first) and then per kind.
func lostExamples(p PolicyReport, n int) string {
	var out []string
	seen := map[string]bool{}
	for _, pos := range Positions {
		for _, l := range p.Retention.LostExamples {
			if l.Position != pos || seen[l.Kind] {
				continue
			}
			seen[l.Kind] = true
			out = append(out, fmt.Sprintf("%s %q (%s third, request %d)", l.Kind, clip(l.Text, 60), l.Position, l.At))
			break
		}
		if len(out) == n {
			break
		}
	}
	return strings.Join(out, ", ")
}

// share formats kept/total as a percentage, "-" when there is nothing
// to count.
func share(kept, total int) string {
	if total == 0 {
		return "-"
	}
	return pct(float64(kept) / float64(total))
}

// pct formats a share with one decimal, never rounding an incomplete share
// up to 100.0% or a non-zero one down to 0.0% (4,999 of 5,000 requests
// that kept the task are not all of them).
func pct(f float64) string {
	s := fmt.Sprintf("%.1f%%", f*100)
	switch {
	case f < 1 && s == "100.0%":
		return "99.9%"
	case f > 0 && s == "0.0%":
		return "0.1%"
	}
	return s
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func money(f float64) string {
	if f < 10 {
		return fmt.Sprintf("$%.4f", f)
	}
	return "$" + thousandsFloat(f)
}

func thousandsFloat(f float64) string {
	whole := int(f)
	cents := int((f-float64(whole))*100 + 0.5)
	if cents == 100 {
		whole, cents = whole+1, 0
	}
	return fmt.Sprintf("%s.%02d", thousands(whole), cents)
}

// thousands formats n with commas: 1234567 → "1,234,567".
func thousands(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
