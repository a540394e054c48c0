package wasmbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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

// testDirName is the directory under the temporary directory that holds
// the modules built for tests, shared by every test binary of the machine.
const testDirName = "compactd-test-wasm"

// testKeep is how long a module built for tests stays in the shared
// directory after it was last used.
const testKeep = 3 * 24 * time.Hour

// ForTest builds the plugin at rel (a path relative to the module root:
// "plugins/sliding" for a Go plugin, "plugins/lastn/lastn.c" for a C one,
// optionally followed by "#NAME=VALUE" defines for C, or a ".wat" text
// module) once per test process and returns the .wasm path. It fails the
// test if the build fails.
//
// The modules live in one directory per machine, each named after a hash
// of what it was built from, so that the test binaries of one `go test
// ./...` (and of several checkouts) never read each other's half-written
// or different builds, and a C plugin is compiled once per machine for as
// long as its preprocessed source, its flags and the compiler stay the
// same (clang takes a second or two per plugin, and a run of the suite
// has a dozen test binaries that load lastn). Go plugins are built by the
// go command each time, from its build cache (a fraction of a second);
// text modules assemble in milliseconds. Modules unused for three days
// are removed.
func ForTest(tb testing.TB, rel string) string {
	tb.Helper()
	path, err := ForTestMain(rel)
	if err != nil {
		tb.Fatalf("wasmbuild: %v", err)
	}
	return path
}

// ForTestMain is ForTest for code that has no testing.TB (a TestMain): it
// returns the build's error.
func ForTestMain(rel string) (string, error) {
	testMu.Lock()
	if testDir == "" {
		d := filepath.Join(os.TempDir(), testDirName)
		if err := os.MkdirAll(d, 0o755); err != nil {
			testMu.Unlock()
			return "", err
		}
		prune(d, time.Now().Add(-testKeep))
		testDir = d
	}
	b := testBuilds[rel]
	if b == nil {
		b = &testBuild{}
		testBuilds[rel] = b
	}
	dir := testDir
	testMu.Unlock()

	b.once.Do(func() { b.path, b.err = buildForTest(dir, rel) })
	return b.path, b.err
}

// buildForTest builds rel into dir and returns the module's path.
func buildForTest(dir, rel string) (string, error) {
	root, err := ModuleRoot(".")
	if err != nil {
		return "", err
	}
	ctx := context.Background()
	src, defines := splitDefines(rel)
	name := filepath.Base(src)
	if ext := filepath.Ext(name); ext != "" {
		name = name[:len(name)-len(ext)]
	}
	for _, d := range defines {
		name += "_" + d
	}
	name = sanitize(name)
	// Each build writes a file of its own and renames it into place, so
	// a reader never sees a half-written module.
	tmp, err := os.CreateTemp(dir, name+".*.wasm.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())

	var key string
	switch filepath.Ext(src) {
	case ".c":
		// Named by its inputs: a module built before is used as is.
		if key, err = cKey(ctx, filepath.Join(root, src), defines); err != nil {
			return "", err
		}
		if path := filepath.Join(dir, name+"-"+key, name+".wasm"); touch(path) {
			return path, nil
		}
		err = C(ctx, filepath.Join(root, src), tmp.Name(), defines)
	case ".wat":
		err = Wat(ctx, filepath.Join(root, src), tmp.Name())
	default:
		err = Go(ctx, filepath.Join(root, src), tmp.Name())
	}
	if err != nil {
		return "", err
	}
	if key == "" {
		// Named by its bytes: two builds of the same sources share a
		// file, and different sources never overwrite each other's.
		if key, err = fileKey(tmp.Name()); err != nil {
			return "", err
		}
	}
	// The module keeps its plain name (tests name plugin files after it)
	// in a directory named by the key.
	sub := filepath.Join(dir, name+"-"+key)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(sub, name+".wasm")
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	touch(path)
	return path, nil
}

// cKey hashes what a C plugin is built from: the source after the
// preprocessor (so every header it includes counts), the defines and
// flags, and the compiler and linker binaries.
func cKey(ctx context.Context, src string, defines []string) (string, error) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		return "", fmt.Errorf("%w: clang (Debian: apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32): %v", ErrToolMissing, err)
	}
	args := []string{"-E", "-P", "-Wno-unused-command-line-argument"}
	args = append(args, cFlags...)
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, clang, append(args, src)...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("clang -E %s: %w\n%s", src, err, strings.TrimSpace(stderr.String()))
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q %q\n", cFlags, defines)
	for _, tool := range []string{clang, "wasm-ld"} {
		if p, err := exec.LookPath(tool); err == nil {
			if st, err := os.Stat(p); err == nil {
				fmt.Fprintf(h, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
			}
		}
	}
	h.Write(out.Bytes())
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// fileKey hashes a file's bytes.
func fileKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

// touch reports whether the module at path exists, and marks its
// directory as used now.
func touch(path string) bool {
	if _, err := os.Stat(path); err != nil {
		return false
	}
	now := time.Now()
	os.Chtimes(filepath.Dir(path), now, now)
	return true
}

// prune removes what in dir was last used before cutoff: module
// directories, and temporary files a killed build left behind.
func prune(dir string, cutoff time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.ModTime().Before(cutoff) {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
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
// and ten times that under -race). It is the cache a compactd process
// started with XDG_CACHE_HOME=TestCacheHome uses by default.
func TestCacheDir(tb testing.TB) string {
	tb.Helper()
	dir, err := TestCacheDirMain()
	if err != nil {
		tb.Fatalf("wasmbuild: %v", err)
	}
	return dir
}

// TestCacheDirMain is TestCacheDir for code that has no testing.TB.
func TestCacheDirMain() (string, error) {
	dir := filepath.Join(TestCacheHome(), "compactd", "wazero")
	return dir, os.MkdirAll(dir, 0o755)
}

// TestCacheHome is the XDG_CACHE_HOME for the compactd processes a test
// runs: their default compilation cache (paths.CacheDir) is TestCacheDir,
// and the user's own cache stays out of the tests.
func TestCacheHome() string {
	return filepath.Join(os.TempDir(), "compactd-test-cache")
}
