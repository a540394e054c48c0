package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/conform"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
)

var bg = context.Background()

func newEngine(t testing.TB) *host.Engine {
	t.Helper()
	e, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(bg) })
	return e
}

// built returns the bytes of a plugin built from source (see
// wasmbuild.ForTest).
func built(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(wasmbuild.ForTest(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withDescribe returns a copy of a plugin whose describe output is a
// string literal in its data section (the C plugins') with the value of
// key replaced by value, which must have the same length: a real,
// different module (another hash, another version) from one build.
func withDescribe(t testing.TB, wasm []byte, key, value string) []byte {
	t.Helper()
	marker := []byte(`"` + key + `":"`)
	i := bytes.Index(wasm, marker)
	if i < 0 || bytes.Contains(wasm[i+1:], marker) {
		t.Fatalf("want exactly one %s in the module", marker)
	}
	start := i + len(marker)
	end := start + bytes.IndexByte(wasm[start:], '"')
	if end-start != len(value) {
		t.Fatalf("%s is %q; the replacement %q must have its length", key, wasm[start:end], value)
	}
	out := bytes.Clone(wasm)
	copy(out[start:end], value)
	return out
}

// lastnVersion returns the lastn plugin describing itself as version v
// (5 characters, like its own "0.4.0").
func lastnVersion(t testing.TB, v string) []byte {
	return withDescribe(t, built(t, "plugins/lastn/lastn.c"), "version", v)
}

// writeRename writes data next to path and renames it into place, as
// build tools and `make plugins` do.
func writeRename(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// daemonSmoke is the smoke test the daemon gives its registry.
func daemonSmoke() func(context.Context, *host.Plugin) error {
	return conform.SmokeTest(tokens.New(tokens.Options{}).ForModel(""))
}

func newRegistry(t testing.TB, dir string) *Registry {
	t.Helper()
	r := New(Options{Dir: dir, Engine: newEngine(t), Debounce: 20 * time.Millisecond, Smoke: daemonSmoke()})
	t.Cleanup(func() { r.Close(bg) })
	return r
}

// startReady starts r and waits until every file of its directory has
// been tried.
func startReady(t testing.TB, r *Registry) {
	t.Helper()
	if err := r.Start(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Ready():
	case <-time.After(2 * time.Minute):
		t.Fatalf("the first scan is not over after 2 minutes: %+v", r.Policies())
	}
}

// servingVersion returns the version serving name, or "" if none.
func servingVersion(r *Registry, name string) string {
	p, release, err := r.Acquire(bg, name)
	if err != nil {
		return ""
	}
	defer release()
	return p.Version()
}

func fileInfo(r *Registry, path string) Info {
	for _, in := range r.Policies() {
		if in.File == path {
			return in
		}
	}
	return Info{}
}

// sample returns the richest conform sample, counted.
func sample(t testing.TB) *chat.Conversation {
	convs, _, err := conform.Samples(tokens.New(tokens.Options{}).ForModel(""))
	if err != nil {
		t.Fatal(err)
	}
	return convs[3]
}

func compact(ctx context.Context, p *host.Plugin, conv *chat.Conversation) error {
	cfg, err := p.Schema().Resolve()
	if err != nil {
		return err
	}
	_, err = p.Compact(ctx, &host.Request{Conversation: conv, Config: cfg})
	return err
}

func TestLoadAllAndAcquire(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "lastn.wasm"), built(t, "plugins/lastn/lastn.c"), 0o644)
	os.WriteFile(filepath.Join(dir, "broken.wasm"), []byte("not wasm"), 0o644)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("ignored"), 0o644)
	os.WriteFile(filepath.Join(dir, ".hidden.wasm"), []byte("ignored"), 0o644)
	r := newRegistry(t, dir)
	if err := r.LoadAll(bg); err != nil {
		t.Fatal(err)
	}
	infos := r.Policies()
	if len(infos) != 2 {
		t.Fatalf("policies = %+v", infos)
	}
	if in := infos[0]; in.Plugin != nil || in.Name != "" || !errors.Is(in.Error, host.ErrInvalidModule) || in.ErrorSHA256 == "" {
		t.Errorf("broken.wasm = %+v", in)
	}
	if in := infos[1]; in.Plugin == nil || in.Name != "lastn" || in.Error != nil || len(in.SHA256) != 64 || in.LoadedAt.IsZero() {
		t.Errorf("lastn.wasm = %+v", in)
	}
	p, release, err := r.Acquire(bg, "lastn")
	if err != nil {
		t.Fatal(err)
	}
	if err := compact(bg, p, sample(t)); err != nil {
		t.Fatal(err)
	}
	release()
	release() // a second release does nothing
	_, _, err = r.Acquire(bg, "nope")
	if !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), "available: lastn") || !strings.Contains(err.Error(), "broken.wasm") {
		t.Errorf("unknown policy error = %v", err)
	}
	if in, ok := r.Policy("lastn"); !ok || in.Plugin == nil {
		t.Errorf("Policy(lastn) = %+v", in)
	}
	if in, ok := r.Policy("broken"); !ok || in.Error == nil {
		t.Errorf("Policy(broken) falls back to the file name: %+v", in)
	}
	if _, ok := r.Policy("absent"); ok {
		t.Error("Policy(absent) found")
	}
	if c := r.Counters(); c.Loads != 2 || c.LoadFailures != 1 || c.Serving != 1 {
		t.Errorf("counters = %+v", c)
	}
}

