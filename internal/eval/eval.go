// Package eval measures compaction policies on recorded agent
// conversations, the way `compactd eval` reports them: it replays each
// conversation turn by turn as a stateless agent sends it (before each
// assistant message, the original history so far), runs every request
// through the compactor — the daemon's own path: host, plugins, token
// counting — and measures what each policy sends, whether it is valid,
// how much of it a provider's prompt cache would serve, what the session
// costs, which early facts survive, and how long compaction takes.
//
// docs/eval.md explains the figures and the models behind them.
//
// Run blocks while it replays conversations on a bounded pool of
// goroutines (each conversation in order, on one goroutine), and returns
// when all of them are done or the first fatal error stops them. Runs do
// not share state; several may run at once.
package eval

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/models"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/hashicorp/go-hclog"
)

// Baseline is the name of the implicit policy that sends every request
// uncompressed.
const Baseline = "none"

// Errors Run returns, wrapped with detail.
var (
	// ErrOptions: the Options cannot be run (no policy, a baseline named
	// as a policy, an unpriced cost model, ...).
	ErrOptions = errors.New("eval")
	// ErrData: a data file is missing or malformed.
	ErrData = errors.New("eval: data")
)

// Spec is one thing to evaluate: a policy or a pipeline of policies.
type Spec struct {
	// Name labels the spec in reports: the policy, or the pipeline's
	// policies joined with commas.
	Name string `json:"name"`
	// Pipeline is the policies run in order.
	Pipeline []string `json:"pipeline"`
	// Overrides is request-level config per policy.
	Overrides map[string]map[string]any `json:"overrides,omitempty"`
}

// Options configure a Run. Policies is required.
type Options struct {
	// Policies, Tokens, Config and Logger are the compactor's (see
	// compactor.Options). Tokens nil means a new counter.
	Policies compactor.PolicySource
	Tokens   *tokens.Counter
	Config   compactor.ConfigSource
	Logger   hclog.Logger
	// LLM answers plugins' llm_complete calls; nil answers no_provider.
	// Eval counts every call (LLMUsage) on its way through.
	LLM host.Completer

	// Specs are the policies to evaluate; the baseline is added first.
	Specs []Spec
	// Model is the agent's model: it picks the tokenizer and the context
	// window the policies see.
	Model string
	// ContextWindow overrides the model's context window.
	ContextWindow int
	// TargetTokens is passed to every request (pipelines stop once the
	// conversation fits).
	TargetTokens int
	// CacheBreakpoints: every request asks for the policies' cache
	// breakpoints, and breakpoint caches (Anthropic) are priced with them.
	CacheBreakpoints bool

	// Pricing is the pricing table; nil means the shipped default.
	Pricing *Pricing
	// CostModels are the models a session is priced under; empty means
	// Pricing.Compare.
	CostModels []string

	// MaxConversations, if > 0, takes only the first N conversations of
	// each file.
	MaxConversations int
	// Workers bounds the conversations replayed at once (default
	// GOMAXPROCS).
	Workers int
	// Probes tunes retention probes.
	Probes ProbeOptions
	// ChartConversation names the conversation a file's tokens chart
	// shows (default: the file's longest). Run fails when no data file
	// has it.
	ChartConversation string
	// Progress, if set, receives a progress bar (carriage returns, one
	// line) while the run lasts.
	Progress io.Writer

	// newCompact replaces the compactor in tests.
	newCompact func(state compactor.StateStore, llm host.Completer) compactFunc
}

type compactFunc func(context.Context, compactor.Request) (*compactor.Response, error)

// costModel is a priced model with its tokenizer.
type costModel struct {
	PricedModel
	tok *tokens.Tokenizer
}

// runner is one Run's state.
type runner struct {
	opts   Options
	tok    *tokens.Tokenizer
	biller *Biller
	costs  []costModel // biller's
	specs  []Spec      // the baseline first

	done, total atomic.Int64
}

// dataFile is one data file's conversations.
type dataFile struct {
	path  string
	convs []dataset.Conversation
	// results[spec][conv]
	results [][]*ConvResult
	skipped []Skip
	mu      sync.Mutex
}

