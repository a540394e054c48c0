package main

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/plugtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// withRecaps gives every assistant message of msgs a content with a recap
// line among other lines, as a Playbooks agent writes them.
func withRecaps(msgs []abi.Message) []abi.Message {
	for i := range msgs {
		if msgs[i].Role == abi.RoleAssistant {
			msgs[i].Content = abi.TextContent(fmt.Sprintf("# execution_id: %d\n  recap - step %d\nsome logs", i, i))
		}
	}
	return msgs
}

func TestCompact(t *testing.T) {
	// The Playbooks design's behaviour: older user messages go, the task
	// with them (keep_task: false).
	seed := map[string]any{"min_preserved_assistant_messages": 3, "batch_size": 4, "keep_task": false}
	kept := map[string]any{"min_preserved_assistant_messages": 3, "batch_size": 4}
	tests := []struct {
		name    string
		spec    string
		recaps  bool
		cfg     map[string]any
		want    string
		summary int // entries_summarized
	}{
		{"seed: 7 pairs, min 3, batch 4", strings.Repeat("ua", 7), true, seed,
			"m m m m r8 r9 r10 r11 r12 r13", 8},
		{"below min+batch: nothing to do", strings.Repeat("ua", 6), true, seed,
			"r0 r1 r2 r3 r4 r5 r6 r7 r8 r9 r10 r11", 0},
		{"rounded down to a batch", strings.Repeat("ua", 10), true, seed,
			"m m m m r8 r9 r10 r11 r12 r13 r14 r15 r16 r17 r18 r19", 8},
		{"two batches", strings.Repeat("ua", 11), true, seed,
			"m m m m m m m m r16 r17 r18 r19 r20 r21", 16},
		{"disabled", strings.Repeat("ua", 11), true, map[string]any{"enabled": false},
			"r0 r1 r2 r3 r4 r5 r6 r7 r8 r9 r10 r11 r12 r13 r14 r15 r16 r17 r18 r19 r20 r21", 0},
		{"no recap line: assistants stay, users go", strings.Repeat("ua", 7), false, seed,
			"r1 r3 r5 r7 r8 r9 r10 r11 r12 r13", 4},
		{"system messages are never removed", "s" + "ua" + "d" + strings.Repeat("ua", 6), true, seed,
			"r0 m r3 m m m r10 r11 r12 r13 r14 r15", 8},
		{"batch 1 compacts all but the preserved", strings.Repeat("ua", 5), true, map[string]any{"min_preserved_assistant_messages": 2, "batch_size": 1, "keep_task": false},
			"m m m r6 r7 r8 r9", 6},
		{"a tool unit with a recap line goes as one", "su" + "ct" + "ptt" + "ua" + "auauaua", true, seed,
			"r0 m m m m r10 r11 r12 r13 r14 r15", 6},
		{"a tool unit without a recap line stays whole", "su" + "ct" + "ptt" + "ua" + "auauaua", false, seed,
			"r0 r2 r3 r4 r5 r6 r8 r9 r10 r11 r12 r13 r14 r15", 2},
		{"the unanswered final call stays", "su" + strings.Repeat("ct", 6) + "c", true, seed,
			"r0 m m m m r10 r11 r12 r13 r14", 5},
		{"default: the task stays", strings.Repeat("ua", 7), true, kept,
			"r0 m m m m r8 r9 r10 r11 r12 r13", 7},
		{"default: the task stays after the system messages", "su" + strings.Repeat("ct", 6) + "c", true, kept,
			"r0 r1 m m m m r10 r11 r12 r13 r14", 4},
		{"default: no recap line, only the task stays of the users", strings.Repeat("ua", 7), false, kept,
			"r0 r1 r3 r5 r7 r8 r9 r10 r11 r12 r13", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := plugtest.Build(tt.spec)
			if tt.recaps {
				withRecaps(msgs)
			}
			res := plugtest.Run(t, compact, msgs, tt.cfg, nil)
			if got := plugtest.Shape(res.Messages); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if res.EntriesSummarized != tt.summary {
				t.Errorf("entries_summarized = %d, want %d", res.EntriesSummarized, tt.summary)
			}
			if res.Compacted != (tt.summary > 0) {
				t.Errorf("compacted = %v", res.Compacted)
			}
			for k, it := range res.Messages {
				if it.IsRef() {
					continue
				}
				if it.Message.Role != abi.RoleAssistant || !strings.HasPrefix(it.Message.Text(), "recap - step ") || len(it.Message.ToolCalls) > 0 {
					t.Errorf("item %d: new message %s %q", k, it.Message.Role, it.Message.Text())
				}
			}
		})
	}
}

func TestSeedRecapLines(t *testing.T) {
	msgs := withRecaps(plugtest.Build(strings.Repeat("ua", 7)))
	res := plugtest.Run(t, compact, msgs, map[string]any{"keep_task": false}, nil)
	var lines []string
	for _, it := range res.Messages[:4] {
		lines = append(lines, it.Message.Text())
	}
	if got := strings.Join(lines, "|"); got != "recap - step 1|recap - step 3|recap - step 5|recap - step 7" {
		t.Fatalf("recap lines = %s", got)
	}
	if fmt.Sprint(res.Rewritten) != "[1 3 5 7]" {
		t.Fatalf("rewritten = %v", res.Rewritten)
	}
}

