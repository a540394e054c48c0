package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/pdk"
)

// seed is the config of rlm-code's own behaviour, where every entry, the
// task included, is history (keep_task: false); most tests here replay the
// seed's examples.
var seed = map[string]any{"keep_task": false}

// seeded returns cfg with keep_task: false unless it says otherwise.
func seeded(cfg map[string]any) map[string]any {
	out := map[string]any{"keep_task": false}
	for k, v := range cfg {
		out[k] = v
	}
	return out
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// summaryOf returns the text of the result's new message ("" if none).
func summaryOf(res *abi.CompactResult) string {
	for _, it := range res.Messages {
		if !it.IsRef() {
			return it.Message.Text()
		}
	}
	return ""
}

func TestCompact(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		cfg     map[string]any
		want    string
		summary string
	}{
		{"at the threshold: nothing to do", "s" + strings.Repeat("ua", 5), nil,
			"r0 r1 r2 r3 r4 r5 r6 r7 r8 r9 r10", ""},
		{"first cycle", "s" + strings.Repeat("ua", 5) + "u", nil,
			"r0 m r9 r10 r11",
			"[Summary of earlier steps]\nOlder: [3 steps: user, reply]\nThen: reply: assistant 4 | user: user 5 | reply: assistant 6 | user: user 7 | reply: assistant 8"},
		{"between cycles the summary stays", "s" + strings.Repeat("ua", 8) + "u", nil,
			"r0 m r9 r10 r11 r12 r13 r14 r15 r16 r17",
			"[Summary of earlier steps]\nOlder: [3 steps: user, reply]\nThen: reply: assistant 4 | user: user 5 | reply: assistant 6 | user: user 7 | reply: assistant 8"},
		{"second cycle: the medium tier becomes old", "s" + strings.Repeat("ua", 9), nil,
			"r0 m r16 r17 r18",
			"[Summary of earlier steps]\nOlder: [3 steps: user, reply] | [7 steps: reply, user]\nThen: user: user 11 | reply: assistant 12 | user: user 13 | reply: assistant 14 | user: user 15"},
		{"old summaries capped", "s" + strings.Repeat("ua", 30), map[string]any{"max_summaries": 2},
			"r0 m r58 r59 r60",
			"[Summary of earlier steps]\nOlder: [6 steps: user, reply] | [6 steps: user, reply]\nThen: user: user 53 | reply: assistant 54 | user: user 55 | reply: assistant 56 | user: user 57"},
		{"no medium tier", "s" + strings.Repeat("ua", 6), map[string]any{"medium_window": 0},
			"r0 m r9 r10 r11 r12",
			"[Summary of earlier steps]\nOlder: [8 steps: user, reply]"},
		{"tool units and the unanswered call", "su" + strings.Repeat("ct", 10) + "c", nil,
			"r0 m r16 r17 r18 r19 r20 r21 r22",
			"[Summary of earlier steps]\nOlder: [3 steps: user, f0]\nThen: f0: result 7 | f0: result 9 | f0: result 11 | f0: result 13 | f0: result 15"},
		{"system messages in the span stay", "s" + "ua" + "d" + strings.Repeat("ua", 4) + "u", nil,
			"r0 m r3 r10 r11 r12",
			"[Summary of earlier steps]\nOlder: [3 steps: user, reply]\nThen: reply: assistant 5 | user: user 6 | reply: assistant 7 | user: user 8 | reply: assistant 9"},
		{"medium outputs cut", "s" + strings.Repeat("ua", 5) + "u", map[string]any{"medium_output_chars": 4},
			"r0 m r9 r10 r11",
			"[Summary of earlier steps]\nOlder: [3 steps: user, reply]\nThen: reply: assi | user: user | reply: assi | user: user | reply: assi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := plugtest.Build(tt.spec)
			res := plugtest.Run(t, compact, msgs, seeded(tt.cfg), nil)
			if got := plugtest.Shape(res.Messages); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if got := summaryOf(res); got != tt.summary {
				t.Fatalf("summary %q\nwant    %q", got, tt.summary)
			}
			if res.Compacted != (tt.summary != "") {
				t.Errorf("compacted = %v", res.Compacted)
			}
			if res.Compacted == (len(res.State) == 0) {
				t.Errorf("state %s", res.State)
			}
		})
	}
}

