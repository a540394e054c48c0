package main

import (
	"flag"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/plugtest"
)

var replayReport = flag.Bool("replay", false, "TestReplayMiniSWE: replay every mini-swe-agent conversation and log the figures")

// TestReplayMiniSWE replays mini-swe-agent conversations turn by turn
// (the raw history each time, as a stateless agent sends it) with layer 2
// active (context_limit 20000, so it fires past 16000 tokens) and a 10%
// summarizer. With the host's cache each large result is summarized once
// in its life; without it, once per turn. For the figures:
//
//	go test ./plugins/toolresult -run TestReplayMiniSWE -v -args -replay
func TestReplayMiniSWE(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a data file")
	}
	load := plugtest.Load
	if *replayReport {
		load = plugtest.LoadFull
	}
	convs := load(t, *replayReport, "mini_swe_agent_deepseek_swebench.jsonl")
	if !*replayReport {
		convs = convs[:min(4, len(convs))]
		if raceEnabled {
			convs = convs[:1]
		}
	}
	cfg := map[string]any{"context_limit": 20000}
	f := &fakeLLM{cache: true}
	turns, followups, unchanged, in, out := 0, 0, 0, 0, 0
	for _, c := range convs {
		var prev []abi.Message
		for k, n := range plugtest.TurnPrefixes(c.Messages) {
			msgs := c.Messages[:n:n]
			res := run(t, f.host(), msgs, cfg, 0)
			got, _ := convo.Resolve(msgs, res.Messages)
			for i := range got {
				if !res.Messages[i].IsRef() {
					got[i].Tokens = len(got[i].Text())/4 + 4
				}
				out += got[i].Tokens
				in += msgs[i].Tokens
			}
			turns++
			if k > 0 {
				followups++
				if len(prev) <= len(got) && samePrefix(prev, got) {
					unchanged++
				}
			}
			prev = got
		}
	}
	t.Logf("%d convs, %d turns: llm_complete requests %d (%.1f/conv; what a cacheless host pays), summaries computed %d (%.1f/conv, with the cache); tokens sent/turn %.0f vs %.0f uncompressed; prefix unchanged on %.1f%% of follow-up turns",
		len(convs), turns, f.calls, float64(f.calls)/float64(len(convs)), f.computed, float64(f.computed)/float64(len(convs)),
		float64(out)/float64(turns), float64(in)/float64(turns), 100*float64(unchanged)/float64(followups))
	if f.computed >= f.calls && f.calls > 0 {
		t.Errorf("the cache saved nothing: %d computed of %d requests", f.computed, f.calls)
	}
}

func samePrefix(a, b []abi.Message) bool {
	for i := range a {
		if !plugtest.SameMessage(&a[i], &b[i]) {
			return false
		}
	}
	return true
}
