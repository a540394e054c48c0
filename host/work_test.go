package host

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/hashicorp/go-hclog"
)

// tiers are the three ways a module runs: the fast path compiled
// (instrumented, stopped through its stop global), the fast path
// interpreted (a quick load; wazero's checks), and the Extism path
// (compiled; wazero's checks).
var tiers = []struct {
	name           string
	disable, quick bool
}{
	{"fast-compiled", false, false},
	{"fast-interpreted", false, true},
	{"extism", true, false},
}

// TestWorkBudgetStopsLoops: a start section, an _initialize or a compact
// that never ends is stopped by the work budget, on every tier and path,
// with a wall-clock limit too far away to be what stops it: the failure
// is ErrWorkLimit and says which budget. The call timeout of
// instantiation is the shortest allowed, so an instantiation bounded by
// it (as it was) would fail on the wall clock instead. The loops are in
// text modules, in C and, interpreted (a Go plugin takes seconds to
// compile), in Go.
func TestWorkBudgetStopsLoops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		what   string
		module string // for wasmbuild.ForTest
		export string // where it loops: "instantiate" or "compact"
		extism bool   // runs on the Extism path only
		interp bool   // runs on the interpreted tier only
		want   string
	}{
		{"start section", "host/testdata/hostile/fast_start_loop.wat", "instantiate", false, false, "the start section or _initialize used up its work budget of 1000000 steps (start_work_budget)"},
		{"recursing start section", "host/testdata/hostile/fast_start_recurse.wat", "instantiate", false, false, "the start section or _initialize used up its work budget of 1000000 steps"},
		{"_initialize", "host/testdata/hostile/fast_init_loop.wat", "instantiate", false, false, "the start section or _initialize used up its work budget of 1000000 steps"},
		{"compact", "host/testdata/hostile/compact_loop.wat", "compact", false, false, "used up its work budget of 1000000 steps (work_budget)"},
		{"compact in C", "host/testdata/hostile/hostile.c#HOSTILE_LOOP", "compact", true, false, "used up its work budget of 1000000 steps (work_budget)"},
		{"compact in Go", "host/testdata/gohostile", "compact", false, true, "used up its work budget of 1000000 steps (work_budget)"},
	}
	for _, tier := range tiers {
		t.Run(tier.name, func(t *testing.T) {
			t.Parallel()
			var log strings.Builder
			var logMu sync.Mutex
			e, err := NewEngine(Config{DisableFastPath: tier.disable, CacheDir: wasmbuild.TestCacheDir(t),
				Logger: hclog.New(&hclog.LoggerOptions{Output: lockedWriter{mu: &logMu, w: &log}, Level: hclog.Warn}),
				Limits: Limits{WorkBudget: MinWorkBudget, StartWorkBudget: MinWorkBudget}})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(ctx)
			defer e.HoldCompiles()() // the interpreted tier stays interpreted
			for _, tt := range tests {
				if tt.extism && !tier.disable || tt.interp && !tier.quick {
					continue
				}
				t.Run(tt.what, func(t *testing.T) {
					wasm, err := os.ReadFile(wasmbuild.ForTest(t, tt.module))
					if err != nil {
						t.Fatal(err)
					}
					// Instantiation gets the shortest call timeout there
					// is, which it must not obey; a call that loops, the
					// longest.
					callLimits := Limits{CallTimeout: MinCallTimeout}
					if tt.export == "compact" {
						callLimits.CallTimeout = MaxCallTimeout
					}
					p, err := e.Load(ctx, wasm, LoadOptions{Source: "/plugins/x.wasm", Quick: tier.quick, Limits: callLimits})
					if tt.export == "instantiate" {
						pe, ok := IsPluginError(err)
						if !ok || !errors.Is(err, ErrWorkLimit) || pe.Export != "instantiate" || !strings.Contains(err.Error(), tt.want) {
							t.Fatalf("load: %v\nwant ErrWorkLimit in instantiate: %q", err, tt.want)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					defer p.Close(ctx)
					if want := map[bool]string{false: TierCompiled, true: TierInterpreted}[tier.quick]; p.Tier() != want {
						t.Fatalf("tier %s, want %s", p.Tier(), want)
					}
					_, err = p.Compact(ctx, modeRequest(testConversation(t), "loop"))
					if pe, ok := IsPluginError(err); !ok || !errors.Is(err, ErrWorkLimit) || pe.Export != "compact" || !strings.Contains(err.Error(), tt.want) {
						t.Fatalf("compact: %v\nwant ErrWorkLimit: %q", err, tt.want)
					}
				})
			}
			// The budget is deterministic: nothing was retried.
			logMu.Lock()
			defer logMu.Unlock()
			if strings.Contains(log.String(), "trying once more") {
				t.Errorf("a load that used up its work budget was retried:\n%s", log.String())
			}
		})
	}
}

// lockedWriter serializes writes to w, calling before (if set) with
// each write first.
type lockedWriter struct {
	mu     *sync.Mutex
	w      *strings.Builder
	before func(p []byte)
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.before != nil {
		l.before(p)
	}
	return l.w.Write(p)
}

// TestLoadRetriedCompiled: a load whose describe runs past its wall-clock
// limit on the interpreter is tried once more, compiled, and serves; a
// describe that loops is tried once more and then reported as the wall
// clock's doing; one that uses up its work budget is reported at once.
//
// The first describe runs past its limit because the test's log writer
// holds describe_logs' line until the limit has passed (twice over), not
// because the interpreter is slow: a module that only spun longer than
// the limit interpreted (seconds) and shorter compiled (~30 ms) needed a
// limit of 300ms between the two, which the compiled retry missed at a
// load average of 12. The retry's describe writes its line at once, and
// has a limit a thousand times what it needs.
func TestLoadRetriedCompiled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const limit = time.Second
	var log strings.Builder
	var logMu sync.Mutex
	var held atomic.Bool
	stall := func(p []byte) {
		if strings.Contains(string(p), "describing") && held.CompareAndSwap(false, true) {
			time.Sleep(2 * limit) // the first describe outlasts its limit
		}
	}
	e, err := NewEngine(Config{CacheDir: wasmbuild.TestCacheDir(t),
		Logger: hclog.New(&hclog.LoggerOptions{Output: lockedWriter{mu: &logMu, w: &log, before: stall}, Level: hclog.Warn})})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	defer e.HoldCompiles()()
	retries := func() int {
		logMu.Lock()
		defer logMu.Unlock()
		n := strings.Count(log.String(), "trying once more, compiled")
		log.Reset()
		return n
	}

	p, err := e.Load(ctx, hostileWat(t, "describe_logs"), LoadOptions{Source: "/plugins/describe_logs.wasm", Quick: true, Limits: Limits{CallTimeout: limit}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tier() != TierCompiled || p.Name() != "describe-logs" || retries() != 1 || !held.Load() {
		t.Errorf("tier %s, name %q: want the retry's compiled module", p.Tier(), p.Name())
	}
	p.Close(ctx)

	_, err = e.Load(ctx, hostileWat(t, "describe_loop"), LoadOptions{Source: "/plugins/describe_loop.wasm", Limits: Limits{CallTimeout: 200 * time.Millisecond}})
	checkPluginError(t, err, "describe_loop.wasm", ErrTimeout, "", "wall-clock time limit of 200ms (call_timeout)")
	if n := retries(); n != 1 {
		t.Errorf("a describe that loops on the wall clock: %d retries, want 1", n)
	}

	_, err = e.Load(ctx, hostileWat(t, "describe_loop"), LoadOptions{Source: "/plugins/describe_loop.wasm", Limits: Limits{CallTimeout: time.Hour, WorkBudget: MinWorkBudget}})
	checkPluginError(t, err, "describe_loop.wasm", ErrWorkLimit, "", "used up its work budget of 1000000 steps (work_budget)")
	if n := retries(); n != 0 {
		t.Errorf("a describe that used up its work budget: %d retries, want 0", n)
	}
}

// busyLoops starts n processes that spin on a core each until the test
// ends, or the test process does (a test killed by its timeout runs no
// cleanup: each loop checks that its parent is alive).
func busyLoops(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		cmd := exec.Command("sh", "-c", "while kill -0 "+strconv.Itoa(os.Getpid())+" 2>/dev/null; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
}

// TestHealthyUnderContention: with twice as many busy processes as cores
// beside the test, healthy plugins in Go (gohostile, on every tier and
// path) and C (lastn) instantiate with the shortest call timeout there is
// (10ms; a Go plugin's _initialize alone takes longer on the interpreter,
// quiet): instantiation is bounded by its work budget, with a wall-clock
// backstop of a minute, not by the call timeout. Then they serve, with a
// call timeout no busy machine reaches. It asserts no duration.
//
// The modules are compiled (and instrumented) before the busy processes
// start: compiling has no time limit to miss, and under -race it is most
// of the test's work (a Go plugin for the interpreter, a minute at a
// load average of 12), which the busy processes would stretch while
// taking the cores from the rest of the suite.
func TestHealthyUnderContention(t *testing.T) {
	if testing.Short() {
		t.Skip("starts busy processes")
	}
	ctx := context.Background()
	type prepared struct {
		name   string
		limits Limits // the engine's
		b      *built
	}
	var mods []*prepared
	for _, tier := range tiers {
		e := newTestEngine(t, tier.disable, Limits{})
		t.Cleanup(e.HoldCompiles())
		plugins := []string{"host/testdata/gohostile"}
		if tier.disable {
			plugins = append(plugins, "plugins/lastn/lastn.c") // on the Extism path on every tier
		}
		for _, rel := range plugins {
			wasm, err := os.ReadFile(wasmbuild.ForTest(t, rel))
			if err != nil {
				t.Fatal(err)
			}
			tight := e.Limits().Over(Limits{CallTimeout: MinCallTimeout})
			b, err := e.build(ctx, wasm, rel, tight, hclog.NewNullLogger(), newLogLimiter(), tier.quick)
			if err != nil {
				t.Fatalf("%s, %s: %v", tier.name, rel, err)
			}
			m := &prepared{name: tier.name + "/" + filepath.Base(rel), limits: e.Limits(), b: b}
			t.Cleanup(func() {
				if m.b != nil {
					m.b.mod.close(ctx)
				}
			})
			mods = append(mods, m)
		}
	}
	busyLoops(t, 2*runtime.NumCPU())
	for _, m := range mods {
		t.Run(m.name, func(t *testing.T) {
			b := m.b
			m.b = nil // the plugin below closes the module
			for i := 0; i < 2; i++ {
				inst, err := b.mod.newInstance(ctx)
				if err != nil {
					b.mod.close(ctx)
					t.Fatalf("instantiating under contention with a call timeout of %v: %v", MinCallTimeout, err)
				}
				inst.close(ctx)
			}
			p := newPlugin(b.mod, m.limits.Over(Limits{CallTimeout: time.Hour}), hclog.NewNullLogger())
			p.desc.Name = m.name
			defer p.Close(ctx)
			if err := p.describe(ctx); err != nil {
				t.Fatalf("describe: %v", err)
			}
			cfg, err := p.Schema().Resolve()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Compact(ctx, &Request{Conversation: testConversation(t), Config: cfg}); err != nil {
				t.Fatalf("compact: %v", err)
			}
		})
	}
}
