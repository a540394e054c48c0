// Command warmtestcache compiles the plugins the test suite loads most
// into the tests' shared compilation cache (wasmbuild.TestCacheDir),
// without the race detector, before `make test` runs the suite with it.
//
// Every race-built test package that loads a Go plugin finds its
// compiled code there instead of compiling it: wazero compiles a Go
// plugin in about a second, and in ten under -race, where a cold suite
// compiled each of the built-ins and host/testdata/gohostile on both call
// paths, in several packages at once (they ran at the same time, each
// missing the cache). This program does it once, on every core, in a
// fraction of that.
//
// It must be built with wasmbuild.TestLDFlags (the Makefile does): a
// compilation cache is per wazero version, a test binary's wazero calls
// itself "dev" (go test's binaries carry no dependency versions), and a
// program built by go run or go build would otherwise fill the cache of
// its real version, which no test reads. It checks that the cache it
// filled is the tests' and fails when it is not.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"

	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// extra are the Go modules the tests load besides the built-ins, with
// the default limits.
var extra = []string{"host/testdata/gohostile", "host/testdata/goheaders", "internal/server/testdata/counter"}

func main() {
	jobs := flag.Int("j", runtime.NumCPU(), "modules compiled at once")
	flag.Parse()
	if err := run(*jobs); err != nil {
		fmt.Fprintln(os.Stderr, "warmtestcache:", err)
		os.Exit(1)
	}
}

func run(jobs int) error {
	root, err := wasmbuild.ModuleRoot(".")
	if err != nil {
		return err
	}
	mods, err := builtins(filepath.Join(root, "plugins"))
	if err != nil {
		return err
	}
	mods = append(mods, extra...)
	ctx := context.Background()
	if err := checkVersion(ctx); err != nil {
		return err
	}
	cacheDir, err := wasmbuild.TestCacheDirMain()
	if err != nil {
		return err
	}
	engines := map[bool]*host.Engine{}
	for _, disableFast := range []bool{false, true} {
		e, err := host.NewEngine(host.Config{DisableFastPath: disableFast, CacheDir: cacheDir})
		if err != nil {
			return err
		}
		defer e.Close(ctx)
		engines[disableFast] = e
	}

	type job struct {
		rel         string
		disableFast bool
	}
	work := make(chan job)
	errs := make(chan error, 2*len(mods))
	var wg sync.WaitGroup
	for range max(jobs, 1) {
		wg.Go(func() {
			for j := range work {
				errs <- load(ctx, engines[j.disableFast], j.rel)
			}
		})
	}
	for _, rel := range mods {
		for _, disableFast := range []bool{false, true} {
			work <- job{rel, disableFast}
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	fmt.Printf("warmtestcache: %d modules on both paths in %s\n", len(mods), cacheDir)
	return nil
}

// testCacheSubdir is the directory of a compilation cache that a test
// binary's wazero reads: its version is "dev" there.
var testCacheSubdir = "wazero-dev-" + runtime.GOARCH + "-" + runtime.GOOS

// checkVersion compiles a small module into a cache of its own and fails
// unless it lands where the test binaries look (testCacheSubdir): this
// program was then built without wasmbuild.TestLDFlags, or the flag no
// longer names wazero's version variable.
func checkVersion(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "warmtestcache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e, err := host.NewEngine(host.Config{CacheDir: dir})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	if err := load(ctx, e, "plugins/lastn/lastn.c"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, testCacheSubdir)); err != nil {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, d := range entries {
			names = append(names, d.Name())
		}
		return fmt.Errorf("compiled into %v, not %s, which the test binaries read: build this program with -ldflags %q (wasmbuild.TestLDFlags)", names, testCacheSubdir, wasmbuild.TestLDFlags)
	}
	return nil
}

// load builds rel as the tests do and loads it (compiled) on e, which
// compiles it into e's cache unless it is there.
func load(ctx context.Context, e *host.Engine, rel string) error {
	path, err := wasmbuild.ForTestMain(rel)
	if err != nil {
		return err
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	p, err := e.Load(ctx, wasm, host.LoadOptions{Source: path})
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	p.Close(ctx)
	<-p.Done()
	return nil
}

// builtins lists the plugin sources under dir as wasmbuild.ForTest names
// them: a directory with a main.go is a Go plugin, one with a single .c
// file a C plugin.
func builtins(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range entries {
		if !d.IsDir() || d.Name() == "internal" || d.Name() == "testdata" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, d.Name(), "main.go")); err == nil {
			out = append(out, "plugins/"+d.Name())
		} else if cs, _ := filepath.Glob(filepath.Join(dir, d.Name(), "*.c")); len(cs) == 1 {
			out = append(out, "plugins/"+d.Name()+"/"+filepath.Base(cs[0]))
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("no plugins under %s", dir)
	}
	return out, nil
}
