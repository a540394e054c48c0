package wasmbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// TestLDFlags are the linker flags of the programs the tests run besides
// the test binaries themselves (CompactdForTest, and `make test`'s
// warmtestcache). wazero keeps a compilation cache per version of itself
// and reads its version from the binary's build information, which a
// test binary does not have: there it is "dev". A binary built by go
// build knows its wazero's version and would fill another cache, one the
// test binaries never read, and read none of theirs. The flag sets the
// version wazero falls back to (it exists for wazero's own CLI).
const TestLDFlags = "-X github.com/tetratelabs/wazero/internal/version.version=dev"

// The compactd binary built for tests, once per test process.
var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// CompactdForTest builds the compactd command of the checkout the test
// runs in and returns the binary's path. It fails the test if the build
// fails.
//
// Every test binary of the checkout builds to the same path (one per
// checkout, under the temporary directory), one at a time (a file lock),
// so the go command finds the binary there up to date and does not link
// it again: a link takes seconds, and four test packages run the binary.
// The binary is not built with -race, and is built with TestLDFlags:
// its compilation cache (TestCacheDir, when run with XDG_CACHE_HOME set
// to TestCacheHome) is then the test binaries' own.
func CompactdForTest(tb testing.TB) string {
	tb.Helper()
	binaryOnce.Do(func() { binaryPath, binaryErr = buildCompactd() })
	if binaryErr != nil {
		tb.Fatalf("building compactd: %v", binaryErr)
	}
	return binaryPath
}

func buildCompactd() (string, error) {
	root, err := ModuleRoot(".")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), "compactd-test-bin", hex.EncodeToString(sum[:])[:12])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	bin := filepath.Join(dir, "compactd")
	cmd := exec.Command("go", "build", "-ldflags", TestLDFlags, "-o", bin, "./cmd/compactd")
	cmd.Dir = root
	return bin, run(cmd, "go build ./cmd/compactd")
}
