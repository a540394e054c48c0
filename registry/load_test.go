package registry

import (
	"context"
	"errors"
	"github.com/compactd/compactd/internal/hostilewasm"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compactd/compactd/host"
)

// TestOnlyRegularFiles: FIFOs, devices, sockets and symlinks to them (or
// to nothing) are refused at once with an error that says what they are;
// a symlink to a regular file loads. None of them holds up the others, at
// the start or when they appear later, and Close is not held up either.
func TestOnlyRegularFiles(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	lastn := built(t, "plugins/lastn/lastn.c")
	path := func(name string) string { return filepath.Join(dir, name) }
	os.WriteFile(path("lastn.wasm"), lastn, 0o644)
	target := filepath.Join(elsewhere, "linked.wasm")
	os.WriteFile(target, withDescribe(t, lastn, "name", "lnked"), 0o644)
	os.Symlink(target, path("linked.wasm"))
	if err := syscall.Mkfifo(filepath.Join(elsewhere, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(elsewhere, "fifo"), path("to-fifo.wasm"))
	if err := syscall.Mkfifo(path("fifo.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/dev/zero", path("zero.wasm"))
	os.Symlink(filepath.Join(elsewhere, "gone"), path("dangling.wasm"))
	ln, err := net.Listen("unix", path("sock.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	r := newRegistry(t, dir)
	startReady(t, r)
	if servingVersion(r, "lastn") == "" || servingVersion(r, "lnked") == "" {
		t.Fatalf("the regular file and the symlink to one do not serve: %+v", r.Policies())
	}
	refused := map[string]string{
		"fifo.wasm":     "fifo.wasm is a FIFO (named pipe); only regular files (or symlinks to them) are loaded",
		"to-fifo.wasm":  "to-fifo.wasm is a symlink to a FIFO (named pipe)",
		"zero.wasm":     "zero.wasm is a symlink to a character device",
		"sock.wasm":     "sock.wasm is a socket",
		"dangling.wasm": "dangling.wasm is a symlink to " + filepath.Join(elsewhere, "gone") + ", which does not exist",
	}
	check := func() {
		t.Helper()
		for name, want := range refused {
			in := fileInfo(r, path(name))
			if in.Plugin != nil || !errors.Is(in.Error, ErrNotRegular) || !strings.Contains(in.Error.Error(), want) {
				t.Errorf("%s: %+v; want an error containing %q", name, in, want)
			}
		}
	}
	check()

	// Later: a FIFO appears, then a plugin; the plugin loads.
	if err := syscall.Mkfifo(path("late-fifo.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused["late-fifo.wasm"] = "late-fifo.wasm is a FIFO"
	waitFor(t, "the late FIFO refused", func() bool { return fileInfo(r, path("late-fifo.wasm")).Error != nil })
	writeRename(t, path("later.wasm"), withDescribe(t, lastn, "name", "later"))
	waitFor(t, "a plugin dropped after the FIFO to serve", func() bool { return servingVersion(r, "later") != "" })
	check()
	// A file replaced by a FIFO is refused; its policy goes.
	os.Remove(path("lastn.wasm"))
	syscall.Mkfifo(path("lastn.wasm"), 0o644)
	waitFor(t, "lastn.wasm, now a FIFO, refused", func() bool { return errors.Is(fileInfo(r, path("lastn.wasm")).Error, ErrNotRegular) })

	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// loopLimits gives the plugin file loop.wasm (a start section that
// never returns) ten minutes and the largest start work budget: its load
// is under way for the whole test.
var loopLimits = map[string]host.Limits{"loop": {CallTimeout: 10 * time.Minute, StartWorkBudget: host.MaxWorkBudget}}

// TestSlowLoadRunsBeside: a load that does not end (a start section
// looping under a long limit) holds nothing up: the other files serve,
// Acquire waits for a policy still loading rather than failing, files
// dropped meanwhile load, and Close ends the slow load.
func TestSlowLoadRunsBeside(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "loop.wasm"), built(t, "host/testdata/hostile/start_loop.wat"), 0o644)
	os.WriteFile(filepath.Join(dir, "lastn.wasm"), built(t, "plugins/lastn/lastn.c"), 0o644)
	r := New(Options{Dir: dir, Engine: newEngine(t), Smoke: daemonSmoke(), Limits: loopLimits})
	defer r.Close(bg)
	if err := r.Start(bg); err != nil {
		t.Fatal(err)
	}
	// lastn may not be loaded yet: Acquire waits for it.
	p, release, err := r.Acquire(bg, "lastn")
	if err != nil {
		t.Fatalf("Acquire during the start: %v", err)
	}
	if err := compact(bg, p, sample(t)); err != nil {
		t.Fatal(err)
	}
	release()
	if !r.Starting() || !fileInfo(r, filepath.Join(dir, "loop.wasm")).Loading || r.Counters().Loading != 1 {
		t.Fatalf("the loop's load is not under way: starting %v, %+v", r.Starting(), r.Policies())
	}
	select {
	case <-r.Ready():
		t.Fatal("Ready while a file is still loading")
	default:
	}
	// A name no file serves yet waits while a file of unknown name loads,
	// for as long as its caller lets it.
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	if _, _, err := r.Acquire(ctx, "nope"); !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), "still loading its plugins") {
		t.Errorf("Acquire of an unknown name during the start: %v", err)
	}
	// A file dropped now loads beside the slow one.
	writeRename(t, filepath.Join(dir, "later.wasm"), withDescribe(t, built(t, "plugins/lastn/lastn.c"), "name", "later"))
	waitFor(t, "a file dropped during the start to serve", func() bool { return servingVersion(r, "later") != "" })

	cctx, ccancel := context.WithTimeout(bg, time.Minute)
	defer ccancel()
	if err := r.Close(cctx); err != nil {
		t.Errorf("Close while a load loops: %v", err)
	}
	<-r.Ready()
}

// TestFailuresRemembered: with a state directory, a file that failed to
// load is not loaded again at the next start (its error says it failed
// before and how to retry) until its bytes change, its limits change, or
// Retry.
func TestFailuresRemembered(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	trap := filepath.Join(dir, "trap.wasm")
	os.WriteFile(trap, built(t, "host/testdata/hostile/hostile.c#HOSTILE_TRAP"), 0o644)
	os.WriteFile(filepath.Join(dir, "lastn.wasm"), built(t, "plugins/lastn/lastn.c"), 0o644)
	open := func() *Registry {
		r := New(Options{Dir: dir, Engine: newEngine(t), Smoke: daemonSmoke(), StateDir: state})
		t.Cleanup(func() { r.Close(bg) })
		startReady(t, r)
		return r
	}
	r := open()
	first := fileInfo(r, trap)
	if !errors.Is(first.Error, ErrSmoke) || r.Counters().Loads != 2 {
		t.Fatalf("trap.wasm: %+v; %d loads", first, r.Counters().Loads)
	}
	r.Close(bg)

	r = open()
	in := fileInfo(r, trap)
	if r.Counters().Loads != 1 || servingVersion(r, "lastn") == "" {
		t.Errorf("after a restart: %d loads, want lastn's alone", r.Counters().Loads)
	}
	if !errors.Is(in.Error, ErrFailedBefore) || !strings.Contains(in.Error.Error(), first.Error.Error()) ||
		!strings.Contains(in.Error.Error(), "compactd plugins retry trap") || in.ErrorSHA256 != first.ErrorSHA256 {
		t.Errorf("the remembered failure: %+v", in)
	}
	// New limits are a new try (for lastn too: its limits changed).
	r.SetLimits(bg, host.Limits{CallTimeout: 9 * time.Second}, nil)
	waitFor(t, "trap.wasm tried again", func() bool {
		in := fileInfo(r, trap)
		return !in.Loading && errors.Is(in.Error, ErrSmoke) && !errors.Is(in.Error, ErrFailedBefore)
	})
	if n := r.Counters().Loads; n != 3 {
		t.Errorf("after new limits: %d loads, want 3", n)
	}
	// So is a retry by hand.
	in, err := r.Retry(bg, "trap")
	if err != nil || r.Counters().Loads != 4 || in.File != trap || !errors.Is(in.Error, ErrSmoke) || in.Loading {
		t.Errorf("Retry: %v, %d loads, %+v", err, r.Counters().Loads, in)
	}
	if _, err := r.Retry(bg, "nope"); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("Retry of an unknown name: %v", err)
	}
	r.Close(bg)

	// New bytes are loaded.
	writeRename(t, trap, withDescribe(t, built(t, "plugins/lastn/lastn.c"), "name", "fixed"))
	r = open()
	if servingVersion(r, "fixed") == "" {
		t.Errorf("new bytes in the file: %+v", fileInfo(r, trap))
	}
}

// TestCompileBudgetFailureNotRemembered: a module refused by the compile
// budget is not remembered as a failed file; a restart with a larger
// budget loads it (here: refused again, by the same check, not by the
// record of the first refusal).
func TestCompileBudgetFailureNotRemembered(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	big := filepath.Join(dir, "big.wasm")
	os.WriteFile(big, hostilewasm.Calls(1<<20), 0o644)
	for range 2 {
		e, err := host.NewEngine(host.Config{MaxTotalMemory: 1 << 30, MaxCompileMemory: 256 << 20})
		if err != nil {
			t.Fatal(err)
		}
		r := New(Options{Dir: dir, Engine: e, StateDir: state})
		startReady(t, r)
		in := fileInfo(r, big)
		if !errors.Is(in.Error, host.ErrCompileBudget) || errors.Is(in.Error, ErrFailedBefore) {
			t.Errorf("big.wasm: %+v; want ErrCompileBudget, not remembered", in)
		}
		r.Close(bg)
		e.Close(bg)
	}
}
