package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/pdk"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fakeLLM answers with a fixed ratio of the request's <output> or <result>
// text (at least 60 characters), counts its calls, and fails when fail
// says so. With cache it answers repeats as the host's cache would.
type fakeLLM struct {
	ratio float64
	cache bool
	fail  func(call int, req abi.LLMRequest) error

	mu       sync.Mutex
	calls    int
	computed int
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
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	cached := f.cache && f.seen[string(key)]
	if !cached {
		f.computed++
		f.seen[string(key)] = true
	}
	body := req.Messages[len(req.Messages)-1].Content
	for _, tag := range []string{"output", "result"} {
		if i := strings.Index(body, "<"+tag+">\n"); i >= 0 {
			body = body[i+len(tag)+3:]
			body = body[:strings.LastIndex(body, "\n</"+tag+">")]
		}
	}
	ratio := f.ratio
	if ratio == 0 {
		ratio = 0.1
	}
	n := max(int(float64(len(body))*ratio), 60)
	head := fmt.Sprintf("gist of %d chars starting %q", len(body), prefix(body, 12))
	return abi.LLMResponse{Text: head + strings.Repeat("~", max(n-len(head), 0)), Cached: cached}, nil
}

func (f *fakeLLM) host() *pdk.TestHost { return &pdk.TestHost{LLM: f.complete} }

// agent builds: system, task, then one bash call per result size (its
// result of that many characters), then a final unanswered call.
func agent(sizes ...int) []abi.Message {
	msgs := []abi.Message{
		{Role: abi.RoleSystem, Content: abi.TextContent("You are a coding agent."), Tokens: 10},
		{Role: abi.RoleUser, Content: abi.TextContent("Fix the bug."), Tokens: 5},
	}
	for k, n := range sizes {
		id := fmt.Sprintf("call_%d", k)
		msgs = append(msgs,
			abi.Message{Role: abi.RoleAssistant, Content: abi.TextContent(fmt.Sprintf("Step %d: look at the logs.", k)), Tokens: 20,
				ToolCalls: []abi.ToolCall{{ID: id, Type: "function", Function: abi.FunctionCall{Name: "bash", Arguments: fmt.Sprintf(`{"cmd":"cat log%d"}`, k)}}}},
			abi.Message{Role: abi.RoleTool, ToolCallID: id, Content: abi.TextContent(output(k, n)), Tokens: n / 4})
	}
	return append(msgs, abi.Message{Role: abi.RoleAssistant, Tokens: 20,
		ToolCalls: []abi.ToolCall{{ID: "last", Type: "function", Function: abi.FunctionCall{Name: "submit", Arguments: "{}"}}}})
}

// output is n characters of log lines.
func output(k, n int) string {
	var b strings.Builder
	for line := 0; b.Len() < n; line++ {
		fmt.Fprintf(&b, "log%d line %06d: value=%d\n", k, line, line*7%1000)
	}
	return b.String()[:n]
}