func TestStartNoDir(t *testing.T) {
	r := New(Options{Dir: filepath.Join(t.TempDir(), "missing"), Engine: newEngine(t)})
	if err := r.Start(bg); !errors.Is(err, ErrNoDir) {
		t.Errorf("Start = %v", err)
	}
	r.Close(bg)
}

// TestSmokeOption: Options.Smoke decides whether a loaded version serves.
// Without one, a plugin that loads and describes serves (even one whose
// compact traps); a check's error refuses the version with ErrSmoke and
// keeps the check's own error.
func TestSmokeOption(t *testing.T) {
	t.Parallel()
	trap := built(t, "host/testdata/hostile/hostile.c#HOSTILE_TRAP")
	refused := errors.New("refused by the embedder's check")
	var checked atomic.Int32
	tests := []struct {
		name    string
		smoke   func(context.Context, *host.Plugin) error
		wantErr []error // nil: the plugin serves
	}{
		{"no smoke test", nil, nil},
		{"the daemon's smoke test", daemonSmoke(), []error{ErrSmoke, host.ErrTrap}},
		{"a check that refuses", func(context.Context, *host.Plugin) error { checked.Add(1); return refused }, []error{ErrSmoke, refused}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "trap.wasm"), trap, 0o644)
			r := New(Options{Dir: dir, Engine: newEngine(t), Smoke: tt.smoke})
			t.Cleanup(func() { r.Close(bg) })
			r.LoadAll(bg)
			in := fileInfo(r, filepath.Join(dir, "trap.wasm"))
			if tt.wantErr == nil {
				if in.Error != nil || in.Plugin == nil {
					t.Fatalf("want the plugin serving, got error %v", in.Error)
				}
				return
			}
			if in.Plugin != nil {
				t.Fatalf("a plugin that failed its smoke test serves (%s)", in.Name)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(in.Error, want) {
					t.Errorf("load error %v; want it to wrap %v", in.Error, want)
				}
			}
		})
	}
	if checked.Load() != 1 {
		t.Errorf("the embedder's check ran %d times, want once", checked.Load())
	}
}

