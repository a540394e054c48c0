package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/host"
)

// markersUnderWay lists the load markers in the state directory's
// plugin-loads, as "FILE KIND" (the file's base name).
func markersUnderWay(stateDir string) []string {
	dir := filepath.Join(stateDir, "plugin-loads")
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		var rec struct{ File, Kind string }
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && json.Unmarshal(b, &rec) == nil && rec.File != "" {
			out = append(out, filepath.Base(rec.File)+" "+rec.Kind)
		}
	}
	return out
}

// killWhenMarked kills the daemon (SIGKILL, as the OOM killer would) as
// soon as work of kind on file is under way, and nothing else.
func (d *childDaemon) killWhenMarked(t *testing.T, stateDir, file, kind string) {
	t.Helper()
	waitFor(t, file+"'s "+kind+" to be under way alone", 3*time.Minute, func() bool {
		if d.exited() {
			t.Fatalf("the daemon exited with %d; log:\n%s", d.code, d.Log())
		}
		m := markersUnderWay(stateDir)
		return len(m) == 1 && m[0] == file+" "+kind
	})
	d.cmd.Process.Kill()
	<-d.done
}

// TestCrashWhileCompiling kills daemon processes (SIGKILL) while they
// compile the default policy, a healthy plugin, as an OOM kill elsewhere
// or a crashed host would. One such crash is not held against the file:
// it serves at the next start. A second one, with nothing else under way,
// quarantines it; /healthz is then degraded and says, as the log does,
// how to clear it, and a retry by hand does. A crash while compiling
// bytes that compiled before (on first use after a restart) is ordinary
// work, and leaves no evidence at all.
//
// The daemons are the compactd binary as users run it (`compactd
// serve`, without the race detector): the test checks what a start makes
// of a crash, and under -race each of its four uncached compiles of
// sliding took seconds. TestCrashLoopQuarantine runs the same load
// markers under -race, in the test binary's own daemon processes.
func TestCrashWhileCompiling(t *testing.T) {
	t.Parallel()
	td := setup(t, "policy: sliding\n", pluginLastn, pluginSliding)
	td.served = true
	// A cache of its own, empty: compiling sliding takes seconds.
	td.childCache = t.TempDir()
	state := filepath.Join(td.dir, "state")

	// 1. The first start serves sliding interpreted and compiles it in
	// the background: killed there, once its load is over (a kill while
	// new bytes load, with nothing else under way, quarantines them at
	// once: TestCrashLoopQuarantine).
	d := startChild(t, td)
	d.killWhenMarked(t, state, "sliding.wasm", "compile")

	// 2. The next start does not quarantine it: it compiles it again,
	// alone, after the others. Killed there again.
	d = startChild(t, td)
	waitFor(t, "the start to weigh the crash", time.Minute, func() bool {
		if d.exited() {
			t.Fatalf("the daemon exited with %d; log:\n%s", d.code, d.Log())
		}
		return strings.Contains(d.Log(), "one crash while compiling is not held against a file")
	})
	if p := d.policies()["sliding.wasm"]; p.Quarantined || p.Error != nil {
		t.Fatalf("after one crash while compiling, sliding.wasm: %+v", p)
	}
	d.killWhenMarked(t, state, "sliding.wasm", "compile")

	// 3. Twice, alone: quarantined. The daemon serves the others, is
	// degraded, and says how to clear it.
	d = startChild(t, td)
	d.waitStarted(time.Minute)
	p := d.policies()["sliding.wasm"]
	if !p.Quarantined || p.Serving || !strings.Contains(p.Error.Message, "compactd stopped twice while compiling these bytes") {
		t.Fatalf("after two crashes while compiling, sliding.wasm: %+v", p)
	}
	h, err := d.c.Health(context.Background())
	if err != nil || h.Status != "degraded" || len(h.Problems) != 1 || !strings.Contains(h.Problems[0], `the default policy "sliding" does not serve`) ||
		!strings.Contains(h.Problems[0], "compactd plugins retry sliding") {
		t.Fatalf("/healthz with the default policy quarantined: %+v, %v", h, err)
	}
	// The daemon writes these lines once every file was tried, just
	// after /healthz stops saying "starting": waited for, not raced.
	saysHow := func() bool {
		log := d.Log()
		return strings.Contains(log, `the default policy "sliding" does not serve`) && strings.Contains(log, "compactd plugins retry sliding")
	}
	for deadline := time.Now().Add(time.Minute); !saysHow() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if !saysHow() {
		t.Errorf("the log does not say how to clear the quarantine:\n%s", d.Log())
	}
	if _, err := d.c.Compact(context.Background(), &client.CompactRequest{Policy: "lastn", Messages: chatMessages(2)}); err != nil {
		t.Errorf("lastn does not serve: %v", err)
	}
	// A retry by hand lifts it.
	if _, err := d.c.RetryPolicy(context.Background(), "nope"); !client.IsCode(err, CodeUnknownPolicy) {
		t.Errorf("retry of an unknown policy: %v", err)
	}
	p2, err := d.c.RetryPolicy(context.Background(), "sliding")
	if err != nil || !p2.Serving || p2.Quarantined || p2.Error != nil {
		t.Fatalf("retry: %+v, %v", p2, err)
	}
	if h, err := d.c.Health(context.Background()); err != nil || h.Status != "ok" || len(h.Problems) != 0 {
		t.Errorf("/healthz after the retry: %+v, %v", h, err)
	}
	if r, err := d.c.Compact(context.Background(), &client.CompactRequest{Messages: chatMessages(2)}); err != nil || len(r.Warnings) != 0 {
		t.Errorf("the default policy after the retry: %+v, %v", r, err)
	}
	d.stop()

	// 4. Bytes this build compiled before: a kill while they compile on
	// first use (the cache emptied, so that it takes seconds) is not
	// evidence: no marker is written, and the next start serves them.
	if err := os.RemoveAll(td.childCache); err != nil {
		t.Fatal(err)
	}
	d = startChild(t, td)
	d.waitHealthy(time.Minute)
	if p := d.policies()["sliding.wasm"]; p.Tier != "lazy" {
		t.Fatalf("sliding after a restart: tier %q, want lazy (described, compiled on first use)", p.Tier)
	}
	go d.c.Compact(context.Background(), &client.CompactRequest{Messages: chatMessages(2)}) // compiles sliding, and fails with the kill
	waitFor(t, "the first call to be under way", time.Minute, func() bool {
		m, _ := d.c.Metrics(context.Background())
		return strings.Contains(m, "compactd_http_requests_in_flight 2\n") // this one and the call
	})
	if m := markersUnderWay(state); len(m) != 0 {
		t.Errorf("a compile of bytes that compiled before is marked: %v", m)
	}
	d.cmd.Process.Kill()
	<-d.done
	d = startChild(t, td)
	d.waitHealthy(time.Minute)
	if p := d.policies()["sliding.wasm"]; !p.Serving || p.Quarantined {
		t.Errorf("after a kill during a compile on first use, sliding.wasm: %+v", p)
	}
	if strings.Contains(d.Log(), "stopped while") {
		t.Errorf("the start held the kill against a file:\n%s", d.Log())
	}
	d.stop()
}

