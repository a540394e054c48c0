package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/hashicorp/go-hclog"
)

// Some tests need the daemon in a process of its own: one they can kill
// in the middle of a load, whose peak memory they can read, and whose
// crash would be reported instead of taking the test binary down. The
// test binary runs itself as that process: with childDirEnv set, TestMain
// runs a daemon on the directory it names (plugins/, state/, config.yaml,
// s.sock, as setup lays them out) until SIGTERM, reloading its config on
// SIGHUP, as `compactd serve` does (see TestMain in openapi_test.go).
const (
	childDirEnv   = "COMPACTD_TEST_DAEMON_DIR"
	childCacheEnv = "COMPACTD_TEST_DAEMON_CACHE"
	// childEnvEnv lists, comma-separated, the variables of the child's
	// environment its daemon reads (testDaemon.childEnv); it sees no
	// others, as an in-process test daemon does.
	childEnvEnv = "COMPACTD_TEST_DAEMON_ENV"
)

// runChildDaemon is the child process's main.
func runChildDaemon(dir, cacheDir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	logger := hclog.New(&hclog.LoggerOptions{Name: "compactd", Output: os.Stderr, Level: hclog.Info})
	seen := map[string]bool{}
	for _, k := range strings.Split(os.Getenv(childEnvEnv), ",") {
		seen[k] = k != ""
	}
	d, err := Start(ctx, DaemonOptions{
		ConfigPath: filepath.Join(dir, "config.yaml"),
		Getenv: func(k string) string {
			if seen[k] {
				return os.Getenv(k)
			}
			return ""
		},
		Defaults: config.Config{
			Socket: filepath.Join(dir, "s.sock"), PluginsDir: filepath.Join(dir, "plugins"),
			StateDir: filepath.Join(dir, "state"), CacheDir: cacheDir,
		},
		Logger: logger, Version: "test-child", Debounce: 10 * time.Millisecond, StoreFlush: 10 * time.Millisecond,
		StoreTimeout: fleetStoreTimeout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child daemon:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "child daemon serving %d policies\n", d.Registry().Counters().Serving)
	for {
		select {
		case <-ctx.Done():
			if err := d.Shutdown(context.Background()); err != nil {
				fmt.Fprintln(os.Stderr, "child daemon: shutting down:", err)
				return 1
			}
			return 0
		case <-hup:
			d.Reload()
		case err := <-d.Errors():
			fmt.Fprintln(os.Stderr, "child daemon:", err)
			return 1
		}
	}
}

// childDaemon is a daemon running in a child process.
type childDaemon struct {
	t      testing.TB
	cmd    *exec.Cmd
	socket string
	c      *client.Client
	done   chan struct{}
	code   int

	mu  sync.Mutex
	log bytes.Buffer
}

type childLog struct{ d *childDaemon }

func (w childLog) Write(p []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.d.log.Write(p)
}

// startChild starts a daemon process on td's directory (see setup): the
// test binary itself, or the compactd binary when td.served is set. It
// does not wait for it to answer.
func startChild(t testing.TB, td *testDaemon) *childDaemon {
	t.Helper()
	d := &childDaemon{t: t, socket: filepath.Join(td.dir, "s.sock"), done: make(chan struct{})}
	cache := td.childCache
	if cache == "" {
		cache = wasmbuild.TestCacheDir(t)
	}
	if td.served {
		// The daemon as users run it: `compactd serve` on the same
		// directory, with nothing from the environment but PATH and
		// td.childEnv.
		d.cmd = exec.Command(wasmbuild.CompactdForTest(t), "serve", "--config", td.config, "--socket", d.socket,
			"--plugins", td.plugins, "--state-dir", filepath.Join(td.dir, "state"), "--cache-dir", cache)
		d.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + td.dir}, td.childEnv...)
	} else {
		d.cmd = exec.Command(os.Args[0], "-test.run=^$")
		d.cmd.Env = append(os.Environ(), childDirEnv+"="+td.dir, childCacheEnv+"="+cache)
		var names []string
		for _, kv := range td.childEnv {
			d.cmd.Env = append(d.cmd.Env, kv)
			names = append(names, strings.SplitN(kv, "=", 2)[0])
		}
		d.cmd.Env = append(d.cmd.Env, childEnvEnv+"="+strings.Join(names, ","))
	}
	d.cmd.Stderr = childLog{d}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	d.c = apiClient(t, d.socket) // validated against openapi.yaml
	t.Cleanup(func() {
		d.c.Close()
		select {
		case <-d.done:
		default:
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// Log returns what the child wrote to stderr so far.
func (d *childDaemon) Log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

func (d *childDaemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// waitHealthy waits until the child answers /healthz with ok.
func (d *childDaemon) waitHealthy(limit time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if d.exited() {
			d.t.Fatalf("the daemon exited with %d; log:\n%s", d.code, d.Log())
		}
		if h, err := d.c.Health(context.Background()); err == nil && h.Status == "ok" {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("the daemon did not become healthy in %v; log:\n%s", limit, d.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and checks the child drained and exited 0.
func (d *childDaemon) stop() {
	d.t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(2 * time.Minute):
		d.t.Fatalf("the daemon did not stop; log:\n%s", d.Log())
	}
	if d.code != 0 {
		d.t.Fatalf("the daemon exited with %d; log:\n%s", d.code, d.Log())
	}
}

// peakRSS returns the child's peak resident memory (VmHWM), in bytes.
func (d *childDaemon) peakRSS() int64 { return procStatusKB(d.cmd.Process.Pid, "VmHWM:") << 10 }

// policies returns GET /v1/policies by file name.
func (d *childDaemon) policies() map[string]client.Policy {
	d.t.Helper()
	list, err := d.c.Policies(context.Background())
	if err != nil {
		d.t.Fatalf("GET /v1/policies: %v; log:\n%s", err, d.Log())
	}
	out := map[string]client.Policy{}
	for _, p := range list {
		out[filepath.Base(p.File)] = p
	}
	return out
}