func TestRecapLine(t *testing.T) {
	tests := []struct {
		name, text, want string
		ok               bool
	}{
		{"first matching line", "a\nrecap - one\nrecap - two", "recap - one", true},
		{"trimmed", "  \t recap - spaced  \r\nx", "recap - spaced", true},
		{"none", "Recap - capital\nrecap: colon\nnot recap - inside", "", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := recapLine(tt.text)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("recapLine(%q) = %q, %v", tt.text, got, ok)
			}
		})
	}
}

// TestBatchBoundaries grows a conversation turn by turn: the output
// changes other than by appending only when the number of compacted
// assistant messages crosses a batch boundary.
func TestBatchBoundaries(t *testing.T) {
	msgs := withRecaps(plugtest.Build("s" + strings.Repeat("ua", 40)))
	for _, batch := range []int{1, 3, 4, 7} {
		cfg := map[string]any{"min_preserved_assistant_messages": 3, "batch_size": batch}
		var prev []abi.Message
		changes := 0
		for n := 2; n <= len(msgs); n++ {
			res := plugtest.Run(t, compact, msgs[:n], cfg, nil)
			out := resolve(msgs[:n], res.Messages)
			if prev != nil && !extends(prev, out) {
				changes++
			}
			prev = out
		}
		// 40 assistant messages, 3 preserved: the compacted count steps
		// from 0 to 37 rounded down, once per batch.
		if want := (40 - 3) / batch; changes != want {
			t.Errorf("batch %d: the prefix changed %d times, want %d", batch, changes, want)
		}
	}
}

func resolve(in []abi.Message, items []abi.Item) []abi.Message {
	out := make([]abi.Message, len(items))
	for i, it := range items {
		if it.IsRef() {
			out[i] = in[it.Ref]
		} else {
			out[i] = *it.Message
		}
	}
	return out
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

// TestRealDataBatchBoundaries replays real conversations turn by turn, as
// they are and with a recap line written into every assistant message:
// the compacted prefix changes only on the turns where the number of
// compacted assistant messages moves to the next batch.
func TestRealDataBatchBoundaries(t *testing.T) {
	convs := plugtest.Sample(plugtest.Load(t, false, "tau_bench_gpt4o_airline.jsonl", "mini_swe_agent_deepseek_swebench.jsonl"), 8)
	for _, recaps := range []bool{false, true} {
		cs := convs
		if recaps {
			cs = make([]plugtest.Conversation, len(convs))
			for i, c := range convs {
				c.Messages = withRecaps(append([]abi.Message(nil), c.Messages...))
				cs[i] = c
			}
		}
		prevK, boundaries, changes := -1, 0, 0
		var prevConv *plugtest.Conversation
		st := plugtest.Replay(t, compact, cs, nil, func(turn *plugtest.Turn) {
			assistants := 0
			for _, m := range turn.Request.Messages {
				if m.Role == abi.RoleAssistant {
					assistants++
				}
			}
			k := batched(assistants, defaults)
			if turn.Conv == prevConv {
				if k != prevK {
					boundaries++
				}
				if !turn.Extended {
					changes++
					if k == prevK {
						t.Fatalf("%s prefix %d: the prefix changed within a batch (%d compacted)", turn.Conv.ID, turn.N, k)
					}
				}
			}
			prevConv, prevK = turn.Conv, k
		})
		if boundaries == 0 || changes == 0 || changes > boundaries {
			t.Fatalf("recaps %v: %d prefix changes at %d batch boundaries", recaps, changes, boundaries)
		}
		t.Logf("recap lines %v: %s; %d prefix changes at %d batch boundaries", recaps, &st, changes, boundaries)
	}
}

// TestDeterminism: the same request gives byte-identical output, call
// after call and from a fresh policy value (a fresh instance).
func TestDeterminism(t *testing.T) {
	msgs := withRecaps(plugtest.Build("sucpttua" + strings.Repeat("ua", 8)))
	plugtest.Deterministic(t, policy, plugtest.Request(msgs, map[string]any{"batch_size": 2}, nil))
}

func TestGolden(t *testing.T) {
	p := policy()
	plugtest.Golden(t, &p, *update)
}

// TestRealData checks recap's contract on turn-by-turn prefixes of every
// conversation in the shared data: valid results, the preserved tail kept
// whole, new messages only recap lines.
func TestRealData(t *testing.T) {
	configs := []map[string]any{
		nil,
		{"min_preserved_assistant_messages": 1, "batch_size": 1},
		{"min_preserved_assistant_messages": 5, "batch_size": 2},
	}
	plugtest.RealData(t, compact, configs, 10, func(tb testing.TB, id string, in []abi.Message, res *abi.CompactResult, cfg map[string]any) {
		if !res.Compacted {
			return
		}
		// Every user message before the last new or dropped position is
		// gone; the messages after the last compacted assistant are all
		// kept, in order, to the end.
		last := res.Messages[len(res.Messages)-1].Ref
		for k := len(res.Messages) - 2; k >= 0 && res.Messages[k].IsRef() && res.Messages[k].Ref == last-1; k-- {
			last--
		}
		if last == 0 {
			tb.Fatalf("%s: compacted but the whole input is kept", id)
		}
	})
}

// TestReplayReport prints recap's figures on the replay files: go test
// ./plugins/recap -run TestReplayReport -v
func TestReplayReport(t *testing.T) {
	plugtest.Report(t, "recap", compact)
}
