//go:build !unit

// `make test-unit` builds with -tags unit and leaves this file out: every
// test in it needs node, Python and a daemon and skips in a unit run
// anyway (internal/testenv), and linking the test binary alone takes
// seconds.

// Package clients holds compactd's API clients for other languages
// (python/, ts/). This test runs their test suites against a real daemon:
// `go test ./clients`, part of `make test`. Each client talks to the
// daemon through a socket that validates every answer against
// api/openapi.yaml on its way (api/apitest), so the clients are also
// checked against the document.
package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/api/apitest"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/server"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// daemon is a real compactd with the plugins the client tests use, and
// its proxy in front of a local provider (upstreamtest).
type daemon struct {
	socket string // the validating proxy's socket
	tcp    string
	token  string
	dir    string
}

const (
	token = "client-test-token"
	// proxiedID is a conversation the daemon's proxy forwarded before the
	// suites run (startDaemon), for their manual compaction tests.
	proxiedID = "client-proxied"
)

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	testenv.Integration(t, "a daemon")
	dir, err := os.MkdirTemp("", "cdc") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	plugins := filepath.Join(dir, "plugins")
	os.MkdirAll(plugins, 0o755)
	for _, rel := range []string{"plugins/sliding", "plugins/lastn/lastn.c", "host/testdata/gohostile"} {
		src := wasmbuild.ForTest(t, rel)
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(plugins, filepath.Base(src)), b, 0o644)
	}
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	up := upstreamtest.New()
	t.Cleanup(up.Close)
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte("tcp:\n  listen: 127.0.0.1:0\n  token_file: "+tokenFile+"\nproxy:\n  openai: {upstream: '"+up.OpenAIBase()+"'}\n"), 0o600)
	d, err := server.Start(context.Background(), server.DaemonOptions{
		ConfigPath: cfg,
		Getenv:     func(string) string { return "" },
		Defaults: config.Config{Socket: filepath.Join(dir, "d.sock"), PluginsDir: plugins,
			StateDir: filepath.Join(dir, "state"), CacheDir: wasmbuild.TestCacheDir(t)},
		Version: "test", StoreFlush: 10 * time.Millisecond, CompileFirst: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	socket := validatingProxy(t, d.Socket(), filepath.Join(dir, "v.sock"))
	proxyConversation(t, socket)
	return &daemon{socket: socket, tcp: d.TCPAddr(), token: token, dir: dir}
}

// proxyConversation sends the longest tau-bench fixture conversation
// through the daemon's OpenAI proxy as conversation proxiedID, so that the
// proxy holds its last request.
func proxyConversation(t *testing.T, socket string) {
	t.Helper()
	path, err := dataset.Fixture("tau_bench_gpt4o_airline.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	longest := convs[0]
	for _, c := range convs {
		if c.Chat.Len() > longest.Chat.Len() {
			longest = c
		}
	}
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": longest.Chat.Raw})
	req, _ := http.NewRequest(http.MethodPost, "http://compactd/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+upstreamtest.OpenAIKey)
	req.Header.Set("X-Compactd-Conversation", proxiedID)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("proxying %s: %d %s", proxiedID, resp.StatusCode, b)
	}
}

// validatingProxy serves the daemon's API on another socket and checks
// every exchange against the OpenAPI document.
func validatingProxy(t *testing.T, target, path string) string {
	t.Helper()
	v, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", target)
	}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "compactd"
		},
		Transport: v.Transport(t, tr),
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return path
}

// env is the environment the client test suites read (see
// python/tests/conftest.py and ts/test/).
func (d *daemon) env(t *testing.T) []string {
	fixtures, err := dataset.FixtureDir()
	if err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(),
		"COMPACTD_SOCKET="+d.socket, "COMPACTD_TEST_TCP="+d.tcp, "COMPACTD_TEST_TOKEN="+d.token,
		"COMPACTD_TEST_FIXTURES="+fixtures, "COMPACTD_TEST_PROXIED="+proxiedID, "XDG_RUNTIME_DIR=", "NO_COLOR=1")
}

// need returns the tool `make deps` installs, failing the test when it is
// missing (skipping only under -short).
func need(t *testing.T, what string, candidates ...string) string {
	t.Helper()
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	if testing.Short() {
		t.Skipf("%s is not installed (make deps installs it)", what)
	}
	t.Fatalf("%s is not installed: run `make deps` (scripts/deps.sh)", what)
	return ""
}

