package compactd_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/paths"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// `make install` with its defaults, then `compactd serve` with no flags:
// the daemon serves every built-in policy on its default socket. `make
// uninstall` takes back what install put there and nothing else.
func TestMakeInstallThenServe(t *testing.T) {
	testenv.Integration(t, "a daemon (compactd serve)")
	if testing.Short() {
		t.Skip("builds every built-in plugin (skipped with -short)")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// Short: the default socket ends up under HOME.
	dir, err := os.MkdirTemp("", "inst")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	home := filepath.Join(dir, "home")
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(home, 0o755)

	// What `make build plugins` would leave in BIN, built the way the
	// tests build (make's own build steps run in TestREADME).
	exe, err := os.ReadFile(wasmbuild.CompactdForTest(t))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(bin, 0o755)
	if err := os.WriteFile(filepath.Join(bin, "compactd"), exe, 0o755); err != nil {
		t.Fatal(err)
	}
	names := builtinPlugins(t, root, filepath.Join(bin, "plugins"))

	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
	runMake := func(target string) string {
		t.Helper()
		cmd := exec.Command("make", "-s", "-o", "deps", "-o", "build", "-o", "plugins", target, "BIN="+bin)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, out)
		}
		return string(out)
	}
	out := runMake("install")
	getenv := func(k string) string {
		if k == "HOME" {
			return home
		}
		return ""
	}
	pluginsDir := paths.PluginsDir(getenv)
	binary := filepath.Join(home, ".local", "bin", "compactd")
	for _, want := range []string{"installed " + binary, pluginsDir, "is not on your PATH"} {
		if !strings.Contains(out, want) {
			t.Errorf("make install said %q; want %q", out, want)
		}
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(pluginsDir, n+".wasm")); err != nil {
			t.Errorf("plugin %s not installed: %v", n, err)
		}
	}

	// compactd serve, no flags.
	serve := exec.Command(binary, "serve")
	serve.Env = append(env, "XDG_CACHE_HOME="+wasmbuild.TestCacheHome())
	var log bytes.Buffer
	serve.Stderr = &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { serve.Wait(); close(done) }()
	defer func() {
		serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(time.Minute):
			serve.Process.Kill()
		}
	}()
	c := client.New(paths.Socket(getenv))
	defer c.Close()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		h, err := c.Health(ctx)
		cancel()
		if err == nil && h.Status != "starting" { // "starting": the plugins are loading
			if h.Status != "ok" || h.Policies != len(names) {
				t.Fatalf("health %+v, want ok with %d policies", h, len(names))
			}
			break
		}
		select {
		case <-done:
			t.Fatalf("compactd serve exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("compactd serve did not answer on %s: %v", paths.Socket(getenv), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	serve.Process.Signal(syscall.SIGTERM)
	<-done

	// uninstall removes the binary and the built-in plugins only.
	mine := filepath.Join(pluginsDir, "mine.wasm")
	os.WriteFile(mine, []byte("a user's plugin"), 0o644)
	runMake("uninstall")
	if _, err := os.Stat(binary); !os.IsNotExist(err) {
		t.Errorf("binary left: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(pluginsDir, "*.wasm"))
	if len(left) != 1 || left[0] != mine {
		t.Errorf("after uninstall the plugins directory holds %v, want only %s", left, mine)
	}
}

// The Makefile's default plugins directory is the daemon's, whatever the
// environment says.
func TestMakeInstallPluginsDir(t *testing.T) {
	for _, env := range []map[string]string{
		{"HOME": "/h"},
		{"HOME": "/h", "XDG_DATA_HOME": "/data"},
		{"HOME": "/h", "XDG_DATA_HOME": "/data", "COMPACTD_PLUGINS": "/p"},
	} {
		cmd := exec.Command("make", "-s", "-n", "-o", "deps", "-o", "build", "-o", "plugins", "install", "PREFIX=/usr/local")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make -n install: %v", err)
		}
		first, _, _ := strings.Cut(string(out), "\n")
		want := `install -d "/usr/local/bin" "` + paths.PluginsDir(func(k string) string { return env[k] }) + `"`
		if first != want {
			t.Errorf("env %v: make install runs %s; want %s", env, first, want)
		}
	}
}

// builtinPlugins builds every built-in plugin (plugins/<name>/ with a
// main.go, or a single .c file) into out, as `make plugins` does, and
// returns their names.
func builtinPlugins(t *testing.T, root, out string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "plugins"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(out, 0o755)
	var names []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" || e.Name() == "testdata" {
			continue
		}
		rel := "plugins/" + e.Name()
		if _, err := os.Stat(filepath.Join(root, rel, "main.go")); err != nil {
			cs, _ := filepath.Glob(filepath.Join(root, rel, "*.c"))
			if len(cs) != 1 {
				continue
			}
			rel += "/" + filepath.Base(cs[0])
		}
		data, err := os.ReadFile(wasmbuild.ForTest(t, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()+".wasm"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Name())
	}
	return names
}