func run(t testing.TB, h pdk.Host, msgs []abi.Message, cfg map[string]any, window int) *abi.CompactResult {
	t.Helper()
	req := plugtest.Request(msgs, cfg, nil)
	req.Context.Model, req.Context.ContextWindow = "agent-model", window
	res, err := compact(h, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := convo.CheckResult(msgs, res.Messages); err != nil {
		t.Fatalf("invalid result: %v", err)
	}
	// Only tool results change, in place, keeping their call id.
	for i, it := range res.Messages {
		if it.IsRef() {
			if it.Ref != i {
				t.Fatalf("item %d is ref %d: a step moved or was dropped", i, it.Ref)
			}
			continue
		}
		if m := it.Message; m.Role != abi.RoleTool || m.ToolCallID != msgs[i].ToolCallID {
			t.Fatalf("item %d: a %s message (id %q) replaced a %s message", i, m.Role, m.ToolCallID, msgs[i].Role)
		}
	}
	return res
}

func newText(res *abi.CompactResult, i int) string {
	if it := res.Messages[i]; !it.IsRef() {
		return it.Message.Text()
	}
	return ""
}

func TestLayer1(t *testing.T) {
	f := &fakeLLM{}
	msgs := agent(120000, 3000)
	res := run(t, f.host(), msgs, nil, 0)
	if plugtest.Shape(res.Messages) != "r0 r1 r2 m r4 r5 r6" {
		t.Fatalf("shape %s", plugtest.Shape(res.Messages))
	}
	text := newText(res, 3)
	header, body, _ := strings.Cut(text, "\n")
	if header != fmt.Sprintf("[compressed tool result: 120000 chars → %d]", len(body)) {
		t.Fatalf("header %q (body %d)", header, len(body))
	}
	for k := 1; k <= 3; k++ {
		if !strings.Contains(body, fmt.Sprintf("[Part %d/3]\ngist of ", k)) {
			t.Fatalf("part %d missing:\n%s", k, body)
		}
	}
	if f.calls != 3 {
		t.Fatalf("%d calls for 3 chunks", f.calls)
	}
	// The chunk prompt names the tool call and the part.
	if p := f.reqs[1].Messages[1].Content; !strings.Contains(p, `Tool bash was called with {"cmd":"cat log0"}`) || !strings.Contains(p, "part 2 of 3") {
		t.Fatalf("prompt %q", p[:200])
	}
	if f.reqs[0].Model != "agent-model" || f.reqs[0].Temperature != 0 {
		t.Fatalf("request %+v", f.reqs[0])
	}
	if res.EntriesSummarized != 1 || fmt.Sprint(res.Rewritten) != "[3]" || len(res.Warnings) != 0 {
		t.Fatalf("%+v", res)
	}
}

func TestLayer1Fallbacks(t *testing.T) {
	cfg := map[string]any{"single_result_threshold": 20000, "chunk_size": 10000}
	t.Run("a failed chunk keeps its first 1000 characters", func(t *testing.T) {
		f := &fakeLLM{fail: func(call int, _ abi.LLMRequest) error {
			if call == 2 {
				return &abi.Error{Code: abi.CodeProviderError, Message: "HTTP 500"}
			}
			return nil
		}}
		res := run(t, f.host(), agent(30000), cfg, 0)
		text := newText(res, 3)
		n := len(split(output(0, 30000), 10000))
		part2 := text[strings.Index(text, fmt.Sprintf("[Part 2/%d]\n", n))+len("[Part 2/n]\n"):]
		part2 = part2[:strings.Index(part2, "\n\n[Part 3/")]
		if want := split(output(0, 30000), 10000)[1][:1000]; !strings.HasPrefix(part2, want) {
			t.Fatalf("part 2 = %q", part2[:80])
		}
		if !strings.HasSuffix(part2, "more characters of this part not shown: summary unavailable]") {
			t.Fatalf("part 2 ends %q", part2[len(part2)-80:])
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "provider_error") {
			t.Fatalf("warnings %q", res.Warnings)
		}
	})
	t.Run("still over the threshold: a second-level summary", func(t *testing.T) {
		f := &fakeLLM{ratio: 0.9}
		res := run(t, f.host(), agent(30000), cfg, 0)
		_, body, _ := strings.Cut(newText(res, 3), "\n")
		if f.calls != len(split(output(0, 30000), 10000))+1 || !strings.HasPrefix(body, "gist of") {
			t.Fatalf("%d calls, body %q", f.calls, body[:60])
		}
	})
	t.Run("second level fails: truncated with a marker", func(t *testing.T) {
		f := &fakeLLM{ratio: 0.9, fail: func(call int, _ abi.LLMRequest) error {
			if call == len(split(output(0, 30000), 10000))+1 {
				return &abi.Error{Code: abi.CodeProviderError, Message: "timeout"}
			}
			return nil
		}}
		res := run(t, f.host(), agent(30000), cfg, 0)
		_, body, _ := strings.Cut(newText(res, 3), "\n")
		if !strings.HasPrefix(body, "[Part 1/") || !strings.Contains(body, "\n[… truncated: ") || len(body) > 20000+100 {
			t.Fatalf("body (%d) ends %q", len(body), body[len(body)-60:])
		}
	})
	t.Run("no LLM at all", func(t *testing.T) {
		res := run(t, &pdk.TestHost{}, agent(30000), cfg, 0)
		text := newText(res, 3)
		n := len(split(output(0, 30000), 10000))
		if !strings.HasPrefix(text, "[compressed tool result: 30000 chars → ") || strings.Count(text, "summary unavailable]") != n {
			t.Fatalf("%q", text)
		}
		if len(text) > n*1100+100 {
			t.Fatalf("kept %d characters", len(text))
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], fmt.Sprintf("failed %d time(s)", n)) || !strings.Contains(res.Warnings[0], "no_provider") {
			t.Fatalf("warnings %q", res.Warnings)
		}
	})
}

