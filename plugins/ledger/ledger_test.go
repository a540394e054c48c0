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
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// agent builds a coding agent's conversation: a system prompt, the task,
// then n tool turns whose commands and results name files, functions,
// errors, ids and numbers; tokens 100 per message unless tok says.
func agent(n int) []abi.Message {
	msgs := []abi.Message{
		{Role: abi.RoleSystem, Content: abi.TextContent("You are a coding agent."), Tokens: 100},
		{Role: abi.RoleUser, Content: abi.TextContent("Fix the crash in pkg/parse/lexer.go. You must not modify the tests."), Tokens: 100},
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("call_%d", i)
		cmd := fmt.Sprintf(`{"command":"cd /repo && grep -n tokenize_%d pkg/mod%d/file%d.py | head"}`, i, i, i)
		out := fmt.Sprintf("pkg/mod%d/file%d.py:%d:def tokenize_%d(text):\nValueError: bad token %d at col 7\ncommit ab%dcd%de %d", i, i, 1000+i, i, i, i, i, 4000+i)
		msgs = append(msgs,
			abi.Message{Role: abi.RoleAssistant, Content: abi.TextContent(fmt.Sprintf("Step %d: look at tokenize_%d.", i, i)), Tokens: 100,
				ToolCalls: []abi.ToolCall{{ID: id, Type: "function", Function: abi.FunctionCall{Name: "bash", Arguments: cmd}}}},
			abi.Message{Role: abi.RoleTool, ToolCallID: id, Content: abi.TextContent(out), Tokens: 100})
	}
	return msgs
}

// small folds early: no minimum size, a jump every 3 tool turns.
func small(kv ...any) map[string]any {
	cfg := map[string]any{"min_tokens": 0, "min_turns": 0, "fold_tokens": 600}
	for i := 0; i+1 < len(kv); i += 2 {
		cfg[kv[i].(string)] = kv[i+1]
	}
	return cfg
}

func TestCompact(t *testing.T) {
	tests := []struct {
		name  string
		msgs  []abi.Message
		cfg   map[string]any
		want  string
		marks string
	}{
		{"below fold_tokens: nothing folded, the task marked", agent(3), small(), "r0 r1 r2 r3 r4 r5 r6 r7", "[1]"},
		{"one jump: the turns before the newest become one chunk", agent(4), small(), "r0 r1 m r8 r9", "[1 2]"},
		{"then the tail grows verbatim", agent(6), small(), "r0 r1 m r8 r9 r10 r11 r12 r13", "[1 2]"},
		{"a second jump appends a chunk", agent(7), small(), "r0 r1 m m r14 r15", "[1 3]"},
		{"past max_chunks the oldest merge", agent(13), small("max_chunks", 2), "r0 r1 m m r26 r27", "[1 3]"},
		{"min_turns holds the first fold back", agent(4), small("min_turns", 5), "r0 r1 r2 r3 r4 r5 r6 r7 r8 r9", "[1]"},
		{"min_tokens holds it back too", agent(4), small("min_tokens", 5000), "r0 r1 r2 r3 r4 r5 r6 r7 r8 r9", "[1]"},
		{"keep_task false: the task is folded, the ledger opens", agent(4), small("keep_task", false), "r0 m r8 r9", "[0 1]"},
		{"no system message", agent(4)[1:], small(), "r0 m r7 r8", "[0 1]"},
		{"an unanswered final call stays with its unit", append(agent(4), abi.Message{Role: abi.RoleAssistant, Tokens: 100, Content: abi.TextContent(""),
			ToolCalls: []abi.ToolCall{{ID: "x", Type: "function", Function: abi.FunctionCall{Name: "bash", Arguments: `{"command":"submit"}`}}}}), small(), "r0 r1 m r8 r9 r10", "[1 2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, tt.msgs, tt.cfg)
			if got := plugtest.Shape(res.Messages); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if got := fmt.Sprint(res.CacheBreakpoints); got != tt.marks {
				t.Fatalf("marks %s, want %s", got, tt.marks)
			}
			if res.Compacted != strings.Contains(tt.want, "m") {
				t.Fatalf("compacted %v", res.Compacted)
			}
		})
	}
}