// TestFirstSeenActions: the old tier lists actions in the order first seen
// (rlm-code listed a set, in hash order).
func TestFirstSeenActions(t *testing.T) {
	msgs := plugtest.Build("sctuctactuaua")
	msgs[1].ToolCalls[0].Function.Name = "zeta"
	msgs[4].ToolCalls[0].Function.Name = "alpha"
	msgs[7].ToolCalls[0].Function.Name = "zeta"
	res := plugtest.Run(t, compact, msgs, seeded(map[string]any{"medium_window": 1, "recent_window": 1, "compress_threshold": 8}), nil)
	if got := summaryOf(res); !strings.Contains(got, "[7 steps: zeta, user, alpha, reply]") {
		t.Fatalf("summary %q", got)
	}
}

// TestNoDuplicateSummary: the current cycle's old-tier summary appears
// once (rlm-code emitted it alone and again in the historical list).
func TestNoDuplicateSummary(t *testing.T) {
	msgs := plugtest.Build("s" + strings.Repeat("ua", 9))
	res := plugtest.Run(t, compact, msgs, seed, nil)
	text := summaryOf(res)
	for _, s := range []string{"[3 steps: user, reply]", "[7 steps: reply, user]"} {
		if n := strings.Count(text, s); n != 1 {
			t.Fatalf("%q appears %d times in %q", s, n, text)
		}
	}
}

// grow returns the turn prefixes of msgs: the history before each
// assistant message, and the whole.
func grow(msgs []abi.Message) []int { return plugtest.TurnPrefixes(msgs) }

func encode(t *testing.T, res *abi.CompactResult) string {
	t.Helper()
	res = &abi.CompactResult{Messages: res.Messages, Compacted: res.Compacted, Summary: res.Summary, EntriesSummarized: res.EntriesSummarized}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStateGivesTheStatelessResult replays a growing conversation with the
// state each call returns, as the daemon stores it, and without any state:
// for an agent that resends its full history the two agree on every turn,
// so state is never double counted and a lost state costs nothing.
func TestStateGivesTheStatelessResult(t *testing.T) {
	msgs := plugtest.Build("su" + strings.Repeat("ctctua", 12) + "c")
	for _, cfg := range []map[string]any{nil, {"recent_window": 1, "medium_window": 2, "compress_threshold": 4, "max_summaries": 2}} {
		var state json.RawMessage
		for _, n := range grow(msgs) {
			withState := plugtest.Run(t, compact, msgs[:n], seeded(cfg), state)
			without := plugtest.Run(t, compact, msgs[:n], seeded(cfg), nil)
			if a, b := encode(t, withState), encode(t, without); a != b {
				t.Fatalf("prefix %d: with state\n%s\nwithout\n%s", n, a, b)
			}
			if strings.Contains(withState.Summary, "(") {
				t.Fatalf("prefix %d: %s", n, withState.Summary)
			}
			// A retry of the same request with the state it produced
			// gives the same result again.
			if withState.State != nil {
				state = withState.State
				again := plugtest.Run(t, compact, msgs[:n], seeded(cfg), state)
				if a, b := encode(t, again), encode(t, withState); a != b {
					t.Fatalf("prefix %d: a retry with the new state differs:\n%s\n%s", n, a, b)
				}
			}
		}
	}
}

// TestAdoptedHistory: an agent that replaces its history with the
// compacted conversation and sends that back (with new messages) gets the
// same conversation as one that resends its full history.
func TestAdoptedHistory(t *testing.T) {
	full := plugtest.Build("su" + strings.Repeat("ctua", 15) + "c")
	var state json.RawMessage
	var kept []abi.Message // the agent's history: compacted output so far
	prevN := 0
	cycles := 0
	for _, n := range grow(full) {
		// The agent's request: what it kept, plus the new messages.
		in := append(append([]abi.Message(nil), kept...), full[prevN:n]...)
		res := plugtest.Run(t, compact, in, seed, state)
		if strings.Contains(res.Summary, "(") {
			t.Fatalf("prefix %d: %s", n, res.Summary)
		}
		out, _ := convo.Resolve(in, res.Messages)
		ref := plugtest.Run(t, compact, full[:n], seed, nil)
		want, _ := convo.Resolve(full[:n], ref.Messages)
		if len(out) != len(want) {
			t.Fatalf("prefix %d: %d messages, want %d", n, len(out), len(want))
		}
		for i := range out {
			if !plugtest.SameMessage(&out[i], &want[i]) {
				t.Fatalf("prefix %d: message %d is %q, want %q", n, i, out[i].Text(), want[i].Text())
			}
		}
		if res.State != nil {
			state = res.State
			cycles++
		}
		kept, prevN = out, n
	}
	if cycles < 3 {
		t.Fatalf("only %d cycles", cycles)
	}
}

func TestStaleState(t *testing.T) {
	other := plugtest.Build("s" + strings.Repeat("ua", 9))
	first := plugtest.Run(t, compact, other, seed, nil)
	msgs := plugtest.Build("s" + strings.Repeat("au", 9))
	tests := []struct {
		name  string
		msgs  []abi.Message
		state string
		want  string // the state returned
	}{
		{"another conversation's state, a cycle now", msgs, string(first.State), "cycle"},
		{"another conversation's state, no cycle", msgs[:5], string(first.State), "{}"},
		{"unreadable state", msgs[:5], `{"v":99,"cycles":3}`, "{}"},
		{"not an object", msgs[:5], `[1,2]`, "{}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := plugtest.Run(t, compact, tt.msgs, seed, json.RawMessage(tt.state))
			fresh := plugtest.Run(t, compact, tt.msgs, seed, nil)
			if len(res.Warnings) != 0 || !strings.Contains(res.Summary, "(") {
				t.Fatalf("warnings %v, summary %q", res.Warnings, res.Summary)
			}
			res.Summary, fresh.Summary = "", ""
			if encode(t, res) != encode(t, fresh) {
				t.Fatalf("a stale state changed the result")
			}
			got := string(res.State)
			if tt.want == "cycle" {
				if !strings.Contains(got, `"cycles":2`) {
					t.Fatalf("state %s", got)
				}
			} else if got != tt.want {
				t.Fatalf("state %s, want %s", got, tt.want)
			}
		})
	}
}

