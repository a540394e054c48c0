package main

import (
	"fmt"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/pdk"
)

var realDataConfigs = []map[string]any{
	{},
	{"token_threshold": 4000},
	{"token_threshold": 2000, "retention_window": 2, "min_batch": 1, "summarize_tool_loop": false},
	{"token_threshold": 0, "message_threshold": 10},
	{"token_threshold": 0, "turn_threshold": 2, "retention_window": 0, "min_batch": 1},
}

// TestRealData runs the policy on sampled turn prefixes of every shared
// data file, with the fake summarizer and with no LLM at all (the
// deterministic fallback), and checks the result is valid and has the
// policy's shape.
func TestRealData(t *testing.T) {
	prefixes := 10
	if testing.Short() || raceEnabled {
		prefixes = 3
	}
	convs := plugtest.Load(t, false)
	compacted := map[string]int{}
	for _, c := range convs {
		for _, n := range plugtest.SamplePrefixes(c.Messages, prefixes) {
			msgs := c.Messages[:n:n]
			for ci, cfg := range realDataConfigs {
				for _, withLLM := range []bool{true, false} {
					var h pdk.Host = &pdk.TestHost{}
					if withLLM {
						h = (&fakeLLM{}).host()
					}
					req := plugtest.Request(msgs, cfg, nil)
					req.Context.Model, req.Context.ContextWindow = "gpt-4o", 128000
					res, err := compact(h, req)
					if err != nil {
						t.Fatalf("%s prefix %d config %v: %v", c.ID, n, cfg, err)
					}
					if err := convo.CheckResult(msgs, res.Messages); err != nil {
						t.Fatalf("%s prefix %d config %v: %v", c.ID, n, cfg, err)
					}
					checkShape(t, fmt.Sprintf("%s prefix %d config %v", c.ID, n, cfg), msgs, res, withLLM)
					if res.Compacted {
						compacted[fmt.Sprintf("config %d llm=%v", ci, withLLM)]++
					}
				}
			}
		}
	}
	t.Logf("compacted results per config: %v", compacted)
	if compacted["config 1 llm=true"] == 0 || compacted["config 3 llm=false"] == 0 {
		t.Fatal("the real-data sweep never compacted: the test checks nothing")
	}
}

// checkShape: the system messages, then the summarized region in order —
// its user/system messages as refs, and in place of each run of
// summarized messages between them one summary (the assistant's, or the
// user's when it opens the conversation) — then a contiguous run of refs
// to the end.
func checkShape(t *testing.T, where string, in []abi.Message, res *abi.CompactResult, withLLM bool) {
	t.Helper()
	items := res.Messages
	if !res.Compacted {
		if len(items) != len(in) {
			t.Fatalf("%s: not compacted but %d of %d items", where, len(items), len(in))
		}
		return
	}
	lead := convo.LeadingSystem(in)
	last := -1 // the last summary's item index
	for k, it := range items {
		if it.IsRef() {
			continue
		}
		sum := it.Message
		if _, body, ok := parseSummary(sum.Text()); !ok || body == "" {
			t.Fatalf("%s: bad summary message %s %q", where, sum.Role, sum.Text())
		}
		wantRole := abi.RoleAssistant
		if k == lead {
			wantRole = abi.RoleUser
		}
		if sum.Role != wantRole {
			t.Fatalf("%s: summary %d is the %s's, want the %s's", where, k, sum.Role, wantRole)
		}
		// It stands where its run was: every input message between the
		// refs around it is summarized, none kept verbatim.
		before := lead - 1
		if k > 0 && items[k-1].IsRef() {
			before = items[k-1].Ref
		} else if k > 0 {
			t.Fatalf("%s: two summaries in a row at %d", where, k)
		}
		if k+1 >= len(items) || !items[k+1].IsRef() {
			t.Fatalf("%s: summary %d is not followed by a kept message", where, k)
		}
		for i := before + 1; i < items[k+1].Ref; i++ {
			if preserved(&in[i]) {
				t.Fatalf("%s: summary %d spans a message kept verbatim (%d)", where, k, i)
			}
		}
		last = k
	}
	if last < 0 {
		t.Fatalf("%s: compacted without a summary", where)
	}
	for k := 0; k < last; k++ {
		if it := items[k]; it.IsRef() && it.Ref >= lead && !preserved(&in[it.Ref]) {
			t.Fatalf("%s: item %d keeps a %s message inside the summarized region", where, k, in[it.Ref].Role)
		}
	}
	if withLLM != (len(res.Warnings) == 0) {
		t.Fatalf("%s: warnings %q with LLM %v", where, res.Warnings, withLLM)
	}
	first := items[last+1].Ref
	for j := last + 1; j < len(items); j++ {
		if !items[j].IsRef() || items[j].Ref != first+j-last-1 {
			t.Fatalf("%s: the kept tail is not contiguous", where)
		}
	}
	if !convo.IsUnitStart(in, first) {
		t.Fatalf("%s: the summary splits a tool unit at %d", where, first)
	}
}
