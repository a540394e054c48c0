package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/eval"
)

// TestEvalVerdict covers the exit codes a report can earn, including the
// ones real plugins cannot produce on demand (a baseline that lost a
// probe is a bug in eval).
func TestEvalVerdict(t *testing.T) {
	t.Parallel()
	policy := func(name string, turns, valid, task, probes, kept int) eval.PolicyReport {
		p := eval.PolicyReport{Policy: name}
		p.Validity.Turns, p.Validity.Valid = turns, valid
		p.Task.Turns, p.Task.Kept = turns, task
		p.Retention.Probes, p.Retention.Retained = probes, kept
		p.Retention.Share = p.Retention.Retention.Share()
		return p
	}
	file := func(name string, convs int, ps ...eval.PolicyReport) eval.FileReport {
		return eval.FileReport{File: name, Conversations: convs, Policies: ps}
	}
	good := file("a.jsonl", 2, policy("none", 10, 10, 10, 40, 40), policy("ledger", 10, 10, 10, 40, 30))
	tests := []struct {
		name   string
		files  []eval.FileReport
		check  bool
		floors retentionFlag
		code   int
		msg    string
	}{
		{"all good", []eval.FileReport{good}, true, retentionFlag{"ledger": 0.75}, ExitOK, ""},
		{"invalid requests, even without --check", []eval.FileReport{file("a.jsonl", 2, policy("none", 10, 10, 10, 4, 4), policy("x", 10, 9, 10, 4, 4))}, false, nil, ExitPluginFailed, "x sent 1 invalid requests on a.jsonl"},
		{"task dropped, with --check", []eval.FileReport{file("a.jsonl", 2, policy("none", 10, 10, 10, 4, 4), policy("x", 10, 10, 8, 4, 4))}, true, nil, ExitPluginFailed, "x dropped the task from 2 of 10 requests"},
		{"task dropped, without --check", []eval.FileReport{file("a.jsonl", 2, policy("none", 10, 10, 10, 4, 4), policy("x", 10, 10, 8, 4, 4))}, false, nil, ExitOK, ""},
		{"under a named floor", []eval.FileReport{good}, false, retentionFlag{"ledger": 0.8}, ExitPluginFailed, "ledger kept 75.0% of its probes on a.jsonl (30 of 40), under the 80.0% required"},
		{"under a floor for every policy", []eval.FileReport{good}, false, retentionFlag{"": 0.8}, ExitPluginFailed, "ledger kept 75.0%"},
		{"another policy's floor", []eval.FileReport{good}, false, retentionFlag{"sliding": 0.99}, ExitOK, ""},
		{"no probes: no floor", []eval.FileReport{file("a.jsonl", 2, policy("none", 10, 10, 10, 0, 0), policy("x", 10, 10, 10, 0, 0))}, false, retentionFlag{"": 1}, ExitOK, ""},
		{"the baseline lost a probe", []eval.FileReport{file("a.jsonl", 2, policy("none", 10, 10, 10, 40, 39))}, true, nil, ExitFailure, "the uncompressed baseline lost 1 of 40 probes on a.jsonl"},
		{"one file evaluated nothing", []eval.FileReport{good, {File: "b.jsonl", Skipped: []eval.Skip{{Conversation: "c", Reason: "invalid conversation: no messages"}, {Conversation: "d", Reason: "r"}}}}, false, nil, ExitInput, "b.jsonl: no conversation evaluated (all 2 skipped, e.g. c: invalid conversation: no messages)"},
		{"an empty file", []eval.FileReport{{File: "b.jsonl"}}, false, nil, ExitInput, "b.jsonl: no conversation evaluated (the file holds no conversation)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			env := &Env{Stdout: &bytes.Buffer{}, Stderr: &stderr}
			code := evalVerdict(env, &eval.Report{Files: tt.files}, tt.check, tt.floors)
			if code != tt.code || (tt.msg == "") != (stderr.Len() == 0) || !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("exit %d, want %d; stderr %q, want %q", code, tt.code, stderr.String(), tt.msg)
			}
		})
	}
}

func TestRetentionFlag(t *testing.T) {
	t.Parallel()
	r := retentionFlag{}
	for _, v := range []string{"0.5", "ledger=85%", "sliding=0"} {
		if err := r.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	if f, ok := r.of("ledger"); !ok || f != 0.85 {
		t.Errorf("ledger: %v %v", f, ok)
	}
	if f, ok := r.of("recap"); !ok || f != 0.5 {
		t.Errorf("recap (the default): %v %v", f, ok)
	}
	if r.String() != "0.5,ledger=0.85,sliding=0" {
		t.Errorf("String() = %q", r.String())
	}
	for _, bad := range []string{"=0.5", "x=", "high", "1.5", "-1%", "ledger=101%"} {
		if err := (retentionFlag{}).Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}
