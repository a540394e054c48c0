//go:build !unit

// `make test-unit` builds with -tags unit and leaves this file out: every
// test in it needs node and a daemon and skips in a unit run anyway
// (internal/testenv), and linking the test binary alone takes seconds.

package clienttest

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
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/provider"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/server"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

const token = "client-test-token"

// A session: turns of a user question, the model's tool call(s), their
// results and the model's answer; each tool output is long enough that the
// conversation passes the trigger within the first dozen turns.
const (
	turns           = 60
	toolOutputWords = 160
	triggerTokens   = 3000
)

// clientCase is one client on one API.
type clientCase struct {
	name   string   // the subtest
	script string   // in testdata
	env    []string // extra environment for the script
	api    string   // the provider API it speaks (provider.API*)
}

var cases = []clientCase{
	{name: "openai/chat", script: "openai-chat.mjs", api: provider.APIChat},
	{name: "openai/responses", script: "openai-responses.mjs", api: provider.APIResponses},
	{name: "anthropic", script: "anthropic.mjs", api: provider.APIMessages},
	{name: "ai-sdk/openai-responses", script: "ai.mjs", env: []string{"MODEL=responses"}, api: provider.APIResponses},
	{name: "ai-sdk/openai-chat", script: "ai.mjs", env: []string{"MODEL=chat"}, api: provider.APIChat},
	{name: "ai-sdk/anthropic", script: "ai.mjs", env: []string{"MODEL=anthropic"}, api: provider.APIMessages},
	{name: "langchain/openai-chat", script: "langchain.mjs", env: []string{"MODEL=chat"}, api: provider.APIChat},
	{name: "langchain/openai-responses", script: "langchain.mjs", env: []string{"MODEL=responses"}, api: provider.APIResponses},
	{name: "langchain/anthropic", script: "langchain.mjs", env: []string{"MODEL=anthropic"}, api: provider.APIMessages},
	{name: "mistral/stream", script: "mistral.mjs", api: provider.APIChat},
}

// summary is the script's last line.
type summary struct {
	Requests  int `json:"requests"`
	ToolCalls int `json:"tool_calls"`
}

// scripts returns the directory of the client scripts, with the clients
// installed in it, and node; without them the test fails (skips with
// -short). A unit run (COMPACTD_TEST=unit) skips the tests that need them.
func scripts(t *testing.T) (dir, node string) {
	t.Helper()
	testenv.Integration(t, "node and a daemon")
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ai")); err != nil {
		if testing.Short() {
			t.Skip("the clients are not installed (make deps)")
		}
		t.Fatalf("the clients are not installed: run `make deps` (npm ci in %s): %v", dir, err)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: run `make deps`: %v", err)
	}
	return dir, node
}

// report collects one line per client for CLIENTTEST_REPORT.
var report struct {
	sync.Mutex
	rows []string
}