// TestDeterminism: the same request and state give byte-identical output,
// call after call and from a fresh policy value (a fresh instance).
func TestDeterminism(t *testing.T) {
	msgs := plugtest.Build("su" + strings.Repeat("ctpttua", 6))
	prev := plugtest.Run(t, compact, msgs[:20], seed, nil)
	plugtest.Deterministic(t, policy, plugtest.Request(msgs, seed, prev.State))
}

func TestGolden(t *testing.T) {
	p := policy()
	plugtest.Golden(t, &p, *update)
}

// TestRealData checks the contract on turn-by-turn prefixes of every
// conversation in the shared data, without state: valid results; when
// compacted, the system messages, one summary message starting with the
// header, then a contiguous suffix of at least recent_window entries.
func TestRealData(t *testing.T) {
	configs := []map[string]any{
		nil,
		{"recent_window": 1, "medium_window": 0, "compress_threshold": 2, "max_summaries": 1, "medium_output_chars": 10},
	}
	plugtest.RealData(t, compact, configs, 10, func(tb testing.TB, id string, in []abi.Message, res *abi.CompactResult, cfg map[string]any) {
		if !res.Compacted {
			return
		}
		news := 0
		for _, it := range res.Messages {
			if !it.IsRef() {
				news++
				if !strings.HasPrefix(it.Message.Text(), header+"\n") {
					tb.Fatalf("%s: summary %s %q", id, it.Message.Role, it.Message.Text())
				}
			}
		}
		if news != 1 || len(res.State) == 0 {
			tb.Fatalf("%s: %d new messages, state %s", id, news, res.State)
		}
	})
}

// TestRealDataWithState replays real conversations turn by turn with the
// daemon's state handling and checks the result on every turn against the
// stateless one.
func TestRealDataWithState(t *testing.T) {
	convs := plugtest.Sample(plugtest.Load(t, false, plugtest.ReplayFiles...), 8)
	plugtest.Replay(t, compact, convs, nil, func(turn *plugtest.Turn) {
		if strings.Contains(turn.Result.Summary, "(") {
			t.Fatalf("%s prefix %d: %s", turn.Conv.ID, turn.N, turn.Result.Summary)
		}
		if len(turn.Request.Context.State) == 0 || turn.N%7 != 0 {
			return // compare a sample: the stateless replay costs more
		}
		fresh := plugtest.Run(t, compact, turn.Request.Messages, nil, nil)
		if a, b := encode(t, turn.Result), encode(t, fresh); a != b {
			t.Fatalf("%s prefix %d: with state\n%s\nwithout\n%s", turn.Conv.ID, turn.N, a, b)
		}
	})
}