// TestHotReload walks one file through the life of a plugin in a watched
// directory.
func TestHotReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lastn.wasm")
	v1 := lastnVersion(t, "1.0.0")
	os.WriteFile(path, v1, 0o644)
	r := newRegistry(t, dir)
	startReady(t, r)
	if v := servingVersion(r, "lastn"); v != "1.0.0" {
		t.Fatalf("serving %q", v)
	}
	loads := func() uint64 { return r.Counters().Loads }

	inPlace := func(data []byte) { os.WriteFile(path, data, 0o644) }
	rename := func(data []byte) { writeRename(t, path, data) }
	steps := []struct {
		name    string
		write   func([]byte)
		data    []byte
		version string // what serves afterwards
		wantErr error  // the file's recorded error (nil: none)
	}{
		{"write in place", inPlace, lastnVersion(t, "2.0.0"), "2.0.0", nil},
		{"rename into place", rename, lastnVersion(t, "3.0.0"), "3.0.0", nil},
		{"truncated copy", inPlace, lastnVersion(t, "4.0.0")[:5000], "3.0.0", host.ErrInvalidModule},
		{"not wasm", rename, []byte("#!/bin/sh\necho hi\n"), "3.0.0", host.ErrInvalidModule},
		{"wrong ABI", rename, withDescribe(t, lastnVersion(t, "5.0.0"), "abi", "2.0"), "3.0.0", host.ErrABIMismatch},
		{"fails the smoke test", rename, built(t, "host/testdata/hostile/hostile.c#HOSTILE_TRAP"), "3.0.0", ErrSmoke},
		{"good again", rename, lastnVersion(t, "6.0.0"), "6.0.0", nil},
	}
	for _, st := range steps {
		sum := sha256.Sum256(st.data)
		hash := hex.EncodeToString(sum[:])
		st.write(st.data)
		waitFor(t, st.name+": the new bytes handled", func() bool {
			in := fileInfo(r, path)
			return in.SHA256 == hash || in.ErrorSHA256 == hash
		})
		in := fileInfo(r, path)
		if in.Plugin == nil || in.Plugin.Version() != st.version {
			t.Errorf("%s: serving %+v, want %s", st.name, in.Plugin, st.version)
		}
		if st.wantErr == nil {
			if in.Error != nil {
				t.Errorf("%s: error %v", st.name, in.Error)
			}
			continue
		}
		if !errors.Is(in.Error, st.wantErr) {
			t.Errorf("%s: error %v, want %v", st.name, in.Error, st.wantErr)
		}
	}

	// The same bad bytes are not tried again; the same good bytes are not
	// reloaded.
	bad := []byte("still not wasm")
	writeRename(t, path, bad)
	waitFor(t, "the bad file recorded", func() bool { return fileInfo(r, path).Error != nil })
	n := loads()
	for _, data := range [][]byte{bad, bad} {
		os.WriteFile(path, data, 0o644)
		time.Sleep(100 * time.Millisecond)
	}
	if loads() != n {
		t.Errorf("the same bad hash was loaded again (%d → %d loads)", n, loads())
	}
	// Putting the serving bytes back clears the error without a load.
	writeRename(t, path, lastnVersion(t, "6.0.0"))
	waitFor(t, "error cleared", func() bool { return fileInfo(r, path).Error == nil })
	time.Sleep(100 * time.Millisecond)
	if loads() != n {
		t.Errorf("unchanged bytes were loaded again")
	}

	// Removal unloads.
	os.Remove(path)
	waitFor(t, "lastn unloaded", func() bool { return servingVersion(r, "lastn") == "" })
	if _, _, err := r.Acquire(bg, "lastn"); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("Acquire after removal = %v", err)
	}
	if len(r.Policies()) != 0 {
		t.Errorf("removed file still listed: %+v", r.Policies())
	}
	c := r.Counters()
	if c.Reloads != 3 || c.Unloads != 1 || c.Serving != 0 {
		t.Errorf("counters = %+v", c)
	}
	waitFor(t, "old versions closed", func() bool { return r.Counters().Draining == 0 })
}