// TestClients runs each client's session through the proxy, one client
// at a time (node and the SDKs are heavy), and checks: the client saw no
// error, the provider refused nothing, every request reached compactd's
// record of the conversation, and compactd compacted it.
// CLIENTTEST_REPORT=FILE writes the table of the run; CLIENTTEST_RUN=a,b
// runs only the named cases.
func TestClients(t *testing.T) {
	dir, node := scripts(t)
	only := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("CLIENTTEST_RUN"), ",") {
		if n != "" {
			only[n] = true
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(only) > 0 && !only[tc.name] {
				t.Skip("not in CLIENTTEST_RUN")
			}
			runClient(t, dir, node, tc)
		})
	}
	if path := os.Getenv("CLIENTTEST_REPORT"); path != "" {
		report.Lock()
		defer report.Unlock()
		out := "| client | API | requests | tool calls | compactions | client errors | rejections |\n|---|---|---:|---:|---:|---:|---:|\n" + strings.Join(report.rows, "")
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// runClient runs one client's session through a daemon's proxy in front
// of the provider.
func runClient(t *testing.T, dir, node string, tc clientCase) {
	up := upstreamtest.NewWith(provider.Options{ParallelEvery: 3})
	t.Cleanup(up.Close)
	id := "client-" + strings.ReplaceAll(tc.name, "/", "-")
	key := upstreamtest.OpenAIKey
	if tc.api == provider.APIMessages {
		key = upstreamtest.AnthropicKey
	}
	d := startDaemon(t, fmt.Sprintf(`policy: sliding
policies: {sliding: {window_size: 8, step: 4}}
tcp: {listen: '127.0.0.1:0', token_file: %s}
proxy:
  openai: {upstream: %s}
  anthropic: {upstream: %s}
  trigger_tokens: %d
`, writeFile(t, "token", token), up.OpenAIBase(), up.AnthropicBase(), triggerTokens))
	base := "http://" + d.TCPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, tc.script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(),
		"COMPACTD_URL="+base, "COMPACTD_TOKEN="+token, "PROVIDER_KEY="+key, "CONVERSATION="+id,
		fmt.Sprint("TURNS=", turns), fmt.Sprint("TOOL_OUTPUT_WORDS=", toolOutputWords)), tc.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	stats := up.Stats()
	api := stats.APIs[tc.api]
	var sum summary
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &sum)
	}
	conv := conversation(t, d, id)
	clientErrors := 0
	if runErr != nil {
		clientErrors = 1
	}
	name, requests := tc.name, conv.Requests
	report.Lock()
	report.rows = append(report.rows, fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d |\n", name, tc.api, requests, api.ToolCall, conv.Compactions, clientErrors, api.Rejected))
	report.Unlock()
	t.Logf("%s: client %d requests, compactd %d requests and %d compactions (%d → %d messages last), provider %+v",
		tc.name, sum.Requests, conv.Requests, conv.Compactions, conv.Messages, conv.MessagesAfter, api)
	if runErr != nil {
		t.Fatalf("%s failed (the client saw an error): %v\nstderr:\n%s\nstdout:\n%s\nprovider refused: %q", tc.script, runErr, tail(stderr.String(), 4000), stdout.String(), stats.Rejections)
	}
	if len(stats.Rejections) > 0 {
		t.Fatalf("the provider refused %d requests: %q", len(stats.Rejections), stats.Rejections)
	}
	if sum.Requests < 2*turns || api.Requests != int64(sum.Requests) {
		t.Fatalf("the client made %d requests, the provider got %d on %s, want %d or more", sum.Requests, api.Requests, tc.api, 2*turns)
	}
	if api.ToolCall <= int64(turns) {
		t.Fatalf("%d tool calls in %d turns: want some parallel ones", api.ToolCall, turns)
	}
	if conv.Requests != int64(sum.Requests) {
		t.Fatalf("compactd recorded %d requests of the conversation, the client made %d", conv.Requests, sum.Requests)
	}
	if conv.Compactions == 0 || conv.MessagesAfter >= conv.Messages {
		t.Fatalf("not compacted past the trigger: %+v", conv)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// conversation returns the daemon's record of a conversation (zero if none).
func conversation(t *testing.T, d *daemon, id string) client.Conversation {
	t.Helper()
	st, err := d.c.Status(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Conversations {
		if c.ID == id {
			return c
		}
	}
	return client.Conversation{}
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
	dir, err := os.MkdirTemp("", "cdcli") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	plugins := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	wasm, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/sliding"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "sliding.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := server.Start(context.Background(), server.DaemonOptions{
		ConfigPath: cfgPath,
		Getenv:     func(string) string { return "" },
		Defaults: config.Config{Socket: filepath.Join(dir, "s.sock"), PluginsDir: plugins,
			StateDir: filepath.Join(dir, "state"), CacheDir: wasmbuild.TestCacheDir(t)},
		// The tier sliding starts on is not what these tests check:
		// compiled from the shared compilation cache, it loads in a
		// fraction of the interpreter's time under -race (eleven daemons).
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

// TestClientsOverUnixSocket runs the Unix-socket setup docs/quickstarts.md
// shows for Node (undici's Agent with socketPath, as each client's fetch):
// each client's request reaches the provider and is recorded under its
// conversation.
func TestClientsOverUnixSocket(t *testing.T) {
	dir, node := scripts(t)
	up := upstreamtest.New()
	t.Cleanup(up.Close)
	d := startDaemon(t, fmt.Sprintf("policy: sliding\nproxy: {openai: {upstream: %s}, anthropic: {upstream: %s}}\n", up.OpenAIBase(), up.AnthropicBase()))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "socket.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COMPACTD_SOCKET="+d.Socket(), "CONVERSATION=sock",
		"OPENAI_KEY="+upstreamtest.OpenAIKey, "ANTHROPIC_KEY="+upstreamtest.AnthropicKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("socket.mjs: %v\n%s%s", err, out, stderr.Bytes())
	}
	var got map[string]string
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	for _, name := range []string{"openai", "anthropic", "ai-sdk"} {
		if got[name] != "echo: hello over the socket" {
			t.Errorf("%s answered %q", name, got[name])
		}
		if c := conversation(t, d, "sock-"+name); c.Requests != 1 {
			t.Errorf("%s: compactd recorded %+v", name, c)
		}
	}
	if st := up.Stats(); len(st.Rejections) > 0 {
		t.Errorf("the provider refused %q", st.Rejections)
	}
}
