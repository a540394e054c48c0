package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// leaveMarker writes the marker a daemon that died loading path's bytes
// leaves behind (the real thing is tested in internal/server, by killing
// a daemon process mid-load).
func leaveMarker(t testing.TB, stateDir, path string, wasm []byte) {
	leaveWork(t, stateDir, path, wasm, "", 4242)
}

// leaveWork writes the marker of a daemon (pid) that died with work of
// kind on path's bytes under way.
func leaveWork(t testing.TB, stateDir, path string, wasm []byte, kind string, pid int) {
	t.Helper()
	dir := filepath.Join(stateDir, markerDir)
	os.MkdirAll(dir, 0o700)
	rec := loadRecord{File: path, SHA256: hashOf(wasm), Kind: kind, PID: pid, Started: time.Now().Add(-time.Minute)}
	name := fmt.Sprintf("%s-%d-%s.json", recordID(path), pid, kind)
	if err := writeRecord(filepath.Join(dir, name), rec); err != nil {
		t.Fatal(err)
	}
}

func startRegistry(t testing.TB, dir, stateDir string) *Registry {
	t.Helper()
	r := New(Options{Dir: dir, Engine: newEngine(t), Debounce: 20 * time.Millisecond, StateDir: stateDir})
	t.Cleanup(func() { r.Close(bg) })
	startReady(t, r)
	return r
}

func markersLeft(t testing.TB, stateDir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(stateDir, markerDir))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestQuarantine: a file the last daemon died loading is not loaded, says
// why, and leaves the others serving; new bytes, or the file removed and
// put back, end the quarantine.
func TestQuarantine(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	lastn := built(t, "plugins/lastn/lastn.c")
	bad := filepath.Join(dir, "lastn.wasm")
	os.WriteFile(bad, lastn, 0o644)
	os.WriteFile(filepath.Join(dir, "other.wasm"), withDescribe(t, lastn, "name", "other"), 0o644)
	leaveMarker(t, state, bad, lastn)

	r := startRegistry(t, dir, state)
	in := fileInfo(r, bad)
	if !in.Quarantined || in.Plugin != nil || !errors.Is(in.Error, ErrQuarantined) || !strings.Contains(in.Error.Error(), "pid 4242") {
		t.Fatalf("lastn.wasm: %+v", in)
	}
	if servingVersion(r, "other") == "" {
		t.Fatal("the other plugin does not serve")
	}
	if left := markersLeft(t, state); len(left) != 0 {
		t.Errorf("markers left after the loads: %v", left)
	}
	r.Close(bg)

	// The quarantine outlives a restart...
	r = startRegistry(t, dir, state)
	if in := fileInfo(r, bad); !in.Quarantined {
		t.Fatalf("after a restart: %+v", in)
	}
	// ... and ends when the bytes change.
	writeRename(t, bad, lastnVersion(t, "0.9.0"))
	waitFor(t, "new bytes to serve", func() bool { return servingVersion(r, "lastn") == "0.9.0" })
	if entries, _ := os.ReadDir(filepath.Join(state, quarantineDir)); len(entries) != 0 {
		t.Errorf("quarantine records left: %d", len(entries))
	}
	r.Close(bg)

	// Removing the file and putting it back also ends it.
	os.WriteFile(bad, lastn, 0o644)
	leaveMarker(t, state, bad, lastn)
	r = startRegistry(t, dir, state)
	if in := fileInfo(r, bad); !in.Quarantined {
		t.Fatalf("second quarantine: %+v", in)
	}
	os.Remove(bad)
	waitFor(t, "the file to go", func() bool { return fileInfo(r, bad).File == "" })
	os.WriteFile(bad, lastn, 0o644)
	waitFor(t, "the file put back to serve", func() bool { return servingVersion(r, "lastn") == "0.4.0" })
}