func TestConflict(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.wasm"), filepath.Join(dir, "b.wasm")
	os.WriteFile(a, lastnVersion(t, "0.0.a"), 0o644)
	os.WriteFile(b, lastnVersion(t, "0.0.b"), 0o644)
	r := newRegistry(t, dir)
	startReady(t, r)
	if v := servingVersion(r, "lastn"); v != "0.0.a" {
		t.Errorf("serving %q, want the first file's", v)
	}
	in := fileInfo(r, b)
	if !errors.Is(in.Error, ErrConflict) || in.Plugin != nil || !strings.Contains(in.Error.Error(), "a.wasm already serves") {
		t.Errorf("b.wasm = %+v", in)
	}
	if r.Counters().Conflicts != 1 {
		t.Errorf("conflicts = %d", r.Counters().Conflicts)
	}
	// When a.wasm goes, b.wasm takes the name.
	os.Remove(a)
	waitFor(t, "b.wasm serving", func() bool { return servingVersion(r, "lastn") == "0.0.b" })
	if in := fileInfo(r, b); in.Error != nil || in.Name != "lastn" {
		t.Errorf("b.wasm after a.wasm left: %+v", in)
	}
}

// TestRename: a file that starts describing another policy serves that
// name, and its old name goes away.
func TestRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.wasm")
	lastn := built(t, "plugins/lastn/lastn.c")
	os.WriteFile(path, lastn, 0o644)
	r := newRegistry(t, dir)
	startReady(t, r)
	writeRename(t, path, withDescribe(t, lastn, "name", "lastm"))
	waitFor(t, "lastm serving", func() bool { return servingVersion(r, "lastm") != "" })
	if v := servingVersion(r, "lastn"); v != "" {
		t.Errorf("lastn still served (%s)", v)
	}
}

// TestInFlight: a caller holding a version keeps it usable after it was
// replaced; it is closed at the last release.
func TestInFlight(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lastn.wasm")
	os.WriteFile(path, lastnVersion(t, "1.0.0"), 0o644)
	r := newRegistry(t, dir)
	startReady(t, r)
	old, release, err := r.Acquire(bg, "lastn")
	if err != nil {
		t.Fatal(err)
	}
	writeRename(t, path, lastnVersion(t, "2.0.0"))
	waitFor(t, "2.0.0 serving", func() bool { return servingVersion(r, "lastn") == "2.0.0" })
	if err := compact(bg, old, sample(t)); err != nil {
		t.Fatalf("the replaced version failed a call while held: %v", err)
	}
	select {
	case <-old.Done():
		t.Fatal("a held version was closed")
	default:
	}
	if r.Counters().Draining != 1 {
		t.Errorf("draining = %d", r.Counters().Draining)
	}
	release()
	select {
	case <-old.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced version was not closed after its last release")
	}
}

// TestAcquireHammer: goroutines acquire, call and release while the file
// is replaced many times. No call may fail, in particular with ErrClosed:
// a caller never gets a version that is being closed.
func TestAcquireHammer(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lastn.wasm")
	os.WriteFile(path, lastnVersion(t, "0.0.0"), 0o644)
	r := New(Options{Dir: dir, Engine: newEngine(t), Debounce: time.Millisecond, Smoke: daemonSmoke()})
	t.Cleanup(func() { r.Close(bg) })
	startReady(t, r)
	swaps, workers := 20, 8
	if testing.Short() {
		swaps = 10
	}
	conv := sample(t)
	var calls, failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, release, err := r.Acquire(bg, "lastn")
				if err == nil {
					err = compact(bg, p, conv)
					release()
				}
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					t.Errorf("call failed: %v", err)
				}
			}
		}()
	}
	for i := 1; i <= swaps; i++ {
		want := fmt.Sprintf("%05d", i)
		writeRename(t, path, lastnVersion(t, want))
		waitFor(t, want+" serving", func() bool { return servingVersion(r, "lastn") == want })
	}
	close(stop)
	wg.Wait()
	if failures.Load() > 0 || calls.Load() == 0 {
		t.Fatalf("%d of %d calls failed", failures.Load(), calls.Load())
	}
	waitFor(t, "replaced versions closed", func() bool { return r.Counters().Draining == 0 })
	t.Logf("%d calls over %d swaps", calls.Load(), swaps)
}

