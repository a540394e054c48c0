package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	t.Helper()
	dir := filepath.Join(stateDir, markerDir)
	os.MkdirAll(dir, 0o700)
	rec := loadRecord{File: path, SHA256: hashOf(wasm), PID: 4242, Started: time.Now().Add(-time.Minute)}
	if err := writeRecord(filepath.Join(dir, recordID(path)+".json"), rec); err != nil {
		t.Fatal(err)
	}
}

func startRegistry(t testing.TB, dir, stateDir string) *Registry {
	t.Helper()
	r := New(Options{Dir: dir, Engine: newEngine(t), Debounce: 20 * time.Millisecond, StateDir: stateDir})
	t.Cleanup(func() { r.Close(bg) })
	if err := r.Start(bg); err != nil {
		t.Fatal(err)
	}
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
	waitFor(t, "the file put back to serve", func() bool { return servingVersion(r, "lastn") == "0.3.0" })
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
