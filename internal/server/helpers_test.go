package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
	"gopkg.in/yaml.v3"
)

var bg = context.Background()

// Plugins the tests use, as wasmbuild.ForTest takes them.
const (
	pluginSliding   = "plugins/sliding"
	pluginLastn     = "plugins/lastn/lastn.c"
	pluginGohostile = "host/testdata/gohostile"
	pluginCounter   = "internal/server/testdata/counter"
)

// testDaemon is a real daemon on a socket in a temporary directory.
type testDaemon struct {
	*Daemon
	c       *client.Client
	http    *http.Client
	dir     string // holds plugins/, state/, config.yaml and the socket
	plugins string
	config  string
	opts    DaemonOptions
	log     *lockedBuffer // the daemon's log, when a test keeps it
	// childCache, if set, is the compilation cache of the daemons
	// startChild starts (default: the tests' shared one).
	childCache string
	// served makes startChild run the real compactd binary, built
	// without the race detector (wasmbuild.CompactdForTest), with
	// `compactd serve` on the directory, instead of the test binary.
	served bool
	// childEnv are NAME=value pairs the daemon startChild starts reads
	// from its environment (it sees no other variables).
	childEnv []string
}

// setup prepares a daemon's directory: plugins copied in, and a config
// file if cfg is not empty.
func setup(t testing.TB, cfg string, plugins ...string) *testDaemon {
	t.Helper()
	testenv.Integration(t, "a daemon")
	// Short: a socket path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cdt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	td := &testDaemon{dir: dir, plugins: filepath.Join(dir, "plugins"), config: filepath.Join(dir, "config.yaml")}
	os.MkdirAll(td.plugins, 0o755)
	warm.compiled(t, limitsOf(t, cfg), plugins...)
	for _, rel := range plugins {
		td.addPlugin(t, rel, "")
	}
	if cfg != "" {
		if err := os.WriteFile(td.config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	td.opts = DaemonOptions{
		ConfigPath: td.config,
		Getenv:     func(string) string { return "" },
		Defaults: config.Config{
			Socket: filepath.Join(dir, "s.sock"), PluginsDir: td.plugins,
			StateDir: filepath.Join(dir, "state"), CacheDir: wasmbuild.TestCacheDir(t),
		},
		Version:    "test",
		Debounce:   10 * time.Millisecond,
		StoreFlush: 10 * time.Millisecond,
		// Compiled from the shared compilation cache at once. The
		// daemon's own way, the interpreter first, is what TestQuickLoads,
		// TestHotReloadHammer (whose versions are all new) and the zoo's
		// child daemon run.
		CompileFirst: true,
	}
	return td
}

// limitsOf returns the limits block of the config cfg, as YAML ("" if it
// has none): the work budgets are compiled into a plugin's instrumented
// code, so a plugin loaded with other budgets is another module to the
// compilation cache.
func limitsOf(t testing.TB, cfg string) string {
	t.Helper()
	var c struct {
		Limits yaml.Node `yaml:"limits"`
	}
	if err := yaml.Unmarshal([]byte(cfg), &c); err != nil || c.Limits.IsZero() {
		return ""
	}
	b, err := yaml.Marshal(map[string]*yaml.Node{"limits": &c.Limits})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// warm fills the tests' shared compilation cache (see cacheWarmer).
var warm = &cacheWarmer{done: map[string]chan struct{}{}}

// cacheWarmer compiles the plugins the tests' daemons load into wazero's
// compilation cache (wasmbuild.TestCacheDir) with the compactd binary
// built without the race detector (wasmbuild.CompactdForTest, linked
// with wasmbuild.TestLDFlags so that its wazero files modules where the
// test binary's reads them), before a daemon in the test binary loads
// them. `make test` warms the built-ins with the default limits before
// any test runs (internal/wasmbuild/warmtestcache); this covers other
// limits and `go test` run without make. Those daemons load compiled from
// that cache at once (DaemonOptions.CompileFirst): on a cold cache (a
// fresh machine, or a plugin or wazero changed) each Go plugin was
// compiled under -race by the first test to load it, about ten times the
// CPU of the same compile without it, and on a machine shared with other
// test packages that test waited minutes for it (TestHealthAndMetrics:
// 154 s for gohostile's compile, 7 s once it was cached). Warming only
// saves time: a cache it could not fill is filled by the daemon itself,
// as before. Each plugin is warmed once per test process.
type cacheWarmer struct {
	mu sync.Mutex
	// done is by source (as wasmbuild.ForTest takes it) and limits
	// (limitsOf), closed once warmed.
	done map[string]chan struct{}
}

// compiled returns once every plugin of srcs, loaded under limits (a
// config's limits block, see limitsOf), is in the compilation cache (or
// could not be put there).
func (w *cacheWarmer) compiled(t testing.TB, limits string, srcs ...string) {
	t.Helper()
	var mine []string
	w.mu.Lock()
	for _, src := range srcs {
		if _, ok := w.done[src+"\x00"+limits]; !ok {
			w.done[src+"\x00"+limits] = make(chan struct{})
			mine = append(mine, src)
		}
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		for _, src := range mine {
			close(w.done[src+"\x00"+limits])
		}
		w.mu.Unlock()
	}()
	if len(mine) > 0 {
		w.warm(t, limits, mine)
	}
	for _, src := range srcs {
		w.mu.Lock()
		done := w.done[src+"\x00"+limits]
		w.mu.Unlock()
		if !slices.Contains(mine, src) {
			<-done
		}
	}
}

// warm runs `compactd serve`, with the limits block given, on a
// directory of srcs's builds until it
// serves each compiled (its compiler writes the compilation cache) or has
// refused it, then stops it.
func (w *cacheWarmer) warm(t testing.TB, limits string, srcs []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cdw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	td := &testDaemon{dir: dir, plugins: filepath.Join(dir, "plugins"), config: filepath.Join(dir, "config.yaml"), served: true}
	os.MkdirAll(td.plugins, 0o755)
	if limits != "" {
		if err := os.WriteFile(td.config, []byte(limits), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]bool{}
	for _, src := range srcs {
		files[filepath.Base(td.addPlugin(t, src, ""))] = true
	}
	start := time.Now()
	d := startChild(t, td)
	defer d.cmd.Process.Kill()
	deadline := start.Add(5 * time.Minute)
	for {
		if d.exited() {
			t.Logf("warming the compilation cache for %v: the daemon exited with %d; log:\n%s", srcs, d.code, d.Log())
			return
		}
		list, err := d.c.Policies(bg)
		ready := 0
		for _, p := range list {
			if files[filepath.Base(p.File)] && (p.Error != nil || p.Serving && p.Tier == host.TierCompiled) {
				ready++
			}
		}
		if err == nil && ready == len(files) {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("warming the compilation cache for %v: not compiled after %v (%v); log:\n%s", srcs, time.Since(start), err, d.Log())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.stop()
}

// addPlugin copies a built plugin into the plugins directory, as name
// (default: the build's file name).
func (td *testDaemon) addPlugin(t testing.TB, rel, name string) string {
	t.Helper()
	src := wasmbuild.ForTest(t, rel)
	if name == "" {
		name = filepath.Base(src)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(td.plugins, name)
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// start starts the daemon and stops it when the test ends.
func (td *testDaemon) start(t testing.TB) *testDaemon {
	t.Helper()
	d, err := Start(bg, td.opts)
	if err != nil {
		t.Fatal(err)
	}
	td.Daemon = d
	td.c = apiClient(t, d.Socket())
	td.http = unixHTTP(t, d.Socket())
	t.Cleanup(func() {
		td.c.Close()
		d.Shutdown(bg)
	})
	return td
}

// startDaemon is setup + start.
func startDaemon(t testing.TB, cfg string, plugins ...string) *testDaemon {
	t.Helper()
	return setup(t, cfg, plugins...).start(t)
}

// unixHTTP returns an HTTP client for the socket at path whose every
// exchange is validated against the OpenAPI document (see openapi_test.go).
func unixHTTP(t testing.TB, path string) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 64,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: spec.Transport(t, tr)}
}

// tcpHTTP is unixHTTP for the TCP listener: it does not follow redirects.
func tcpHTTP(t testing.TB) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: spec.Transport(t, tr), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// apiClient returns a client for the socket at path whose exchanges are
// validated against the OpenAPI document.
func apiClient(t testing.TB, path string) *client.Client {
	return client.New(path, validating(t))
}

// apiTCPClient is apiClient for the TCP listener.
func apiTCPClient(t testing.TB, addr, token string) *client.Client {
	return client.NewTCP(addr, token, validating(t))
}

func validating(t testing.TB) client.Option {
	return client.WrapTransport(func(rt http.RoundTripper) http.RoundTripper { return spec.Transport(t, rt) })
}

// raw sends a request and returns the status, the body and the headers.
func (td *testDaemon) raw(t testing.TB, method, path, body string) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://compactd"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := td.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// errorCode decodes an error body, failing the test if it does not have
// the stable shape.
func errorCode(t testing.TB, body []byte) (code, message string) {
	t.Helper()
	var eb map[string]map[string]string
	if err := json.Unmarshal(body, &eb); err != nil || len(eb) != 1 || eb["error"] == nil || len(eb["error"]) != 2 {
		t.Fatalf("error body %s does not have the shape {\"error\":{\"code\",\"message\"}}", body)
	}
	return eb["error"]["code"], eb["error"]["message"]
}

// tauConversation returns the messages of the tau-bench conversation whose
// JSON is closest to chars bytes.
func tauConversation(t testing.TB, chars int) []json.RawMessage {
	t.Helper()
	path, err := dataset.Fixture("tau_bench_gpt4o_airline.jsonl")
	if err != nil {
		t.Skip(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Skip(err)
	}
	best, bestDiff := convs[0].Chat, -1
	for _, c := range convs {
		d := len(c.Chat.Encode()) - chars
		if d < 0 {
			d = -d
		}
		if bestDiff < 0 || d < bestDiff {
			best, bestDiff = c.Chat, d
		}
	}
	return best.Raw
}

// chatMessages are a small valid conversation: system, then user and
// assistant turns.
func chatMessages(turns int) []json.RawMessage {
	msgs := []json.RawMessage{json.RawMessage(`{"role":"system","content":"You are terse."}`)}
	for i := 0; i < turns; i++ {
		msgs = append(msgs,
			json.RawMessage(`{"role":"user","content":"question `+itoa(i)+`"}`),
			json.RawMessage(`{"role":"assistant","content":"answer `+itoa(i)+`"}`))
	}
	return append(msgs, json.RawMessage(`{"role":"user","content":"last question"}`))
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitInFlight waits until the daemon is serving an API request.
func (td *testDaemon) waitInFlight(t testing.TB) {
	t.Helper()
	waitFor(t, "a request in flight", 2*time.Minute, func() bool { return td.server.metrics.inflight.Load() > 0 })
}

func waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// contains reports whether any of msgs is byte-identical to m.
func contains(msgs []json.RawMessage, m json.RawMessage) bool {
	for _, x := range msgs {
		if bytes.Equal(x, m) {
			return true
		}
	}
	return false
}