// TestReplayReport prints the figures on the replay files: go test
// ./plugins/hierarchical -run TestReplayReport -v
func TestReplayReport(t *testing.T) {
	plugtest.Report(t, "hierarchical", compact)
}

// FuzzState: whatever the stored state holds, the policy answers with a
// valid result for the conversation, the same as without state unless the
// state matches it.
func FuzzState(f *testing.F) {
	msgs := plugtest.Build("su" + strings.Repeat("ctua", 8))
	good := plugtest.Run(f, compact, msgs[:20], nil, nil)
	f.Add(string(good.State), 30)
	f.Add(`{}`, 10)
	f.Add(`{"v":1,"folded":3,"hash":"zz","next":"","cycles":1}`, 33)
	f.Add(`{"v":1,"folded":-4,"cycles":1,"summaries":null}`, 33)
	f.Fuzz(func(t *testing.T, state string, n int) {
		if n < 1 || n > len(msgs) || !json.Valid([]byte(state)) {
			t.Skip()
		}
		res, err := compact(&pdk.TestHost{}, plugtest.Request(msgs[:n], nil, json.RawMessage(state)))
		if err != nil {
			t.Fatal(err)
		}
		if err := convo.CheckResult(msgs[:n], res.Messages); err != nil {
			t.Fatal(err)
		}
	})
}

// TestKeepTask: by default the task stays verbatim before the summary,
// entries are counted after it, and the summary is the assistant's.
func TestKeepTask(t *testing.T) {
	msgs := plugtest.Build("su" + strings.Repeat("ct", 11))
	res := plugtest.Run(t, compact, msgs, nil, nil)
	if got := plugtest.Shape(res.Messages); !strings.HasPrefix(got, "r0 r1 m ") {
		t.Fatalf("got %s, want the system message, the task, then the summary", got)
	}
	if m := res.Messages[2].Message; m.Role != abi.RoleAssistant || !strings.HasPrefix(m.Text(), header+"\n") {
		t.Fatalf("summary %s %q", m.Role, m.Text())
	}
	if strings.Contains(res.Messages[2].Message.Text(), "user") {
		t.Fatalf("the task was counted as a step: %q", res.Messages[2].Message.Text())
	}
	user := plugtest.Run(t, compact, msgs, map[string]any{"summary_role": "user"}, nil)
	if m := user.Messages[2].Message; m.Role != abi.RoleUser {
		t.Fatalf("summary_role user gave %s", m.Role)
	}
	// An adopted history whose summary is the assistant's resumes too.
	full := plugtest.Build("su" + strings.Repeat("ct", 14))
	first := plugtest.Run(t, compact, full[:24], nil, nil)
	adopted, _ := convo.Resolve(full[:24], first.Messages)
	adopted = append(adopted, full[24:]...)
	again := plugtest.Run(t, compact, adopted, nil, first.State)
	if strings.Contains(again.Summary, "did not match") || !again.Messages[2].IsRef() {
		t.Fatalf("adopted history not resumed: %s (%s)", plugtest.Shape(again.Messages), again.Summary)
	}
}

// TestReset is rlm-code's reset(): the old tier accumulated so far is
// dropped, the state remembers it, and later cycles accumulate again.
func TestReset(t *testing.T) {
	msgs := plugtest.Build("s" + strings.Repeat("ua", 20))
	before := plugtest.Run(t, compact, msgs[:30], seed, nil)
	if !strings.Contains(before.Messages[1].Message.Text(), "\nOlder: ") {
		t.Fatalf("no old tier to reset: %q", before.Messages[1].Message.Text())
	}
	reset := plugtest.Run(t, compact, msgs[:30], seeded(map[string]any{"reset": true}), before.State)
	if text := reset.Messages[1].Message.Text(); strings.Contains(text, "\nOlder: ") || !strings.Contains(reset.Summary, "reset") {
		t.Fatalf("after reset: %q (%s)", text, reset.Summary)
	}
	var st state
	if err := json.Unmarshal(reset.State, &st); err != nil || len(st.Summaries) != 0 || st.OldSteps != 0 || st.Cycles == 0 {
		t.Fatalf("state after reset: %s (%v)", reset.State, err)
	}
	// The next call, without reset, resumes from the reset state.
	next := plugtest.Run(t, compact, msgs[:31], seed, reset.State)
	if strings.Contains(next.Messages[1].Message.Text(), "\nOlder: ") {
		t.Fatalf("the old tier came back: %q", next.Messages[1].Message.Text())
	}
	// Nothing to reset: no state change.
	if r := plugtest.Run(t, compact, msgs[:5], seeded(map[string]any{"reset": true}), nil); len(r.State) != 0 {
		t.Fatalf("reset with nothing to drop returned state %s", r.State)
	}
}

