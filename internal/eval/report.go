package eval

import (
	"math"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// ReportVersion is the version of the JSON report's shape. Version 2:
// retention is measured on every request, from probes drawn across its
// whole history (ProbeSet), with counts by position; turns carry their
// probe counts.
const ReportVersion = 2

// Report is every figure of a run. It is written as report.json.
type Report struct {
	Version int `json:"version"`
	// Command is the command line that made the report (set by the CLI).
	Command    string        `json:"command,omitempty"`
	Started    time.Time     `json:"started"`
	DurationNS time.Duration `json:"duration_ns"`
	Machine    *Machine      `json:"machine,omitempty"`
	// Model is the agent's model; Tokenizer the tokenizer it selects.
	Model         string `json:"model"`
	Tokenizer     string `json:"tokenizer"`
	ContextWindow int    `json:"context_window"`
	Workers       int    `json:"workers"`
	// LLM names the provider behind llm_complete ("none", "stub").
	LLM        string          `json:"llm,omitempty"`
	Pricing    PricingInfo     `json:"pricing"`
	CostModels []CostModelInfo `json:"cost_models"`
	Specs      []Spec          `json:"specs"`
	Files      []FileReport    `json:"files"`
}

// Machine describes where a report was made.
type Machine struct {
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPU        string `json:"cpu,omitempty"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Go         string `json:"go"`
}

// PricingInfo names the pricing table used.
type PricingInfo struct {
	Name     string `json:"name"`
	AsOf     string `json:"as_of,omitempty"`
	Currency string `json:"currency,omitempty"`
}

// CostModelInfo is a model sessions are priced under.
type CostModelInfo struct {
	Model     string `json:"model"`
	Row       string `json:"row"`
	Provider  string `json:"provider"`
	Tokenizer string `json:"tokenizer"`
	Cache     string `json:"cache"`
	MinCached int    `json:"min_cached_tokens,omitempty"`
	Increment int    `json:"cache_increment,omitempty"`
	Price     Price  `json:"price"`
}

// FileReport is one data file's figures.
type FileReport struct {
	File          string         `json:"file"`
	Path          string         `json:"path"`
	Conversations int            `json:"conversations"`
	Turns         int            `json:"turns"`
	Skipped       []Skip         `json:"skipped,omitempty"`
	Policies      []PolicyReport `json:"policies"`
	// Example is the conversation the token chart shows: the one named by
	// Options.ChartConversation (ExampleNamed), else the longest one (the
	// most requests, then the most tokens), where compaction had the
	// most to do.
	Example      string `json:"example,omitempty"`
	ExampleNamed bool   `json:"example_named,omitempty"`
}

// PolicyReport is one spec's figures on one file.
type PolicyReport struct {
	Policy    string          `json:"policy"`
	Pipeline  []string        `json:"pipeline,omitempty"`
	Tokens    TokenStats      `json:"tokens"`
	Validity  Validity        `json:"validity"`
	Task      TaskStats       `json:"task"`
	Prefix    PrefixStats     `json:"prefix"`
	Costs     []CostReport    `json:"costs"`
	Retention RetentionReport `json:"retention"`
	Latency   Latency         `json:"latency"`
	LLM       LLMUsage        `json:"llm"`
	// CompactedTurns counts requests the policy changed; StageErrors the
	// stage failures (input kept), Warnings the warnings.
	CompactedTurns int `json:"compacted_turns"`
	StageErrors    int `json:"stage_errors"`
	Warnings       int `json:"warnings"`
	// Conversations holds every turn of every conversation.
	Conversations []*ConvResult `json:"conversations"`
}

// TokenStats compares what was sent with the uncompressed requests.
type TokenStats struct {
	Turns        int `json:"turns"`
	Uncompressed int `json:"uncompressed"`
	Sent         int `json:"sent"`
	// Ratio is Sent/Uncompressed; MedianTurnRatio the median over turns
	// of each request's ratio.
	Ratio           float64 `json:"ratio"`
	MedianTurnRatio float64 `json:"median_turn_ratio"`
	// Peak is the largest request sent; PeakUncompressed the largest
	// uncompressed one; MedianPeak the median over conversations of their
	// largest request sent.
	Peak             int `json:"peak"`
	PeakUncompressed int `json:"peak_uncompressed"`
	MedianPeak       int `json:"median_peak"`
}

// Validity counts requests that are valid conversations.
type Validity struct {
	Turns int     `json:"turns"`
	Valid int     `json:"valid"`
	Share float64 `json:"share"`
	// Failures lists up to 20 invalid requests.
	Failures []Failure `json:"failures,omitempty"`
}

// TaskStats count requests that still hold the conversation's task (its
// first user message; see TaskKept).
type TaskStats struct {
	// Turns counts requests of conversations that have a task.
	Turns int     `json:"turns"`
	Kept  int     `json:"kept"`
	Share float64 `json:"share"`
	// Dropped lists up to 20 requests without their task.
	Dropped []Failure `json:"dropped,omitempty"`
}

// Failure is one invalid request.
type Failure struct {
	Conversation string `json:"conversation"`
	At           int    `json:"at"`
	Reason       string `json:"reason"`
}

// PrefixStats measure how much of each request repeats the previous one.
type PrefixStats struct {
	// Tokens is the sum of the turns' common prefixes (whole messages)
	// with the previous request as sent; Share is Tokens / tokens sent.
	Tokens int     `json:"tokens"`
	Share  float64 `json:"share"`
	// KeptTurns counts requests (after the first of each conversation)
	// that start with the whole previous request; KeptShare is their
	// share of those requests.
	KeptTurns int     `json:"kept_turns"`
	KeptShare float64 `json:"kept_share"`
}

// CostReport is a session's cost under one model.
type CostReport struct {
	Model string `json:"model"`
	Usage Usage  `json:"usage"`
	// CacheShare is the share of input tokens served from the cache;
	// WriteShare the share written to it.
	CacheShare    float64 `json:"cache_share"`
	WriteShare    float64 `json:"write_share"`
	InputUSD      float64 `json:"input_usd"`
	CacheReadUSD  float64 `json:"cache_read_usd"`
	CacheWriteUSD float64 `json:"cache_write_usd"`
	OutputUSD     float64 `json:"output_usd"`
	// SummarizerUSD is the cost of the policy's own LLM calls (priced at
	// the answering model's row, or this model's when it has none).
	SummarizerUSD float64 `json:"summarizer_usd"`
	TotalUSD      float64 `json:"total_usd"`
	// VsNone is TotalUSD over the baseline's.
	VsNone float64 `json:"vs_none"`
	// InputVsNone compares what the policy controls: the input's cost
	// (uncached input, cache reads and writes, and the summarizer's
	// calls), without the output, which is the same for every policy.
	InputVsNone float64 `json:"input_vs_none"`
}

// InputUSDTotal is the cost of the input side: everything but the output.
func (c CostReport) InputUSDTotal() float64 {
	return c.InputUSD + c.CacheReadUSD + c.CacheWriteUSD + c.SummarizerUSD
}

// RetentionReport sums the probes of every request of every
// conversation (see ProbeSet.Draw).
type RetentionReport struct {
	Retention
	// Share is Retained/Probes (1 when there are no probes).
	Share float64 `json:"share"`
	// LostExamples are up to 40 lost probes, a few per conversation (the
	// latest requests' of each position).
	LostExamples []LostProbe `json:"lost_examples,omitempty"`
}

// LostProbe is a probe a compacted context lost.
type LostProbe struct {
	Conversation string `json:"conversation"`
	Probe
}

// Latency sums up the compaction calls' wall times.
type Latency struct {
	Compactions int           `json:"compactions"`
	P50         time.Duration `json:"p50_ns"`
	P99         time.Duration `json:"p99_ns"`
	Max         time.Duration `json:"max_ns"`
	Mean        time.Duration `json:"mean_ns"`
	Total       time.Duration `json:"total_ns"`
	// PluginP50 and PluginP99 are the plugin calls alone (the stages'
	// durations), without the compactor's validation and counting.
	PluginP50 time.Duration `json:"plugin_p50_ns"`
	PluginP99 time.Duration `json:"plugin_p99_ns"`
}

func (r *runner) report(data []*dataFile) *Report {
	rep := &Report{
		Version: ReportVersion, Model: r.opts.Model, Tokenizer: r.tok.Name(),
		ContextWindow: r.contextWindow(), Workers: r.opts.Workers,
		Pricing: PricingInfo{Name: r.opts.Pricing.Name, AsOf: r.opts.Pricing.AsOf, Currency: r.opts.Pricing.Currency},
		Specs:   r.specs,
	}
	for _, cm := range r.costs {
		rep.CostModels = append(rep.CostModels, CostModelInfo{
			Model: cm.Name, Row: cm.Row, Provider: cm.Price.Provider, Tokenizer: cm.tok.Name(),
			Cache: cm.Rules.Mode, MinCached: cm.Rules.MinTokens, Increment: cm.Rules.Increment, Price: cm.Price,
		})
	}
	for _, df := range data {
		fr := FileReport{File: filepath.Base(df.path), Path: df.path}
		sort.Slice(df.skipped, func(i, j int) bool { return df.skipped[i].Conversation < df.skipped[j].Conversation })
		fr.Skipped = df.skipped
		var base *PolicyReport
		for si, spec := range r.specs {
			var convs []*ConvResult
			for _, c := range df.results[si] {
				if c != nil && !skippedConv(df.skipped, c.ID) {
					convs = append(convs, c)
				}
			}
			pr := r.aggregate(spec, convs, base)
			fr.Policies = append(fr.Policies, pr)
			if si == 0 {
				base = &fr.Policies[0]
			}
		}
		if len(fr.Policies) > 0 {
			fr.Conversations = len(fr.Policies[0].Conversations)
			fr.Turns = fr.Policies[0].Tokens.Turns
			fr.Example, fr.ExampleNamed = exampleConversation(fr.Policies[0].Conversations, r.opts.ChartConversation)
		}
		rep.Files = append(rep.Files, fr)
	}
	return rep
}

func skippedConv(skipped []Skip, id string) bool {
	for _, s := range skipped {
		if s.Conversation == id {
			return true
		}
	}
	return false
}

// exampleConversation returns the conversation a tokens chart shows:
// named, if it is one of convs, else the longest (the most requests, then
// the largest uncompressed last request; the first of equals).
func exampleConversation(convs []*ConvResult, named string) (string, bool) {
	var best *ConvResult
	size := func(c *ConvResult) (int, int) {
		if len(c.Turns) == 0 {
			return 0, 0
		}
		return len(c.Turns), c.Turns[len(c.Turns)-1].TokensIn
	}
	for _, c := range convs {
		if named != "" && c.ID == named {
			return c.ID, true
		}
		if best == nil {
			best = c
			continue
		}
		n, t := size(c)
		bn, bt := size(best)
		if n > bn || n == bn && t > bt {
			best = c
		}
	}
	if best == nil {
		return "", false
	}
	return best.ID, false
}

// aggregate sums one spec's conversations. base is the baseline's report
// on the same file (nil for the baseline itself).
func (r *runner) aggregate(spec Spec, convs []*ConvResult, base *PolicyReport) PolicyReport {
	pr := PolicyReport{Policy: spec.Name, Pipeline: spec.Pipeline, Conversations: convs}
	var ratios []float64
	var lat, plug []time.Duration
	var peaks []int
	usage := make([]Usage, len(r.costs))
	var llm LLMUsage
	laterTurns := 0
	for _, c := range convs {
		peak := 0
		for ti, t := range c.Turns {
			pr.Tokens.Turns++
			pr.Tokens.Uncompressed += t.TokensIn
			pr.Tokens.Sent += t.Tokens
			if t.TokensIn > 0 {
				ratios = append(ratios, float64(t.Tokens)/float64(t.TokensIn))
			}
			peak = max(peak, t.Tokens)
			pr.Tokens.PeakUncompressed = max(pr.Tokens.PeakUncompressed, t.TokensIn)
			pr.Validity.Turns++
			if t.Invalid == "" {
				pr.Validity.Valid++
			} else if len(pr.Validity.Failures) < 20 {
				pr.Validity.Failures = append(pr.Validity.Failures, Failure{Conversation: c.ID, At: t.At, Reason: t.Invalid})
			}
			if t.TaskKept != nil {
				pr.Task.Turns++
				if *t.TaskKept {
					pr.Task.Kept++
				} else if len(pr.Task.Dropped) < 20 {
					pr.Task.Dropped = append(pr.Task.Dropped, Failure{Conversation: c.ID, At: t.At, Reason: "the task (first user message) is not in the request"})
				}
			}
			pr.Prefix.Tokens += t.Prefix
			if ti > 0 {
				laterTurns++
				if t.PrevKept {
					pr.Prefix.KeptTurns++
				}
			}
			for k, b := range t.Bills {
				usage[k].Add(b)
			}
			if t.LLM != nil {
				llm.Add(*t.LLM)
			}
			if t.Compacted {
				pr.CompactedTurns++
			}
			pr.StageErrors += len(t.Errors)
			pr.Warnings += t.Warnings
			if spec.Name != Baseline {
				lat = append(lat, time.Duration(t.LatencyNS))
				plug = append(plug, time.Duration(t.PluginNS))
			}
		}
		peaks = append(peaks, peak)
		pr.Tokens.Peak = max(pr.Tokens.Peak, peak)
		pr.Retention.Add(c.Retention)
		for i, p := range c.Retention.Lost {
			if i >= 6 || len(pr.Retention.LostExamples) >= 40 {
				break
			}
			pr.Retention.LostExamples = append(pr.Retention.LostExamples, LostProbe{Conversation: c.ID, Probe: p})
		}
	}
	pr.Tokens.Ratio = ratio(pr.Tokens.Sent, pr.Tokens.Uncompressed)
	slices.Sort(ratios)
	pr.Tokens.MedianTurnRatio = quantile(ratios, 0.5)
	slices.Sort(peaks)
	pr.Tokens.MedianPeak = quantile(peaks, 0.5)
	pr.Validity.Share = ratio(pr.Validity.Valid, pr.Validity.Turns)
	pr.Task.Share = ratio(pr.Task.Kept, pr.Task.Turns)
	pr.Prefix.Share = ratio(pr.Prefix.Tokens, pr.Tokens.Sent)
	pr.Prefix.KeptShare = ratio(pr.Prefix.KeptTurns, laterTurns)
	pr.Retention.Share = pr.Retention.Retention.Share()
	pr.LLM = llm
	pr.Latency = latency(lat, plug)
	for k, cm := range r.costs {
		u := usage[k]
		cr := CostReport{Model: cm.Name, Usage: u}
		cr.CacheShare = ratio(u.CacheRead, u.TotalInput())
		cr.WriteShare = ratio(u.CacheWrite, u.TotalInput())
		p := cm.Price
		cr.InputUSD = float64(u.Input) * p.Input / 1e6
		cr.CacheReadUSD = float64(u.CacheRead) * p.CachedInput / 1e6
		cr.CacheWriteUSD = float64(u.CacheWrite) * p.CacheWrite / 1e6
		cr.OutputUSD = float64(u.Output) * p.Output / 1e6
		cr.SummarizerUSD = r.summarizerCost(llm, cm)
		cr.TotalUSD = cr.InputUSD + cr.CacheReadUSD + cr.CacheWriteUSD + cr.OutputUSD + cr.SummarizerUSD
		cr.VsNone, cr.InputVsNone = 1, 1
		if base != nil && base.Costs[k].TotalUSD > 0 {
			cr.VsNone = cr.TotalUSD / base.Costs[k].TotalUSD
		}
		if base != nil && base.Costs[k].InputUSDTotal() > 0 {
			cr.InputVsNone = cr.InputUSDTotal() / base.Costs[k].InputUSDTotal()
		}
		pr.Costs = append(pr.Costs, cr)
	}
	return pr
}

// summarizerCost prices LLM usage: each answering model at its own row
// when the table has one, else at the cost model's prices.
func (r *runner) summarizerCost(u LLMUsage, cm costModel) float64 {
	total := 0.0
	for _, m := range u.models() {
		tp := u.ByModel[m]
		price := cm.Price
		if pm, err := r.opts.Pricing.Lookup(m); err == nil {
			price = pm.Price
		}
		total += (float64(tp.Input)*price.Input + float64(tp.Output)*price.Output) / 1e6
	}
	return total
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// quantile returns the nearest-rank q-quantile of sorted values: the
// smallest value with at least q of the values at or below it.
func quantile[T int | float64 | time.Duration](sorted []T, q float64) T {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func latency(lat, plug []time.Duration) Latency {
	l := Latency{Compactions: len(lat)}
	if len(lat) == 0 {
		return l
	}
	slices.Sort(lat)
	slices.Sort(plug)
	for _, d := range lat {
		l.Total += d
	}
	l.P50, l.P99, l.Max = quantile(lat, 0.5), quantile(lat, 0.99), lat[len(lat)-1]
	l.Mean = l.Total / time.Duration(len(lat))
	l.PluginP50, l.PluginP99 = quantile(plug, 0.5), quantile(plug, 0.99)
	return l
}
