//go:build !unit

// `make test-unit` builds with -tags unit and leaves this file out: every
// test in it needs the kits' compilers and a daemon and skips in a unit
// run anyway (internal/testenv), and linking the test binary alone takes
// seconds.

// Package kits_test checks the plugin kits end to end, as a policy author
// uses them: for each language, `compactd new LANG NAME DIR` writes the
// example policy, `make` builds it with that language's real compiler and
// `make test` runs its unit tests; the module then passes `compactd
// conform`, takes the fast path, gives byte-identical output on both paths
// and in all four languages on the fixture conversations, and serves in a
// running daemon. Each language is built once per test binary.
package kits_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// langs are the kit languages, each with the policy name its example gets.
var langs = []struct{ lang, name string }{
	{"go", "example-go"},
	{"c", "example-c"},
	{"rust", "example-rust"},
	{"assemblyscript", "example-as"},
}

var (
	workOnce sync.Once
	workDir  string
	workErr  error

	buildMu sync.Mutex
	built   = map[string]*buildResult{}
)

type buildResult struct {
	once sync.Once
	wasm string
	log  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if workDir != "" {
		os.RemoveAll(workDir)
	}
	os.Exit(code)
}

// compactd returns the compactd binary (wasmbuild.CompactdForTest) and
// the test binary's work directory, where the projects are built.
func compactd(tb testing.TB) (bin, work string) {
	tb.Helper()
	workOnce.Do(func() { workDir, workErr = os.MkdirTemp("", "compactd-kits-") })
	if workErr != nil {
		tb.Fatal(workErr)
	}
	return wasmbuild.CompactdForTest(tb), workDir
}

// run runs a command in dir and returns its combined output.
func run(dir string, name string, args ...string) (string, error) {
	return runEnv(dir, nil, name, args...)
}

// runEnv is run with env added to the environment.
func runEnv(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), err
}

// cargoTargetDir is the Rust example's cargo target directory, one per
// checkout under the temporary directory (cargo locks it while it builds).
func cargoTargetDir(tb testing.TB) string {
	tb.Helper()
	root, err := wasmbuild.ModuleRoot(".")
	if err != nil {
		tb.Fatal(err)
	}
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(os.TempDir(), "compactd-test-cargo", hex.EncodeToString(sum[:])[:12])
}

// project scaffolds, builds and tests the example policy in lang (once per
// test binary) and returns its .wasm path.
func project(tb testing.TB, lang, name string) string {
	path, _ := projectLog(tb, lang, name)
	return path
}

// projectLog is project, also returning what the build and tests printed.
func projectLog(tb testing.TB, lang, name string) (string, string) {
	tb.Helper()
	bin, work := compactd(tb)
	buildMu.Lock()
	b := built[lang]
	if b == nil {
		b = &buildResult{}
		built[lang] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		dir := filepath.Join(work, lang, name)
		var env []string
		if lang == "rust" {
			// cargo builds the dependencies (serde_json, ...) once per
			// checkout rather than once per run, as a policy author's
			// target directory keeps them: twice 15 s of CPU.
			env = []string{"CARGO_TARGET_DIR=" + cargoTargetDir(tb)}
		}
		var log strings.Builder
		step := func(name string, args ...string) bool {
			out, err := runEnv(filepath.Dir(dir), env, name, args...)
			log.WriteString(out)
			b.err = err
			return err == nil
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			b.err = err
			return
		}
		_ = step(bin, "new", lang, name, dir) &&
			step("make", "-C", dir) &&
			step("make", "-C", dir, "test")
		b.log = log.String()
		b.wasm = filepath.Join(dir, name+".wasm")
	})
	if b.err != nil {
		tb.Fatalf("%s: %v", lang, b.err)
	}
	return b.wasm, b.log
}

