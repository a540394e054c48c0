package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/wasmbuild"
)

// runEnv is run with extra environment variables (later ones win).
func runEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(compactdBinary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(append(os.Environ(), "COMPACTD_PLUGINS=", "COMPACTD_SOCKET=", "XDG_CACHE_HOME="+wasmbuild.TestCacheHome()), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

// checkOneError fails unless stderr holds exactly one error line, starting
// with a single "compactd: " (a usage hint may follow it).
func checkOneError(t *testing.T, stderr string) {
	t.Helper()
	var errs []string
	for _, l := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
		if strings.Contains(l, "compactd:") {
			errs = append(errs, l)
		}
	}
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "compactd: ") || strings.Count(errs[0], "compactd:") != 1 {
		t.Errorf("want one error line with one compactd: prefix, stderr:\n%s", stderr)
	}
}

var subcommands = []string{"compact", "policies", "status", "plugins", "conform", "eval", "version", "serve", "new"}

func TestHelpAndUnknownFlags(t *testing.T) {
	for _, cmd := range subcommands {
		t.Run(cmd, func(t *testing.T) {
			for _, h := range []string{"-h", "--help", "-help"} {
				r := run(t, "", cmd, h)
				if r.code != 0 || !strings.HasPrefix(r.stdout, "usage: compactd "+cmd) || r.stderr != "" {
					t.Errorf("%s %s: exit %d, stdout %.60q, stderr %q", cmd, h, r.code, r.stdout, r.stderr)
				}
			}
			// Help after an argument still wins.
			if r := run(t, "", cmd, "x", "--help"); r.code != 0 || !strings.HasPrefix(r.stdout, "usage: compactd "+cmd) {
				t.Errorf("%s x --help: exit %d, stdout %.60q, stderr %q", cmd, r.code, r.stdout, r.stderr)
			}
			for _, flag := range []string{"--nope", "-nope", "--nope=3"} {
				r := run(t, "", cmd, flag)
				name, _, _ := strings.Cut(flag, "=")
				if r.code != 2 || !strings.Contains(r.stderr, "compactd: unknown flag "+name+"\n") || r.stdout != "" {
					t.Errorf("%s %s: exit %d, stdout %q, stderr %q", cmd, flag, r.code, r.stdout, r.stderr)
				}
				checkOneError(t, r.stderr)
			}
			if r := run(t, "", "help", cmd); r.code != 0 || !strings.HasPrefix(r.stdout, "usage: compactd "+cmd) {
				t.Errorf("help %s: exit %d, stdout %.60q", cmd, r.code, r.stdout)
			}
		})
	}

	for _, tt := range []struct {
		name   string
		args   []string
		code   int
		stdout string // prefix
		stderr string // substring
	}{
		{name: "no arguments", code: 2, stderr: "usage: compactd <command>"},
		{name: "help", args: []string{"help"}, stdout: "usage: compactd <command>"},
		{name: "--help", args: []string{"--help"}, stdout: "usage: compactd <command>"},
		{name: "-h", args: []string{"-h"}, stdout: "usage: compactd <command>"},
		{name: "unknown command", args: []string{"compress"}, code: 2, stderr: `compactd: unknown command "compress"`},
		{name: "help for an unknown command", args: []string{"help", "compress"}, code: 2, stderr: `compactd: unknown command "compress"`},
		{name: "unknown flag before the command", args: []string{"--verbose", "compact"}, code: 2, stderr: "compactd: unknown flag --verbose"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, "", tt.args...)
			if r.code != tt.code || !strings.HasPrefix(r.stdout, tt.stdout) || !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("exit %d, stdout %.80q, stderr %.200q", r.code, r.stdout, r.stderr)
			}
			if tt.code == 0 && r.stderr != "" {
				t.Errorf("stderr on success: %q", r.stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	line := regexp.MustCompile(`^compactd \d+\.\d+\.\d+ \(commit ([0-9a-f]{12}(-dirty)?|unknown), go1\.\d+(\.\d+)?\S* \S+/\S+, plugin ABI \d+\.\d+\)\n$`)
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		r := run(t, "", args...)
		if r.code != 0 || !line.MatchString(r.stdout) || r.stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	// The linker-set commit is used when the go command stamped none.
	dir := t.TempDir()
	bin := filepath.Join(dir, "compactd")
	root := moduleRoot(t)
	cmd := exec.Command("go", "build", "-buildvcs=false", "-ldflags",
		"-X github.com/compactd/compactd/internal/cli.commit=0123456789abcdef0123 -X github.com/compactd/compactd/internal/cli.dirty=true",
		"-o", bin, "./cmd/compactd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "compactd ") || !strings.Contains(string(out), "(commit 0123456789ab-dirty, go1.") {
		t.Errorf("with ldflags: %q, %v", out, err)
	}
}

// Flags go before or after the positional argument, and "--" ends them.
func TestFlagsAnywhere(t *testing.T) {
	plugins := pluginsDir(t, "plugins/sliding")
	file, _ := realConversation(t)
	want := run(t, "", "compact", "--plugins", plugins, "--policy", "sliding", "--set", "window_size=3", file)
	if want.code != 0 {
		t.Fatalf("flags first: exit %d, %s", want.code, want.stderr)
	}
	for _, args := range [][]string{
		{"compact", file, "--plugins", plugins, "--policy", "sliding", "--set", "window_size=3"},
		{"compact", "--plugins", plugins, file, "--policy=sliding", "--set", "window_size=3"},
		{"compact", "--plugins", plugins, "--policy", "sliding", "--set", "window_size=3", "--", file},
	} {
		r := run(t, "", args...)
		if r.code != 0 || r.stdout != want.stdout {
			t.Errorf("%v: exit %d, stderr %q, same output %v", args[1:], r.code, r.stderr, r.stdout == want.stdout)
		}
	}
	// After "--", a flag-looking argument is a file name.
	r := run(t, "", "compact", "--plugins", plugins, "--policy", "sliding", "--", "--set")
	if r.code != 3 || !strings.Contains(r.stderr, "reading --set") {
		t.Errorf("-- --set: exit %d, stderr %q", r.code, r.stderr)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := wasmbuild.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}