// Run evaluates the specs on the conversations of the data files and
// returns the report (Command and Machine are left for the caller).
func Run(ctx context.Context, opts Options, files []string) (*Report, error) {
	r, err := newRunner(opts)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no data files", ErrOptions)
	}
	start := time.Now()
	data := make([]*dataFile, len(files))
	for i, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrData, err)
		}
		if opts.MaxConversations > 0 && len(convs) > opts.MaxConversations {
			convs = convs[:opts.MaxConversations]
		}
		df := &dataFile{path: f, convs: convs, results: make([][]*ConvResult, len(r.specs))}
		for s := range df.results {
			df.results[s] = make([]*ConvResult, len(convs))
		}
		data[i] = df
	}
	if id := opts.ChartConversation; id != "" && !hasConversation(data, id) {
		return nil, fmt.Errorf("%w: chart conversation %q is in no data file", ErrOptions, id)
	}
	if err := r.replayAll(ctx, data); err != nil {
		return nil, err
	}
	rep := r.report(data)
	rep.Started = start.UTC()
	rep.DurationNS = time.Since(start)
	return rep, nil
}

func hasConversation(data []*dataFile, id string) bool {
	for _, df := range data {
		for _, c := range df.convs {
			if c.ID == id {
				return true
			}
		}
	}
	return false
}

