package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestRun: a wasip1 program run through wasmexec sees its arguments,
// environment and the host's files by their paths, and its exit code is
// wasmexec's. It sets an environment variable, so it does not run in parallel.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program for wasip1")
	}
	dir := t.TempDir()
	src := `package main

import "os"

func main() {
	b, err := os.ReadFile(os.Args[1])
	if err != nil || string(b) != "hello" || os.Getenv("WASMEXEC_TEST") != "yes" {
		os.Exit(4)
	}
	os.Exit(3)
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module probe\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(dir, "probe.wasm")
	build := exec.Command("go", "build", "-o", wasm, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data.txt")
	if err := os.WriteFile(data, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WASMEXEC_TEST", "yes")
	if code := run(context.Background(), wasm, []string{data}); code != 3 {
		t.Fatalf("exit code %d, want 3 (4: the program did not see its argument, file or environment)", code)
	}
	if code := run(context.Background(), filepath.Join(dir, "missing.wasm"), nil); code != 1 {
		t.Fatalf("a missing program: exit code %d, want 1", code)
	}
}
