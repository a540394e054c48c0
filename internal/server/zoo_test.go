package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/hostilewasm"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/compactd/compactd/registry"
)

// zooEntry is one hostile plugin of the zoo: a module built from source
// (host/testdata/hostile, see its README), or a file that is not a
// regular file, and what GET /v1/policies must say about its file once
// the daemon has tried it.
type zooEntry struct {
	file string // its name in the plugins directory
	src  string // as wasmbuild.ForTest takes it
	want string // in the file's load error
	// make, if set, puts the entry at path (instead of src's module):
	// a FIFO, a socket, a symlink to one.
	make func(t testing.TB, path string)
}

// zooGenerated are the zoo's modules written by a function (src
// "gen:NAME"): shapes too big to commit.
var zooGenerated = map[string]func() []byte{
	"gen:locals-50m":    func() []byte { return hostilewasm.Locals(50_000_000) },
	"gen:locals-2m":     func() []byte { return hostilewasm.Locals(2_000_000) },
	"gen:functions-62m": func() []byte { return hostilewasm.EmptyFunctions(15_500_000) },
	"gen:calls-1m":      func() []byte { return hostilewasm.Calls(1 << 20) },
}

var zoo = []zooEntry{
	{"memory_over_cap.wasm", "host/testdata/hostile/memory_over_cap.wat", "declares 4097 pages (256.1 MiB) of initial memory; the limit is 4096 pages", nil},
	{"start_loop.wasm", "host/testdata/hostile/start_loop.wat", "instantiate: plugin used up its work budget: the start section or _initialize used up its work budget of 1000000 steps", nil},
	{"fast_start_loop.wasm", "host/testdata/hostile/fast_start_loop.wat", "instantiate: plugin used up its work budget: the start section or _initialize used up its work budget of 1000000 steps", nil},
	{"fast_init_loop.wasm", "host/testdata/hostile/fast_init_loop.wat", "instantiate: plugin used up its work budget: the start section or _initialize used up its work budget of 1000000 steps", nil},
	{"describe_loop.wasm", "host/testdata/hostile/describe_loop.wat", "describe: plugin call timed out", nil},
	{"describe_recurse.wasm", "host/testdata/hostile/describe_recurse.wat", "describe: plugin call timed out", nil},
	{"fast_start_recurse.wasm", "host/testdata/hostile/fast_start_recurse.wat", "instantiate: plugin used up its work budget: the start section or _initialize used up its work budget of 1000000 steps", nil},
	{"describe_huge.wasm", "host/testdata/hostile/describe_huge.wat", "a description is 8388608 bytes; the limit is 1048576", nil},
	{"grow_1gib.wasm", "host/testdata/hostile/grow_1gib.wat", "compact: plugin exceeded its memory limit", nil},
	{"bad_utf8.wasm", "host/testdata/hostile/bad_utf8.wat", "the description is not UTF-8 (byte", nil},
	{"badref.wasm", "host/testdata/hostile/hostile.c#HOSTILE_BADREF", "ref 999999 is out of range", nil},
	{"log_spam.wasm", "host/testdata/hostile/log_spam.wat", "compact: plugin call timed out: ran past its wall-clock time limit of", nil},
	{"count_huge.wasm", "host/testdata/hostile/count_huge.wat", "compact: plugin call timed out", nil},
	{"stack_overflow.wasm", "host/testdata/hostile/stack_overflow.wat", "stack overflow", nil},
	{"fast_alloc_trap.wasm", "host/testdata/hostile/fast_alloc_trap.wat", "describe: plugin trapped", nil},
	{"unknown_import.wasm", "host/testdata/hostile/unknown_import.wat", "imports env.oops, which compactd does not provide", nil},
	{"missing_export.wasm", "host/testdata/hostile/missing_export.wat", `missing required export "compact"`, nil},
	// The healthy lastn plugin, padded with a custom section to just over
	// the file-size limit: refused unread.
	{"oversize.wasm", "plugins/lastn/lastn.c", "plugin file too large: oversize.wasm is", nil},
	// Files that are not regular files: opening a FIFO to read waits for
	// a writer, forever; they are refused without being waited on.
	{"fifo.wasm", "", "fifo.wasm is a FIFO (named pipe); only regular files (or symlinks to them) are loaded", mkfifo},
	{"fifo_link.wasm", "", "fifo_link.wasm is a symlink to a FIFO (named pipe)", func(t testing.TB, path string) {
		fifo := filepath.Join(t.TempDir(), "fifo")
		mkfifo(t, fifo)
		symlink(t, fifo, path)
	}},
	{"device.wasm", "", "device.wasm is a symlink to a character device", func(t testing.TB, path string) { symlink(t, "/dev/zero", path) }},
	{"socket.wasm", "", "socket.wasm is a socket", func(t testing.TB, path string) {
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false) // it stays for the restart
		t.Cleanup(func() { ln.Close() })
	}},
	{"dangling.wasm", "", "which does not exist", func(t testing.TB, path string) { symlink(t, filepath.Join(t.TempDir(), "gone.wasm"), path) }},
	// Shapes that cost a compiler gigabytes and minutes (issue 21): a
	// 66-byte module of 50 million locals (8 GiB and a dead daemon after
	// 146 s before the compile budget), 2 million (650 MiB, 12.5 s), a
	// 62 MB file of empty functions (8 GiB, dead), and one function of
	// a megabyte of calls (460 MiB, 11 s) over the zoo's compile budget.
	{"locals_50m.wasm", "gen:locals-50m", "declares 50000000 locals in one function; the limit is 50000", nil},
	{"locals_2m.wasm", "gen:locals-2m", "declares 2000000 locals in one function; the limit is 50000", nil},
	{"functions_62mb.wasm", "gen:functions-62m", "declares 15500000 functions; the limit is 1000000", nil},
	{"calls_1mb.wasm", "gen:calls-1m", "the compile budget is 512 MiB (limits.max_compile_memory_mb)", nil},
}

