package cli_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/cli"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/eval"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// evalPlugins returns a plugins directory holding the real sliding plugin.
func evalPlugins(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/sliding"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sliding.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func evalDataFile(t *testing.T, name string) string {
	t.Helper()
	path, err := dataset.Fixture(name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestEvalEndToEnd runs `compactd eval` through the CLI with the real
// sliding plugin on a few real conversations and checks the report's
// shape and invariants.
func TestEvalEndToEnd(t *testing.T) {
	plugins := evalPlugins(t)
	swe := evalDataFile(t, "mini_swe_agent_deepseek_swebench.jsonl")
	tau := evalDataFile(t, "tau_bench_gpt4o_airline.jsonl")
	out := t.TempDir()
	convs := "3"
	if testing.Short() {
		convs = "1"
	}
	code, stdout, stderr := runCLI(t, "eval", "--plugins", plugins, "--cache-dir", wasmbuild.TestCacheDir(t),
		"--data", swe, "--data", tau, "--policy", "sliding", "--max-conversations", convs,
		"--cost-models", "gpt-4o,claude-sonnet-4", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"mini_swe_agent_deepseek_swebench.jsonl", "tau_bench_gpt4o_airline.jsonl", "sliding", "none", "gpt-4o cost", "retention"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}

	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep eval.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Version != eval.ReportVersion || rep.Machine == nil || rep.Machine.CPUs < 1 || !strings.Contains(rep.Command, "--policy sliding") {
		t.Errorf("report header: version %d, machine %+v, command %q", rep.Version, rep.Machine, rep.Command)
	}
	if len(rep.CostModels) != 2 || rep.CostModels[0].Cache != eval.CacheAutomatic || rep.CostModels[1].Cache != eval.CacheBreakpoints {
		t.Errorf("cost models %+v", rep.CostModels)
	}
	if len(rep.Files) != 2 {
		t.Fatalf("%d files, want 2", len(rep.Files))
	}
	for _, f := range rep.Files {
		if len(f.Policies) != 2 || f.Policies[0].Policy != "none" || f.Policies[1].Policy != "sliding" {
			t.Fatalf("%s: policies %+v", f.File, f.Policies)
		}
		if f.Conversations == 0 || f.Turns == 0 {
			t.Errorf("%s: %d conversations, %d turns", f.File, f.Conversations, f.Turns)
		}
		none, sl := f.Policies[0], f.Policies[1]
		if none.Tokens.Ratio != 1 || none.Retention.Share != 1 || none.Prefix.KeptShare != 1 {
			t.Errorf("%s: the baseline must send everything, keep every probe and every prefix: %+v %+v", f.File, none.Tokens, none.Retention.Retention)
		}
		if sl.Validity.Share != 1 || sl.Validity.Valid != sl.Validity.Turns || sl.Validity.Turns != f.Turns {
			t.Errorf("%s: sliding validity %+v", f.File, sl.Validity)
		}
		if sl.Tokens.Ratio > 1 || sl.Tokens.MedianTurnRatio > 1 || sl.Tokens.Uncompressed != none.Tokens.Sent || sl.Tokens.Peak > none.Tokens.Peak {
			t.Errorf("%s: sliding tokens %+v vs none %+v", f.File, sl.Tokens, none.Tokens)
		}
		if sl.Latency.Compactions != f.Turns || sl.Latency.P50 <= 0 || sl.Latency.P99 < sl.Latency.P50 {
			t.Errorf("%s: latency %+v", f.File, sl.Latency)
		}
		if sl.Retention.Probes != none.Retention.Probes || sl.Retention.Retained > sl.Retention.Probes {
			t.Errorf("%s: retention %+v vs %+v", f.File, sl.Retention.Retention, none.Retention.Retention)
		}
		for k := range rep.CostModels {
			nc, sc := none.Costs[k], sl.Costs[k]
			if nc.VsNone != 1 || nc.TotalUSD <= 0 || sc.TotalUSD <= 0 || sc.CacheShare < 0 || sc.CacheShare > 1 {
				t.Errorf("%s: costs %+v / %+v", f.File, nc, sc)
			}
			if sc.Usage.Output != nc.Usage.Output {
				t.Errorf("%s: output tokens differ (%d vs %d): replies are the recorded ones", f.File, sc.Usage.Output, nc.Usage.Output)
			}
		}
		for _, c := range sl.Conversations {
			for i, tr := range c.Turns {
				if tr.Tokens > tr.TokensIn || tr.Prefix > tr.Tokens || len(tr.Bills) != 2 {
					t.Errorf("%s %s turn %d: %+v", f.File, c.ID, i, tr)
				}
				if i == 0 && tr.PrefixMessages != 0 {
					t.Errorf("%s %s: the first request has a previous one?", f.File, c.ID)
				}
			}
		}
		for _, chart := range []string{"tokens-", "cost-"} {
			svg, err := os.ReadFile(filepath.Join(out, chart+eval.ChartName(f.File)+".svg"))
			if err != nil {
				t.Fatal(err)
			}
			dec := xml.NewDecoder(bytes.NewReader(svg))
			for {
				_, err := dec.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%s chart is not well-formed: %v", chart, err)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(out, "summary.md")); err != nil {
		t.Error(err)
	}
}

func TestEvalUsage(t *testing.T) {
	plugins := evalPlugins(t)
	tau := evalDataFile(t, "tau_bench_gpt4o_airline.jsonl")
	common := []string{"eval", "--plugins", plugins, "--cache-dir", wasmbuild.TestCacheDir(t), "--out", ""}
	malformed := filepath.Join(t.TempDir(), "malformed.jsonl")
	if err := os.WriteFile(malformed, []byte(`{"id":"a","messages":[{"role":"user","content":"hi"}]}`+"\n{\"id\": oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	allSkipped := filepath.Join(t.TempDir(), "skipped.jsonl")
	if err := os.WriteFile(allSkipped, []byte(`{"id":"a","messages":[{"role":"tool","tool_call_id":"x","content":"r"},{"role":"assistant","content":"ok"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, []byte(`{"messages": []}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"all skipped", []string{"--data", allSkipped, "--policy", "sliding"}, cli.ExitInput, "skipped.jsonl: no conversation evaluated (its one conversation was skipped: invalid conversation: message 0: "},
		{"no messages", []string{"--data", empty, "--policy", "sliding"}, cli.ExitInput, "empty.jsonl: no conversation evaluated (its one conversation was skipped: invalid conversation: no messages)"},
		{"nothing anywhere", []string{"--data", empty, "--data", allSkipped, "--policy", "sliding"}, cli.ExitInput, "no conversation evaluated in any of 2 data files"},
		{"unknown chart conversation", []string{"--data", tau, "--policy", "sliding", "--max-conversations", "1", "--chart-conversation", "nosuch"}, cli.ExitUsage, `chart conversation "nosuch" is in no data file`},
		{"bad min retention", []string{"--data", tau, "--policy", "sliding", "--min-retention", "high"}, cli.ExitUsage, "want a share"},
		{"min retention over 1", []string{"--data", tau, "--policy", "sliding", "--min-retention", "sliding=120%"}, cli.ExitUsage, "between 0 and 1"},
		{"retention under the floor", []string{"--data", tau, "--policy", "sliding", "--max-conversations", "1", "--min-retention", "sliding=99%"}, cli.ExitPluginFailed, "under the 99.0% required"},
		{"no policy", []string{"--data", tau}, cli.ExitUsage, "--policy or --pipeline is required"},
		{"unknown policy", []string{"--data", tau, "--policy", "nosuch"}, cli.ExitPolicy, "unknown policy"},
		{"baseline named", []string{"--data", tau, "--policy", "none"}, cli.ExitUsage, "baseline"},
		{"missing data", []string{"--data", filepath.Join(t.TempDir(), "x.jsonl"), "--policy", "sliding"}, cli.ExitInput, "no such file"},
		{"bad pricing", []string{"--data", tau, "--policy", "sliding", "--pricing", "nosuch"}, cli.ExitUsage, "no such shipped table"},
		{"unpriced cost model", []string{"--data", tau, "--policy", "sliding", "--cost-models", "llama-3"}, cli.ExitUsage, "no price"},
		{"bad set", []string{"--data", tau, "--policy", "sliding", "--set", "lastn.n=3"}, cli.ExitUsage, "no evaluated policy"},
		{"bad config", []string{"--data", tau, "--policy", "sliding", "--set", "window_size=0", "--max-conversations", "1"}, cli.ExitPolicy, "window_size"},
		{"bad llm", []string{"--data", tau, "--policy", "sliding", "--llm", "gpt"}, cli.ExitUsage, "--llm"},
		{"malformed data", []string{"--data", malformed, "--policy", "sliding"}, cli.ExitInput, "malformed.jsonl:2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each loads its own plugins, and most then wait on nothing
			code, _, stderr := runCLI(t, append(append([]string{}, common...), tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.msg) {
				t.Errorf("exit %d, want %d; stderr %q, want it to mention %q", code, tt.code, stderr, tt.msg)
			}
		})
	}
	// The skip message says "invalid conversation" once, and the tables
	// do not claim 100% of nothing.
	_, stdout, _ := runCLI(t, append(append([]string{}, common...), "--data", empty, "--policy", "sliding")...)
	if !strings.Contains(stdout, "NO CONVERSATION EVALUATED") || strings.Contains(stdout, "100.0%") || strings.Contains(stdout, "invalid conversation: invalid conversation") {
		t.Errorf("a run that evaluated nothing:\n%s", stdout)
	}
	// A floor the policy clears passes.
	code, stdout, stderr := runCLI(t, append(append([]string{}, common...), "--data", tau, "--policy", "sliding", "--max-conversations", "1", "--min-retention", "0.05", "--check")...)
	if code != cli.ExitOK {
		t.Errorf("--check --min-retention 0.05: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "eval", "--print-pricing")
	if code != cli.ExitOK || !strings.Contains(stdout, `"claude-sonnet-4"`) {
		t.Errorf("--print-pricing: exit %d, %q", code, stdout)
	}
}