func TestLayer2(t *testing.T) {
	// 4 results of 6000, 4000, 8000 and 7000 characters.
	msgs := agent(6000, 4000, 8000, 7000)
	total := 0 // characters, the seed's measure
	for i := range msgs {
		total += chars(&msgs[i])
	}
	// The trigger is strict: at exactly global_threshold × limit nothing
	// happens; above it, every result over min_result_size is summarized.
	// The conversation is measured in characters against the limit's
	// number (the seed's rule), not in tokens.
	tests := []struct {
		name  string
		limit int
		want  string
	}{
		{"at the threshold: no", 2 * total, "r0 r1 r2 r3 r4 r5 r6 r7 r8 r9 r10"},
		{"above the threshold: every result over 5000", 2*total - 1, "r0 r1 r2 m r4 r5 r6 m r8 m r10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLLM{}
			res := run(t, f.host(), msgs, map[string]any{"context_limit": tt.limit, "global_threshold": 0.5}, 0)
			if got := plugtest.Shape(res.Messages); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	// The context window from the request stands in for context_limit.
	f := &fakeLLM{}
	res := run(t, f.host(), msgs, nil, total)
	if plugtest.Shape(res.Messages) != "r0 r1 r2 m r4 r5 r6 m r8 m r10" {
		t.Fatalf("shape %s", plugtest.Shape(res.Messages))
	}
	// The summarizer sees the assistant's reasoning and call.
	p := f.reqs[0].Messages[1].Content
	if !strings.Contains(p, "<reasoning>\nStep 0: look at the logs.\n</reasoning>") || !strings.Contains(p, `called the tool bash with {"cmd":"cat log0"}`) {
		t.Fatalf("prompt %q", p[:300])
	}
	if text := newText(res, 3); !strings.HasPrefix(text, "[compressed tool result: 6000 chars → ") {
		t.Fatalf("%q", text)
	}
	// Unknown limit: layer 2 is off.
	if res := run(t, f.host(), msgs, nil, 0); res.Compacted {
		t.Fatal("layer 2 ran without a context limit")
	}
	// No LLM: the results stay as they are, with a warning.
	res = run(t, &pdk.TestHost{}, msgs, nil, total)
	if res.Compacted || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "left those results as they are") {
		t.Fatalf("compacted %v warnings %q", res.Compacted, res.Warnings)
	}
}

func TestNeverTwice(t *testing.T) {
	f := &fakeLLM{}
	msgs := agent(60000, 6000, 6000)
	res := run(t, f.host(), msgs, nil, 5000)
	out, _ := convo.Resolve(msgs, res.Messages)
	calls := f.calls
	if calls == 0 {
		t.Fatal("nothing compressed")
	}
	again := run(t, f.host(), out, nil, 5000)
	if again.Compacted || f.calls != calls {
		t.Fatalf("compressed results were compressed again (%d more calls)", f.calls-calls)
	}
}

// TestFinalMessageAndUserMessages: user messages are never touched; the
// final message is, in one case only: an oversized tool result is
// compressed by layer 1 as it arrives, and comes back as the same tool
// result (same tool_call_id), shorter. Layer 2 never touches it.
func TestFinalMessageAndUserMessages(t *testing.T) {
	msgs := agent(6000, 60000)
	msgs = msgs[:len(msgs)-1] // ends with the 60000-character result
	msgs = append(msgs[:2:2], append([]abi.Message{{Role: abi.RoleUser, Content: abi.TextContent(output(9, 70000)), Tokens: 17500}}, msgs[2:]...)...)
	f := &fakeLLM{}
	res := run(t, f.host(), msgs, nil, 1000)
	if got := plugtest.Shape(res.Messages); got != "r0 r1 r2 r3 m r5 m" {
		t.Fatalf("shape %s: the non-final tool result (layer 2) and the final one (layer 1) change, nothing else", got)
	}
	last := res.Messages[len(res.Messages)-1].Message
	orig := msgs[len(msgs)-1]
	if last.Role != abi.RoleTool || last.ToolCallID != orig.ToolCallID || len(last.Text()) >= len(orig.Text()) || !strings.HasPrefix(last.Text(), "[compressed tool result: 60000 chars → ") {
		t.Fatalf("final message %s %s %d chars", last.Role, last.ToolCallID, len(last.Text()))
	}
	// A final result under the layer-1 threshold stays, even when layer
	// 2 fires.
	small := agent(6000, 7000)
	small = small[:len(small)-1]
	res = run(t, f.host(), small, nil, 1000)
	if got := plugtest.Shape(res.Messages); got != "r0 r1 r2 m r4 r5" {
		t.Fatalf("shape %s: layer 2 must not touch the final message", got)
	}
	// Without an LLM, layer 1's fallback still shortens the final result.
	res = run(t, &pdk.TestHost{}, msgs, map[string]any{"context_limit": 10_000_000}, 0)
	if got := plugtest.Shape(res.Messages); got != "r0 r1 r2 r3 r4 r5 m" {
		t.Fatalf("shape %s", got)
	}
}

func TestBudgetStopsCalls(t *testing.T) {
	f := &fakeLLM{fail: func(call int, _ abi.LLMRequest) error {
		if call >= 2 {
			return &abi.Error{Code: abi.CodeBudgetExceeded, Message: "max_calls"}
		}
		return nil
	}}
	res := run(t, f.host(), agent(6000, 6000, 6000, 6000), nil, 1000)
	if f.calls != 2 || plugtest.Shape(res.Messages) != "r0 r1 r2 m r4 r5 r6 r7 r8 r9 r10" {
		t.Fatalf("%d calls, shape %s", f.calls, plugtest.Shape(res.Messages))
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "budget_exceeded") {
		t.Fatalf("warnings %q", res.Warnings)
	}
}

// TestReplayComputesEachResultOnce replays an agent turn by turn: with the
// host's cache, each result is summarized once however many turns repeat
// it.
func TestReplayComputesEachResultOnce(t *testing.T) {
	msgs := agent(6000, 7000, 8000, 9000, 6500, 3000)
	f := &fakeLLM{cache: true}
	for n := 3; n <= len(msgs); n++ {
		if msgs[n-1].Role == abi.RoleAssistant {
			run(t, f.host(), msgs[:n], nil, 1000)
		}
	}
	if f.computed != 5 {
		t.Fatalf("%d summaries computed for 5 large results (%d requests)", f.computed, f.calls)
	}
}

func TestSplit(t *testing.T) {
	s := strings.Repeat("abcdefghi\n", 30) // 300 bytes
	parts := split(s, 95)
	if strings.Join(parts, "") != s || len(parts) != 4 {
		t.Fatalf("split into %d parts", len(parts))
	}
	for _, p := range parts[:len(parts)-1] {
		if !strings.HasSuffix(p, "\n") || len(p) != 90 {
			t.Fatalf("part %q", p)
		}
	}
	u := strings.Repeat("é", 50) // no newline, 2-byte runes
	for _, p := range split(u, 11) {
		if !utf8.ValidString(p) {
			t.Fatalf("part %q splits a rune", p)
		}
	}
	if got := prefix("éé", 3); got != "é" {
		t.Fatalf("prefix %q", got)
	}
}

func TestDefaultsMatchTheDesign(t *testing.T) {
	want := config{SingleResultThreshold: 50000, ChunkSize: 50000, TargetRatio: 0.1, GlobalThreshold: 0.8, MinResultSize: 5000, FallbackChars: 1000}
	if defaults != want {
		t.Fatalf("%+v", defaults)
	}
	p := policy()
	if _, err := p.Describe(); err != nil {
		t.Fatal(err)
	}
}

// TestRealData runs the policy on sampled prefixes of every data file with
// thresholds low enough to act, with and without an LLM.
func TestRealData(t *testing.T) {
	configs := []map[string]any{
		{},
		{"single_result_threshold": 4000, "chunk_size": 2000},
		{"context_limit": 4000, "min_result_size": 1000},
	}
	prefixes := 8
	if testing.Short() || raceEnabled {
		prefixes = 3
	}
	compacted := 0
	for _, c := range plugtest.Load(t, false) {
		for _, n := range plugtest.SamplePrefixes(c.Messages, prefixes) {
			for _, cfg := range configs {
				for _, h := range []pdk.Host{(&fakeLLM{}).host(), &pdk.TestHost{}} {
					if res := run(t, h, c.Messages[:n:n], cfg, 128000); res.Compacted {
						compacted++
					}
				}
			}
		}
	}
	if compacted == 0 {
		t.Fatal("never compacted: the sweep checks nothing")
	}
	t.Logf("%d compacted results", compacted)
}