// TestSuspects: when the last daemon died with several loads in flight,
// the files are loaded one at a time rather than all quarantined.
func TestSuspects(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	lastn := built(t, "plugins/lastn/lastn.c")
	a, b := filepath.Join(dir, "a.wasm"), filepath.Join(dir, "b.wasm")
	wa, wb := withDescribe(t, lastn, "name", "aaaaa"), withDescribe(t, lastn, "name", "bbbbb")
	os.WriteFile(a, wa, 0o644)
	os.WriteFile(b, wb, 0o644)
	leaveMarker(t, state, a, wa)
	leaveMarker(t, state, b, wb)
	r := startRegistry(t, dir, state)
	if servingVersion(r, "aaaaa") == "" || servingVersion(r, "bbbbb") == "" {
		t.Fatalf("suspects did not load: %+v", r.Policies())
	}
	if len(r.suspects) != 0 || len(markersLeft(t, state)) != 0 {
		t.Errorf("suspects %v, markers %v", r.suspects, markersLeft(t, state))
	}
}

// TestFileTooLarge: a file over the size limit is refused unread.
func TestFileTooLarge(t *testing.T) {
	dir := t.TempDir()
	lastn := built(t, "plugins/lastn/lastn.c")
	os.WriteFile(filepath.Join(dir, "big.wasm"), append(withDescribe(t, lastn, "name", "bigxx"), make([]byte, 64<<10)...), 0o644)
	os.WriteFile(filepath.Join(dir, "lastn.wasm"), lastn, 0o644)
	r := New(Options{Dir: dir, Engine: newEngine(t), MaxFileBytes: int64(len(lastn)) + 1024})
	defer r.Close(bg)
	if err := r.LoadAll(bg); err != nil {
		t.Fatal(err)
	}
	in := fileInfo(r, filepath.Join(dir, "big.wasm"))
	if !errors.Is(in.Error, ErrTooLarge) || !strings.Contains(in.Error.Error(), "the limit is") {
		t.Errorf("big.wasm: %+v", in)
	}
	if servingVersion(r, "lastn") == "" {
		t.Error("lastn does not serve")
	}
}

// TestCrashEvidence: what a start makes of the markers a dead daemon
// left, by the work under way and what else was.
func TestCrashEvidence(t *testing.T) {
	lastn := built(t, "plugins/lastn/lastn.c")
	other := withDescribe(t, lastn, "name", "other")
	tests := []struct {
		name string
		// leave leaves the markers, in the directory dir, state state.
		leave func(t *testing.T, dir, state string)
		// quarantined: the file lastn.wasm is quarantined, with reason;
		// else it serves.
		quarantined bool
		reason      string
	}{
		{"a load alone", func(t *testing.T, dir, state string) {
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, kindLoad, 4242)
		}, true, reasonLoad},
		{"a load, in a marker of an older daemon (no kind)", func(t *testing.T, dir, state string) {
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, "", 4242)
		}, true, reasonLoad},
		{"a first compile alone", func(t *testing.T, dir, state string) {
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, kindCompile, 4242)
		}, false, ""},
		{"a compile alone, of bytes that crashed the daemon before", func(t *testing.T, dir, state string) {
			r := New(Options{StateDir: state})
			r.updateHistory(hashOf(lastn), func(h *record) bool { h.Crashes = 1; return true })
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, kindCompile, 4242)
		}, true, reasonCompile},
		{"a load and a compile of the same file", func(t *testing.T, dir, state string) {
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, kindCompile, 4242)
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, kindLoad, 4242)
		}, true, reasonLoad},
		{"two files", func(t *testing.T, dir, state string) {
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, kindLoad, 4242)
			leaveWork(t, state, filepath.Join(dir, "other.wasm"), other, kindLoad, 4242)
		}, false, ""},
		{"a load when the daemon was stopping", func(t *testing.T, dir, state string) {
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, kindLoad, 4242)
			writeRecord(filepath.Join(state, markerDir, stoppingNote), stopping{PID: 4242, At: time.Now()})
		}, false, ""},
		{"a load after another daemon stopped", func(t *testing.T, dir, state string) {
			leaveWork(t, state, filepath.Join(dir, "lastn.wasm"), lastn, kindLoad, 4242)
			writeRecord(filepath.Join(state, markerDir, stoppingNote), stopping{PID: 4241, At: time.Now()})
		}, true, reasonLoad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, state := t.TempDir(), t.TempDir()
			path := filepath.Join(dir, "lastn.wasm")
			os.WriteFile(path, lastn, 0o644)
			os.WriteFile(filepath.Join(dir, "other.wasm"), other, 0o644)
			tt.leave(t, dir, state)
			r := startRegistry(t, dir, state)
			in := fileInfo(r, path)
			if servingVersion(r, "other") == "" {
				t.Errorf("other.wasm does not serve: %+v", fileInfo(r, filepath.Join(dir, "other.wasm")))
			}
			if left := markersLeft(t, state); len(left) != 0 {
				t.Errorf("markers left after the start: %v", left)
			}
			if !tt.quarantined {
				if in.Plugin == nil || in.Quarantined {
					t.Fatalf("lastn.wasm does not serve: %+v", in)
				}
				// It got through: its bytes have no crash against them.
				r.histMu.Lock()
				h := r.historyLocked(hashOf(lastn))
				r.histMu.Unlock()
				if h != nil && h.Crashes != 0 {
					t.Errorf("history after a load that got through: %+v", h)
				}
				return
			}
			if !in.Quarantined || in.Plugin != nil || !strings.Contains(in.Error.Error(), tt.reason) || !strings.Contains(in.Error.Error(), "compactd plugins retry lastn") {
				t.Fatalf("lastn.wasm: %+v", in)
			}
			// A retry lifts the quarantine, and the file serves.
			in, err := r.Retry(context.Background(), "lastn")
			if err != nil || in.Plugin == nil || in.Quarantined || in.Error != nil {
				t.Fatalf("after Retry: %v, %+v", err, in)
			}
			if entries, _ := os.ReadDir(filepath.Join(state, quarantineDir)); len(entries) != 0 {
				t.Errorf("%d quarantine records left after Retry", len(entries))
			}
		})
	}
}

