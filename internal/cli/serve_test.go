package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// daemonProc is `compactd serve` running as a child process.
type daemonProc struct {
	cmd    *exec.Cmd
	socket string
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	code   int
}

func (d *daemonProc) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

type lockedWriter struct{ d *daemonProc }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.d.stderr.Write(p)
}

// serveDirs holds a daemon's files; short, for the socket path limit.
func serveDirs(t testing.TB) string {
	dir, err := os.MkdirTemp("", "cds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startServe runs the binary's serve command and waits until it answers
// (or exits).
func startServe(t testing.TB, bin string, dir string, args ...string) *daemonProc {
	t.Helper()
	testenv.Integration(t, "a daemon (compactd serve)")
	d := &daemonProc{socket: filepath.Join(dir, "s.sock"), done: make(chan struct{})}
	args = append([]string{"serve", "--socket", d.socket, "--state-dir", filepath.Join(dir, "state"),
		"--config", filepath.Join(dir, "config.yaml")}, args...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = append(os.Environ(), "COMPACTD_PLUGINS=", "XDG_CACHE_HOME="+dir)
	d.cmd.Stderr = lockedWriter{d}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	c := client.New(d.socket)
	defer c.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-d.done:
			return d
		default:
		}
		if _, err := c.Health(context.Background()); err == nil {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not answer; log:\n%s", d.log())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLog waits until the daemon's stderr holds want (the copy from its
// pipe may lag behind its answers on the socket).
func (d *daemonProc) waitLog(t testing.TB, want string) {
	t.Helper()
	// Generous: a busy machine (the race detector, other tests) can take
	// many seconds to load plugins; the test waits for the line, it does
	// not time it.
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(d.log(), want) {
		if time.Now().After(deadline) {
			exited := "running"
			select {
			case <-d.done:
				exited = "exited " + itoa(d.code)
			default:
			}
			t.Fatalf("%q not logged (daemon %s):\n%s", want, exited, d.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (d *daemonProc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func (d *daemonProc) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-d.done:
		return d.code
	case <-time.After(time.Minute):
		t.Fatalf("daemon did not exit; log:\n%s", d.log())
		return -1
	}
}

func TestServe(t *testing.T) {
	bin := compactdBinary(t)
	plugins := pluginsDir(t, "plugins/lastn/lastn.c")
	dir := serveDirs(t)
	d := startServe(t, bin, dir, "--plugins", plugins, "--cache-dir", wasmbuild.TestCacheDir(t))
	c := client.New(d.socket)
	defer c.Close()
	ctx := context.Background()
	waitLog := func(want string) { t.Helper(); d.waitLog(t, want) }
	waitLog("serving 1 policies on " + d.socket)
	if st, err := os.Stat(d.socket); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v %v", st.Mode(), err)
	}
	msgs := []json.RawMessage{json.RawMessage(`{"role":"system","content":"s"}`), json.RawMessage(`{"role":"user","content":"a"}`),
		json.RawMessage(`{"role":"assistant","content":"b"}`), json.RawMessage(`{"role":"user","content":"c"}`)}
	count := func() int {
		r, err := c.Compact(ctx, &client.CompactRequest{Messages: msgs})
		if err != nil {
			t.Fatalf("compact: %v", err)
		}
		return len(r.Messages)
	}

	// A second daemon on the socket is refused and says why.
	second := startServe(t, bin, dir, "--plugins", plugins)
	if code := second.wait(t); code != 1 || !strings.Contains(second.log(), "another compactd is running") {
		t.Errorf("second daemon: exit %d, log:\n%s", code, second.log())
	}

	// SIGHUP reloads the config file.
	cfgFile := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfgFile, []byte("policy: lastn\npolicies: {lastn: {n: 1, step: 1}}\n"), 0o600)
	d.signal(t, syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// lastn, n 1: the system message, the task and the last message.
		if r, err := c.Compact(ctx, &client.CompactRequest{Messages: msgs}); err == nil && len(r.Messages) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not apply the config; log:\n%s", d.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// An invalid file keeps the running config, and the daemon runs on.
	os.WriteFile(cfgFile, []byte("policy: lastn\npolicies: {lastn: {n: 3, step: 1}}\nunknown_key: 1\n"), 0o600)
	d.signal(t, syscall.SIGHUP)
	waitLog("config reload failed")
	if !strings.Contains(d.log(), `unknown key \"unknown_key\"`) && !strings.Contains(d.log(), `unknown key "unknown_key"`) {
		t.Errorf("the reload error does not name the key:\n%s", d.log())
	}
	if n := count(); n != 3 {
		t.Errorf("after a bad reload: %d messages, want 3", n)
	}

	// SIGTERM drains and exits 0, removing the socket.
	d.signal(t, syscall.SIGTERM)
	if code := d.wait(t); code != 0 {
		t.Errorf("exit %d after SIGTERM; log:\n%s", code, d.log())
	}
	if _, err := os.Stat(d.socket); !os.IsNotExist(err) {
		t.Errorf("socket left: %v", err)
	}
	if !strings.Contains(d.log(), "stopped") {
		t.Errorf("no clean stop logged:\n%s", d.log())
	}
}

func TestServeUsage(t *testing.T) {
	bin := compactdBinary(t)
	dir := serveDirs(t)
	os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("sockett: x\n"), 0o600)
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"extra argument", []string{"extra"}, 2, `compactd: unexpected argument "extra"`},
		{"unknown flag", []string{"--nope"}, 2, "compactd: unknown flag --nope"},
		{"invalid config file", nil, 5, `unknown key "sockett"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"serve", "--config", filepath.Join(dir, "config.yaml"), "--socket", filepath.Join(dir, "s.sock")}, tt.args...)...)
			out, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != tt.code || !strings.Contains(string(out), tt.want) {
				t.Errorf("exit %d, output:\n%s", cmd.ProcessState.ExitCode(), out)
			}
		})
	}
}

// builtinPlugins builds every built-in plugin (plugins/<name>/ with a
// main.go, or a single .c file) into one directory.
func builtinPlugins(b testing.TB) (string, int) {
	root, err := wasmbuild.ModuleRoot(".")
	if err != nil {
		b.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "plugins"))
	var rels []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" || e.Name() == "testdata" {
			continue
		}
		dir := filepath.Join(root, "plugins", e.Name())
		if _, err := os.Stat(filepath.Join(dir, "main.go")); err == nil {
			rels = append(rels, "plugins/"+e.Name())
		} else if cs, _ := filepath.Glob(filepath.Join(dir, "*.c")); len(cs) == 1 {
			rels = append(rels, "plugins/"+e.Name()+"/"+filepath.Base(cs[0]))
		}
	}
	out := b.TempDir()
	for _, rel := range rels {
		data, err := os.ReadFile(wasmbuild.ForTest(b, rel))
		if err != nil {
			b.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(rel), ".c")
		os.WriteFile(filepath.Join(out, strings.TrimSuffix(name, ".wasm")+".wasm"), data, 0o644)
	}
	return out, len(rels)
}

// BenchmarkServeStartup measures a daemon process's start, from exec to
// the first answer on its socket, with every built-in plugin: "cold" with
// an empty compilation cache (every plugin compiled), "cached" with the
// cache a previous start filled.
//
//	go test -run '^$' -bench BenchmarkServeStartup -benchtime 5x ./internal/cli/
func BenchmarkServeStartup(b *testing.B) {
	bin := compactdBinary(b)
	plugins, n := builtinPlugins(b)
	b.Logf("%d built-in plugins", n)
	for _, mode := range []string{"cold", "cached"} {
		b.Run(mode, func(b *testing.B) {
			cache := b.TempDir()
			if mode == "cached" {
				d := startServe(b, bin, serveDirs(b), "--plugins", plugins, "--cache-dir", cache)
				d.signal(b, syscall.SIGTERM)
				d.wait(b)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := serveDirs(b)
				c := cache
				if mode == "cold" {
					c = filepath.Join(dir, "cache")
				}
				b.StartTimer()
				d := startServe(b, bin, dir, "--plugins", plugins, "--cache-dir", c)
				b.StopTimer()
				d.waitLog(b, "serving "+itoa(n)+" policies")
				d.signal(b, syscall.SIGTERM)
				d.wait(b)
				b.StartTimer()
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
