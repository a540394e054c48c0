// Package wasmbuild builds plugin modules from source: Go plugins with the
// standard toolchain (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared) and C
// plugins with clang for wasm32-wasi, and text modules (.wat) with
// wat2wasm. `make plugins`, the tests and the benchmarks all build through
// it, so a test always runs the .wasm its sources produce today. For tests
// it also builds the compactd binary (CompactdForTest), and shares what it
// builds between the test binaries of a run (ForTest, TestCacheDir).
package wasmbuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrToolMissing is returned when a compiler is not installed.
var ErrToolMissing = errors.New("toolchain missing")

// ModuleRoot returns the directory holding compactd's go.mod, searching
// upwards from dir.
func ModuleRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for d := abs; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/compactd/compactd\n")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("module root: no compactd go.mod above %s", abs)
		}
	}
}

// Go builds the Go plugin in pkgDir (a directory of the compactd module) to
// out. The Go build cache makes a rebuild of unchanged sources cheap.
func Go(ctx context.Context, pkgDir, out string) error {
	if _, err := ModuleRoot(pkgDir); err != nil {
		return err
	}
	goTool := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if os.Getenv("GOROOT") == "" {
		goTool = "go"
	}
	if _, err := exec.LookPath(goTool); err != nil {
		return fmt.Errorf("%w: go: %v", ErrToolMissing, err)
	}
	abs, err := filepath.Abs(pkgDir)
	if err != nil {
		return fmt.Errorf("build %s: %w", pkgDir, err)
	}
	if out, err = filepath.Abs(out); err != nil {
		return fmt.Errorf("build %s: %w", pkgDir, err)
	}
	// -s -w: no symbol table or DWARF. The module's name section goes
	// with them (2% of a plugin, and ~1 MB of the host's memory per
	// loaded plugin); a Go guest's own panics still name their functions.
	// (wasm-opt from binaryen gained nothing measurable: RATIONALE.md.)
	cmd := exec.CommandContext(ctx, goTool, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = abs
	cmd.Env = append(withoutEnv(os.Environ(), "GOOS", "GOARCH", "CGO_ENABLED", "GOFLAGS"),
		"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	return run(cmd, "go build "+pkgDir)
}

// cFlags are the flags every C plugin is built with. Plugins name their
// exports with __attribute__((export_name(...))), as the C kit does.
var cFlags = []string{
	"--target=wasm32-wasi", "--sysroot=/usr", "-O2", "-mexec-model=reactor",
	"-Wall", "-Werror",
}

// C builds the C plugin source src to out with clang. defines are passed
// as -D flags; extraExports are added to the module's exports.
func C(ctx context.Context, src, out string, defines []string, extraExports ...string) error {
	clang, err := exec.LookPath("clang")
	if err != nil {
		return fmt.Errorf("%w: clang (Debian: apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32): %v", ErrToolMissing, err)
	}
	args := append([]string{}, cFlags...)
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	for _, e := range extraExports {
		args = append(args, "-Wl,--export="+e)
	}
	args = append(args, "-o", out, src)
	return run(exec.CommandContext(ctx, clang, args...), "clang "+src)
}

// Wat assembles the WebAssembly text module src to out with wat2wasm
// (Debian's wabt, which `make deps` installs). The hostile plugins of the
// tests are written this way: a text module says exactly what a module
// declares (memory sizes, a start section, imports), which no compiler
// would produce on purpose.
func Wat(ctx context.Context, src, out string) error {
	tool, err := exec.LookPath("wat2wasm")
	if err != nil {
		return fmt.Errorf("%w: wat2wasm (Debian: apt-get install wabt; `make deps` does): %v", ErrToolMissing, err)
	}
	return run(exec.CommandContext(ctx, tool, "-o", out, src), "wat2wasm "+src)
}

func run(cmd *exec.Cmd, what string) error {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", what, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func withoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		drop := false
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				drop = true
				break
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}