// TestCompileMarkers: the first compile of some bytes by this build is
// marked; once one got through, compiling them again is ordinary work,
// and writes no marker.
func TestCompileMarkers(t *testing.T) {
	state := t.TempDir()
	r := New(Options{StateDir: state})
	r.recoverMarkers()
	hook := r.compiling("/plugins/x.wasm", "abc123")
	done := hook()
	if done == nil || len(markersLeft(t, state)) != 1 {
		t.Fatalf("a first compile: done %v, markers %v", done != nil, markersLeft(t, state))
	}
	done()
	if left := markersLeft(t, state); len(left) != 0 || !r.compiledBefore("abc123") {
		t.Fatalf("after it: markers %v, compiled %v", left, r.compiledBefore("abc123"))
	}
	if hook() != nil {
		t.Error("a second compile of the same bytes is marked")
	}
	// Another registry on the same state (the next start) knows it; a
	// registry of another build would not.
	r2 := New(Options{StateDir: state})
	if !r2.compiledBefore("abc123") {
		t.Error("the next start does not know the bytes compiled")
	}
	r2.compiler = "another build"
	if r2.compiledBefore("abc123") {
		t.Error("another build trusts this one's compile")
	}
}

// TestRetryByDescribedName: a quarantined file whose bytes' description
// is cached is found, and retried, by the policy it serves.
func TestRetryByDescribedName(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	described := filepath.Join(state, "described")
	lastn := built(t, "plugins/lastn/lastn.c")
	path := filepath.Join(dir, "some-file.wasm")
	os.WriteFile(path, lastn, 0o644)
	open := func() *Registry {
		r := New(Options{Dir: dir, Engine: newEngine(t), StateDir: state, DescribedDir: described})
		t.Cleanup(func() { r.Close(bg) })
		startReady(t, r)
		return r
	}
	r := open()
	if servingVersion(r, "lastn") == "" {
		t.Fatal("lastn does not serve")
	}
	r.Close(bg)
	leaveWork(t, state, path, lastn, kindLoad, 4242)
	r = open()
	in, ok := r.Policy("lastn")
	if !ok || !in.Quarantined || in.Name != "lastn" || in.File != path {
		t.Fatalf("Policy(lastn) of the quarantined file: %v %+v", ok, in)
	}
	if in, err := r.Retry(bg, "lastn"); err != nil || in.Plugin == nil {
		t.Fatalf("Retry(lastn): %v %+v", err, in)
	}
}
