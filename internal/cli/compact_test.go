package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// compactdBinary returns the real binary (see wasmbuild.CompactdForTest).
func compactdBinary(t testing.TB) string {
	t.Helper()
	testenv.Integration(t, "the compactd binary")
	return wasmbuild.CompactdForTest(t)
}

// pluginsDir returns a plugins directory holding the given built plugins
// (paths relative to the module root, as wasmbuild.ForTest takes them).
func pluginsDir(t *testing.T, rels ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, rel := range rels {
		src := wasmbuild.ForTest(t, rel)
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(compactdBinary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "COMPACTD_PLUGINS=", "XDG_CACHE_HOME="+wasmbuild.TestCacheHome())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

// realConversation writes the first mini-swe-agent conversation to a file.
func realConversation(t *testing.T) (string, []byte) {
	t.Helper()
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	body := convs[0].Chat.Encode()
	file := filepath.Join(t.TempDir(), "conversation.json")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	return file, body
}

var summaryLine = regexp.MustCompile(`^sliding@\d+\.\d+\.\d+: \d+ → \d+ tokens, \d+ → \d+ messages, \S+ \(o200k_base\)\n$`)

func TestCompactEndToEnd(t *testing.T) {
	compactdBinary(t) // a unit run skips here, before building the plugins
	plugins := pluginsDir(t, "plugins/sliding", "plugins/lastn/lastn.c", "host/testdata/gohostile")
	file, body := realConversation(t)
	var in []json.RawMessage
	_ = json.Unmarshal(body, &in)

	t.Run("file", func(t *testing.T) {
		r := run(t, "", "compact", "--plugins", plugins, "--policy", "sliding", "--model", "gpt-4o", file)
		if r.code != 0 || !summaryLine.MatchString(r.stderr) {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		var out []json.RawMessage
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("stdout is not a JSON array: %v", err)
		}
		if len(out) >= len(in) || !bytes.Equal(out[len(out)-1], in[len(in)-1]) || !bytes.Equal(out[0], in[0]) {
			t.Fatalf("%d → %d messages; first/last message changed?", len(in), len(out))
		}
	})
	t.Run("stdin and envelope", func(t *testing.T) {
		env := `{"model":"gpt-4o","messages":` + string(body) + `,"tools":[]}`
		r := run(t, env, "compact", "--plugins", plugins, "--policy", "sliding", "--set", "window_size=3", "-")
		if r.code != 0 || !strings.HasPrefix(r.stdout, `{"model":"gpt-4o","messages":[`) || !strings.HasSuffix(r.stdout, `,"tools":[]}`+"\n") {
			t.Fatalf("exit %d, stdout %.80q…, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("C plugin", func(t *testing.T) {
		r := run(t, "", "compact", "--plugins", plugins, "--policy", "lastn", "--set", "n=4", "--set", "step=1", file)
		var out []json.RawMessage
		// The system message, the task, and 4 messages widened to a tool unit.
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || len(out) > 7 || !bytes.Equal(out[1], in[1]) {
			t.Fatalf("exit %d, %d messages, stderr %q", r.code, len(out), r.stderr)
		}
	})

	errorCases := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stderr string
		echo   bool // stdout must be the input, unchanged
	}{
		{name: "missing file", args: []string{"--policy", "sliding", "/nonexistent/conv.json"}, code: 3, stderr: "no such file"},
		{name: "malformed JSON", stdin: "[{\"role\": \"user\",\n \"content\": nope}]", args: []string{"--policy", "sliding"}, code: 3, stderr: "line 2, column"},
		{name: "invalid conversation", stdin: `[{"role":"tool","tool_call_id":"x","content":"orphan"}]`, args: []string{"--policy", "sliding"}, code: 3, stderr: "message 0"},
		{name: "unknown policy", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"--policy", "nope"}, code: 5, stderr: "available: "},
		{name: "no plugins dir", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"--policy", "sliding", "--plugins", "/nonexistent"}, code: 5, stderr: "plugins directory not found"},
		{name: "invalid config value", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"--policy", "sliding", "--set", "window_size=0"}, code: 5, stderr: "window_size"},
		{name: "unknown config key", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"--policy", "sliding", "--set", "windowsize=3"}, code: 5, stderr: `unknown key "windowsize"`},
		{name: "plugin failure echoes the input", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"--policy", "gohostile", "--set", "mode=panic"}, code: 4, stderr: "panicked", echo: true},
		{name: "no policy", args: []string{}, code: 2, stderr: "--policy or --pipeline is required"},
		{name: "both", args: []string{"--policy", "a", "--pipeline", "b"}, code: 2, stderr: "not both"},
		{name: "bad flag", args: []string{"--nope"}, code: 2, stderr: "compactd: unknown flag --nope\n"},
		{name: "anthropic format", stdin: `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"}]}]`, args: []string{"--policy", "sliding"}, code: 3, stderr: `Anthropic Messages format (content block of type "tool_result")`},
		{name: "two input files", args: []string{"--policy", "sliding", "a.json", "b.json"}, code: 2, stderr: "at most one input file"},
	}
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"compact", "--plugins", plugins}, tt.args...)
			r := run(t, tt.stdin, args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", r.code, tt.code, r.stderr, tt.stderr)
			}
			if tt.echo && r.stdout != tt.stdin+"\n" {
				t.Fatalf("stdout %q, want the input unchanged", r.stdout)
			}
			if !tt.echo && tt.code != 0 && r.stdout != "" {
				t.Fatalf("stdout %q on error", r.stdout)
			}
			if tt.code != 4 {
				checkOneError(t, r.stderr)
			}
		})
	}
}

func TestPoliciesAndConform(t *testing.T) {
	compactdBinary(t) // a unit run skips here, before building the plugins
	plugins := pluginsDir(t, "plugins/sliding", "plugins/lastn/lastn.c")
	r := run(t, "", "policies", "--plugins", plugins)
	if r.code != 0 || !strings.Contains(r.stdout, "sliding") || !strings.Contains(r.stdout, "lastn") {
		t.Fatalf("policies: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(plugins, "broken.wasm"), []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(t, "", "policies", "--plugins", plugins)
	if r.code != 5 || !strings.Contains(r.stdout, "broken.wasm") || !strings.Contains(r.stdout, "ERROR") {
		t.Fatalf("policies with a broken file: exit %d\n%s", r.code, r.stdout)
	}
	r = run(t, "", "policies", "--plugins", plugins, "--json")
	var list []map[string]any
	if json.Unmarshal([]byte(r.stdout), &list) != nil || len(list) != 3 {
		t.Fatalf("policies --json: %s", r.stdout)
	}
	r = run(t, "", "conform", "--plugins", plugins, filepath.Join(plugins, "lastn.wasm"))
	if r.code != 0 || !strings.Contains(r.stdout, "all") {
		t.Fatalf("conform lastn: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, "", "conform", "--plugins", plugins, "sliding")
	if r.code != 0 {
		t.Fatalf("conform sliding: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, "", "version")
	if r.code != 0 || !strings.Contains(r.stdout, "ABI "+abi.Version.String()) {
		t.Fatalf("version: %d %s", r.code, r.stdout)
	}
}
