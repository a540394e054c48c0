package main

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/plugtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestCompact(t *testing.T) {
	step1 := map[string]any{"step": 1}
	tests := []struct {
		name    string
		spec    string
		cfg     map[string]any
		want    string
		summary string // the summary message, "" for none
	}{
		{"at max_entries: nothing to do", "s" + strings.Repeat("ua", 4), nil,
			"r0 r1 r2 r3 r4 r5 r6 r7 r8", ""},
		{"one over: all but the last 2", "s" + strings.Repeat("ua", 4) + "u", nil,
			"r0 m r8 r9", "Previous 7 steps: user(4), reply(3) | Key outputs: user 1; assistant 2; user 3"},
		{"hysteresis: the summary stays", "s" + strings.Repeat("ua", 7), nil,
			"r0 m r8 r9 r10 r11 r12 r13 r14", "Previous 7 steps: user(4), reply(3) | Key outputs: user 1; assistant 2; user 3"},
		{"hysteresis: recomputed at preserve+step", "s" + strings.Repeat("ua", 7) + "u", nil,
			"r0 m r14 r15", "Previous 13 steps: user(7), reply(6) | Key outputs: user 1; assistant 2; user 3"},
		{"step 1: every entry", "s" + strings.Repeat("ua", 7), step1,
			"r0 m r13 r14", "Previous 12 steps: user(6), reply(6) | Key outputs: user 1; assistant 2; user 3"},
		{"no system message", strings.Repeat("ua", 5), step1,
			"m r8 r9", "Previous 8 steps: user(4), reply(4) | Key outputs: user 0; assistant 1; user 2"},
		{"tool units are entries", "su" + strings.Repeat("ct", 8) + "u", step1,
			"r0 m r16 r17 r18", "Previous 8 steps: user(1), f0(7) | Key outputs: user 1; result 3; result 5"},
		{"parallel calls are one entry", "su" + "ptt" + strings.Repeat("ct", 7) + "u", step1,
			"r0 m r17 r18 r19", "Previous 8 steps: user(1), f0+f1(1), f0(6) | Key outputs: user 1; result 3 result 4; result 6"},
		{"the unanswered final call is kept", "su" + strings.Repeat("ct", 8) + "c", step1,
			"r0 m r16 r17 r18", "Previous 8 steps: user(1), f0(7) | Key outputs: user 1; result 3; result 5"},
		{"system messages in the span stay after the summary", "sd" + "ua" + "s" + strings.Repeat("ua", 4), step1,
			"r0 r1 m r4 r11 r12", "Previous 8 steps: user(4), reply(4) | Key outputs: user 2; assistant 3; user 5"},
		{"without action counts", "s" + strings.Repeat("ua", 5), map[string]any{"include_action_counts": false},
			"r0 m r8 r9 r10", "Key outputs: user 1; assistant 2; user 3"},
		{"outputs cut", "s" + strings.Repeat("ua", 5), map[string]any{"max_output_chars": 4},
			"r0 m r8 r9 r10", "Previous 7 steps: user(4), reply(3) | Key outputs: user; assi; user"},
		{"preserve more", "s" + strings.Repeat("ua", 5), map[string]any{"preserve_last_n": 4},
			"r0 m r6 r7 r8 r9 r10", "Previous 5 steps: user(3), reply(2) | Key outputs: user 1; assistant 2; user 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The seed's entries include the task (keep_task: false), so
			// the summary opens the conversation: a user message.
			cfg := map[string]any{"keep_task": false}
			for k, v := range tt.cfg {
				cfg[k] = v
			}
			msgs := plugtest.Build(tt.spec)
			res := plugtest.Run(t, compact, msgs, cfg, nil)
			if got := plugtest.Shape(res.Messages); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			var summary string
			for _, it := range res.Messages {
				if !it.IsRef() {
					if it.Message.Role != abi.RoleUser {
						t.Errorf("summary role %s", it.Message.Role)
					}
					summary = it.Message.Text()
				}
			}
			if summary != tt.summary {
				t.Fatalf("summary %q\nwant    %q", summary, tt.summary)
			}
			if res.Compacted != (tt.summary != "") || (summary != "" && res.Summary != summary) {
				t.Errorf("compacted = %v, summary %q", res.Compacted, res.Summary)
			}
		})
	}
}

