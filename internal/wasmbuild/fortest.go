package wasmbuild

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Builds made for tests are shared by every test in one process: a package
// that loads the sliding plugin in twenty tests builds it once.
var (
	testMu     sync.Mutex
	testDir    string
	testBuilds = map[string]*testBuild{}
)

type testBuild struct {
	once sync.Once
	path string
	err  error
}

// ForTest builds the plugin at rel (a path relative to the module root:
// "plugins/sliding" for a Go plugin, "plugins/lastn/lastn.c" for a C one,
// optionally followed by "#NAME=VALUE" defines for C, or a ".wat" text
// module) once per test process and returns the .wasm path. It fails the
// test if the build fails.
func ForTest(tb testing.TB, rel string) string {
	tb.Helper()
	testMu.Lock()
	if testDir == "" {
		// One directory per machine, files overwritten in place: test
		// runs leave no clutter behind.
		d := filepath.Join(os.TempDir(), "compactd-test-wasm")
		if err := os.MkdirAll(d, 0o755); err != nil {
			testMu.Unlock()
			tb.Fatalf("wasmbuild: %v", err)
		}
		testDir = d
	}
	b := testBuilds[rel]
	if b == nil {
		b = &testBuild{}
		testBuilds[rel] = b
	}
	dir := testDir
	testMu.Unlock()

	b.once.Do(func() {
		root, err := ModuleRoot(".")
		if err != nil {
			b.err = err
			return
		}
		src, defines := splitDefines(rel)
		name := filepath.Base(src)
		if ext := filepath.Ext(name); ext != "" {
			name = name[:len(name)-len(ext)]
		}
		for _, d := range defines {
			name += "_" + d
		}
		b.path = filepath.Join(dir, sanitize(name)+".wasm")
		// Test binaries of several packages build the same plugins at
		// once: each writes its own temporary file and renames it into
		// place, so a reader never sees a half-written module.
		tmp := fmt.Sprintf("%s.%d.tmp", b.path, os.Getpid())
		switch filepath.Ext(src) {
		case ".c":
			b.err = C(context.Background(), filepath.Join(root, src), tmp, defines)
		case ".wat":
			b.err = Wat(context.Background(), filepath.Join(root, src), tmp)
		default:
			b.err = Go(context.Background(), filepath.Join(root, src), tmp)
		}
		if b.err == nil {
			b.err = os.Rename(tmp, b.path)
		}
	})
	if b.err != nil {
		tb.Fatalf("wasmbuild: %v", b.err)
	}
	return b.path
}

func splitDefines(rel string) (string, []string) {
	var defines []string
	for {
		i := lastIndexByte(rel, '#')
		if i < 0 {
			break
		}
		defines = append([]string{rel[i+1:]}, defines...)
		rel = rel[:i]
	}
	return rel, defines
}

func lastIndexByte(s string, c byte) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// TestCacheDir returns a directory for wazero's compilation cache shared by
// the test binaries of one machine, so each module is compiled once rather
// than once per test package (compiling a Go plugin takes about a second,
// and ten times that under -race).
func TestCacheDir(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(os.TempDir(), "compactd-test-wazero-cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("wasmbuild: %v", err)
	}
	return dir
}
