// Command wasmexec runs a wasip1 program under wazero, the runtime the
// daemon runs plugins with, with the real clock, so `go test` can run a
// package's tests and benchmarks as a Go guest runs them:
//
//	go build -o bin/wasmexec ./internal/wasmbuild/wasmexec
//	GOOS=wasip1 GOARCH=wasm go test -exec $PWD/bin/wasmexec -run '^$' -bench DecodeFastRequest ./abi
//
// A Go guest runs several times slower than native code, and not evenly
// (a function call costs it much more), so code on the guest's hot path
// (the PDK's decoding, a built-in policy's steps) is measured this way.
// The program sees its arguments, environment (PWD included, so relative
// paths such as testdata/ resolve as natively) and standard streams, and
// the file system as the host does: it is a developer's own test binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wasmexec PROGRAM.wasm [ARG ...]")
		os.Exit(2)
	}
	os.Exit(run(context.Background(), os.Args[1], os.Args[2:]))
}

// run runs the program and returns its exit code.
func run(ctx context.Context, path string, args []string) int {
	wasm, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasmexec:", err)
		return 1
	}
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	dir, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasmexec:", err)
		return 1
	}
	if err := os.Setenv("PWD", dir); err != nil {
		fmt.Fprintln(os.Stderr, "wasmexec:", err)
		return 1
	}
	cfg := wazero.NewModuleConfig().
		WithArgs(append([]string{path}, args...)...).
		WithStdin(os.Stdin).WithStdout(os.Stdout).WithStderr(os.Stderr).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithFSConfig(wazero.NewFSConfig().WithDirMount("/", "/"))
	for _, kv := range os.Environ() {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				cfg = cfg.WithEnv(kv[:i], kv[i+1:])
				break
			}
		}
	}
	_, err = r.InstantiateWithConfig(ctx, wasm, cfg)
	var exit *sys.ExitError
	switch {
	case errors.As(err, &exit):
		return int(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "wasmexec:", err)
		return 1
	}
	return 0
}