func newRunner(opts Options) (*runner, error) {
	if opts.Policies == nil && opts.newCompact == nil {
		return nil, fmt.Errorf("%w: no policy source", ErrOptions)
	}
	if len(opts.Specs) == 0 {
		return nil, fmt.Errorf("%w: no policy to evaluate", ErrOptions)
	}
	if opts.Tokens == nil {
		opts.Tokens = tokens.New(tokens.Options{})
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Pricing == nil {
		p, err := LoadPricing("default")
		if err != nil {
			return nil, err
		}
		opts.Pricing = p
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.newCompact == nil {
		opts.newCompact = func(state compactor.StateStore, llm host.Completer) compactFunc {
			c := compactor.New(compactor.Options{
				Policies: opts.Policies, Tokens: opts.Tokens, Config: opts.Config,
				State: state, NewLLM: func() host.Completer { return llm }, Logger: opts.Logger,
			})
			return c.Compact
		}
	}
	r := &runner{opts: opts, tok: opts.Tokens.ForModel(opts.Model)}
	b, err := NewBiller(opts.Pricing, opts.CostModels, opts.Tokens)
	if err != nil {
		return nil, err
	}
	r.biller, r.costs = b, b.costs
	r.specs = append(r.specs, Spec{Name: Baseline, Pipeline: nil})
	for _, s := range opts.Specs {
		if len(s.Pipeline) == 0 {
			return nil, fmt.Errorf("%w: %q names no policy", ErrOptions, s.Name)
		}
		if s.Name == "" {
			s.Name = strings.Join(s.Pipeline, ",")
		}
		if s.Name == Baseline || slices.Contains(s.Pipeline, Baseline) {
			return nil, fmt.Errorf("%w: %q is the built-in baseline (no compaction), not a policy", ErrOptions, Baseline)
		}
		for _, have := range r.specs {
			if have.Name == s.Name {
				return nil, fmt.Errorf("%w: %q given twice", ErrOptions, s.Name)
			}
		}
		r.specs = append(r.specs, s)
	}
	return r, nil
}

// job is one conversation, replayed under every spec by one goroutine.
type job struct {
	file *dataFile
	conv int
	size int
}

func (r *runner) replayAll(ctx context.Context, data []*dataFile) error {
	var jobs []job
	for _, df := range data {
		for i, c := range df.convs {
			n := len(Turns(c.Chat))
			r.total.Add(int64(n * (len(r.specs) - 1)))
			jobs = append(jobs, job{file: df, conv: i, size: n * c.Chat.Len()})
		}
	}
	// Longest first, so one long conversation does not finish last.
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(b.size, a.size) })

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopProgress := r.startProgress()
	defer stopProgress()

	ch := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < min(r.opts.Workers, max(len(jobs), 1)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if err := r.replayConversation(ctx, j.file, j.conv); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// Turns returns the requests a stateless agent sends for a recorded
// conversation: the length of the history before each assistant message
// (each such request is answered by that message). A conversation that
// ends with messages after its last assistant message (a pending tool
// result or user message) has no request for them: there is no recorded
// answer to bill.
func Turns(c *chat.Conversation) []int {
	var out []int
	for i := 1; i < c.Len(); i++ {
		if c.Messages[i].Role == "assistant" {
			out = append(out, i)
		}
	}
	return out
}

// Skip is a conversation left out, and why.
type Skip struct {
	Conversation string `json:"conversation"`
	Reason       string `json:"reason"`
}

// ConvResult is one conversation replayed under one spec.
type ConvResult struct {
	ID    string `json:"id"`
	Turns []Turn `json:"turns"`
	// Retention sums the probes of every request.
	Retention Retention `json:"retention"`
}

// Turn is one request of a replay. Token counts are the eval model's,
// except in Bills.
type Turn struct {
	// At is the request's length in original messages: it is the history
	// before message At, which answers it.
	At int `json:"at"`
	// Messages and Tokens are what was sent; TokensIn is the uncompressed
	// request's tokens.
	Messages int `json:"messages"`
	TokensIn int `json:"tokens_in"`
	Tokens   int `json:"tokens"`
	// PrefixMessages and Prefix: the leading whole messages this request
	// shares, byte for byte, with the previous request as sent, and their
	// tokens.
	PrefixMessages int `json:"prefix_messages"`
	Prefix         int `json:"prefix"`
	// PrevKept: the previous request as sent is a prefix of this one.
	PrevKept  bool `json:"prev_kept,omitempty"`
	Compacted bool `json:"compacted,omitempty"`
	// LatencyNS is the compactor call's wall time; PluginNS the sum of
	// its stages' plugin calls.
	LatencyNS int64     `json:"latency_ns,omitempty"`
	PluginNS  int64     `json:"plugin_ns,omitempty"`
	LLM       *LLMUsage `json:"llm,omitempty"`
	// Invalid says why the request as sent is not a valid conversation.
	Invalid string `json:"invalid,omitempty"`
	// TaskKept: the request still holds the task (see TaskKept); nil when
	// the conversation has no user message.
	TaskKept *bool `json:"task_kept,omitempty"`
	// CacheBreakpoints are the messages the policy marked (with
	// Options.CacheBreakpoints).
	CacheBreakpoints []int `json:"cache_breakpoints,omitempty"`
	// Errors are stage failures (the stage's input was kept).
	Errors   []string `json:"errors,omitempty"`
	Warnings int      `json:"warnings,omitempty"`
	// Bills is the request billed under each cost model, in the order of
	// Report.CostModels, counted with that model's tokenizer.
	Bills []Usage `json:"bills"`
	// Probes are the facts of the request's history checked against the
	// request as sent (see ProbeSet.Draw); ProbesKept how many it holds.
	Probes     int `json:"probes,omitempty"`
	ProbesKept int `json:"probes_kept,omitempty"`
}

func (r *runner) replayConversation(ctx context.Context, df *dataFile, ci int) error {
	c := df.convs[ci]
	skip := func(reason string) {
		df.mu.Lock()
		df.skipped = append(df.skipped, Skip{Conversation: c.ID, Reason: reason})
		df.mu.Unlock()
		r.done.Add(int64(len(Turns(c.Chat)) * (len(r.specs) - 1)))
	}
	if err := c.Chat.Validate(); err != nil {
		skip(err.Error())
		return nil
	}
	turns := Turns(c.Chat)
	if len(turns) == 0 {
		skip("no assistant message: no request to replay")
		return nil
	}
	// Count every message once up front (as the daemon has by the time a
	// conversation is long), so latencies measure compaction, not the
	// first tokenization of a message.
	r.tok.CountMessages(c.Chat.Messages)
	for _, cm := range r.costs {
		if cm.tok != r.tok {
			cm.tok.CountMessages(slices.Clone(c.Chat.Messages))
		}
	}
	// Every spec is checked against the same probes: drawn once per
	// request.
	ps := newProbeSet(c.Chat, c.ID, r.opts.Probes)
	probes := make([][]Probe, len(turns))
	for ti, at := range turns {
		probes[ti] = ps.Draw(at)
	}

	for si, spec := range r.specs {
		res, err := r.replay(ctx, c, turns, spec, ps, probes)
		if errors.Is(err, chat.ErrInvalid) {
			skip(fmt.Sprintf("%s: %v", spec.Name, err))
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", df.path, c.ID, err)
		}
		df.results[si][ci] = res
	}
	return nil
}

// replay sends every turn of one conversation through one spec.
func (r *runner) replay(ctx context.Context, c dataset.Conversation, turns []int, spec Spec, ps *ProbeSet, probes [][]Probe) (*ConvResult, error) {
	res := &ConvResult{ID: c.ID, Turns: make([]Turn, 0, len(turns))}
	var compact compactFunc
	llm := &meter{inner: r.opts.LLM}
	if spec.Name != Baseline {
		compact = r.opts.newCompact(newMemState(), llm)
	}
	var prev *Sent
	for ti, at := range turns {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		in := dataset.Prefix(c.Chat, at)
		t := Turn{At: at}
		out := in
		var marks []int
		if compact != nil {
			start := time.Now()
			resp, err := compact(ctx, compactor.Request{
				Conversation: in, Pipeline: spec.Pipeline, Overrides: spec.Overrides,
				Model: r.opts.Model, ConversationID: c.ID, ContextWindow: r.opts.ContextWindow,
				TargetTokens: r.opts.TargetTokens,
			})
			t.LatencyNS = time.Since(start).Nanoseconds()
			r.done.Add(1)
			if err != nil {
				return nil, err
			}
			out = resp.Conversation
			t.Compacted = resp.Compacted
			t.Warnings = len(resp.Warnings)
			for _, st := range resp.Stats.Stages {
				t.PluginNS += st.Duration.Nanoseconds()
				if st.Error != "" {
					t.Errors = append(t.Errors, st.Policy+": "+st.Error)
				}
			}
			if u := llm.take(); u.Calls > 0 {
				t.LLM = &u
			}
			if err := Check(in, out); err != nil {
				t.Invalid = err.Error()
			}
			if r.opts.CacheBreakpoints {
				marks = resp.CacheBreakpoints
				t.CacheBreakpoints = marks
				if err := CheckMarks(out, marks); err != nil && t.Invalid == "" {
					t.Invalid = err.Error()
				}
			}
		} else {
			r.tok.CountMessages(in.Messages)
		}
		t.Messages = out.Len()
		t.TokensIn = in.TotalTokens()
		t.Tokens = r.countSent(out)
		t.TaskKept = TaskKept(in, out)
		var bill Bill
		bill, prev = r.biller.Bill(r.tok, prev, out, marks, &c.Chat.Messages[at])
		t.PrefixMessages, t.Prefix, t.PrevKept, t.Bills = bill.PrefixMessages, bill.Prefix, bill.PrevKept, bill.Usages
		ret := ps.retainSent(probes[ti], out)
		t.Probes, t.ProbesKept = ret.Probes, ret.Retained
		res.Retention.Add(ret)
		res.Retention.keepLost(ret.Lost)
		res.Turns = append(res.Turns, t)
	}
	return res, nil
}

// countSent returns the eval model's tokens of a request as sent,
// counting messages the compactor left uncounted.
func (r *runner) countSent(out *chat.Conversation) int {
	n := 0
	for i := range out.Messages {
		if out.Messages[i].Tokens == 0 {
			out.Messages[i].Tokens = r.tok.CountMessage(&out.Messages[i])
		}
		n += out.Messages[i].Tokens
	}
	return n
}

// maxBreakpoints is how many cache breakpoints Anthropic allows in one
// request.
const maxBreakpoints = 4

// Breakpoints returns where a request of n messages marks cache
// breakpoints, as prefix lengths in messages, ascending: after each
// message the policy marked (marks, indices), at the end, and — while
// Anthropic's four allow it — after the lead leading system messages (the
// agent's own breakpoint on its system prompt).
func Breakpoints(n, lead int, marks []int) []int {
	out := make([]int, 0, len(marks)+2)
	for _, m := range marks {
		if m >= 0 && m < n && !slices.Contains(out, m+1) {
			out = append(out, m+1)
		}
	}
	if n > 0 && !slices.Contains(out, n) {
		out = append(out, n)
	}
	if lead > 0 && lead < n && len(out) < maxBreakpoints && !slices.Contains(out, lead) {
		out = append(out, lead)
	}
	slices.Sort(out)
	return out
}

// contextWindow is the window the policies see.
func (r *runner) contextWindow() int {
	if r.opts.ContextWindow > 0 {
		return r.opts.ContextWindow
	}
	return models.ContextWindow(r.opts.Model)
}

// memState is a per-replay compactor.StateStore: a stateful policy sees
// the state it returned on the previous turn of the same replay.
type memState struct {
	mu sync.Mutex
	m  map[[2]string]json.RawMessage
}

func newMemState() *memState { return &memState{m: map[[2]string]json.RawMessage{}} }

func (s *memState) LoadState(_ context.Context, conv, policy string) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[[2]string{conv, policy}], nil
}

func (s *memState) SaveState(_ context.Context, conv, policy string, state json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[[2]string{conv, policy}] = append(json.RawMessage(nil), state...)
	return nil
}

var _ compactor.StateStore = (*memState)(nil)
