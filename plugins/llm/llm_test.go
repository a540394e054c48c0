package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/steps"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fakeLLM is a summarizer that answers with a fixed-ratio summary: a
// <summary> of about ratio times the request's characters (at least a
// line), naming how many characters it read. It counts its calls, and
// with cache it answers repeated requests as the host's cache would.
type fakeLLM struct {
	ratio float64
	cache bool
	fail  func(call int, req abi.LLMRequest) error

	mu       sync.Mutex
	calls    int // requests received
	computed int // requests answered without the cache
	seen     map[string]bool
	reqs     []abi.LLMRequest
}

func (f *fakeLLM) complete(req abi.LLMRequest) (abi.LLMResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.reqs = append(f.reqs, req)
	if f.fail != nil {
		if err := f.fail(f.calls, req); err != nil {
			return abi.LLMResponse{}, err
		}
	}
	key, _ := json.Marshal(req)
	cached := f.cache && f.seen[string(key)]
	if !cached {
		f.computed++
		if f.seen == nil {
			f.seen = map[string]bool{}
		}
		f.seen[string(key)] = true
	}
	in := 0
	for _, m := range req.Messages {
		in += len(m.Content)
	}
	ratio := f.ratio
	if ratio == 0 {
		ratio = 0.1
	}
	n := max(int(float64(in)*ratio), 40)
	if lim := req.MaxTokens * 4; req.MaxTokens > 0 && n > lim {
		n = lim
	}
	head := fmt.Sprintf("summary of %d chars", in)
	body := head + strings.Repeat(".", max(n-len(head), 0))
	return abi.LLMResponse{Text: "<summary>\n" + body + "\n</summary>", Model: req.Model, Cached: cached,
		Usage: abi.LLMUsage{InputTokens: in / 4, OutputTokens: n / 4}}, nil
}

func (f *fakeLLM) host() *pdk.TestHost { return &pdk.TestHost{LLM: f.complete} }

// run calls compact with h and checks the result as the host does.
func run(t testing.TB, h pdk.Host, msgs []abi.Message, cfg map[string]any, state json.RawMessage) *abi.CompactResult {
	t.Helper()
	req := plugtest.Request(msgs, cfg, state)
	req.Context.Model = "agent-model"
	res, err := compact(h, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := convo.CheckResult(msgs, res.Messages); err != nil {
		t.Fatalf("invalid result: %v", err)
	}
	return res
}

// small makes every trigger but message_threshold off.
func small(kv ...any) map[string]any {
	cfg := map[string]any{"token_threshold": 0, "usage_ratio_threshold": 0, "retention_window": 2, "min_batch": 1}
	for i := 0; i+1 < len(kv); i += 2 {
		cfg[kv[i].(string)] = kv[i+1]
	}
	return cfg
}

func TestSpans(t *testing.T) {
	tests := []struct {
		name string
		spec string
		cfg  map[string]any
		want string
	}{
		{"below every threshold", "suauaua", small("message_threshold", 8), "r0 r1 r2 r3 r4 r5 r6"},
		{"user messages kept verbatim in their places, each run summarized where it was", "suauauaua", small("message_threshold", 9), "r0 r1 m r3 m r5 m r7 r8"},
		{"tool unit never split: the span ends before the call", "suctctcta", small("message_threshold", 9, "retention_window", 3), "r0 r1 m r6 r7 r8"},
		{"parallel calls are one unit", "suapttctaua", small("message_threshold", 11, "retention_window", 5), "r0 r1 m r6 r7 r8 r9 r10"},
		{"the newest unit stays even with no retention", "suctctc", small("message_threshold", 7, "retention_window", 0), "r0 r1 m r6"},
		{"trailing unanswered call kept", "suctctctc", small("message_threshold", 9, "retention_window", 1), "r0 r1 m r8"},
		{"mid-conversation system message kept in its place", "suasctctcta", small("message_threshold", 11), "r0 r1 m r3 m r8 r9 r10"},
		{"summarize_tool_loop false stops at the latest user message", "suctctuctctcta", small("message_threshold", 14, "summarize_tool_loop", false), "r0 r1 m r6 r7 r8 r9 r10 r11 r12 r13"},
		{"summarize_tool_loop true folds completed loop steps", "suctctuctctcta", small("message_threshold", 14), "r0 r1 m r6 m r11 r12 r13"},
		{"min_batch holds a small span back", "suctcta", small("message_threshold", 6, "retention_window", 2, "min_batch", 4), "r0 r1 r2 r3 r4 r5 r6"},
		{"developer messages lead like system ones", "sductcta", small("message_threshold", 8), "r0 r1 r2 m r5 r6 r7"},
		{"a span of user messages only is not summarized", "suuuuuua", small("message_threshold", 8), "r0 r1 r2 r3 r4 r5 r6 r7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLLM{}
			res := run(t, f.host(), plugtest.Build(tt.spec), tt.cfg, nil)
			if got := plugtest.Shape(res.Messages); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if res.Compacted != strings.Contains(tt.want, "m") {
				t.Fatalf("compacted = %v", res.Compacted)
			}
		})
	}
}