func mkfifo(t testing.TB, path string) {
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t testing.TB, target, path string) {
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// zooBytes returns an entry's module (nil for the files it makes).
func zooBytes(t testing.TB, e zooEntry) []byte {
	t.Helper()
	if gen := zooGenerated[e.src]; gen != nil {
		return gen()
	}
	if e.make != nil {
		return nil
	}
	b, err := os.ReadFile(wasmbuild.ForTest(t, e.src))
	if err != nil {
		t.Fatal(err)
	}
	if e.file == "oversize.wasm" {
		b = withCustomSection(b, registry.DefaultMaxFileBytes+1-len(b))
	}
	return b
}

// withCustomSection appends a custom section so that the module grows by
// a little more than n bytes. A custom section is valid anywhere in a
// module and means nothing to the runtime.
func withCustomSection(wasm []byte, n int) []byte {
	name := "padding"
	body := binary.AppendUvarint(nil, uint64(len(name)))
	body = append(body, name...)
	body = append(body, make([]byte, n)...)
	out := append(bytes.Clone(wasm), 0)
	out = binary.AppendUvarint(out, uint64(len(body)))
	return append(out, body...)
}

// TestHostileZoo drops each hostile plugin into the plugins directory of a
// real daemon (its own process, on a real Unix socket, watching with
// fsnotify) while clients call a healthy policy without pause. For every
// entry: /healthz stays ok, the healthy policy serves every request, and
// the file's error shows in GET /v1/policies. Then the daemon restarts
// with the whole zoo in its directory and comes up healthy. The daemon's
// peak memory (VmHWM) is reported.
//
// The daemon is the compactd binary as users run it (`compactd serve`,
// without the race detector): under -race, reading the 62 MB module's
// sections alone took 45 s, twice, and the test over 5 minutes. The host's
// and the registry's own tests run the same hostile modules under -race.
func TestHostileZoo(t *testing.T) {
	timeout, spam, workers := "2s", "10s", 4
	if testing.Short() {
		timeout, spam, workers = "1s", "5s", 2
	}
	// The zoo's plugins are stopped after timeout, except two that get
	// longer: the recursing one, because wazero grows its call stack by
	// copying it up to its ceiling (~100 MB), which under -race takes
	// seconds before the overflow is reported; and the log spammer, so
	// that it outruns the rate limit's burst of 1000 lines however slow
	// the machine. The healthy policy gets a minute: its requests must
	// not fail because the machine is slow. Start sections and
	// _initialize get the least work budget there is (a million steps):
	// the interpreter under -race takes seconds for it.
	td := setup(t, "limits:\n  max_total_memory_mb: 4096\n  max_compile_memory_mb: 512\n  plugin:\n    call_timeout: "+timeout+"\n    start_work_budget: 1000000\n  plugins:\n    lastn: {call_timeout: 1m}\n    zoo-recurse: {call_timeout: 1m}\n    zoo-logspam: {call_timeout: "+spam+"}\n", pluginLastn)
	built := make([][]byte, len(zoo))
	for i, e := range zoo {
		built[i] = zooBytes(t, e) // build (and time) everything before the daemon runs
	}
	td.served = true
	d := startChild(t, td)
	d.waitHealthy(2 * time.Minute)
	// A regression (a module that compiles without bound) fails the
	// test, not the machine: the peak checked below is 3 GiB.
	lim := limitMemory(t, d.cmd.Process.Pid, 3<<30+512<<20)

	var requests, failures atomic.Int64
	var failMu sync.Mutex
	var failed []string
	fail := func(format string, args ...any) {
		failures.Add(1)
		failMu.Lock()
		if len(failed) < 10 {
			failed = append(failed, fmt.Sprintf(format, args...))
		}
		failMu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	msgs := chatMessages(6)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The first worker's exchanges are validated against
			// openapi.yaml, as the poller's and d.c's are. The others
			// are not: validation compiles the response's schema on
			// every call (kin-openapi 0.153) and would cut the load on
			// the daemon fourteenfold (1.7k instead of 25k requests).
			c := client.New(d.socket)
			if w == 0 {
				c = apiClient(t, d.socket)
			}
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				requests.Add(1)
				r, err := c.Compact(context.Background(), &client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 3, "step": 1}, Messages: msgs})
				switch {
				case err != nil:
					fail("compact: %v", err)
				case len(r.Warnings) > 0 || len(r.Stats.Stages) != 1 || r.Stats.Stages[0].Error != "" || len(r.Messages) != 5: // system, task, last 3
					fail("compact: %d messages, warnings %q, stages %+v", len(r.Messages), r.Warnings, r.Stats.Stages)
				}
			}
		}()
	}
	var healthChecks atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			healthChecks.Add(1)
			if h, err := d.c.Health(context.Background()); err != nil || h.Status != "ok" {
				fail("healthz: %+v %v", h, err)
			}
		}
	}()

	for i, e := range zoo {
		start := time.Now()
		if e.make != nil {
			e.make(t, filepath.Join(td.plugins, e.file))
		} else {
			writeRename(t, filepath.Join(td.plugins, e.file), built[i])
		}
		var got client.Policy
		waitFor(t, e.file+"'s error in /v1/policies", 3*time.Minute, func() bool {
			if d.exited() {
				t.Fatalf("the daemon exited with %d after %s; log:\n%s", d.code, e.file, d.Log())
			}
			got = d.policies()[e.file]
			return got.Error != nil
		})
		if got.Serving || !strings.Contains(got.Error.Message, e.want) {
			t.Errorf("%s: serving=%v, error %q, want it to contain %q", e.file, got.Serving, got.Error.Message, e.want)
		}
		if e.file == "log_spam.wasm" && (got.LogLinesDropped == 0 || got.LogLinesTruncated == 0) {
			t.Errorf("log spam: %d lines dropped, %d cut; want both counted", got.LogLinesDropped, got.LogLinesTruncated)
		}
		t.Logf("%-22s refused after %5.1fs (daemon peak RSS so far %4d MiB): %s", e.file, time.Since(start).Seconds(), d.peakRSS()>>20, got.Error.Message)
	}
	close(stop)
	wg.Wait()
	if requests.Load() == 0 || healthChecks.Load() == 0 || failures.Load() != 0 {
		t.Errorf("%d requests and %d health checks, %d failed: %q", requests.Load(), healthChecks.Load(), failures.Load(), failed)
	}
	metrics, err := d.c.Metrics(context.Background())
	if err != nil || !strings.Contains(metrics, `compactd_plugin_log_lines_dropped_total{file="log_spam.wasm"}`) ||
		strings.Contains(metrics, `compactd_plugin_log_lines_dropped_total{file="log_spam.wasm"} 0`) {
		t.Errorf("/metrics does not count the dropped lines (%v)", err)
	}
	log := d.Log()
	spamLines, longest := 0, 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "plugin.log_spam:") {
			spamLines++
			longest = max(longest, len(line))
		}
	}
	t.Logf("the daemon's log: %d lines, %d bytes; %d lines from log_spam, the longest %d bytes", strings.Count(log, "\n"), len(log), spamLines, longest)
	if n := strings.Count(log, "\n"); n > 20000 || longest > 5<<10 {
		t.Errorf("the daemon logged %d lines, log_spam's longest %d bytes", n, longest)
	}
	if k := lim.oomKills(); k > 0 {
		t.Errorf("the kernel killed the daemon %d times at its memory limit (%s)", k, lim)
	}
	peak := d.peakRSS()
	t.Logf("%d requests to the healthy policy and %d health checks, none failed; daemon peak RSS (VmHWM of its process) %d MiB",
		requests.Load(), healthChecks.Load(), peak>>20)
	if peak > 3<<30 {
		t.Errorf("the daemon's peak RSS was %d MiB", peak>>20)
	}
	d.stop()

	// A restart with the whole zoo in the directory comes up healthy, at
	// once: the daemon remembers which bytes failed, and does not load
	// them again (lastn, from its cached description, is the one load).
	start := time.Now()
	d = startChild(t, td)
	d.waitHealthy(3 * time.Minute)
	t.Logf("restart with the zoo in the directory: healthy after %.1fs", time.Since(start).Seconds())
	pols := d.policies()
	if p := pols["lastn.wasm"]; !p.Serving {
		t.Errorf("after the restart lastn does not serve: %+v", p)
	}
	for _, e := range zoo {
		p := pols[e.file]
		if p.Serving || p.Error == nil || !strings.Contains(p.Error.Message, e.want) {
			t.Errorf("after the restart, %s: %+v", e.file, p)
			continue
		}
		// Files refused unread (too large, not regular) are cheap to
		// refuse again, and so are those over the compile budget (their
		// counts are read, nothing compiles, and a larger budget must
		// load them); the others were not tried again.
		remembered := e.make == nil && e.file != "oversize.wasm" && zooGenerated[e.src] == nil
		if got := strings.Contains(p.Error.Message, "failed to load before"); got != remembered {
			t.Errorf("after the restart, %s: remembered %v, want %v: %s", e.file, got, remembered, p.Error.Message)
		}
	}
	// lastn, and the files over the compile budget.
	if m, _ := d.c.Metrics(context.Background()); !strings.Contains(m, fmt.Sprintf("compactd_plugin_loads_total %d\n", 1+len(zooGenerated))) {
		t.Errorf("after the restart, the zoo's files were loaded again:\n%s", grepLines(m, "compactd_plugin_load"))
	}
	r, err := d.c.Compact(context.Background(), &client.CompactRequest{Policy: "lastn", Messages: msgs})
	if err != nil || len(r.Warnings) > 0 {
		t.Errorf("after the restart: %v %+v", err, r)
	}
	d.stop()
}

