package wasmbuild

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A C plugin built once is used again as long as its inputs are the same
// (the second build is a lookup: the file is not written again); other
// defines are another module, in a directory of its own, under the
// plugin's own file name.
func TestBuildForTestReusesCModules(t *testing.T) {
	dir := t.TempDir()
	first, err := buildForTest(dir, "host/testdata/hostile/hostile.c#HOSTILE_TRAP")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(first) != "hostile_HOSTILE_TRAP.wasm" {
		t.Errorf("module is named %s", filepath.Base(first))
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(first, old, old); err != nil {
		t.Fatal(err)
	}
	again, err := buildForTest(dir, "host/testdata/hostile/hostile.c#HOSTILE_TRAP")
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("second build at %s, first at %s", again, first)
	}
	if st, err := os.Stat(again); err != nil || !st.ModTime().Equal(old) {
		t.Errorf("the module was built again (%v, %v)", st.ModTime(), err)
	}
	other, err := buildForTest(dir, "host/testdata/hostile/hostile.c#HOSTILE_BADREF")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(other) == filepath.Dir(first) {
		t.Errorf("other defines share %s", filepath.Dir(first))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// Modules built from other sources never take each other's place (a
// module is named by its bytes), and the same source built again lands in
// the same place with the same bytes.
func TestBuildForTestNamesModulesByContent(t *testing.T) {
	dir := t.TempDir()
	a, err := buildForTest(dir, "host/testdata/hostile/missing_export.wat")
	if err != nil {
		t.Fatal(err)
	}
	b, err := buildForTest(dir, "host/testdata/hostile/unknown_import.wat")
	if err != nil {
		t.Fatal(err)
	}
	if a == b || filepath.Base(a) != "missing_export.wasm" {
		t.Fatalf("modules at %s and %s", a, b)
	}
	want, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	again, err := buildForTest(dir, "host/testdata/hostile/missing_export.wat")
	if err != nil || again != a {
		t.Fatalf("the same text module built again lands at %s (%v), want %s", again, err, a)
	}
	if got, _ := os.ReadFile(again); string(got) != string(want) {
		t.Error("the module's bytes changed")
	}
}

// Pruning removes what was not used within the cutoff, and keeps the
// rest.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"old", "new"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name, "m.wasm"), []byte("\x00asm"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "stale.wasm.tmp"), nil, 0o644)
	old := time.Now().Add(-2 * testKeep)
	os.Chtimes(filepath.Join(dir, "old"), old, old)
	os.Chtimes(filepath.Join(dir, "stale.wasm.tmp"), old, old)
	prune(dir, time.Now().Add(-testKeep))
	if _, err := os.Stat(filepath.Join(dir, "old")); !os.IsNotExist(err) {
		t.Errorf("old module kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stale.wasm.tmp")); !os.IsNotExist(err) {
		t.Errorf("stale temporary file kept: %v", err)
	}
	if !touch(filepath.Join(dir, "new", "m.wasm")) {
		t.Error("the module used recently was removed")
	}
}
