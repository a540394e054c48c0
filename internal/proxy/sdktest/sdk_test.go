//go:build !unit

// `make test-unit` builds with -tags unit and leaves this file out: every
// test in it needs node and a daemon and skips in a unit run anyway
// (internal/testenv), and linking the test binary alone takes seconds.

package sdktest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/server"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/compactd/compactd/internal/wire/anthropic"
)

const token = "sdk-test-token"

// Turns each script runs, and the words of each tool output: enough that
// a conversation starting below the threshold crosses it mid-session.
const (
	turns           = 4
	toolOutputWords = 200
)

// history returns a recorded conversation that ends with an assistant's
// answer (so a new user question can follow).
func history(t *testing.T) *chat.Conversation {
	t.Helper()
	path, err := dataset.Fixture("tau_bench_gpt4o_airline.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var best *chat.Conversation
	for _, c := range convs {
		for n := c.Chat.Len(); n > 8; n-- {
			m := c.Chat.Messages[n-1]
			if m.Role == "assistant" && len(m.ToolCalls) == 0 && m.Text() != "" {
				if p := dataset.Prefix(c.Chat, n); best == nil || p.Len() > best.Len() && p.Len() <= 40 {
					best = p
				}
				break
			}
		}
	}
	if best == nil {
		t.Fatal("no fixture conversation ends with an assistant's answer")
	}
	return best
}

// line is one request of a script's transcript.
type line struct {
	Request   int             `json:"request"`
	Kind      string          `json:"kind"`
	Sent      int             `json:"sent"`
	Compacted *bool           `json:"compacted"` // null where the SDK helper hides the headers
	Warning   string          `json:"warning"`
	Usage     json.RawMessage `json:"usage"`
}

// sdks returns the directory of the SDK scripts, with the SDKs installed
// in it, and node; without them the test fails (skips with -short). A unit
// run (COMPACTD_TEST=unit) skips the tests that need them.
func sdks(t *testing.T) (dir, node string) {
	t.Helper()
	testenv.Integration(t, "node and a daemon")
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		if testing.Short() {
			t.Skip("the SDKs are not installed (make deps)")
		}
		t.Fatalf("the SDKs are not installed: run `make deps` (npm ci in %s): %v", dir, err)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: run `make deps`: %v", err)
	}
	return dir, node
}