func TestSetLimits(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "lastn.wasm"), built(t, "plugins/lastn/lastn.c"), 0o644)
	r := newRegistry(t, dir)
	if err := r.LoadAll(bg); err != nil {
		t.Fatal(err)
	}
	limits := func() host.Limits {
		p, release, _ := r.Acquire(bg, "lastn")
		defer release()
		return p.Limits()
	}
	if got := limits().CallTimeout; got != host.DefaultCallTimeout {
		t.Fatalf("call timeout = %v", got)
	}
	r.SetLimits(bg, host.Limits{CallTimeout: time.Second}, map[string]host.Limits{"lastn": {MaxInstances: 1}})
	if got := limits(); got.CallTimeout != time.Second || got.MaxInstances != 1 {
		t.Errorf("limits after SetLimits = %+v", got)
	}
	loads := r.Counters().Loads
	r.SetLimits(bg, host.Limits{CallTimeout: time.Second}, map[string]host.Limits{"lastn": {MaxInstances: 1}})
	if r.Counters().Loads != loads {
		t.Error("unchanged limits reloaded the plugin")
	}
	// Limits keyed by a policy name that differs from the file name.
	os.Rename(filepath.Join(dir, "lastn.wasm"), filepath.Join(dir, "other.wasm"))
	r.LoadAll(bg)
	if got := limits(); got.MaxInstances != 1 {
		t.Errorf("limits of lastn loaded from other.wasm = %+v", got)
	}
}

func TestClose(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "lastn.wasm"), built(t, "plugins/lastn/lastn.c"), 0o644)
	r := New(Options{Dir: dir, Engine: newEngine(t)})
	startReady(t, r)
	p, release, err := r.Acquire(bg, "lastn")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with a held reference = %v, want a deadline error", err)
	}
	if err := compact(bg, p, sample(t)); err != nil {
		t.Errorf("held plugin failed after Close: %v", err)
	}
	release()
	<-p.Done()
	if _, _, err := r.Acquire(bg, "lastn"); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close = %v", err)
	}
	if err := r.Close(bg); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestDescribedCache: bytes that passed once serve from their cached
// description on the next start, compiled on first use; a corrupt or
// foreign entry is ignored; new bytes are checked (and a Go plugin's
// quick load serves interpreted until its compile is done).
func TestDescribedCache(t *testing.T) {
	dir := t.TempDir()
	described := filepath.Join(t.TempDir(), "described")
	os.WriteFile(filepath.Join(dir, "sliding.wasm"), built(t, "plugins/sliding"), 0o644)
	os.WriteFile(filepath.Join(dir, "lastn.wasm"), built(t, "plugins/lastn/lastn.c"), 0o644)
	start := func() *Registry {
		r := New(Options{Dir: dir, Engine: newEngine(t), DescribedDir: described, Quick: true, Smoke: daemonSmoke()})
		if err := r.LoadAll(bg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(bg) })
		return r
	}
	tier := func(r *Registry, name string) string {
		p, release, err := r.Acquire(bg, name)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		return p.Tier()
	}
	r := start()
	if got := tier(r, "sliding"); got != host.TierInterpreted && got != host.TierCompiled {
		t.Errorf("first load: sliding %s", got)
	}
	entries, _ := filepath.Glob(filepath.Join(described, "*.json"))
	if len(entries) != 2 {
		t.Fatalf("%d cached descriptions, want 2", len(entries))
	}
	r2 := start()
	for _, name := range []string{"sliding", "lastn"} {
		if got := tier(r2, name); got != host.TierLazy {
			t.Errorf("restart: %s is %s, want lazy", name, got)
		}
		p, release, _ := r2.Acquire(bg, name)
		if p.Stats().Calls != 0 {
			t.Errorf("%s: smoke-tested again (%d calls)", name, p.Stats().Calls)
		}
		if err := daemonSmoke()(bg, p); err != nil {
			t.Errorf("%s from its description: %v", name, err)
		}
		release()
	}
	// A corrupt entry is ignored: the file is checked again.
	for _, e := range entries {
		os.WriteFile(e, []byte("{not json"), 0o644)
	}
	r3 := start()
	if got := tier(r3, "lastn"); got == host.TierLazy {
		t.Error("a corrupt cache entry was trusted")
	}
}