// TestCrashLoopQuarantine kills a daemon process (SIGKILL, as the OOM
// killer would) while it loads a plugin, and starts it again: the second
// start knows what it was loading, quarantines that file, serves the
// others at once, and says so in the log and in /v1/policies. New bytes
// in the file end the quarantine.
func TestCrashLoopQuarantine(t *testing.T) {
	// The looping start section gets ten minutes and the most work
	// there is: the first daemon is still loading it when it is killed.
	td := setup(t, "log_level: debug\nlimits:\n  plugins:\n    start_loop:\n      call_timeout: 10m\n      start_work_budget: 1000000000000000\n", pluginLastn)
	loop := zooBytes(t, zooEntry{file: "start_loop.wasm", src: "host/testdata/hostile/start_loop.wat"})
	os.WriteFile(filepath.Join(td.plugins, "start_loop.wasm"), loop, 0o644)
	markers := filepath.Join(td.dir, "state", "plugin-loads")

	d := startChild(t, td)
	waitFor(t, "lastn to load and start_loop's load to be under way", 2*time.Minute, func() bool {
		if d.exited() {
			t.Fatalf("the daemon exited with %d; log:\n%s", d.code, d.Log())
		}
		entries, _ := os.ReadDir(markers)
		if len(entries) != 1 || !strings.Contains(d.Log(), "lastn.wasm") {
			return false
		}
		b, _ := os.ReadFile(filepath.Join(markers, entries[0].Name()))
		return strings.Contains(string(b), "start_loop.wasm")
	})
	d.cmd.Process.Kill()
	<-d.done
	if _, err := os.Stat(d.socket); err != nil {
		t.Fatalf("a killed daemon leaves its socket behind, but: %v", err)
	}

	start := time.Now()
	d = startChild(t, td)
	d.waitHealthy(2 * time.Minute)
	t.Logf("the restarted daemon was healthy after %.1fs", time.Since(start).Seconds())
	pols := d.policies()
	q := pols["start_loop.wasm"]
	if !q.Quarantined || q.Serving || q.Error == nil || !strings.Contains(q.Error.Message, "quarantined: compactd stopped while loading these bytes") {
		t.Fatalf("start_loop.wasm: %+v", q)
	}
	if !pols["lastn.wasm"].Serving {
		t.Fatalf("lastn does not serve: %+v", pols["lastn.wasm"])
	}
	if log := d.Log(); !strings.Contains(log, "quarantined, the other plugins serve") || !strings.Contains(log, "start_loop.wasm") {
		t.Errorf("the log does not say what was quarantined:\n%s", log)
	}
	if m, _ := d.c.Metrics(context.Background()); !strings.Contains(m, "compactd_plugins_quarantined 1") {
		t.Error("/metrics does not count the quarantined file")
	}

	// New bytes in the file are loaded again.
	lastn, err := os.ReadFile(wasmbuild.ForTest(t, pluginLastn))
	if err != nil {
		t.Fatal(err)
	}
	other := bytes.Replace(lastn, []byte(`"name":"lastn"`), []byte(`"name":"other"`), 1)
	writeRename(t, filepath.Join(td.plugins, "start_loop.wasm"), other)
	waitFor(t, "the file's new bytes to serve", time.Minute, func() bool {
		p := d.policies()["start_loop.wasm"]
		return p.Serving && !p.Quarantined
	})
	d.stop()
	if entries, _ := os.ReadDir(filepath.Join(td.dir, "state", "quarantine")); len(entries) != 0 {
		t.Errorf("%d quarantine records left", len(entries))
	}
}