func TestSDKs(t *testing.T) {
	dir, node := sdks(t)

	hist := history(t)
	sys, msgs, err := anthropic.FromChat(uniqueToolIDs(hist.Messages))
	if err != nil {
		t.Fatal(err)
	}
	anthropicHistory, _ := json.Marshal(map[string]any{"system": sys, "messages": msgs})
	up := upstreamtest.New()
	t.Cleanup(up.Close)
	for _, tc := range []struct {
		script, model, key, history string
	}{
		{"openai.mjs", "gpt-4o", upstreamtest.OpenAIKey, string(hist.MessagesJSON())},
		{"anthropic.mjs", "claude-sonnet-4-5", upstreamtest.AnthropicKey, string(anthropicHistory)},
	} {
		t.Run(strings.TrimSuffix(tc.script, ".mjs"), func(t *testing.T) {
			// The window puts the threshold about one and a half turns
			// after the recorded history, counted as compactd counts for
			// the script's model.
			n := tokens.New(tokens.Options{}).ForModel(tc.model).CountMessages(hist.Messages)
			window := (n + 700) * 10 / 8
			d := startDaemon(t, fmt.Sprintf(`policy: sliding
policies: {sliding: {window_size: 6, step: 2}}
tcp: {listen: '127.0.0.1:0', token_file: %s}
proxy:
  openai: {upstream: %s}
  anthropic: {upstream: %s}
  context_window: %d
`, writeFile(t, "token", token), up.OpenAIBase(), up.AnthropicBase(), window))
			id := "sdk-" + strings.TrimSuffix(tc.script, ".mjs")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, tc.script)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(),
				"COMPACTD_URL=http://"+d.TCPAddr(), "COMPACTD_TOKEN="+token, "PROVIDER_KEY="+tc.key,
				"HISTORY="+writeFile(t, id+".json", tc.history), fmt.Sprint("TURNS=", turns),
				fmt.Sprint("TOOL_OUTPUT_WORDS=", toolOutputWords), "CONVERSATION="+id)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s failed (the SDK saw an error): %v\nstderr:\n%s\nstdout:\n%s", tc.script, err, stderr.String(), stdout.String())
			}
			var lines []line
			sc := bufio.NewScanner(&stdout)
			for sc.Scan() {
				var l line
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Fatalf("transcript line %q: %v", sc.Text(), err)
				}
				lines = append(lines, l)
			}
			if len(lines) != 2*turns+1 {
				t.Fatalf("%d requests in the transcript, want %d:\n%s", len(lines), 2*turns+1, stdout.String())
			}
			compacted, firstCompacted := 0, 0
			for _, l := range lines {
				c := "-"
				if l.Compacted != nil {
					c = fmt.Sprint(*l.Compacted)
				}
				t.Logf("request %d %-16s %3d messages sent, compacted %-5s %s", l.Request, l.Kind, l.Sent, c, l.Usage)
				if l.Warning != "" {
					t.Errorf("request %d: warning %q", l.Request, l.Warning)
				}
				if l.Compacted != nil && *l.Compacted {
					compacted++
					if firstCompacted == 0 {
						firstCompacted = l.Request
					}
				}
			}
			if lines[0].Compacted == nil || *lines[0].Compacted || compacted == 0 {
				t.Fatalf("want the first request uncompacted and a later one compacted; %d compacted", compacted)
			}
			st, err := d.c.Status(context.Background(), 1000)
			if err != nil {
				t.Fatal(err)
			}
			var conv *client.Conversation
			for i := range st.Conversations {
				if st.Conversations[i].ID == id {
					conv = &st.Conversations[i]
				}
			}
			if conv == nil || conv.Compactions == 0 || conv.LastUsage == nil || conv.Requests != int64(len(lines)) || conv.MessagesAfter >= conv.Messages {
				t.Fatalf("status %+v", conv)
			}
			b, _ := json.Marshal(conv)
			t.Logf("%s: %d requests, first compacted: request %d, compacted: %d; status %s", tc.script, len(lines), firstCompacted, compacted, b)
		})
	}
}

// uniqueToolIDs returns a copy of msgs where a tool call id met before
// (OpenAI accepts one reused in a later turn; the recording has some) gets
// a suffix, in its call and its results: Anthropic refuses a repeated
// tool_use id.
func uniqueToolIDs(msgs []abi.Message) []abi.Message {
	out := append([]abi.Message(nil), msgs...)
	seen := map[string]int{}
	renamed := map[string]string{}
	for i := range out {
		m := &out[i]
		if len(m.ToolCalls) > 0 {
			m.ToolCalls = append([]abi.ToolCall(nil), m.ToolCalls...)
			renamed = map[string]string{}
			for j := range m.ToolCalls {
				id := m.ToolCalls[j].ID
				if n := seen[id]; n > 0 {
					renamed[id] = fmt.Sprintf("%s_%d", id, n)
					m.ToolCalls[j].ID = renamed[id]
				}
				seen[id]++
			}
		}
		if m.Role == abi.RoleTool && renamed[m.ToolCallID] != "" {
			m.ToolCallID = renamed[m.ToolCallID]
		}
	}
	return out
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// daemon is a running compactd with the sliding policy.
type daemon struct {
	*server.Daemon
	c *client.Client
}

func startDaemon(t *testing.T, cfg string) *daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "cdsdk") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	plugins := filepath.Join(dir, "plugins")
	os.MkdirAll(plugins, 0o755)
	wasm, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/sliding"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(plugins, "sliding.wasm"), wasm, 0o644)
	cfgPath := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfgPath, []byte(cfg), 0o600)
	d, err := server.Start(context.Background(), server.DaemonOptions{
		ConfigPath: cfgPath,
		Getenv:     func(string) string { return "" },
		Defaults: config.Config{Socket: filepath.Join(dir, "s.sock"), PluginsDir: plugins,
			StateDir: filepath.Join(dir, "state"), CacheDir: wasmbuild.TestCacheDir(t)},
		Version: "test", StoreFlush: 10 * time.Millisecond, CompileFirst: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(d.Socket())
	t.Cleanup(func() {
		c.Close()
		d.Shutdown(context.Background())
	})
	return &daemon{Daemon: d, c: c}
}