// TestTriggerBoundaries checks every trigger at its threshold (fires:
// the comparisons are >=) and one below (does not).
func TestTriggerBoundaries(t *testing.T) {
	// "suctctcta": 9 messages of 10 tokens = 90 tokens, 2 user turns.
	off := map[string]any{"token_threshold": 0, "usage_ratio_threshold": 0, "retention_window": 2, "min_batch": 1}
	with := func(kv ...any) map[string]any {
		cfg := map[string]any{}
		for k, v := range off {
			cfg[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			cfg[kv[i].(string)] = kv[i+1]
		}
		return cfg
	}
	msgs := plugtest.Build("suctctcua")
	tests := []struct {
		name   string
		cfg    map[string]any
		window int
		fires  bool
	}{
		{"tokens at the threshold", with("token_threshold", 90), 0, true},
		{"tokens one below", with("token_threshold", 91), 0, false},
		{"messages at the threshold", with("message_threshold", 9), 0, true},
		{"messages one below", with("message_threshold", 10), 0, false},
		{"turns at the threshold", with("turn_threshold", 2), 0, true},
		{"turns one below", with("turn_threshold", 3), 0, false},
		{"usage ratio at the threshold", with("usage_ratio_threshold", 0.9), 100, true},
		{"usage ratio below", with("usage_ratio_threshold", 0.91), 100, false},
		{"usage ratio without a known window", with("usage_ratio_threshold", 0.1), 0, false},
		{"null thresholds are off", with("message_threshold", nil, "turn_threshold", nil, "token_threshold", nil), 0, false},
		{"no trigger at all", off, 1000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := plugtest.Request(msgs, tt.cfg, nil)
			req.Context.ContextWindow = tt.window
			f := &fakeLLM{}
			res, err := compact(f.host(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Compacted != tt.fires {
				t.Fatalf("compacted = %v, want %v (%s)", res.Compacted, tt.fires, plugtest.Shape(res.Messages))
			}
			should, err := shouldCompact(f.host(), req)
			if err != nil || should.Compact != tt.fires {
				t.Fatalf("should_compact = %+v, %v", should, err)
			}
		})
	}
}

func TestDefaultsMatchThePRD(t *testing.T) {
	want := config{MaxTokens: 2000, TokenThreshold: 60000, RetentionWindow: 6, SummaryTag: "summary", UsageRatioThreshold: 0.8, MinBatch: 6, SummarizeToolLoop: true,
		Temperature: 0.3, SummaryRole: abi.RoleAssistant}
	if defaults != want {
		t.Fatalf("defaults %+v", defaults)
	}
	// The schema's defaults decode back to the same config.
	p := policy()
	d, err := p.Describe()
	if err != nil {
		t.Fatal(err)
	}
	got := config{}
	if err := json.Unmarshal(d.Defaults, &got); err != nil || got != defaults {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestSummaryMessage(t *testing.T) {
	f := &fakeLLM{}
	msgs := plugtest.Build("suctctcta")
	res := run(t, f.host(), msgs, small("message_threshold", 9), nil)
	var sum *abi.Message
	for _, it := range res.Messages {
		if !it.IsRef() {
			sum = it.Message
		}
	}
	if sum == nil || sum.Role != abi.RoleAssistant {
		t.Fatalf("summary message %+v", sum)
	}
	count, body, ok := parseSummary(sum.Text())
	if !ok || count != 4 || !strings.HasPrefix(body, "summary of ") || strings.Contains(body, "<summary>") {
		t.Fatalf("summary %q (count %d, ok %v)", sum.Text(), count, ok)
	}
	if res.EntriesSummarized != 4 || len(res.Warnings) != 0 {
		t.Fatalf("result %+v", res)
	}
	// The request: the agent's model (no model configured), temperature
	// 0.3 (the llms extension's), max_tokens, the default prompt, and the
	// span as a transcript.
	req := f.reqs[0]
	if req.Model != "agent-model" || req.MaxTokens != 2000 || req.Temperature != 0.3 || len(req.Messages) != 2 {
		t.Fatalf("request %+v", req)
	}
	if !strings.Contains(req.Messages[0].Content, "Current step") || !strings.Contains(req.Messages[0].Content, "<summary></summary>") {
		t.Fatalf("system prompt %q", req.Messages[0].Content)
	}
	user := req.Messages[1].Content
	for _, want := range []string{"[user] (kept verbatim)\nuser 1", "[assistant calls f0] {}", "[tool result: f0]\nresult 3"} {
		if !strings.Contains(user, want) {
			t.Fatalf("transcript lacks %q:\n%s", want, user)
		}
	}
}

func TestModelFromConfig(t *testing.T) {
	f := &fakeLLM{}
	run(t, f.host(), plugtest.Build("suctctcta"), small("message_threshold", 9, "model", "cheap-summarizer"), nil)
	if f.reqs[0].Model != "cheap-summarizer" {
		t.Fatalf("model %q", f.reqs[0].Model)
	}
}

func TestExtractTag(t *testing.T) {
	tests := []struct{ name, in, tag, want string }{
		{"tagged", "Sure!\n<summary>\nthe gist\n</summary>\nbye", "summary", "the gist"},
		{"no tag: whole answer", "  the gist  ", "summary", "the gist"},
		{"cut by max_tokens: no closing tag", "<summary>the gi", "summary", "the gi"},
		{"other tag name", "<recap>x</recap>", "recap", "x"},
		{"empty tag setting", "<summary>x</summary>", "", "<summary>x</summary>"},
		{"empty inside", "<summary> </summary>", "summary", ""},
		{"first occurrence", "<summary>a</summary><summary>b</summary>", "summary", "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := extractTag(tt.in, tt.tag); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCustomPrompt(t *testing.T) {
	f := &fakeLLM{}
	run(t, f.host(), plugtest.Build("suctctcta"), small("message_threshold", 9, "prompt", "Be brief."), nil)
	if r := f.reqs[0]; r.Messages[0].Content != "Be brief." || r.Messages[0].Role != abi.RoleSystem {
		t.Fatalf("%+v", r)
	}
	f = &fakeLLM{}
	run(t, f.host(), plugtest.Build("suctctcta"), small("message_threshold", 9, "prompt", "Summarize in {{max_tokens}} tokens as <{{summary_tag}}>:\n{{conversation}}"), nil)
	r := f.reqs[0]
	if len(r.Messages) != 1 || !strings.HasPrefix(r.Messages[0].Content, "Summarize in 2000 tokens as <summary>:\n[user] (kept verbatim)\nuser 1") {
		t.Fatalf("%+v", r)
	}
}

// TestFallbackIsTheDeterministicSummary fails loudly if the fallback is not
// steps.DeterministicSummary over the summarized entries (user entries
// left out: they are kept verbatim).
func TestFallbackIsTheDeterministicSummary(t *testing.T) {
	msgs := plugtest.Build("suctctcta")
	res := run(t, &pdk.TestHost{}, msgs, small("message_threshold", 9), nil) // no LLM provider
	var entries []steps.Entry
	for _, e := range steps.Entries(msgs, 2, 6) {
		if e.Action != steps.ActionUser {
			entries = append(entries, e)
		}
	}
	want := formatSummary(4, steps.DeterministicSummary(entries, steps.SummaryOptions{}))
	if plugtest.Shape(res.Messages) != "r0 r1 m r6 r7 r8" || res.Messages[2].Message.Text() != want {
		t.Fatalf("got %s %q\nwant %q", plugtest.Shape(res.Messages), res.Messages[2].Message.Text(), want)
	}
	if !strings.HasPrefix(want, headerPrefix+"4"+headerSuffix+"\nPrevious 2 steps: f0(2)") {
		t.Fatalf("deterministic summary changed format: %q", want)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "no_provider") || !strings.Contains(res.Warnings[0], "deterministic") {
		t.Fatalf("warnings %q", res.Warnings)
	}
	if res.State != nil {
		t.Fatal("a fallback summary must not be saved as state")
	}
}

func TestFallbackChain(t *testing.T) {
	msgs := plugtest.Build("suctctctctctcta")
	cfg := small("message_threshold", 7, "retention_window", 2)
	sched := schedule(msgs, mustConfig(t, cfg), 0)
	if len(sched) < 2 {
		t.Fatalf("want several steps, got %v", sched)
	}
	tests := []struct {
		name     string
		fail     func(call int, req abi.LLMRequest) error
		wantBody string // prefix of the summary body
		warning  string
	}{
		{"the first call fails: all deterministic", func(int, abi.LLMRequest) error {
			return &abi.Error{Code: abi.CodeProviderError, Message: "HTTP 500"}
		}, "Previous", "provider_error"},
		{"budget exceeded mid-way: the LLM summary so far, then the rest deterministic", func(call int, _ abi.LLMRequest) error {
			if call >= 2 {
				return &abi.Error{Code: abi.CodeBudgetExceeded, Message: "max_calls"}
			}
			return nil
		}, "summary of", "budget_exceeded"},
		{"an answer without text", func(int, abi.LLMRequest) error { return nil }, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLLM{fail: tt.fail}
			res := run(t, f.host(), msgs, cfg, nil)
			if tt.wantBody == "" {
				return
			}
			var text string
			for _, it := range res.Messages {
				if !it.IsRef() {
					text = it.Message.Text()
				}
			}
			_, body, ok := parseSummary(text)
			if !ok || !strings.HasPrefix(body, tt.wantBody) {
				t.Fatalf("summary %q", text)
			}
			if tt.warning == "budget_exceeded" && !strings.Contains(body, "\n\nThen: Previous") {
				t.Fatalf("the deterministic part is not folded in: %q", body)
			}
			if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], tt.warning) {
				t.Fatalf("warnings %q", res.Warnings)
			}
			// The LLM steps made before the failure are saved; a step of
			// the fallback never is.
			st, ok := loadState(res.State)
			if tt.warning == "budget_exceeded" {
				if !ok || st.Steps != 1 || len(st.Runs) != 1 || !strings.HasPrefix(st.Runs[0].Summary, "summary of") {
					t.Fatalf("state %s", res.State)
				}
				// Next time, with a budget again, only the remaining steps are
				// asked for.
				f2 := &fakeLLM{}
				run(t, f2.host(), msgs, cfg, res.State)
				if f2.calls != len(sched)-1 {
					t.Fatalf("%d calls after resuming from step 1 of %d", f2.calls, len(sched))
				}
			} else if res.State != nil {
				t.Fatalf("state %s saved from a fallback", res.State)
			}
		})
	}
	// An LLM answering blank text falls back too.
	blank := &pdk.TestHost{LLM: func(abi.LLMRequest) (abi.LLMResponse, error) {
		return abi.LLMResponse{Text: "<summary> </summary>"}, nil
	}}
	res := run(t, blank, msgs, cfg, nil)
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "without a summary") {
		t.Fatalf("warnings %q", res.Warnings)
	}
}

// TestFallbackImpossible: when no deterministic summary can be made the
// input comes back unchanged with a warning.
func TestFallbackImpossible(t *testing.T) {
	msgs := plugtest.Build("suuu")
	if text, _ := fallback(msgs, 1, 4, "", 0); text != "" {
		t.Fatalf("fallback of user messages only = %q", text)
	}
	sum := summarize(&pdk.TestHost{}, msgs, 1, []step{{at: 4, end: 4}}, defaults, "", nil)
	if len(sum.runs) != 0 || len(sum.warnings) != 1 || sum.state != nil {
		t.Fatalf("%+v", sum)
	}
}

func mustConfig(t *testing.T, cfg map[string]any) config {
	t.Helper()
	c, err := decodeConfig(plugtest.Request(nil, cfg, nil))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIncrementalFold: an agent that sends back the compacted conversation
// gets the earlier summary folded into the next one (sent as the previous
// summary, not re-read as a user message), and the count accumulates.
func TestIncrementalFold(t *testing.T) {
	f := &fakeLLM{}
	cfg := small("message_threshold", 9)
	msgs := plugtest.Build("suctctcta")
	res := run(t, f.host(), msgs, cfg, nil)
	out, _ := convo.Resolve(msgs, res.Messages)
	// The agent continues from the compacted conversation.
	next := append(append([]abi.Message(nil), out...), plugtest.Build("ssctctctcta")[2:]...)
	for i := range next {
		next[i].Tokens = 10
	}
	if err := convo.Check(next); err != nil {
		t.Fatal(err)
	}
	res2 := run(t, f.host(), next, cfg, nil)
	if len(f.reqs) < 2 {
		t.Fatalf("%d LLM calls", len(f.reqs))
	}
	user := f.reqs[1].Messages[1].Content
	_, firstBody, _ := parseSummary(out[2].Text())
	if !strings.HasPrefix(user, "<previous_summary>\n"+firstBody+"\n</previous_summary>") || strings.Contains(user, headerPrefix) {
		t.Fatalf("fold request:\n%s", user)
	}
	if !strings.Contains(f.reqs[1].Messages[1].Content, "Write the updated summary now.") {
		t.Fatal("not asked to update")
	}
	var count int
	for _, it := range res2.Messages {
		if !it.IsRef() {
			count, _, _ = parseSummary(it.Message.Text())
		}
	}
	if count <= 4 {
		t.Fatalf("count %d did not accumulate", count)
	}
	if got := plugtest.Shape(res2.Messages); !strings.HasPrefix(got, "r0 r1 m") {
		t.Fatalf("shape %s: the old summary must be replaced by the new one", got)
	}
}

// TestState: the result's state lets the next call skip every summary
// step already made; a state for another history is ignored.
func TestState(t *testing.T) {
	msgs := plugtest.Build("suctctctctctctctcta")
	cfg := small("message_threshold", 7)
	f := &fakeLLM{}
	first := run(t, f.host(), msgs, cfg, nil)
	steps := len(schedule(msgs, mustConfig(t, cfg), 0))
	if f.calls != steps || steps < 2 || first.State == nil {
		t.Fatalf("%d calls for %d steps, state %s", f.calls, steps, first.State)
	}
	again := run(t, f.host(), msgs, cfg, first.State)
	if f.calls != steps {
		t.Fatalf("the matching state did not save the calls: %d", f.calls)
	}
	if again.State != nil {
		t.Fatal("an unchanged state was returned again")
	}
	if a, b := mustJSON(t, first.Messages), mustJSON(t, again.Messages); a != b {
		t.Fatalf("outputs differ:\n%s\n%s", a, b)
	}
	// The conversation grows by one step: one call.
	longer := plugtest.Build("suctctctctctctctctctcta")
	run(t, f.host(), longer, cfg, first.State)
	added := len(schedule(longer, mustConfig(t, cfg), 0)) - steps
	if f.calls != steps+added || added < 1 {
		t.Fatalf("%d calls after growing by %d steps", f.calls-steps, added)
	}
	// Another history (an edited message) does not match the state.
	edited := plugtest.Build("suctctctctctctctcta")
	edited[3].Content = abi.TextContent("edited")
	run(t, f.host(), edited, cfg, first.State)
	if f.calls != 2*steps+added {
		t.Fatalf("a state for another history was used (%d calls)", f.calls)
	}
	// Another model does not match either.
	cfg["model"] = "other"
	run(t, f.host(), msgs, cfg, first.State)
	if f.calls != 3*steps+added {
		t.Fatalf("a state for another model was used (%d calls)", f.calls)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReplayCallsOncePerSpan replays a conversation turn by turn without
// state, as a stateless agent and daemon would: with the host's cache the
// LLM computes each span once (not once per turn), and the prefix changes
// only when the summary moves.
func TestReplayCallsOncePerSpan(t *testing.T) {
	msgs := plugtest.Build("su" + strings.Repeat("ct", 40) + "c")
	cfg := small("message_threshold", 20, "retention_window", 6, "min_batch", 6)
	f := &fakeLLM{cache: true}
	var prev []abi.Message
	changes, turns := 0, 0
	for n := 3; n <= len(msgs); n++ {
		if msgs[n-1].Role != abi.RoleAssistant {
			continue
		}
		in := msgs[:n]
		res := run(t, f.host(), in, cfg, nil)
		out, _ := convo.Resolve(in, res.Messages)
		if prev != nil && !isPrefix(prev, out) {
			changes++
		}
		prev = out
		turns++
	}
	steps := len(schedule(msgs, mustConfig(t, cfg), 0))
	if f.computed != steps {
		t.Fatalf("the LLM computed %d summaries for %d spans", f.computed, steps)
	}
	if changes != steps {
		t.Fatalf("prefix changed %d times over %d turns, want once per step (%d)", changes, turns, steps)
	}
	t.Logf("%d turns, %d spans, %d LLM requests (%d computed)", turns, steps, f.calls, f.computed)
}

func isPrefix(a, b []abi.Message) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if !plugtest.SameMessage(&a[i], &b[i]) {
			return false
		}
	}
	return true
}

func TestConfigErrors(t *testing.T) {
	req := plugtest.Request(plugtest.Build("su"), map[string]any{"max_tokens": 1}, nil)
	_, err := compact(&pdk.TestHost{}, req)
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidConfig {
		t.Fatalf("err = %v", err)
	}
	req = plugtest.Request(plugtest.Build("su"), map[string]any{"nope": 1}, nil)
	if _, err := compact(&pdk.TestHost{}, req); !errors.As(err, &ae) || ae.Code != abi.CodeInvalidConfig {
		t.Fatalf("err = %v", err)
	}
}

func TestElide(t *testing.T) {
	s := strings.Repeat("é", 100) // 200 bytes
	got := elide(s, 60)
	if !strings.Contains(got, "bytes left out") || !strings.HasPrefix(got, "éé") || !strings.HasSuffix(got, "éé") {
		t.Fatalf("%q", got)
	}
	for _, r := range got {
		if r == '\uFFFD' {
			t.Fatal("split a UTF-8 sequence")
		}
	}
	if elide("short", 60) != "short" {
		t.Fatal("short text changed")
	}
}

// TestSeedDocument replays the example of rlm-code's compaction policies
// document (seed 003, SuperagenticAI/rlm-code docs/policies/compaction.md,
// "LLMCompactionPolicy") with its parameter names and defaults: a task and
// a history of steps; compaction triggers when the history reaches
// max_entries_before_compact (10) entries, not before; the summary,
// asked for in summary_max_tokens (200) tokens with key findings in focus,
// replaces all but the last preserve_last_n (2) entries:
// [summary] + the last two steps.
func TestSeedDocument(t *testing.T) {
	rlm := map[string]any{
		"min_entries_to_compact": 5, "max_entries_before_compact": 10, "preserve_last_n": 2,
		"summary_max_tokens": 200, "include_key_findings": true,
		// Only the seed's trigger: ours off.
		"token_threshold": 0, "usage_ratio_threshold": 0, "retention_window": 0, "min_batch": 1,
	}
	history := func(steps int) []abi.Message {
		msgs := []abi.Message{
			{Role: abi.RoleSystem, Content: abi.TextContent("You are an RLM."), Tokens: 10},
			{Role: abi.RoleUser, Content: abi.TextContent("Solve the optimization problem"), Tokens: 10},
		}
		outputs := []string{"Loaded dataset with 1000 rows", "Defined objective function", "Found 42 matching results", "Computed optimal value 3.14"}
		for i := 0; i < steps; i++ {
			id := fmt.Sprintf("s%d", i)
			msgs = append(msgs,
				abi.Message{Role: abi.RoleAssistant, Content: abi.TextContent(""), Tokens: 10,
					ToolCalls: []abi.ToolCall{{ID: id, Type: "function", Function: abi.FunctionCall{Name: "code", Arguments: "{}"}}}},
				abi.Message{Role: abi.RoleTool, ToolCallID: id, Content: abi.TextContent(outputs[i%len(outputs)]), Tokens: 10})
		}
		return msgs
	}
	f := &fakeLLM{}
	if res := run(t, f.host(), history(9), rlm, nil); res.Compacted || f.calls != 0 {
		t.Fatalf("9 entries: compacted %v (%d calls); the seed waits for 10", res.Compacted, f.calls)
	}
	msgs := history(10)
	res := run(t, f.host(), msgs, rlm, nil)
	// System, task, the summary of the first 8 steps, the last 2 steps.
	if got := plugtest.Shape(res.Messages); got != "r0 r1 m r18 r19 r20 r21" {
		t.Fatalf("10 entries: %s", got)
	}
	count, _, ok := parseSummary(res.Messages[2].Message.Text())
	if !ok || count != 16 || res.Messages[2].Message.Role != abi.RoleAssistant {
		t.Fatalf("summary %s %q", res.Messages[2].Message.Role, res.Messages[2].Message.Text())
	}
	req := f.reqs[len(f.reqs)-1]
	if req.MaxTokens != 200 || !strings.Contains(req.Messages[0].Content, "key findings, successful approaches, and important context") {
		t.Fatalf("request: max_tokens %d, prompt %q", req.MaxTokens, req.Messages[0].Content)
	}
	for _, want := range []string{"Solve the optimization problem", "Loaded dataset with 1000 rows", "Defined objective function"} {
		if !strings.Contains(req.Messages[1].Content, want) {
			t.Fatalf("the summarizer did not get %q:\n%s", want, req.Messages[1].Content)
		}
	}
	// min_entries_to_compact holds a trigger back: with a threshold of 2
	// entries, 4 entries are still too few for the seed's minimum of 5.
	low := map[string]any{}
	for k, v := range rlm {
		low[k] = v
	}
	low["max_entries_before_compact"] = 2
	if res := run(t, f.host(), history(4), low, nil); res.Compacted {
		t.Fatal("compacted below min_entries_to_compact")
	}
	if res := run(t, f.host(), history(5), low, nil); !res.Compacted {
		t.Fatal("not compacted at min_entries_to_compact")
	}
}