// startLoops writes n plugin files loop0.wasm … whose start sections
// never return, each different bytes.
func startLoops(t *testing.T, dir string, n int) {
	t.Helper()
	loop := zooBytes(t, zooEntry{file: "loop.wasm", src: "host/testdata/hostile/start_loop.wat"})
	for i := range n {
		// A custom section of its own makes each file other bytes.
		name := "n"
		body := binary.AppendUvarint(nil, uint64(len(name)))
		body = append(append(body, name...), byte(i))
		b := append(append([]byte(nil), loop...), 0)
		b = binary.AppendUvarint(b, uint64(len(body)))
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("loop%d.wasm", i)), append(b, body...), 0o644)
	}
}

// loopLimits is the config's limits block giving loop0 … loop(n-1) a call
// timeout and a start work budget (steps).
func loopLimits(n int, timeout string, startBudget uint64) string {
	var b strings.Builder
	b.WriteString("limits:\n  plugins:\n")
	for i := range n {
		fmt.Fprintf(&b, "    loop%d: {call_timeout: %s, start_work_budget: %d}\n", i, timeout, startBudget)
	}
	return b.String()
}

// TestStartNotHeldUp: nine plugin files whose start sections loop do not
// hold up a daemon's start: /healthz answers at once ("starting"), the
// healthy policy serves while they load beside it, and SIGTERM stops the
// daemon. Once they have failed, a restart does not load them again (the
// daemon remembers the failures of their bytes) and is healthy at once;
// a retry by hand loads one again.
func TestStartNotHeldUp(t *testing.T) {
	const loops = 9
	// Ten minutes and the largest start work budget: the loops are
	// loading for as long as the first part of the test lasts.
	td := setup(t, "policy: lastn\npolicies: {lastn: {n: 3, step: 1}}\n"+loopLimits(loops, "10m", host.MaxWorkBudget), pluginLastn)
	startLoops(t, td.plugins, loops)
	d := startChild(t, td)
	var h *client.Health
	waitFor(t, "/healthz to answer", 2*time.Minute, func() bool {
		if d.exited() {
			t.Fatalf("the daemon exited with %d; log:\n%s", d.code, d.Log())
		}
		var err error
		h, err = d.c.Health(context.Background())
		return err == nil
	})
	if h.Status != "starting" {
		t.Fatalf("/healthz during the start: %+v", h)
	}
	// The default policy (lastn, with n = 3: the system message, the
	// task and the last three) serves while the loops load.
	r, err := d.c.Compact(context.Background(), &client.CompactRequest{Messages: chatMessages(3)})
	if err != nil || len(r.Warnings) != 0 || len(r.Messages) != 5 {
		t.Fatalf("compact during the start: %+v, %v", r, err)
	}
	h, err = d.c.Health(context.Background())
	if err != nil || h.Status != "starting" || h.Policies != 1 || h.Loading != loops {
		t.Fatalf("/healthz while the loops load: %+v, %v", h, err)
	}
	if p := d.policies()["loop0.wasm"]; !p.Loading || p.Serving {
		t.Errorf("loop0.wasm during the start: %+v", p)
	}
	if m, _ := d.c.Metrics(context.Background()); !strings.Contains(m, fmt.Sprintf("compactd_plugins_loading %d\n", loops)) {
		t.Errorf("/metrics during the start:\n%s", grepLines(m, "compactd_plugins_"))
	}
	d.stop() // its loads under way end

	// With the smallest start work budget they fail; a restart then does
	// not load them again, and is healthy at once.
	if err := os.WriteFile(td.config, []byte("policy: lastn\npolicies: {lastn: {n: 3, step: 1}}\n"+loopLimits(loops, "10m", host.MinWorkBudget)), 0o600); err != nil {
		t.Fatal(err)
	}
	d = startChild(t, td)
	d.waitHealthy(3 * time.Minute)
	first := d.policies()["loop0.wasm"]
	if first.Error == nil || strings.Contains(first.Error.Message, "failed to load before") {
		t.Fatalf("loop0.wasm: %+v", first)
	}
	d.stop()
	start := time.Now()
	d = startChild(t, td)
	d.waitHealthy(3 * time.Minute)
	t.Logf("restart with %d known-bad files: healthy after %.1fs", loops, time.Since(start).Seconds())
	if m, _ := d.c.Metrics(context.Background()); !strings.Contains(m, "compactd_plugin_loads_total 1\n") {
		t.Errorf("the restart loaded the known-bad files again:\n%s", grepLines(m, "compactd_plugin_load"))
	}
	pols := d.policies()
	for i := range loops {
		p := pols[fmt.Sprintf("loop%d.wasm", i)]
		want := strings.ReplaceAll(first.Error.Message, "loop0", fmt.Sprintf("loop%d", i))
		if p.Error == nil || !strings.Contains(p.Error.Message, want) || !strings.Contains(p.Error.Message, "failed to load before") ||
			!strings.Contains(p.Error.Message, fmt.Sprintf("compactd plugins retry loop%d", i)) {
			t.Errorf("loop%d.wasm after the restart: %+v", i, p)
		}
	}
	// A retry by hand loads it again.
	p, err := d.c.RetryPolicy(context.Background(), "loop0.wasm")
	if err != nil || p.Error == nil || strings.Contains(p.Error.Message, "failed to load before") {
		t.Errorf("retry: %+v, %v", p, err)
	}
	if m, _ := d.c.Metrics(context.Background()); !strings.Contains(m, "compactd_plugin_loads_total 2\n") {
		t.Errorf("the retry did not load the file:\n%s", grepLines(m, "compactd_plugin_load"))
	}
	d.stop()
}

// waitStarted waits until the child has tried every plugin file
// (/healthz no longer says "starting").
func (d *childDaemon) waitStarted(limit time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if d.exited() {
			d.t.Fatalf("the daemon exited with %d; log:\n%s", d.code, d.Log())
		}
		if h, err := d.c.Health(context.Background()); err == nil && h.Status != "starting" {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("the daemon was still starting after %v; log:\n%s", limit, d.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
