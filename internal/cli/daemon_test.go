package cli_test

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// The commands that talk to a running daemon: status, policies --socket,
// compact --socket / --daemon.
func TestDaemonCommands(t *testing.T) {
	bin := compactdBinary(t)
	plugins := pluginsDir(t, "plugins/sliding", "plugins/lastn/lastn.c", "host/testdata/gohostile")
	dir := serveDirs(t)
	// The daemon's config: lastn is the default policy, with n = 2 and
	// step = 1 (a cut on every message, unlike the defaults' steps).
	os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("policy: lastn\npolicies: {lastn: {n: 2, step: 1}}\n"), 0o600)
	d := startServe(t, bin, dir, "--plugins", plugins, "--cache-dir", wasmbuild.TestCacheDir(t))
	d.waitLog(t, "serving 3 policies")
	sock := d.socket
	file, body := realConversation(t)

	t.Run("compact --socket gives what a local run gives", func(t *testing.T) {
		local := run(t, "", "compact", "--plugins", plugins, "--policy", "sliding", "--set", "window_size=3", file)
		remote := run(t, "", "compact", file, "--socket", sock, "--policy", "sliding", "--set", "window_size=3")
		if local.code != 0 || remote.code != 0 || remote.stdout != local.stdout {
			t.Fatalf("local exit %d, remote exit %d (%s), same output %v", local.code, remote.code, remote.stderr, remote.stdout == local.stdout)
		}
		if !summaryLine.MatchString(remote.stderr) {
			t.Errorf("summary: %q", remote.stderr)
		}
		// An envelope keeps its other keys either way.
		env := `{"model":"gpt-4o","messages":` + string(body) + `,"tools":[]}`
		local = run(t, env, "compact", "--plugins", plugins, "--policy", "sliding", "--set", "window_size=3", "-")
		remote = run(t, env, "compact", "--socket", sock, "--policy", "sliding", "--set", "window_size=3", "-")
		if remote.code != 0 || remote.stdout != local.stdout || !strings.HasSuffix(remote.stdout, `,"tools":[]}`+"\n") {
			t.Errorf("envelope: exit %d (%s), same output %v, stdout %.60q", remote.code, remote.stderr, remote.stdout == local.stdout, remote.stdout)
		}
	})
	t.Run("compact --socket applies the daemon's config", func(t *testing.T) {
		// The daemon's default is lastn with n=2, step=1: the same as a
		// local run that names them.
		want := run(t, "", "compact", "--plugins", plugins, "--policy", "lastn", "--set", "n=2", "--set", "step=1", file)
		r := run(t, "", "compact", "--socket", sock, file)
		if r.code != 0 || want.code != 0 || r.stdout != want.stdout || !strings.HasPrefix(r.stderr, "lastn@") {
			t.Fatalf("exit %d (local %d), same output %v, stderr %q", r.code, want.code, r.stdout == want.stdout, r.stderr)
		}
		if r.stdout == run(t, "", "compact", "--plugins", plugins, "--policy", "lastn", file).stdout {
			t.Error("lastn's defaults give the same result: the test cannot tell the config applied")
		}
	})
	t.Run("compact --daemon finds the socket as serve does", func(t *testing.T) {
		want := run(t, string(body), "compact", "--plugins", plugins, "--pipeline", "sliding,lastn", "--set", "lastn.n=4", "--set", "lastn.step=1", "-")
		r := runEnv(t, []string{"COMPACTD_SOCKET=" + sock}, string(body), "compact", "--daemon", "--pipeline", "sliding,lastn", "--set", "lastn.n=4", "--set", "lastn.step=1", "-")
		if r.code != 0 || want.code != 0 || r.stdout != want.stdout || !strings.HasPrefix(r.stderr, "sliding@1.3.0 → lastn@") {
			t.Fatalf("exit %d (local %d), same output %v, stderr %q", r.code, want.code, r.stdout == want.stdout, r.stderr)
		}
	})
	t.Run("a plugin failure on the daemon echoes the input", func(t *testing.T) {
		in := `[{"role":"user","content":"hi"}]`
		r := run(t, in, "compact", "--socket", sock, "--policy", "gohostile", "--set", "mode=panic")
		if r.code != 4 || r.stdout != in+"\n" || !strings.Contains(r.stderr, "warning:") {
			t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	errorCases := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stderr string
	}{
		{name: "unknown policy", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"compact", "--socket", sock, "--policy", "nope"}, code: 5, stderr: "answered unknown_policy (HTTP 404)"},
		{name: "invalid config", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"compact", "--socket", sock, "--policy", "sliding", "--set", "window_size=0"}, code: 5, stderr: "answered invalid_config"},
		{name: "invalid conversation", stdin: `[{"role":"tool","tool_call_id":"x","content":"orphan"}]`, args: []string{"compact", "--socket", sock, "--policy", "sliding"}, code: 3, stderr: "answered invalid_conversation"},
		{name: "anthropic format", stdin: `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]`, args: []string{"compact", "--socket", sock}, code: 3, stderr: "Anthropic Messages format"},
		{name: "local flags with --socket", stdin: `[]`, args: []string{"compact", "--socket", sock, "--plugins", plugins, "--policy", "sliding"}, code: 2, stderr: "--plugins configures plugins loaded by this command"},
		{name: "--set without a policy", stdin: `[]`, args: []string{"compact", "--socket", sock, "--set", "n=1"}, code: 2, stderr: "--set needs --policy or --pipeline"},
		{name: "no daemon", stdin: `[{"role":"user","content":"hi"}]`, args: []string{"compact", "--socket", filepath.Join(dir, "none.sock"), "--policy", "sliding"}, code: 1, stderr: "no daemon is answering on " + filepath.Join(dir, "none.sock")},
		{name: "status without a daemon", args: []string{"status", "--socket", filepath.Join(dir, "none.sock")}, code: 1, stderr: "no daemon is answering on"},
		{name: "policies without a daemon", args: []string{"policies", "--daemon"}, code: 1, stderr: "no daemon is answering on"},
		{name: "status --limit 0", args: []string{"status", "--socket", sock, "--limit", "0"}, code: 2, stderr: "--limit 0"},
		{name: "unknown conversation", args: []string{"status", "--socket", sock, "--conversation", "nope"}, code: 1, stderr: `answered not_found (HTTP 404): no tracked conversation "nope"`},
		{name: "retry an unknown plugin", args: []string{"plugins", "retry", "nope", "--socket", sock}, code: 5, stderr: `answered unknown_policy (HTTP 404): no policy or plugin file named "nope" to retry`},
		{name: "retry without a name", args: []string{"plugins", "retry", "--socket", sock}, code: 2, stderr: "retry takes one NAME"},
		{name: "plugins without a subcommand", args: []string{"plugins", "--socket", sock}, code: 2, stderr: "name a subcommand: retry NAME"},
		{name: "plugins with an unknown subcommand", args: []string{"plugins", "reload", "lastn", "--socket", sock}, code: 2, stderr: `unknown subcommand "reload"`},
		{name: "retry without a daemon", args: []string{"plugins", "retry", "lastn", "--socket", filepath.Join(dir, "none.sock")}, code: 1, stderr: "no daemon is answering on"},
	}
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			// HOME without a daemon, for --daemon's default socket.
			r := runEnv(t, []string{"HOME=" + t.TempDir(), "XDG_RUNTIME_DIR="}, tt.stdin, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) || r.stdout != "" {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", r.code, tt.code, r.stdout, r.stderr, tt.stderr)
			}
			checkOneError(t, r.stderr)
		})
	}

	t.Run("policies --socket", func(t *testing.T) {
		r := run(t, "", "policies", "--socket", sock)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "NAME ") {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		for _, want := range []string{"sliding ", "lastn ", "gohostile ", " fast "} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("no %q in\n%s", want, r.stdout)
			}
		}
		r = run(t, "", "policies", "--json", "--socket", sock)
		var list client.PolicyList
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Policies) != 3 {
			t.Errorf("--json: exit %d\n%s", r.code, r.stdout)
		}
		// A broken file is listed with its error, and the exit code says so.
		os.WriteFile(filepath.Join(plugins, "broken.wasm"), []byte("not wasm"), 0o644)
		defer os.Remove(filepath.Join(plugins, "broken.wasm"))
		deadline := time.Now().Add(30 * time.Second)
		for {
			r = run(t, "", "policies", "--socket", sock)
			if r.code == 5 && strings.Contains(r.stdout, "broken.wasm") && strings.Contains(r.stdout, "ERROR") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("broken plugin not listed: exit %d\n%s", r.code, r.stdout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("plugins retry", func(t *testing.T) {
		// A file that serves: retried, and it still serves.
		r := run(t, "", "plugins", "retry", "lastn", "--socket", sock)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "lastn.wasm serves lastn ") || r.stderr != "" {
			t.Errorf("retry lastn: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		// A file that fails is loaded again, by its file name, and fails
		// again: the command waits for the load and says so.
		bad := filepath.Join(plugins, "retried.wasm")
		os.WriteFile(bad, []byte("not wasm either"), 0o644)
		defer os.Remove(bad)
		d.waitLog(t, "retried.wasm")
		for _, name := range []string{"retried", "retried.wasm"} {
			r = run(t, "", "plugins", "retry", name, "--socket", sock)
			if r.code != 5 || r.stdout != "" || !strings.Contains(r.stderr, "compactd: retried.wasm still does not load: ") || !strings.Contains(r.stderr, "not a valid compactd plugin module") {
				t.Errorf("retry %s: exit %d, stdout %q, stderr %q", name, r.code, r.stdout, r.stderr)
			}
			checkOneError(t, r.stderr)
		}
		if n := strings.Count(d.log(), "plugin file retried by hand: file="+bad); n != 2 {
			t.Errorf("the daemon logged %d retries, want 2:\n%s", n, d.log())
		}
		r = run(t, "", "plugins", "retry", "lastn", "--json", "--socket", sock)
		var p client.Policy
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &p) != nil || !p.Serving || p.Name != "lastn" {
			t.Errorf("retry --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("status", func(t *testing.T) {
		r := run(t, "", "status", "--socket", sock)
		for _, want := range []string{"health:         ok", "policies:       3 serving", "plugins:        " + plugins, "CONVERSATION", "lastn"} {
			if r.code != 0 || !strings.Contains(r.stdout, want) {
				t.Errorf("exit %d: no %q in\n%s%s", r.code, want, r.stdout, r.stderr)
			}
		}
		r = runEnv(t, []string{"COMPACTD_SOCKET=" + sock}, "", "status", "--json")
		var st client.Status
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st.Policies.Serving < 3 || len(st.Conversations) == 0 {
			t.Fatalf("status --json: exit %d\n%s", r.code, r.stdout)
		}
		id := st.Conversations[0].ID
		r = run(t, "", "status", "--socket", sock, "--conversation", id)
		if r.code != 0 || !strings.Contains(r.stdout, "conversation:") || !strings.Contains(r.stdout, id) {
			t.Errorf("--conversation: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
}

// A daemon with no policy says so, names the directory and the fix, and
// reports "degraded"; status shows it.
func TestServeWithoutPolicies(t *testing.T) {
	bin := compactdBinary(t)
	dir := serveDirs(t)
	empty := filepath.Join(dir, "plugins")
	d := startServe(t, bin, dir, "--plugins", empty)
	d.waitLog(t, "serving 0 policies")
	d.waitLog(t, "compactd: no policies loaded from "+empty)
	for _, want := range []string{"make install", "--plugins DIR", "$COMPACTD_PLUGINS", `"degraded"`} {
		d.waitLog(t, want)
	}
	c := client.New(d.socket)
	defer c.Close()
	if h, err := c.Health(t.Context()); err != nil || h.Status != "degraded" {
		t.Errorf("health = %+v, %v", h, err)
	}
	r := run(t, "", "status", "--socket", d.socket)
	if r.code != 0 || !strings.Contains(r.stdout, "health:         degraded") || !strings.Contains(r.stdout, "no policies loaded from "+empty) {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// The systemd unit's ExecStart, run as systemd runs it (HOME and
// XDG_RUNTIME_DIR set, NOTIFY_SOCKET for Type=notify), serves the plugins
// `make install` put in the default directory on the default socket, and
// reports READY=1 and STOPPING=1.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(moduleRoot(t), "contrib", "compactd.service"))
	if err != nil {
		t.Fatal(err)
	}
	var execStart string
	notifyType := false
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			execStart = v
		}
		notifyType = notifyType || l == "Type=notify"
	}
	if !notifyType {
		t.Error("the unit is not Type=notify")
	}
	home := serveDirs(t)
	runtime := filepath.Join(home, "run")
	args := strings.Fields(strings.ReplaceAll(execStart, "%h", home))
	if len(args) < 2 || args[0] != filepath.Join(home, ".local", "bin", "compactd") {
		t.Fatalf("ExecStart=%s: want %%h/.local/bin/compactd (make install's default)", execStart)
	}
	// What make install does with its defaults.
	os.MkdirAll(filepath.Dir(args[0]), 0o755)
	if err := os.Symlink(compactdBinary(t), args[0]); err != nil {
		t.Fatal(err)
	}
	pluginsDir := filepath.Join(home, ".local", "share", "compactd", "plugins")
	os.MkdirAll(pluginsDir, 0o755)
	data, _ := os.ReadFile(wasmbuild.ForTest(t, "plugins/lastn/lastn.c"))
	os.WriteFile(filepath.Join(pluginsDir, "lastn.wasm"), data, 0o644)
	os.MkdirAll(runtime, 0o700)

	notifyPath := filepath.Join(home, "notify")
	notifications, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notifications.Close()

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = []string{"HOME=" + home, "XDG_RUNTIME_DIR=" + runtime, "NOTIFY_SOCKET=" + notifyPath,
		"XDG_CACHE_HOME=" + wasmbuild.TestCacheHome(), "PATH=" + os.Getenv("PATH")}
	var log lockedBuf
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	read := func(want string) {
		t.Helper()
		notifications.SetReadDeadline(time.Now().Add(2 * time.Minute))
		buf := make([]byte, 4096)
		n, _, err := notifications.ReadFromUnix(buf)
		if err != nil || !strings.HasPrefix(string(buf[:n]), want) {
			t.Fatalf("notification %q, %v; want %s; log:\n%s", buf[:n], err, want, log.String())
		}
	}
	read("READY=1\nSTATUS=serving 1 policies on " + filepath.Join(runtime, "compactd.sock"))
	r := runEnv(t, []string{"HOME=" + home, "XDG_RUNTIME_DIR=" + runtime}, "", "policies", "--daemon")
	if r.code != 0 || !strings.Contains(r.stdout, "lastn") {
		t.Errorf("policies --daemon: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	read("STOPPING=1")
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v; log:\n%s", err, log.String())
	}
}

// lockedBuf collects a process's output while the test may read it.
type lockedBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
