package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/tokens"
)

// writeData writes conversations (lists of message JSON) as a JSONL file.
func writeData(t *testing.T, convs ...[]string) string {
	t.Helper()
	var b bytes.Buffer
	for i, msgs := range convs {
		fmt.Fprintf(&b, `{"id":"c%d","messages":[%s]}`+"\n", i, strings.Join(msgs, ","))
	}
	path := filepath.Join(t.TempDir(), "data.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fake stands in for the compactor: it records each request, keeps the
// system messages and the last unit (with a marker for what it dropped),
// keeps a turn counter in the policy state, and asks the LLM once per
// request. invalidAt makes the request of that length come back with its
// final message rewritten.
type fake struct {
	tok       *tokens.Counter
	invalidAt int

	mu       sync.Mutex
	requests [][]json.RawMessage
	states   []string
	llmErrs  int
}

func (f *fake) newCompact(state compactor.StateStore, llm host.Completer) compactFunc {
	return func(ctx context.Context, req compactor.Request) (*compactor.Response, error) {
		in := req.Conversation
		tok := f.tok.ForModel(req.Model)
		tok.CountMessages(in.Messages)
		prev, _ := state.LoadState(ctx, req.ConversationID, "fake")
		n := 0
		if prev != nil {
			json.Unmarshal(prev, &n)
		}
		state.SaveState(ctx, req.ConversationID, "fake", json.RawMessage(fmt.Sprint(n+1)))
		resp, _ := llm.Complete(ctx, abi.LLMRequest{Messages: []abi.LLMMessage{{Role: "user", Content: "summarize"}}})
		f.mu.Lock()
		f.requests = append(f.requests, append([]json.RawMessage(nil), in.Raw...))
		f.states = append(f.states, string(prev))
		if resp.Error != nil {
			f.llmErrs++
		}
		f.mu.Unlock()

		lead := convo.LeadingSystem(in.Messages)
		cut := convo.UnitStartAtOrBefore(in.Messages, in.Len()-1)
		raw := append([]json.RawMessage{}, in.Raw[:lead]...)
		if cut > lead {
			raw = append(raw, json.RawMessage(fmt.Sprintf(`{"role":"user","content":"[%d dropped]"}`, cut-lead)))
		}
		raw = append(raw, in.Raw[max(cut, lead):]...)
		if in.Len() == f.invalidAt {
			raw[len(raw)-1] = json.RawMessage(`{"role":"user","content":"rewritten"}`)
		}
		out, err := chat.FromRaw(raw)
		if err != nil {
			return nil, err
		}
		tok.CountMessages(out.Messages)
		return &compactor.Response{Conversation: out, Compacted: out.Len() != in.Len(), Stats: compactor.Stats{Stages: []compactor.Stage{{Policy: "fake"}}}}, nil
	}
}

func fakeOptions(f *fake) Options {
	return Options{
		Tokens: f.tok, Specs: []Spec{{Name: "fake", Pipeline: []string{"fake"}}},
		Model: "gpt-4o", CostModels: []string{"gpt-4o", "claude-sonnet-4"}, Workers: 2,
		newCompact: f.newCompact,
	}
}

func TestReplayOrder(t *testing.T) {
	f := &fake{tok: tokens.New(tokens.Options{})}
	msgs := []string{mSys, mUser, mCall1, mRes1, mText, mUser2, mCall2, mRes2, mUser3}
	path := writeData(t, msgs)
	rep, err := Run(context.Background(), fakeOptions(f), []string{path})
	if err != nil {
		t.Fatal(err)
	}
	// Requests end before each assistant message (2, 4 and 6); the
	// messages after the last one (a result and a user message) have no
	// recorded answer and are not replayed.
	if len(f.requests) != 3 {
		t.Fatalf("%d requests, want 3", len(f.requests))
	}
	original := conv(t, msgs...)
	for i, want := range []int{2, 4, 6} {
		got := f.requests[i]
		if len(got) != want {
			t.Errorf("request %d has %d messages, want %d", i, len(got), want)
			continue
		}
		// Each request is the original history, not the previous
		// compacted one plus the new messages.
		for j := range got {
			if !bytes.Equal(got[j], original.Raw[j]) {
				t.Errorf("request %d message %d = %s, want the original %s", i, j, got[j], original.Raw[j])
			}
		}
	}
	if want := []string{"", "1", "2"}; fmt.Sprint(f.states) != fmt.Sprint(want) {
		t.Errorf("the policy saw states %q, want %q (its own, turn after turn)", f.states, want)
	}

	file := rep.Files[0]
	if len(file.Policies) != 2 || file.Policies[0].Policy != Baseline || file.Policies[1].Policy != "fake" {
		t.Fatalf("policies %+v", file.Policies)
	}
	tok := f.tok.ForModel("gpt-4o")
	prefixTokens := func(n int) int { return tok.CountMessages(append([]abi.Message(nil), original.Messages[:n]...)) }
	none, fk := file.Policies[0].Conversations[0].Turns, file.Policies[1].Conversations[0].Turns
	for i, at := range []int{2, 4, 6} {
		if none[i].At != at || fk[i].At != at {
			t.Errorf("turn %d at %d/%d, want %d", i, none[i].At, fk[i].At, at)
		}
		if none[i].Tokens != prefixTokens(at) || none[i].TokensIn != none[i].Tokens || fk[i].TokensIn != none[i].Tokens {
			t.Errorf("turn %d: none sent %d of %d, fake's input %d; want the prefix's %d", i, none[i].Tokens, none[i].TokensIn, fk[i].TokensIn, prefixTokens(at))
		}
		if fk[i].LLM == nil || fk[i].LLM.Calls != 1 || fk[i].LLM.Failed != 1 {
			t.Errorf("turn %d: LLM usage %+v, want 1 failed call (no provider)", i, fk[i].LLM)
		}
	}
	// The baseline's requests grow: each starts with the whole previous.
	if !none[1].PrevKept || none[1].PrefixMessages != 2 || none[1].Prefix != prefixTokens(2) || none[2].PrefixMessages != 4 {
		t.Errorf("baseline prefixes: %+v", none)
	}
	// The fake's: [S U] → [S marker C1 R1] → [S marker' C2 R2]: only the
	// system message is shared.
	if fk[1].PrefixMessages != 1 || fk[1].PrevKept || fk[2].PrefixMessages != 1 {
		t.Errorf("fake prefixes: %+v", fk)
	}
	if v := file.Policies[1].Validity; v.Share != 1 || v.Valid != 3 {
		t.Errorf("validity %+v", v)
	}
	if got := file.Policies[1].LLM; got.Calls != 3 || got.Failed != 3 {
		t.Errorf("LLM %+v, want 3 calls, 3 failed", got)
	}
}

func TestInvalidRequestsAreReported(t *testing.T) {
	f := &fake{tok: tokens.New(tokens.Options{}), invalidAt: 4}
	path := writeData(t, []string{mSys, mUser, mCall1, mRes1, mText, mUser2, mCall2, mRes2, mUser3})
	rep, err := Run(context.Background(), fakeOptions(f), []string{path})
	if err != nil {
		t.Fatal(err)
	}
	v := rep.Files[0].Policies[1].Validity
	// The rewritten final message was the call's result: the pairing
	// check sees it first.
	if v.Turns != 3 || v.Valid != 2 || len(v.Failures) != 1 || v.Failures[0].At != 4 || !strings.Contains(v.Failures[0].Reason, "no result") {
		t.Errorf("validity %+v, want the request at 4 reported", v)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "INVALID fake: 1 of 3 requests") {
		t.Errorf("the table does not flag the invalid request:\n%s", text.String())
	}
}

// TestCostArithmetic checks the report's dollars against the turns' bills
// priced by hand, and the baseline's bills against the cache rules.
func TestCostArithmetic(t *testing.T) {
	f := &fake{tok: tokens.New(tokens.Options{})}
	// A long system prompt, so the caches have something to hold.
	sys := fmt.Sprintf(`{"role":"system","content":%q}`, strings.Repeat("Rule: always answer with care. ", 200))
	path := writeData(t,
		[]string{sys, mUser, mCall1, mRes1, mText, mUser2, mCall2, mRes2, mUser3},
		[]string{sys, mUser2, mText, mUser3, mText})
	rep, err := Run(context.Background(), fakeOptions(f), []string{path})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := LoadPricing("default")
	for k, name := range []string{"gpt-4o", "claude-sonnet-4"} {
		pm, _ := p.Lookup(name)
		var base float64
		for pi, pol := range rep.Files[0].Policies {
			var want float64
			for _, c := range pol.Conversations {
				for _, tr := range c.Turns {
					want += pm.Price.Cost(tr.Bills[k])
				}
			}
			got := pol.Costs[k]
			if math.Abs(got.TotalUSD-want) > 1e-12 || math.Abs(got.InputUSD+got.CacheReadUSD+got.CacheWriteUSD+got.OutputUSD-got.TotalUSD) > 1e-12 {
				t.Errorf("%s %s: total %v, want %v", pol.Policy, name, got.TotalUSD, want)
			}
			if pi == 0 {
				base = want
				if got.VsNone != 1 {
					t.Errorf("baseline vs none = %v", got.VsNone)
				}
			} else if math.Abs(got.VsNone-want/base) > 1e-12 {
				t.Errorf("%s %s: vs none %v, want %v", pol.Policy, name, got.VsNone, want/base)
			}
		}
	}
	// The baseline under OpenAI: turn 2 of conversation 0 shares turn 1
	// whole (system + task, over 1,024 tokens), rounded down to a
	// 128-token step; under Anthropic it reads turn 1 and writes the rest.
	none := rep.Files[0].Policies[0].Conversations[0].Turns
	if none[1].Prefix < 1024 {
		t.Fatalf("the system prompt is too short for the test: %d", none[1].Prefix)
	}
	wantCached := 1024 + (none[1].Prefix-1024)/128*128
	if b := none[1].Bills[0]; b.CacheRead != wantCached || b.Input != none[1].Tokens+3-wantCached {
		t.Errorf("openai bill %+v, want %d cached of %d", b, wantCached, none[1].Tokens+3)
	}
	claude := f.tok.ForModel("claude-sonnet-4")
	first := 0
	for i := 0; i < 2; i++ {
		first += claude.CountMessage(&conv(t, sys, mUser).Messages[i])
	}
	if b := none[1].Bills[1]; b.CacheRead != first || b.Input != 3 || b.CacheWrite != none[1].Bills[1].TotalInput()-3-first {
		t.Errorf("anthropic bill %+v, want %d read from the first request", b, first)
	}
	if b := none[0].Bills[1]; b.CacheRead != 0 || b.CacheWrite != first {
		t.Errorf("anthropic first bill %+v, want %d written", b, first)
	}
}

func TestOutputs(t *testing.T) {
	f := &fake{tok: tokens.New(tokens.Options{})}
	path := writeData(t, []string{mSys, mUser, mCall1, mRes1, mText, mUser2, mCall2, mRes2, mUser3})
	opts := fakeOptions(f)
	var progress bytes.Buffer
	opts.Progress = &progress
	rep, err := Run(context.Background(), opts, []string{path})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "3/3 compactions") {
		t.Errorf("progress: %q", progress.String())
	}
	dir := t.TempDir()
	written, err := rep.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 4 {
		t.Errorf("wrote %v", written)
	}
	for _, p := range written {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(p) {
		case ".svg":
			dec := xml.NewDecoder(bytes.NewReader(b))
			for {
				if _, err := dec.Token(); err != nil {
					if err.Error() != "EOF" {
						t.Errorf("%s is not well-formed XML: %v", p, err)
					}
					break
				}
			}
		case ".json":
			var back Report
			if err := json.Unmarshal(b, &back); err != nil || len(back.Files) != 1 {
				t.Errorf("report.json: %v", err)
			}
		case ".md":
			if !strings.Contains(string(b), "| fake |") {
				t.Errorf("summary.md has no row for the policy:\n%s", b)
			}
		}
	}
}

func TestOptionsErrors(t *testing.T) {
	f := &fake{tok: tokens.New(tokens.Options{})}
	path := writeData(t, []string{mSys, mUser, mText})
	for name, mutate := range map[string]func(*Options){
		"no specs":          func(o *Options) { o.Specs = nil },
		"baseline as spec":  func(o *Options) { o.Specs = []Spec{{Name: "none", Pipeline: []string{"none"}}} },
		"twice":             func(o *Options) { o.Specs = append(o.Specs, o.Specs[0]) },
		"unpriced model":    func(o *Options) { o.CostModels = []string{"no-such-model"} },
		"empty pipeline":    func(o *Options) { o.Specs = []Spec{{Name: "x"}} },
		"no policy source":  func(o *Options) { o.newCompact = nil },
		"missing data file": func(o *Options) {},
	} {
		opts := fakeOptions(f)
		mutate(&opts)
		files := []string{path}
		if name == "missing data file" {
			files = []string{filepath.Join(t.TempDir(), "nope.jsonl")}
		}
		if _, err := Run(context.Background(), opts, files); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine(250, 1000, 10*time.Second)
	for _, want := range []string{"[#######-----", " 25%", "250/1,000 compactions", "0:10", "~0:30 left"} {
		if !strings.Contains(got, want) {
			t.Errorf("progressLine = %q, want it to contain %q", got, want)
		}
	}
	if got := progressLine(5, 5, time.Second); strings.Contains(got, "left") || !strings.Contains(got, "100%") {
		t.Errorf("finished: %q", got)
	}
}

func TestQuantile(t *testing.T) {
	v := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if quantile(v, 0.5) != 5 || quantile(v, 0.99) != 10 || quantile(v, 0.1) != 1 || quantile([]int{}, 0.5) != 0 {
		t.Errorf("quantile: %d %d %d", quantile(v, 0.5), quantile(v, 0.99), quantile(v, 0.1))
	}
	if thousands(1234567) != "1,234,567" || thousands(-1000) != "-1,000" || thousands(12) != "12" {
		t.Error("thousands")
	}
	if pct(0.99996) != "99.9%" || pct(1) != "100.0%" || pct(0.00001) != "0.1%" || pct(0) != "0.0%" || pct(0.5) != "50.0%" {
		t.Errorf("pct: %s %s %s %s", pct(0.99996), pct(1), pct(0.00001), pct(0))
	}
	if money(1234.5) != "$1,234.50" || money(0.01234) != "$0.0123" {
		t.Errorf("money: %s %s", money(1234.5), money(0.01234))
	}
}

func TestSummarizerCostAndMeter(t *testing.T) {
	r, err := newRunner(Options{newCompact: (&fake{}).newCompact, Specs: []Spec{{Name: "x", Pipeline: []string{"x"}}}, CostModels: []string{"gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	u := LLMUsage{ByModel: map[string]TokenPair{
		"gpt-4o-mini-2024-07-18": {Input: 1_000_000, Output: 1_000_000}, // its own row: 0.15 + 0.60
		"house-summarizer":       {Input: 1_000_000},                    // no row: gpt-4o's 2.50
	}}
	if got := r.summarizerCost(u, r.costs[0]); math.Abs(got-3.25) > 1e-12 {
		t.Errorf("summarizer cost %v, want 3.25", got)
	}

	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	m := &meter{inner: StubLLM{Ratio: 0.5, Count: tok.Count}}
	ctx := context.Background()
	long := strings.Repeat("word ", 400)
	resp, err := m.Complete(ctx, abi.LLMRequest{Model: "gpt-4o-mini", MaxTokens: 50, Messages: []abi.LLMMessage{{Role: "user", Content: long}}, Stop: []string{"</summary>"}})
	if err != nil || resp.Error != nil || !strings.HasPrefix(resp.Text, "<summary>word") || strings.Contains(resp.Text, "</summary>") {
		t.Fatalf("stub: %+v %v", resp, err)
	}
	if resp.Usage.OutputTokens > 60 || resp.Usage.InputTokens < 400 {
		t.Errorf("stub usage %+v", resp.Usage)
	}
	got := m.take()
	if got.Calls != 1 || got.Failed != 0 || got.ByModel["gpt-4o-mini"] != (TokenPair{resp.Usage.InputTokens, resp.Usage.OutputTokens}) {
		t.Errorf("meter %+v", got)
	}
	if again := m.take(); again.Calls != 0 {
		t.Errorf("take does not reset: %+v", again)
	}
	none := &meter{}
	if resp, err := none.Complete(ctx, abi.LLMRequest{}); err == nil {
		t.Errorf("no provider answered %+v", resp)
	}
	if u := none.take(); u.Calls != 1 || u.Failed != 1 || len(u.ByModel) != 0 {
		t.Errorf("no provider: %+v", u)
	}
}

// TestNothingEvaluated: a file whose conversations were all skipped has
// no figures (not 100% everywhere), says why once, and gets no charts.
func TestNothingEvaluated(t *testing.T) {
	f := &fake{tok: tokens.New(tokens.Options{})}
	bad := writeData(t, []string{mUser, mRes1, mText}, nil)
	good := writeData(t, []string{mSys, mUser, mCall1, mRes1, mText})
	rep, err := Run(context.Background(), fakeOptions(f), []string{bad, good})
	if err != nil {
		t.Fatal(err)
	}
	none, some := rep.Files[0], rep.Files[1]
	if none.Conversations != 0 || len(none.Skipped) != 2 || some.Conversations != 1 {
		t.Fatalf("conversations %d (skipped %+v) and %d", none.Conversations, none.Skipped, some.Conversations)
	}
	for _, s := range none.Skipped {
		if strings.Count(s.Reason, "invalid conversation") != 1 {
			t.Errorf("skip reason %q: say it once", s.Reason)
		}
	}
	var text, md bytes.Buffer
	rep.WriteText(&text)
	rep.WriteMarkdown(&md)
	section := text.String()[:strings.Index(text.String(), "data.jsonl: 1 conversations")]
	if !strings.Contains(section, "NO CONVERSATION EVALUATED: all 2 were skipped") || strings.Contains(section, "100.0%") {
		t.Errorf("the empty file's section:\n%s", section)
	}
	if !strings.Contains(md.String(), "NO CONVERSATION EVALUATED") {
		t.Errorf("summary.md:\n%s", md.String())
	}
	written, err := rep.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// report.json, summary.md, and the charts of the one file with figures.
	if len(written) != 4 {
		t.Errorf("wrote %v", written)
	}
}

func TestExampleConversation(t *testing.T) {
	long := []string{mSys, mUser, mCall1, mRes1, mText, mUser2, mCall2, mRes2, mText}
	short := []string{mSys, mUser, mText}
	path := writeData(t, short, long, short)
	run := func(named string) (*Report, error) {
		opts := fakeOptions(&fake{tok: tokens.New(tokens.Options{})})
		opts.ChartConversation = named
		return Run(context.Background(), opts, []string{path})
	}
	rep, err := run("")
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Files[0]; f.Example != "c1" || f.ExampleNamed {
		t.Errorf("example %q (named %v), want the longest, c1", f.Example, f.ExampleNamed)
	}
	if !strings.Contains(string(TokensChart(&rep.Files[0])), "c1 (the file&#39;s longest: 4 requests)") {
		t.Errorf("the chart does not say which conversation it shows:\n%s", TokensChart(&rep.Files[0]))
	}
	if rep, err = run("c2"); err != nil {
		t.Fatal(err)
	}
	if f := rep.Files[0]; f.Example != "c2" || !f.ExampleNamed {
		t.Errorf("example %q (named %v), want c2", f.Example, f.ExampleNamed)
	}
	if _, err := run("c9"); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), `"c9"`) {
		t.Errorf("an unknown chart conversation: %v", err)
	}
}

// TestRetentionPerRequest: every request is checked against probes of
// its own history, and the fake (which keeps only the last unit) loses
// what came before.
func TestRetentionPerRequest(t *testing.T) {
	f := &fake{tok: tokens.New(tokens.Options{})}
	var msgs []string
	msgs = append(msgs, mSys, mUser)
	for i := 0; i < 6; i++ {
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":"","tool_calls":[{"id":"c%d","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"cat src/file_%d.py\"}"}}]}`, i, i),
			fmt.Sprintf(`{"role":"tool","tool_call_id":"c%d","content":"def handler_%d(x): return %d"}`, i, i, 4000+i))
	}
	msgs = append(msgs, mText)
	rep, err := Run(context.Background(), fakeOptions(f), []string{writeData(t, msgs)})
	if err != nil {
		t.Fatal(err)
	}
	none, fk := rep.Files[0].Policies[0], rep.Files[0].Policies[1]
	if none.Retention.Probes == 0 || none.Retention.Share != 1 || fk.Retention.Probes != none.Retention.Probes {
		t.Fatalf("retention: none %+v, fake %+v", none.Retention.Retention, fk.Retention.Retention)
	}
	if fk.Retention.Retained != 0 || fk.Retention.ByPosition[PositionFirst][0] == 0 || len(fk.Retention.LostExamples) == 0 {
		t.Errorf("the fake keeps nothing of the history: %+v", fk.Retention)
	}
	probes := 0
	for i, tr := range fk.Conversations[0].Turns {
		probes += tr.Probes
		if i == 0 && tr.Probes != 0 {
			t.Errorf("the first request (system and task) has %d probes", tr.Probes)
		}
	}
	if probes != fk.Retention.Probes {
		t.Errorf("turns hold %d probes, the total is %d", probes, fk.Retention.Probes)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, want := range []string{"compacted", "first third", "lost by fake, e.g.:"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the tables lack %q:\n%s", want, text.String())
		}
	}
}
