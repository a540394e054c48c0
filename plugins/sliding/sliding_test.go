package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/pdk"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func run(t *testing.T, msgs []abi.Message, cfg map[string]any) *abi.CompactResult {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	req := &abi.CompactRequest{ABI: abi.Version, Messages: msgs, Config: raw}
	res, err := compact(&pdk.TestHost{}, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := convo.CheckResult(msgs, res.Messages); err != nil {
		t.Fatalf("invalid result: %v", err)
	}
	return res
}

// shape renders items as "r0 m r7 r8": refs and new (marker) messages.
func shape(items []abi.Item) string {
	var parts []string
	for _, it := range items {
		if it.IsRef() {
			parts = append(parts, fmt.Sprintf("r%d", it.Ref))
		} else {
			parts = append(parts, "m")
		}
	}
	return strings.Join(parts, " ")
}

func TestCompact(t *testing.T) {
	seed := map[string]any{"window_size": 5, "step": 1, "keep_first_user": false}
	tests := []struct {
		name string
		spec string
		tok  []int
		cfg  map[string]any
		want string
	}{
		{"seed: 12 entries, window 5", "uauauauauaua", nil, seed, "m r7 r8 r9 r10 r11"},
		{"seed: at the window, nothing to do", "uauau", nil, seed, "r0 r1 r2 r3 r4"},
		{"system kept", "suauauau", nil, seed, "r0 m r3 r4 r5 r6 r7"},
		{"task kept by default", "suauauauau", nil, map[string]any{"window_size": 3, "step": 1}, "r0 r1 m r7 r8 r9"},
		{"no marker", "uauauaua", nil, map[string]any{"window_size": 3, "step": 1, "keep_first_user": false, "include_summary_marker": false}, "r5 r6 r7"},
		{"widens over a tool unit", "suctauaua", nil, map[string]any{"window_size": 6, "step": 1, "keep_first_user": false}, "r0 m r2 r3 r4 r5 r6 r7 r8"},
		{"cut lands on a tool result: widen to its call", "suauctaua", nil, map[string]any{"window_size": 4, "step": 1, "keep_first_user": false}, "r0 m r4 r5 r6 r7 r8"},
		{"parallel calls are one unit", "suapttauau", nil, map[string]any{"window_size": 5, "step": 1, "keep_first_user": false}, "r0 m r3 r4 r5 r6 r7 r8 r9"},
		{"trailing unanswered call kept", "suauauauc", nil, map[string]any{"window_size": 2, "step": 1, "keep_first_user": false}, "r0 m r7 r8"},
		{"start_on user", "suauactau", nil, map[string]any{"window_size": 5, "step": 1, "keep_first_user": false, "start_on": "user"}, "r0 m r8"},
		{"start_on user without one in the window", "suctctctct", nil, map[string]any{"window_size": 3, "step": 1, "keep_first_user": false, "start_on": "user"}, "r0 m r6 r7 r8 r9"},
		{"hysteresis: not yet at window+step", "uauauauaua", nil, map[string]any{"window_size": 5, "step": 6, "keep_first_user": false}, "r0 r1 r2 r3 r4 r5 r6 r7 r8 r9"},
		{"hysteresis: cut back to the window at window+step", "uauauauauaua", nil, map[string]any{"window_size": 5, "step": 7, "keep_first_user": false}, "m r7 r8 r9 r10 r11"},
		{"hysteresis: cut stays until the next step", "uauauauauauau", nil, map[string]any{"window_size": 5, "step": 7, "keep_first_user": false}, "m r7 r8 r9 r10 r11 r12"},
		{"tokens: fits", "suaua", []int{100, 10, 10, 10, 10}, map[string]any{"max_tokens": 200}, "r0 r1 r2 r3 r4"},
		{"tokens: over budget cuts to low water", "suauauaua", []int{100, 50, 50, 50, 50, 50, 50, 50, 50}, map[string]any{"max_tokens": 400, "low_water": 0.6, "keep_first_user": false}, "r0 m r5 r6 r7 r8"},
		{"tokens: low water 1 trims to the budget", "suauauaua", []int{100, 50, 50, 50, 50, 50, 50, 50, 50}, map[string]any{"max_tokens": 400, "low_water": 1.0, "keep_first_user": false}, "r0 m r4 r5 r6 r7 r8"},
		{"tokens: the final unit stays even over budget", "suauc" + "t", []int{10, 10, 10, 10, 10, 5000}, map[string]any{"max_tokens": 100, "keep_first_user": false}, "r0 m r4 r5"},
		{"tokens: tool units dropped whole", "suctctaua", []int{10, 10, 10, 200, 10, 200, 10, 10, 10}, map[string]any{"max_tokens": 300, "keep_first_user": false}, "r0 m r4 r5 r6 r7 r8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := plugtest.Build(tt.spec, tt.tok...)
			res := run(t, msgs, tt.cfg)
			if got := shape(res.Messages); got != tt.want {
				t.Fatalf("got %s\nwant %s", got, tt.want)
			}
			if res.Compacted != strings.Contains(tt.want, "m") && !strings.Contains(fmt.Sprint(tt.cfg), "include_summary_marker:false") {
				t.Errorf("compacted = %v", res.Compacted)
			}
		})
	}
}