func run(t testing.TB, msgs []abi.Message, cfg map[string]any) *abi.CompactResult {
	t.Helper()
	res := plugtest.Run(t, compact, msgs, cfg, nil)
	if err := convo.CheckCompactResult(msgs, res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestLedgerText: what a chunk lists, each item once across chunks, in
// order of first appearance, with its commands counted.
func TestLedgerText(t *testing.T) {
	res := run(t, agent(7), small())
	first, second := res.Messages[2].Message.Text(), res.Messages[3].Message.Text()
	for _, want := range []string{
		"[compactd ledger: turns 1-3 after the task",
		"ran: bash ×3 (grep ×3, head ×3);",
		"files: pkg/mod0/file0.py pkg/mod1/file1.py pkg/mod2/file2.py",
		"defined: tokenize_0 tokenize_1 tokenize_2",
		"errors:\n- ValueError: bad token 0 at col 7\n- ValueError: bad token 1 at col 7",
		"ids: ab0cd0e ab1cd1e ab2cd2e",
		"numbers: 1000 4000 1001 4001 1002 4002",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("chunk 1 lacks %q:\n%s", want, first)
		}
	}
	if !strings.HasPrefix(second, "[compactd ledger: turns 4-6 after the task") || strings.Contains(second, "file0.py") || !strings.Contains(second, "pkg/mod3/file3.py") {
		t.Errorf("chunk 2:\n%s", second)
	}
	for i, it := range res.Messages[2:4] {
		if it.Message.Role != abi.RoleAssistant {
			t.Errorf("chunk %d is the %s's", i, it.Message.Role)
		}
	}
	// User messages after the task are quoted, clipped to user_chars.
	msgs := agent(4)
	msgs = append(msgs[:4:4], append([]abi.Message{{Role: abi.RoleUser, Content: abi.TextContent("Also never touch   setup.cfg, please; and keep it short"), Tokens: 100}}, msgs[4:]...)...)
	res = run(t, msgs, small("user_chars", 20))
	if text := res.Messages[2].Message.Text(); !strings.Contains(text, "\nuser said: Also never touch set…") {
		t.Errorf("no user quote:\n%s", text)
	}
}

// TestAppendOnly replays a conversation's growth: between merges, every
// request starts with the previous request's system messages, task and
// ledger chunks, byte for byte (so a prompt cache reads them), and the
// newest chunk is marked.
func TestAppendOnly(t *testing.T) {
	msgs := agent(60)
	cfg := small("max_chunks", 4)
	var prevChunks []string
	merges, jumps := 0, 0
	for n := 4; n <= len(msgs); n += 2 {
		res := run(t, msgs[:n], cfg)
		var chunks []string
		for _, it := range res.Messages {
			if !it.IsRef() {
				chunks = append(chunks, it.Message.Text())
			}
		}
		if len(chunks) > 0 {
			if want := 2 + len(chunks) - 1; res.CacheBreakpoints[len(res.CacheBreakpoints)-1] != want {
				t.Fatalf("prefix %d: marks %v, want the newest chunk (%d)", n, res.CacheBreakpoints, want)
			}
		}
		kept := len(prevChunks) <= len(chunks)
		for i := 0; kept && i < len(prevChunks); i++ {
			kept = prevChunks[i] == chunks[i]
		}
		switch {
		case !kept:
			merges++
			if len(chunks) >= len(prevChunks) {
				t.Fatalf("prefix %d: a chunk changed without a merge", n)
			}
		case len(chunks) > len(prevChunks):
			jumps++
		}
		prevChunks = chunks
	}
	if jumps < 10 || merges < 2 || merges > jumps/2 {
		t.Fatalf("%d jumps, %d merges", jumps, merges)
	}
}

func TestSummaryRole(t *testing.T) {
	res := run(t, agent(4), small("summary_role", "user"))
	if m := res.Messages[2].Message; m.Role != abi.RoleUser {
		t.Fatalf("role %s", m.Role)
	}
}

// TestMemo: a result made with the extraction memo is the one made
// without it.
func TestMemo(t *testing.T) {
	msgs := agent(30)
	req := plugtest.Request(msgs, small(), nil)
	chunkMemo.clear()
	cold, err := compact(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := compact(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, cold), mustJSON(t, warm); a != b {
		t.Fatalf("the memo changed the result:\n%s\n%s", a, b)
	}
	// A memo too small for anything still gives the same result.
	saved := chunkMemo.max
	chunkMemo.max = 1
	chunkMemo.clear()
	tiny, _ := compact(nil, req)
	chunkMemo.max = saved
	if mustJSON(t, tiny) != mustJSON(t, cold) {
		t.Fatal("a full memo changed the result")
	}
}

func mustJSON(t *testing.T, res *abi.CompactResult) string {
	t.Helper()
	b, err := appendJSON(res)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeterminism(t *testing.T) {
	plugtest.Deterministic(t, policy, plugtest.Request(agent(40), small(), nil))
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []map[string]any{{"max_chunks": 1}, {"merge_keep": 8}, {"fold_tokens": 0}, {"summary_role": "system"}, {"nope": 1}} {
		if _, err := compact(nil, plugtest.Request(agent(2), cfg, nil)); err == nil {
			t.Errorf("%v accepted", cfg)
		}
	}
}

func TestGolden(t *testing.T) {
	p := policy()
	plugtest.Golden(t, &p, *update)
}

// TestRealData checks the contract on sampled prefixes of every fixture
// conversation: valid results; the system messages and the task kept as
// refs first; new messages only right after them (the ledger); the newest
// chunk marked; then a contiguous suffix of the input.
func TestRealData(t *testing.T) {
	configs := []map[string]any{nil, small(), small("max_chunks", 2, "chunk_items", 2, "summary_role", "user")}
	plugtest.RealData(t, compact, configs, 10, func(tb testing.TB, id string, in []abi.Message, res *abi.CompactResult, cfg map[string]any) {
		if err := convo.CheckBreakpoints(len(res.Messages), res.CacheBreakpoints); err != nil {
			tb.Fatalf("%s: %v", id, err)
		}
		pinned := convo.Pinned(in, true)
		items := res.Messages
		for i := 0; i < pinned; i++ {
			if !items[i].IsRef() || items[i].Ref != i {
				tb.Fatalf("%s: item %d is not the kept prefix", id, i)
			}
		}
		k := pinned
		for k < len(items) && !items[k].IsRef() {
			k++
		}
		if k > pinned && (len(res.CacheBreakpoints) == 0 || res.CacheBreakpoints[len(res.CacheBreakpoints)-1] != k-1) {
			tb.Fatalf("%s: the newest chunk (%d) is not marked: %v", id, k-1, res.CacheBreakpoints)
		}
		for j := k; j < len(items); j++ {
			if !items[j].IsRef() || items[j].Ref != items[k].Ref+j-k {
				tb.Fatalf("%s: the verbatim tail is not contiguous", id)
			}
		}
	})
}

// appendJSON encodes a result as the plugin's export does.
func appendJSON(res *abi.CompactResult) (string, error) {
	b, err := json.Marshal(res)
	return string(b), err
}