// run runs a command with the daemon's environment, logs its output and
// fails the test when it fails. It returns the output.
func run(t *testing.T, env []string, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env, cmd.Dir = env, dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), out.String())
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out.String()
}

// python returns Debian's python3 with pytest (/usr/bin/python3 first: a
// pyenv or venv python3 earlier on PATH may lack pytest).
func python(t *testing.T) string {
	t.Helper()
	py := need(t, "python3", "/usr/bin/python3", "python3")
	if err := exec.Command(py, "-c", "import sys, pytest; assert sys.version_info >= (3, 9)").Run(); err != nil {
		if testing.Short() {
			t.Skipf("%s has no pytest (make deps installs python3-pytest)", py)
		}
		t.Fatalf("%s has no pytest (make deps installs python3-pytest): %v", py, err)
	}
	return py
}

func TestPythonClient(t *testing.T) {
	testenv.Integration(t, "python and a daemon")
	py := python(t)
	d := startDaemon(t)
	root, _ := filepath.Abs("..")
	src := filepath.Join(root, "clients", "python")
	env := append(d.env(t), "PYTHONPATH="+src, "PYTHONDONTWRITEBYTECODE=1")
	out := run(t, env, src, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	reportCount(t, "python (source)", out)

	// The installed copy passes the same tests (TestPythonInstall installs
	// it in a fresh venv of every Python on the machine; this one needs
	// Debian's, which has pytest).
	t.Run("installed", func(t *testing.T) {
		tmp := t.TempDir()
		copyTree(t, src, filepath.Join(tmp, "src"))
		target := filepath.Join(tmp, "site")
		run(t, offlineEnv(tmp), tmp, py, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
			"--target", target, filepath.Join(tmp, "src"))
		// The tests alone, away from the source (python -m puts the
		// working directory first on sys.path).
		copyTree(t, filepath.Join(src, "tests"), filepath.Join(tmp, "tests"))
		env := append(d.env(t), "PYTHONPATH="+target, "PYTHONDONTWRITEBYTECODE=1", "COMPACTD_TEST_EXPECT_INSTALLED="+target)
		out := run(t, env, tmp, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
		reportCount(t, "python (installed)", out)
	})
}

// reportCount logs the runner's summary line ("27 passed in 1.2s").
func reportCount(t *testing.T, what, out string) {
	t.Helper()
	if m := regexp.MustCompile(`(?m)^.*\b(\d+) passed\b.*$`).FindString(out); m != "" {
		t.Logf("%s: %s", what, strings.TrimSpace(m))
		return
	}
	if m := regexp.MustCompile(`(?m)^# pass \d+$`).FindString(out); m != "" {
		t.Logf("%s: %s", what, m)
		return
	}
	t.Errorf("%s: no test summary in the output", what)
}

// copyTree copies the files under src to dst, leaving out build outputs.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		switch info.Name() {
		case "build", "__pycache__", "node_modules", "dist":
			if info.IsDir() {
				return filepath.SkipDir
			}
		}
		if strings.HasSuffix(info.Name(), ".egg-info") && info.IsDir() {
			return filepath.SkipDir
		}
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTypeScriptClient(t *testing.T) {
	testenv.Integration(t, "node and a daemon")
	node := need(t, "node", "node")
	root, _ := filepath.Abs("..")
	src := filepath.Join(root, "clients", "ts")
	tsc := filepath.Join(src, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		if testing.Short() {
			t.Skip("clients/ts has no node_modules (make deps runs npm ci there)")
		}
		t.Fatalf("clients/ts/node_modules has no typescript: run `make deps` (it runs npm ci in clients/ts): %v", err)
	}
	if out, err := exec.Command(node, "-e", "process.exit(Number(process.versions.node.split('.')[0]) >= 18 ? 0 : 1)").CombinedOutput(); err != nil {
		t.Fatalf("node ≥ 18 needed: %v %s", err, out)
	}
	d := startDaemon(t)
	// Type-check the client and its tests against the types generated from
	// openapi.yaml, and compile them.
	out := filepath.Join(t.TempDir(), "dist")
	run(t, os.Environ(), src, node, tsc, "-p", ".", "--outDir", out)
	os.WriteFile(filepath.Join(out, "package.json"), []byte(`{"type":"module"}`), 0o644)
	res := run(t, d.env(t), out, node, "--test", "--test-reporter=tap", filepath.Join(out, "test", "client.test.js"))
	reportCount(t, "typescript", res)
	if !regexp.MustCompile(`(?m)^# fail 0$`).MatchString(res) {
		t.Error("node --test reported failures")
	}
}
