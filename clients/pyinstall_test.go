//go:build !unit

// `make test-unit` builds with -tags unit and leaves this file out: every
// test in it needs Python and a daemon and skips in a unit run anyway
// (internal/testenv), and linking the test binary alone takes seconds.

package clients

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// minPython is the oldest Python the client supports (its
// requires-python).
var minPython = [2]int{3, 9}

// interpreter is a Python found on the machine.
type interpreter struct {
	path    string // how it was found
	version string // "3.11.2"
	major   int
	minor   int
}

// TestPythonInstall installs the Python client the way docs/clients.md
// says, `pip install ./clients/python`, into a fresh virtual environment
// (python3 -m venv: nothing but pip in it) of every Python ≥ 3.9 on the
// machine, with pip kept off the network, and uses the installed package
// against a real daemon. Debian's python3 (make deps installs its venv
// module) is always among them; pyenv's versions and other python3.N
// found on PATH or in /usr/bin and /usr/local/bin join it.
func TestPythonInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a virtual environment per Python on the machine (skipped with -short)")
	}
	pythons := findPythons(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "clients", "python")
	before := treeListing(t, src)
	d := startDaemon(t)
	for i, py := range pythons {
		t.Run(py.version, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			env := offlineEnv(tmp)
			venv := filepath.Join(tmp, "venv")
			run(t, env, tmp, py.path, "-m", "venv", venv)
			vpy := filepath.Join(venv, "bin", "python")
			out := run(t, env, tmp, vpy, "-m", "pip", "install", "--no-index", src)
			if !strings.Contains(out, "Successfully installed compactd-") {
				t.Errorf("pip did not say it installed compactd:\n%s", out)
			}
			checkInstalled(t, env, tmp, vpy, d.socket, venv)
			// Debian's python3 also installs it editable (PEP 660): the
			// package is then the source itself.
			if i == 0 {
				venv := filepath.Join(tmp, "venv-editable")
				run(t, env, tmp, py.path, "-m", "venv", venv)
				vpy := filepath.Join(venv, "bin", "python")
				run(t, env, tmp, vpy, "-m", "pip", "install", "--no-index", "--editable", src)
				checkInstalled(t, env, tmp, vpy, d.socket, src)
			}
		})
	}
	t.Cleanup(func() {
		// Building left nothing in the checkout (no build/, *.egg-info,
		// wheel): pip builds in place with the package's own backend,
		// which only reads it.
		if after := treeListing(t, src); after != before {
			t.Errorf("installing changed clients/python:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// checkInstalled imports compactd with the venv's python, in isolated
// mode (no PYTHONPATH, no user site, not the working directory), checks it
// is loaded from under the directory where, and compacts through the
// daemon on socket with it.
func checkInstalled(t *testing.T, env []string, dir, python, socket, where string) {
	t.Helper()
	const script = `
import os, sys
import compactd

assert os.path.isfile(os.path.join(os.path.dirname(compactd.__file__), "py.typed")), "py.typed is not installed"
messages = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Book a flight to Boston."},
    {"role": "assistant", "content": "Which date?"},
    {"role": "user", "content": "Friday."},
]
kept = compactd.compact(messages, policy="lastn", config={"n": 1, "step": 1})
assert [m["content"] for m in kept] == ["You are a helpful assistant.", "Book a flight to Boston.", "Friday."], kept
try:
    compactd.Client().compact(messages, policy="nope")
    raise SystemExit("no error for an unknown policy")
except compactd.UnknownPolicy as e:
    assert (e.code, e.status) == ("unknown_policy", 404), (e.code, e.status)
print("compactd", compactd.__version__, "from", compactd.__file__, "on Python", sys.version.split()[0])
`
	out := run(t, append(env, "COMPACTD_SOCKET="+socket), dir, python, "-I", "-c", script)
	if !strings.Contains(out, " from "+where+string(filepath.Separator)) {
		t.Errorf("compactd was not imported from %s:\n%s", where, out)
	}
}

// offlineEnv is an environment for pip that cannot reach a package index:
// none of the caller's PIP_*, PYTHON* or proxy settings, a HOME of its own
// (no pip.conf, no cache), proxies that lead nowhere, and no index
// (PIP_NO_INDEX, besides --no-index on the command line).
func offlineEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(name)
		switch {
		case strings.HasPrefix(upper, "PIP_"), strings.HasPrefix(upper, "PYTHON"), strings.HasPrefix(upper, "VIRTUAL_ENV"),
			strings.HasSuffix(upper, "_PROXY"), upper == "HOME", strings.HasPrefix(upper, "XDG_"), strings.HasPrefix(upper, "COMPACTD_"):
			continue
		}
		env = append(env, kv)
	}
	// A closed port: any connection pip tried would fail at once.
	const nowhere = "http://127.0.0.1:9"
	return append(env, "HOME="+home, "PIP_CONFIG_FILE="+os.DevNull, "PIP_NO_INDEX=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PYTHONDONTWRITEBYTECODE=1",
		"http_proxy="+nowhere, "https_proxy="+nowhere, "HTTP_PROXY="+nowhere, "HTTPS_PROXY="+nowhere, "NO_PROXY=", "no_proxy=")
}

// findPythons returns the Pythons ≥ 3.9 on the machine, one per
// interpreter (the same binary found twice counts once), Debian's
// python3 first. It fails the test when there is none or when Debian's
// cannot make a venv (make deps installs python3-venv).
func findPythons(t *testing.T) []interpreter {
	t.Helper()
	first := need(t, "python3", "/usr/bin/python3", "python3")
	candidates := []string{first}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin"} {
		m, _ := filepath.Glob(filepath.Join(dir, "python3.*"))
		candidates = append(candidates, m...)
	}
	for minor := minPython[1]; minor <= 30; minor++ {
		if p, err := exec.LookPath(fmt.Sprintf("python3.%d", minor)); err == nil {
			candidates = append(candidates, p)
		}
	}
	pyenv := os.Getenv("PYENV_ROOT")
	if pyenv == "" {
		if home, err := os.UserHomeDir(); err == nil {
			pyenv = filepath.Join(home, ".pyenv")
		}
	}
	if pyenv != "" {
		m, _ := filepath.Glob(filepath.Join(pyenv, "versions", "*", "bin", "python3"))
		sort.Strings(m)
		candidates = append(candidates, m...)
	}

	var out []interpreter
	seen := map[string]bool{}
	for i, c := range candidates {
		if strings.HasSuffix(c, "-config") || strings.Contains(c, string(filepath.Separator)+"shims"+string(filepath.Separator)) {
			continue
		}
		py, exe, err := probe(c)
		if err != nil {
			if i == 0 {
				t.Fatalf("%s: %v", c, err)
			}
			t.Logf("not a usable Python: %s: %v", c, err)
			continue
		}
		if seen[exe] {
			continue
		}
		seen[exe] = true
		if py.major < minPython[0] || py.major == minPython[0] && py.minor < minPython[1] {
			t.Logf("%s is Python %s, older than the client supports (%d.%d)", c, py.version, minPython[0], minPython[1])
			continue
		}
		if i == 0 {
			if err := exec.Command(c, "-c", "import ensurepip, venv").Run(); err != nil {
				t.Fatalf("%s cannot make a virtual environment (Debian: python3-venv, which make deps installs): %v", c, err)
			}
		}
		out = append(out, py)
	}
	var names []string
	for _, py := range out {
		names = append(names, py.version+" ("+py.path+")")
	}
	t.Logf("Pythons: %s", strings.Join(names, ", "))
	return out
}

// probe asks a Python for its version and the real path of its binary.
func probe(path string) (interpreter, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-I", "-c", "import os, platform, sys; print(platform.python_version()); print(os.path.realpath(sys.executable))")
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return interpreter{}, "", err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		return interpreter{}, "", fmt.Errorf("unexpected answer %q", b)
	}
	py := interpreter{path: path, version: lines[0]}
	parts := strings.SplitN(py.version, ".", 3)
	if len(parts) < 2 {
		return interpreter{}, "", fmt.Errorf("unexpected version %q", py.version)
	}
	if py.major, err = strconv.Atoi(parts[0]); err == nil {
		py.minor, err = strconv.Atoi(parts[1])
	}
	if err != nil {
		return interpreter{}, "", fmt.Errorf("unexpected version %q", py.version)
	}
	return py, lines[1], nil
}

// treeListing lists the files under dir (not __pycache__, which Python
// may write anywhere and git ignores), one per line.
func treeListing(t *testing.T, dir string) string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(dir, path)
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(files, "\n")
}