func TestSeedMarkerText(t *testing.T) {
	res := run(t, plugtest.Build("uauauauauaua"), map[string]any{"window_size": 5, "step": 1, "keep_first_user": false})
	if got := res.Messages[0].Message.Text(); got != "[7 earlier entries discarded]" || res.Messages[0].Message.Role != abi.RoleUser {
		t.Fatalf("marker = %s %q", res.Messages[0].Message.Role, got)
	}
	if res.EntriesSummarized != 7 {
		t.Fatalf("entries_summarized = %d", res.EntriesSummarized)
	}
}

// TestHysteresisMovesInSteps replays a conversation turn by turn: the cut
// (the kept prefix) changes only once every step turns.
func TestHysteresisMovesInSteps(t *testing.T) {
	msgs := plugtest.Build("s" + strings.Repeat("ua", 40))
	for _, step := range []int{1, 3, 5} {
		cfg := map[string]any{"window_size": 4, "step": step, "keep_first_user": false}
		prev, changes := "", 0
		for n := 2; n <= len(msgs); n++ {
			res := run(t, msgs[:n], cfg)
			first := res.Messages[1]
			key := "none"
			if !first.IsRef() {
				key = first.Message.Text()
			}
			if key != prev {
				changes++
				prev = key
			}
		}
		// 80 entries, window 4: the cut moves about (80-4)/step times.
		want := (80 - 4) / step
		if changes < want-1 || changes > want+1 {
			t.Errorf("step %d: prefix changed %d times over 80 turns, want about %d", step, changes, want)
		}
	}
}

// TestGolden runs the policy through both encodings the Wasm exports read
// (JSON and the fast path's binary) on testdata/*.input.json and compares
// the output with testdata/*.golden.json. Run with -update to rewrite them.
func TestGolden(t *testing.T) {
	p := policy()
	plugtest.GoldenWith(t, &p, *update, func(string) pdk.Host { return &pdk.TestHost{} })
}

// TestRealData checks the window's contract on turn-by-turn prefixes of
// every conversation in the shared data, natively: the result is valid and
// is the system messages, the task, an optional marker, then a contiguous
// suffix of the input holding at least window_size entries.
func TestRealData(t *testing.T) {
	files, err := dataset.FixtureFiles()
	if err != nil {
		t.Fatal(err)
	}
	configs := []map[string]any{
		{},
		{"window_size": 3, "step": 1},
		{"max_tokens": 4000},
		{"max_tokens": 2000, "start_on": "user", "keep_first_user": false},
	}
	for _, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range convs {
			for i := range c.Chat.Messages {
				c.Chat.Messages[i].Tokens = len(c.Chat.Raw[i]) / 4
			}
			for _, n := range dataset.SamplePrefixes(c.Chat, 10) {
				msgs := c.Chat.Messages[:n]
				for _, cfg := range configs {
					res := run(t, msgs, cfg)
					checkContract(t, c.ID, msgs, res, cfg)
				}
			}
		}
	}
}

func checkContract(t *testing.T, id string, in []abi.Message, res *abi.CompactResult, cfgMap map[string]any) {
	t.Helper()
	items := res.Messages
	if !res.Compacted {
		if len(items) != len(in) {
			t.Fatalf("%s: not compacted but %d of %d items", id, len(items), len(in))
		}
		return
	}
	// After the pinned refs and the marker, refs are contiguous up to the end.
	i := 0
	for i < len(items) && items[i].IsRef() && items[i].Ref == i {
		i++
	}
	if i < len(items) && !items[i].IsRef() {
		i++
	}
	if i >= len(items) {
		t.Fatalf("%s: nothing kept after the marker", id)
	}
	start := items[i].Ref
	for k := i; k < len(items); k++ {
		if !items[k].IsRef() || items[k].Ref != start+k-i {
			t.Fatalf("%s: kept window is not a contiguous suffix: %s", id, shape(items))
		}
	}
	if _, tokenMode := cfgMap["max_tokens"]; !tokenMode {
		w := 5
		if v, ok := cfgMap["window_size"].(int); ok {
			w = v
		}
		if kept := len(in) - start; kept < w && start > 0 {
			t.Fatalf("%s: kept %d entries, fewer than the window of %d", id, kept, w)
		}
	}
}

// TestSeedDocument replays the example of rlm-code's compaction policies
// document (seed 003, SuperagenticAI/rlm-code docs/policies/compaction.md,
// "SlidingWindowCompactionPolicy"), with its parameter names: 12 entries,
// window_size 5 → "[7 earlier entries discarded]" and history[7] to
// history[11]. The document's history holds steps, the task beside it: the
// task stays in front (keep_task); step 1 is the seed's window, moved on
// every turn.
func TestSeedDocument(t *testing.T) {
	msgs := plugtest.Build("su" + strings.Repeat("ua", 6))
	res := plugtest.Run(t, compact, msgs, map[string]any{"window_size": 5, "include_summary_marker": true, "step": 1}, nil)
	if got := plugtest.Shape(res.Messages); got != "r0 r1 m r9 r10 r11 r12 r13" {
		t.Fatalf("got %s", got)
	}
	if m := res.Messages[2].Message; m.Text() != "[7 earlier entries discarded]" || res.EntriesSummarized != 7 {
		t.Fatalf("marker %q, %d entries", m.Text(), res.EntriesSummarized)
	}
	if defaults.WindowSize != 5 || !defaults.IncludeSummaryMarker {
		t.Fatalf("defaults %+v", defaults)
	}
}