// TestSummaryDetailLevels: rlm-code's informational key is accepted.
func TestSummaryDetailLevels(t *testing.T) {
	msgs := plugtest.Build("s" + strings.Repeat("ua", 8))
	a := plugtest.Run(t, compact, msgs, map[string]any{"summary_detail_levels": 3}, nil)
	b := plugtest.Run(t, compact, msgs, nil, nil)
	if plugtest.Shape(a.Messages) != plugtest.Shape(b.Messages) {
		t.Fatal("summary_detail_levels changed the result")
	}
}

// TestSeedDocument replays the examples of rlm-code's compaction policies
// document (seed 003, SuperagenticAI/rlm-code docs/policies/compaction.md,
// "HierarchicalCompactionPolicy") with its parameter names and defaults:
// the old tier as "[4 steps: code, search]" (action kinds only), the
// medium tier as "code: Found 42... | search: Results..." (action and the
// start of the output), the recent tier in full; old summaries accumulate
// over cycles and the last 3 are kept. The document's single cycle folds 4
// old steps out of 12: compress_threshold 11 puts the first cycle at the
// twelfth entry (the default 10 would run it at the eleventh).
func TestSeedDocument(t *testing.T) {
	steps := []struct{ action, output string }{
		{"code", "loaded"}, {"search", "hits"}, {"code", "ok"}, {"code", "ok"},
		{"code", "Found 42 matching results in 3 files of the index"}, {"search", "Results: 3 pages"},
		{"code", "x"}, {"code", "y"}, {"search", "z"},
		{"code", "recent 1"}, {"code", "recent 2"}, {"search", "recent 3"},
	}
	build := func(n int) []abi.Message {
		msgs := []abi.Message{
			{Role: abi.RoleSystem, Content: abi.TextContent("You are an RLM."), Tokens: 10},
			{Role: abi.RoleUser, Content: abi.TextContent("Solve the optimization problem"), Tokens: 10},
		}
		for i := 0; i < n; i++ {
			s := steps[i%len(steps)]
			id := fmt.Sprintf("c%d", i)
			msgs = append(msgs,
				abi.Message{Role: abi.RoleAssistant, Content: abi.TextContent(""), Tokens: 10,
					ToolCalls: []abi.ToolCall{{ID: id, Type: "function", Function: abi.FunctionCall{Name: s.action, Arguments: "{}"}}}},
				abi.Message{Role: abi.RoleTool, ToolCallID: id, Content: abi.TextContent(s.output), Tokens: 10})
		}
		return msgs
	}
	cfg := map[string]any{"recent_window": 3, "medium_window": 5, "compress_threshold": 11, "summary_detail_levels": 3}
	res := plugtest.Run(t, compact, build(12), cfg, nil)
	// System, task, the summary, the 3 recent steps in full.
	if got := plugtest.Shape(res.Messages); got != "r0 r1 m r20 r21 r22 r23 r24 r25" {
		t.Fatalf("got %s", got)
	}
	text := res.Messages[2].Message.Text()
	if !strings.Contains(text, "\nOlder: [4 steps: code, search]\n") || !strings.Contains(text, "\nThen: code: Found 42 matching results in 3 files of the index | search: Results: 3 pages | code: x") {
		t.Fatalf("summary:\n%s", text)
	}
	if res.Summary != "hierarchical: 4 old, 5 medium, 3 recent" {
		t.Fatalf("summary line %q", res.Summary)
	}
	// Several cycles later: at most the last 3 old summaries.
	long := plugtest.Run(t, compact, build(80), map[string]any{}, nil)
	older := long.Messages[2].Message.Text()
	if n := strings.Count(older, " steps: "); n != 3 {
		t.Fatalf("%d old summaries kept, want 3:\n%s", n, older)
	}
	if defaults.RecentWindow != 3 || defaults.MediumWindow != 5 || defaults.CompressThreshold != 10 || defaults.MaxSummaries != 3 {
		t.Fatalf("defaults %+v", defaults)
	}
}