func TestKits(t *testing.T) {
	testenv.Integration(t, "node (the AssemblyScript compiler) and a daemon")
	if testing.Short() {
		t.Skip("builds a policy project with each of four toolchains")
	}
	bin, work := compactd(t)
	wasm := map[string]string{}
	var mu sync.Mutex
	t.Run("build", func(t *testing.T) {
		for _, l := range langs {
			t.Run(l.lang, func(t *testing.T) {
				t.Parallel()
				path, log := projectLog(t, l.lang, l.name)
				// The generated tests ran (make test), in the language's
				// own runner.
				if !strings.Contains(log, "pass") && !strings.Contains(log, "ok") {
					t.Errorf("make test printed no passing tests:\n%s", log)
				}
				out, err := run(filepath.Dir(path), bin, "conform", "--cache-dir", wasmbuild.TestCacheDir(t), path)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "checks passed (path: fast)") {
					t.Errorf("conform did not pass on the fast path:\n%s", out)
				}
				info, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %s.wasm is %d bytes", l.lang, l.name, info.Size())
				mu.Lock()
				wasm[l.lang] = path
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	t.Run("same output", func(t *testing.T) { sameOutput(t, wasm) })
	t.Run("daemon", func(t *testing.T) { serveAll(t, bin, work, wasm) })
}

// fixtures returns prefixes of the fixture conversations, tokens counted.
func fixtures(t testing.TB, perConversation int) []*chat.Conversation {
	t.Helper()
	files, err := dataset.FixtureFiles()
	if err != nil {
		t.Fatal(err)
	}
	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	var out []*chat.Conversation
	for _, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range convs {
			for _, n := range dataset.SamplePrefixes(c.Chat, perConversation) {
				p := dataset.Prefix(c.Chat, n)
				tok.CountMessages(p.Messages)
				out = append(out, p)
			}
		}
	}
	return out
}

// configs are the configs the languages are compared on: the defaults,
// and one that masks and drops even short conversations.
var configs = []string{`{"keep_units":8,"mask_units":24,"step":4}`, `{"keep_units":2,"mask_units":3,"step":2}`}

// sameOutput runs every language's module on both paths over the fixture
// conversations and requires byte-identical results: the same messages
// (refs resolved by the host) and the same summary.
func sameOutput(t *testing.T, wasm map[string]string) {
	ctx := context.Background()
	engines := map[string]*host.Engine{}
	for _, path := range []string{"fast", "extism"} {
		// The comparison is about output, not speed: a call on the
		// Extism path under -race on a busy machine can take longer
		// than the default call limit of 10s.
		e, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(t), DisableFastPath: path == "extism",
			Limits: host.Limits{CallTimeout: 10 * time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		engines[path] = e
	}
	type runner struct {
		label  string
		extism bool
		p      *host.Plugin
	}
	var runners []runner
	for _, l := range langs {
		b, err := os.ReadFile(wasm[l.lang])
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"fast", "extism"} {
			p, err := engines[path].Load(ctx, b, host.LoadOptions{Source: wasm[l.lang]})
			if err != nil {
				t.Fatalf("%s on the %s path: %v", l.lang, path, err)
			}
			defer p.Close(ctx)
			if p.Path() != path {
				t.Fatalf("%s: loaded on the %s path, want %s", l.lang, p.Path(), path)
			}
			runners = append(runners, runner{l.lang + "/" + path, path == "extism", p})
		}
	}
	convs := fixtures(t, 6)
	compacted := 0
	for _, cfg := range configs {
		for ci, c := range convs {
			var want string
			for k, r := range runners {
				// The Extism path reads its input through a host call per
				// 8 bytes, a cost -race multiplies (nine tenths of this
				// comparison's time): it is compared on every third
				// prefix (two of each conversation's six), where the fast
				// path runs every one. The languages' logic is the
				// same on both paths; what the Extism path adds is its I/O.
				if r.extism && ci%3 != 0 {
					continue
				}
				resp, err := r.p.Compact(ctx, &host.Request{Conversation: c, Config: json.RawMessage(cfg)})
				if err != nil {
					t.Fatalf("%s, config %s, conversation %d: %v", r.label, cfg, ci, err)
				}
				got := fmt.Sprintf("compacted=%v entries=%d rewritten=%v summary=%q\n%s",
					resp.Compacted, resp.Result.EntriesSummarized, resp.Result.Rewritten, resp.Result.Summary, resp.Conversation.Encode())
				if k == 0 {
					want = got
					if resp.Compacted {
						compacted++
					}
					continue
				}
				if got != want {
					t.Fatalf("config %s, conversation %d (%d messages): %s differs from %s:\n%s\n---\n%s",
						cfg, ci, c.Len(), r.label, runners[0].label, clip(got), clip(want))
				}
			}
		}
	}
	if compacted == 0 {
		t.Fatal("no conversation was compacted: the comparison proves nothing")
	}
	// A bad config is the same error everywhere (the daemon checks configs
	// against the schema first; a plugin must still refuse one).
	for _, r := range runners {
		_, err := r.p.Compact(ctx, &host.Request{Conversation: convs[0], Config: json.RawMessage(`{"keep_units":0,"mask_units":1,"step":1}`)})
		pe, ok := host.IsPluginError(err)
		if !ok || pe.Code != "invalid_config" {
			t.Errorf("%s: a bad config gave %v, want an invalid_config error", r.label, err)
		}
	}
	t.Logf("%d results identical across %d runners (the Extism path's on every third prefix; %d compacted)", len(convs)*len(configs), len(runners), compacted)
}

func clip(s string) string {
	if len(s) > 3000 {
		return s[:3000] + "…"
	}
	return s
}

// serveAll starts `compactd serve` on a plugins directory holding the four
// modules and compacts fixture conversations through each over the socket.
func serveAll(t *testing.T, bin, work string, wasm map[string]string) {
	dir, err := os.MkdirTemp("", "cdk")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	plugins := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range langs {
		b, err := os.ReadFile(wasm[l.lang])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(plugins, l.name+".wasm"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	socket := filepath.Join(dir, "s.sock")
	cmd := exec.Command(bin, "serve", "--socket", socket, "--plugins", plugins, "--state-dir", filepath.Join(dir, "state"),
		"--config", filepath.Join(dir, "config.yaml"), "--cache-dir", wasmbuild.TestCacheDir(t))
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	c := client.New(socket)
	defer c.Close()
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pols, err := c.Policies(ctx)
		loaded := 0
		for _, p := range pols {
			if p.Serving && p.Path == "fast" {
				loaded++
			}
		}
		if err == nil && loaded == len(langs) {
			break
		}
		select {
		case <-done:
			t.Fatalf("daemon exited:\n%s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the four policies did not load on the fast path (%v, %+v):\n%s", err, pols, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	convs := fixtures(t, 2)
	for ci, conv := range convs {
		var want string
		for _, l := range langs {
			resp, err := c.Compact(ctx, &client.CompactRequest{Policy: l.name, Model: "gpt-4o", Config: map[string]any{"keep_units": 2, "mask_units": 3, "step": 2}, Messages: conv.Raw})
			if err != nil {
				t.Fatalf("%s: %v", l.name, err)
			}
			if len(resp.Warnings) > 0 {
				t.Fatalf("%s: warnings %v", l.name, resp.Warnings)
			}
			msgs, _ := json.Marshal(resp.Messages)
			got := fmt.Sprintf("%v %s %s", resp.Compacted, strings.ReplaceAll(resp.Stats.Stages[0].Summary, l.name, "NAME"), msgs)
			if want == "" {
				want = got
			} else if got != want {
				t.Fatalf("conversation %d: %s answers differently:\n%s\n---\n%s", ci, l.name, clip(got), clip(want))
			}
		}
	}
	t.Logf("%d conversations compacted identically by the four policies through the daemon", len(convs))
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