// TestKeepTask: by default the task stays verbatim, entries are counted
// after it, and the summary takes the summarized span's place after it,
// as the assistant's (summary_role).
func TestKeepTask(t *testing.T) {
	tests := []struct {
		name, spec string
		cfg        map[string]any
		want, role string
	}{
		{"the task stays, the summary follows it", "s" + strings.Repeat("ua", 5), nil, "r0 r1 m r9 r10", abi.RoleAssistant},
		{"no system message", strings.Repeat("ua", 5) + "u", nil, "r0 m r8 r9 r10", abi.RoleAssistant},
		{"summary_role user", "s" + strings.Repeat("ua", 5), map[string]any{"summary_role": "user"}, "r0 r1 m r9 r10", abi.RoleUser},
		{"tool units after the task", "su" + strings.Repeat("ct", 9), map[string]any{"step": 1}, "r0 r1 m r16 r17 r18 r19", abi.RoleAssistant},
		{"below the trigger once the task is not an entry", "s" + strings.Repeat("ua", 4) + "u", nil, "r0 r1 r2 r3 r4 r5 r6 r7 r8 r9", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := plugtest.Build(tt.spec)
			res := plugtest.Run(t, compact, msgs, tt.cfg, nil)
			if got := plugtest.Shape(res.Messages); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			for _, it := range res.Messages {
				if !it.IsRef() && it.Message.Role != tt.role {
					t.Errorf("summary role %s, want %s", it.Message.Role, tt.role)
				}
			}
		})
	}
}

// TestErrorOutputsSkipped: outputs that mention an error in any case are
// not key outputs.
func TestErrorOutputsSkipped(t *testing.T) {
	msgs := plugtest.Build("s" + strings.Repeat("ct", 9))
	msgs[2].Content = abi.TextContent("Traceback: ERROR in line 3")
	msgs[4].Content = abi.TextContent("")
	res := plugtest.Run(t, compact, msgs, map[string]any{"step": 1, "keep_task": false}, nil)
	want := "Previous 7 steps: f0(7) | Key outputs: result 6; result 8; result 10"
	if got := res.Messages[1].Message.Text(); got != want {
		t.Fatalf("summary %q\nwant    %q", got, want)
	}
}

// TestHysteresisMovesInSteps replays a conversation's growth: the prefix
// changes on the first summary and then once every step entries.
func TestHysteresisMovesInSteps(t *testing.T) {
	msgs := plugtest.Build("s" + strings.Repeat("ua", 40))
	for _, step := range []int{1, 3, 6, 10} {
		cfg := map[string]any{"step": step, "keep_task": false}
		var prev []abi.Message
		changes := 0
		for n := 2; n <= len(msgs); n++ {
			res := plugtest.Run(t, compact, msgs[:n], cfg, nil)
			out, _ := convo.Resolve(msgs[:n], res.Messages)
			if prev != nil && !extends(prev, out) {
				changes++
			}
			prev = out
		}
		// 80 entries: the first summary at 9, then every step.
		if want := 1 + (80-9)/step; changes != want {
			t.Errorf("step %d: the prefix changed %d times, want %d", step, changes, want)
		}
	}
}

func extends(prev, out []abi.Message) bool {
	if len(prev) > len(out) {
		return false
	}
	for i := range prev {
		if !plugtest.SameMessage(&prev[i], &out[i]) {
			return false
		}
	}
	return true
}

func TestSummarized(t *testing.T) {
	tests := []struct {
		name string
		n    int
		cfg  config
		want int
	}{
		{"empty", 0, defaults, 0},
		{"at max", 8, defaults, 0},
		{"over max", 9, defaults, 7},
		{"held", 14, defaults, 7},
		{"moved", 15, defaults, 13},
		{"max below preserve", 5, config{MaxEntries: 1, PreserveLastN: 3, Step: 1}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarized(tt.n, tt.cfg); got != tt.want {
				t.Fatalf("summarized(%d) = %d, want %d", tt.n, got, tt.want)
			}
		})
	}
}

func TestDeterminism(t *testing.T) {
	msgs := plugtest.Build("su" + strings.Repeat("ctpttua", 4))
	plugtest.Deterministic(t, policy, plugtest.Request(msgs, nil, nil))
}

func TestGolden(t *testing.T) {
	p := policy()
	plugtest.Golden(t, &p, *update)
}