// withInitialMemory returns wasm with its memory section declaring pages
// initial pages (and no maximum).
func withInitialMemory(t testing.TB, wasm []byte, pages uint32) []byte {
	t.Helper()
	out := append([]byte(nil), wasm[:8]...)
	for rest := wasm[8:]; len(rest) > 0; {
		id := rest[0]
		size, n := binary.Uvarint(rest[1:])
		if n <= 0 {
			t.Fatal("malformed module")
		}
		body := rest[1+n : 1+n+int(size)]
		rest = rest[1+n+int(size):]
		if id == 5 { // the memory section: one memory, limits without a maximum
			body = binary.AppendUvarint([]byte{1, 0}, uint64(pages))
		}
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out
}

// TestConfigMemoryFit: a memory limit below what a serving plugin
// declares it needs at start is refused (the reload would unload the
// plugin), naming the key and the range that fits.
func TestConfigMemoryFit(t *testing.T) {
	t.Parallel()
	td := setup(t, "")
	lastn, err := os.ReadFile(wasmbuild.ForTest(t, pluginLastn))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(td.plugins, "lastn.wasm"), withInitialMemory(t, lastn, 600), 0o644) // 37.5 MiB
	td.start(t)
	for _, tt := range []struct{ patch, want string }{
		{`{"limits":{"plugin":{"max_memory_mb":32}}}`, "limits.plugin.max_memory_mb: 32 is out of range (allowed: 38 to 4096 while plugin lastn is loaded (it declares 38 MiB of initial memory)"},
		{`{"limits":{"plugins":{"lastn":{"max_memory_mb":16}}}}`, "limits.plugins.lastn.max_memory_mb: 16 is out of range (allowed: 38 to 4096"},
	} {
		status, body, _ := td.raw(t, "PUT", "/v1/config", tt.patch)
		if code, msg := errorCode(t, body); status != 400 || code != CodeInvalidConfig || !strings.Contains(msg, tt.want) {
			t.Errorf("%s: %d %s %q", tt.patch, status, code, msg)
		}
	}
	if _, err := os.Stat(td.config); !os.IsNotExist(err) {
		t.Errorf("a rejected update wrote the config file: %v", err)
	}
	if _, err := td.c.UpdateConfig(bg, map[string]any{"limits": map[string]any{"plugin": map[string]any{"max_memory_mb": 64}}}); err != nil {
		t.Fatal(err)
	}
	if p, err := td.c.Policy(bg, "lastn"); err != nil || !p.Serving || p.Limits.MaxMemoryBytes != 64<<20 {
		t.Errorf("after a limit that fits: %+v %v", p, err)
	}
}