// TestRealData checks the contract on turn-by-turn prefixes of every
// conversation in the shared data: valid results; when compacted, the
// system messages (and the task), one summary, then a contiguous suffix
// of the input holding at least preserve_last_n entries.
func TestRealData(t *testing.T) {
	configs := []map[string]any{
		nil,
		{"step": 1},
		{"max_entries": 3, "preserve_last_n": 1, "include_action_counts": false, "max_output_chars": 20, "summary_role": "user"},
		{"keep_task": false},
	}
	plugtest.RealData(t, compact, configs, 10, func(tb testing.TB, id string, in []abi.Message, res *abi.CompactResult, cfg map[string]any) {
		if !res.Compacted {
			return
		}
		news := 0
		for _, it := range res.Messages {
			if !it.IsRef() {
				news++
				if it.Message.Text() == "" {
					tb.Fatalf("%s: summary %s %q", id, it.Message.Role, it.Message.Text())
				}
			}
		}
		if news != 1 {
			tb.Fatalf("%s: %d new messages", id, news)
		}
		items := res.Messages
		first := len(items) - 1
		for first > 0 && items[first-1].IsRef() && items[first-1].Ref == items[first].Ref-1 {
			first--
		}
		if items[first].Ref < 1 || !convo.IsUnitStart(in, items[first].Ref) {
			tb.Fatalf("%s: kept suffix starts at %d", id, items[first].Ref)
		}
	})
}

// TestReplayReport prints the figures on the replay files: go test
// ./plugins/deterministic -run TestReplayReport -v
func TestReplayReport(t *testing.T) {
	plugtest.Report(t, "deterministic", compact)
}

// TestSeedDocument replays the example of rlm-code's compaction policies
// document (seed 003, SuperagenticAI/rlm-code docs/policies/compaction.md,
// "DeterministicCompactionPolicy") with its parameter names and defaults:
// eight steps, six summarized as
//
//	Previous 6 steps: code(4), search(2) | Key outputs: Found 42 matching results; Dataset loaded with 1000 rows; Computed optimal value 3.14
//
// and the last two kept: [summary, history[-2], history[-1]]. The
// document compacts its eight steps, so the trigger (more than
// max_entries) is set one lower than the default 8.
func TestSeedDocument(t *testing.T) {
	actions := []string{"code", "code", "search", "code", "search", "code", "code", "search"}
	outputs := []string{"Found 42 matching results", "Dataset loaded with 1000 rows", "Computed optimal value 3.14", "ValueError: retrying", "x = 3", "done", "step 7", "step 8"}
	msgs := []abi.Message{
		{Role: abi.RoleSystem, Content: abi.TextContent("You are an RLM."), Tokens: 10},
		{Role: abi.RoleUser, Content: abi.TextContent("Solve the optimization problem"), Tokens: 10},
	}
	for i, a := range actions {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs,
			abi.Message{Role: abi.RoleAssistant, Content: abi.TextContent(""), Tokens: 10,
				ToolCalls: []abi.ToolCall{{ID: id, Type: "function", Function: abi.FunctionCall{Name: a, Arguments: "{}"}}}},
			abi.Message{Role: abi.RoleTool, ToolCallID: id, Content: abi.TextContent(outputs[i]), Tokens: 10})
	}
	cfg := map[string]any{"max_entries": 7, "preserve_last_n": 2, "max_output_chars": 200, "include_action_counts": true, "step": 1}
	res := plugtest.Run(t, compact, msgs, cfg, nil)
	if got := plugtest.Shape(res.Messages); got != "r0 r1 m r14 r15 r16 r17" {
		t.Fatalf("got %s, want the system message, the task, the summary and the last two steps", got)
	}
	want := "Previous 6 steps: code(4), search(2) | Key outputs: Found 42 matching results; Dataset loaded with 1000 rows; Computed optimal value 3.14"
	if got := res.Messages[2].Message.Text(); got != want || res.EntriesSummarized != 6 {
		t.Fatalf("summary %q (%d entries)\nwant    %q", got, res.EntriesSummarized, want)
	}
	// The defaults are the document's.
	if defaults.MaxEntries != 8 || defaults.PreserveLastN != 2 || defaults.MaxOutputChars != 200 || !defaults.IncludeActionCounts {
		t.Fatalf("defaults %+v", defaults)
	}
}
