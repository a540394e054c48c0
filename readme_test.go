// The docs' examples are tests: TestREADME runs the examples of README.md,
// of every docs/*.md and of any other Markdown file in the repository that
// marks one, against a real daemon with the real built-in plugins, and
// checks the output each doc shows. A doc that drifts from the product
// fails `make test`.
//
// # Marking an example
//
// Put an HTML comment (invisible on GitHub) on the line right before a
// fenced code block:
//
//	<!-- example -->              run the block; it must exit 0
//	<!-- example exit=3 -->       run the block; it must exit 3
//	<!-- example skip: REASON --> do not run it, and say why
//	<!-- output -->               the next block is the output of the example above
//
// An output block shows what the example prints, stdout and stderr
// interleaved as a terminal would show them. In it, "…" stands for any text
// within a line, and a line holding only "…" for any number of lines
// (including none): elide what changes between runs (durations, times,
// absolute paths) or what is too long to show. Trailing spaces are ignored.
// An example needs no output block; it must still succeed.
//
// Every ```sh (or bash, shell, console) block of those docs that mentions
// compactd, curl, $SOCK or make must carry one of the example markers, so
// nothing that talks to the daemon or runs the CLI escapes the test: skip
// is for what cannot run here (`make run` itself, installing into your
// home, systemctl, the full data set) or what another test runs (the
// clients' examples in docs/clients.md: clients/readme_test.go).
//
// # How the examples run
//
// Each doc is a subtest (TestREADME/docs/api.md), and its examples run in
// the doc's order, one after another, sharing one daemon, as a reader
// typing them into one terminal would: what a PUT /v1/config changes, the
// examples after it see. Every doc with an example to run gets a daemon
// of its own, fresh, as after `make run` in a clean checkout, so a doc's
// outputs do not depend on what another doc did. The first daemon of a
// run is started with `make run` (its deps step skipped; BIN and SOCKET
// pointed into a temporary directory), which builds compactd and the
// plugins; the next ones reuse those files, and the descriptions of the
// plugins the first one checked, and run the same recipe with make's
// build steps marked done (-o build -o plugins). Each block runs
// with bash -euo pipefail in a working directory of the doc's own that
// looks like the checkout: bin/compactd, bin/plugins/, bin/compactd.sock,
// and links to the repository's files (testdata/, docs/, …). The
// environment is clean: SOCK=bin/compactd.sock, HOME a temporary
// directory, no COMPACTD_*, XDG_* or provider variables, and bin/ first
// on PATH. A failure names the doc and the example's line (docs/api.md:27).
//
// A block in another language runs with the interpreter the runners table
// below names for its info string; add a line there for a new language
// (```python → python3, say) along with the package to scripts/deps.sh.
//
// # Updating the outputs
//
//	go test -run TestREADME -update .
//
// rewrites, in every doc, each output block that no longer matches with
// what the example printed now, durations, timestamps and the temporary
// directory already replaced by "…" (-run TestREADME/docs/cli.md for one
// doc). Read the diff before committing it: the docs are the product's
// promise.
package compactd_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the docs' output blocks that do not match what their examples print")

// runners maps a fenced block's language to the command that runs its
// text (appended as the last argument).
var runners = map[string][]string{
	"sh":    {"bash", "-euo", "pipefail", "-c"},
	"bash":  {"bash", "-euo", "pipefail", "-c"},
	"shell": {"bash", "-euo", "pipefail", "-c"},
	// Debian's python3, which scripts/deps.sh gives httpx (a pyenv or venv
	// python3 earlier on PATH may lack it).
	"python": {"/usr/bin/python3", "-c"},
}

// mustMark is what makes a shell block one the test has to know about.
var mustMark = regexp.MustCompile(`\bcompactd\b|\bcurl\b|\$SOCK\b|\bmake\b`)

// exampleTimeout bounds one example (an eval over the fixtures is the
// slowest).
const exampleTimeout = 5 * time.Minute

// block is a fenced code block of a doc.
type block struct {
	line      int    // 1-based line of the opening fence
	end       int    // 1-based line of the closing fence
	lang      string // first word of the info string
	text      string // the lines between the fences
	marker    string // the <!-- … --> comment right before it, trimmed, or ""
	output    *block // for an example: its output block
	skip      string // for an example: why it is not run
	wantExit  int
	isExample bool
}

// doc is a Markdown file whose examples TestREADME runs.
type doc struct {
	path     string // slash-separated, relative to the repository
	text     string
	examples []*block
}

// runnable reports whether any of the doc's examples is to be run.
func (d *doc) runnable() bool {
	for _, ex := range d.examples {
		if ex.skip == "" {
			return true
		}
	}
	return false
}

func TestREADME(t *testing.T) {
	testenv.Integration(t, "a daemon (make run)")
	if testing.Short() {
		t.Skip("starts the daemon with make run and runs every example of the docs (skipped with -short)")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	paths, err := docFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	// Every doc's markers are checked before the first daemon starts.
	var docs []*doc
	var problems []string
	for _, path := range paths {
		text, err := os.ReadFile(filepath.FromSlash(path))
		if err != nil {
			t.Fatal(err)
		}
		examples, err := parseExamples(path, string(text))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		docs = append(docs, &doc{path: path, text: string(text), examples: examples})
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
	// Short: the socket's path must fit in 108 bytes.
	tmp, err := os.MkdirTemp("", "readme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	b := &builds{root: root}
	for i, d := range docs {
		t.Run(d.path, func(t *testing.T) {
			runDoc(t, d, b, filepath.Join(tmp, strconv.Itoa(i)))
		})
	}
}

// runDoc runs a doc's examples in order against a fresh daemon and checks
// their outputs (or, with -update, rewrites the outputs that differ).
func runDoc(t *testing.T, d *doc, b *builds, dir string) {
	if !d.runnable() {
		for _, ex := range d.examples {
			t.Logf("%s:%d: skipped: %s", d.path, ex.line, ex.skip)
		}
		t.Logf("%s has no example to run", d.path)
		return
	}
	work := newWorkDir(t, b.root, dir)
	startDaemon(t, work, b)

	var updates []*block
	actual := map[*block]string{}
	ran := 0
	for _, ex := range d.examples {
		name := fmt.Sprintf("%s:%d", d.path, ex.line)
		if ex.skip != "" {
			t.Logf("%s: skipped: %s", name, ex.skip)
			continue
		}
		ran++
		first, _, _ := strings.Cut(ex.text, "\n")
		t.Logf("%s: %s", name, first)
		out, code, err := work.run(ex)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if code != ex.wantExit {
			t.Errorf("%s: exit %d, want %d\n--- example\n%s--- output\n%s", name, code, ex.wantExit, ex.text, out)
			continue
		}
		if ex.output == nil {
			continue
		}
		if !matchOutput(ex.output.text, out) {
			if *update {
				actual[ex.output] = generalize(out, work.dir)
				updates = append(updates, ex.output)
				continue
			}
			t.Errorf("%s: the output differs from %s:%d (go test -run TestREADME -update . rewrites it)\n--- example\n%s--- %s shows\n%s--- it printed\n%s",
				name, d.path, ex.output.line, ex.text, d.path, ex.output.text, out)
		}
	}
	t.Logf("ran %d examples of %s", ran, d.path)
	if len(updates) > 0 {
		if err := rewriteOutputs(filepath.Join(b.root, filepath.FromSlash(d.path)), d.text, updates, actual); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %d output blocks of %s", len(updates), d.path)
	}
}

// docFiles returns the docs whose examples TestREADME runs, as paths
// relative to root: README.md, every docs/*.md, and every other Markdown
// file under root that marks an example or an output (outside node_modules
// and what builds write).
func docFiles(root string) ([]string, error) {
	docs := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(more)
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		docs = append(docs, filepath.ToSlash(rel))
	}
	seen := map[string]bool{}
	for _, d := range docs {
		seen[d] = true
	}
	all, err := markdownFiles(root)
	if err != nil {
		return nil, err
	}
	marker := regexp.MustCompile(`(?m)^\s*<!--\s*(example|output)\b`)
	for _, rel := range all {
		if seen[rel] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		if marker.Match(b) {
			docs = append(docs, rel)
		}
	}
	return docs, nil
}

// markdownFiles returns the Markdown files under root as sorted
// slash-separated relative paths, leaving out .git, node_modules and what
// builds write.
func markdownFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			switch e.Name() {
			case ".git", "node_modules", "bin", "eval-out", "dist", "target":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// parseExamples returns a doc's examples in order, checking the markers;
// name is the doc's path, for the messages.
func parseExamples(name, text string) ([]*block, error) {
	blocks, err := fencedBlocks(name, text)
	if err != nil {
		return nil, err
	}
	var examples []*block
	var last *block
	var problems []string
	bad := func(b *block, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: ", name, b.line)+fmt.Sprintf(format, args...))
	}
	for _, b := range blocks {
		m := b.marker
		switch {
		case m == "output":
			switch {
			case last == nil:
				bad(b, "<!-- output --> before any example")
			case last.output != nil:
				bad(b, "a second output block for the example at line %d", last.line)
			case last.skip != "":
				bad(b, "an output block for the skipped example at line %d", last.line)
			default:
				last.output = b
			}
			continue
		case m == "example" || strings.HasPrefix(m, "example "):
			b.isExample = true
			opts := strings.TrimSpace(strings.TrimPrefix(m, "example"))
			switch {
			case strings.HasPrefix(opts, "skip:"):
				b.skip = strings.TrimSpace(strings.TrimPrefix(opts, "skip:"))
				if b.skip == "" {
					bad(b, "skip needs a reason: <!-- example skip: REASON -->")
				}
			case strings.HasPrefix(opts, "exit="):
				n, err := strconv.Atoi(strings.TrimPrefix(opts, "exit="))
				if err != nil {
					bad(b, "bad marker %q: want exit=N", m)
				}
				b.wantExit = n
			case opts != "":
				bad(b, "unknown marker %q (see readme_test.go)", m)
			}
			if b.skip == "" && runners[b.lang] == nil {
				bad(b, "no runner for ```%s blocks (add one to runners in readme_test.go)", b.lang)
			}
			examples = append(examples, b)
			last = b
			continue
		case m != "" && (m == "example:" || strings.HasPrefix(m, "example") || strings.HasPrefix(m, "output")):
			bad(b, "unknown marker %q (see readme_test.go)", m)
		}
		if isShell(b.lang) && mustMark.MatchString(b.text) {
			bad(b, "this ```%s block talks to the daemon or runs the CLI but is not marked: "+
				"put <!-- example --> (or <!-- example skip: REASON -->) on the line before it", b.lang)
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "\n"))
	}
	return examples, nil
}

func isShell(lang string) bool {
	switch lang {
	case "sh", "bash", "shell", "console":
		return true
	}
	return false
}

var fence = regexp.MustCompile("^(```+|~~~+)\\s*(.*)$")

// fencedBlocks finds the fenced code blocks of a Markdown document, with
// the HTML comment on the line before each; name is the document's path,
// for the messages.
func fencedBlocks(name, text string) ([]*block, error) {
	lines := strings.Split(text, "\n")
	var out []*block
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := &block{line: i + 1}
		if f := strings.Fields(m[2]); len(f) > 0 {
			b.lang = f[0]
		}
		if i > 0 {
			prev := strings.TrimSpace(lines[i-1])
			if strings.HasPrefix(prev, "<!--") && strings.HasSuffix(prev, "-->") {
				b.marker = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(prev, "<!--"), "-->"))
			}
		}
		var body []string
		j := i + 1
		for ; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], m[1]) && strings.TrimSpace(strings.TrimLeft(lines[j], m[1][:1])) == "" {
				break
			}
			body = append(body, lines[j])
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: code block never closed", name, i+1)
		}
		b.end = j + 1
		if len(body) > 0 {
			b.text = strings.Join(body, "\n") + "\n"
		}
		out = append(out, b)
		i = j
	}
	return out, nil
}

// workDir is where a doc's examples run: a directory that looks like the
// checkout, with the daemon's files under bin/.
type workDir struct {
	t    *testing.T
	dir  string
	env  []string
	root string // the repository
}

// newWorkDir makes dir (which must not exist) a work directory for the
// repository at root.
func newWorkDir(t *testing.T, root, dir string) *workDir {
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "bin", "eval-out", ".git":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bin", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := &workDir{t: t, dir: dir, root: root}
	w.env = []string{
		"PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + filepath.Join(dir, "home"),
		"LANG=C.UTF-8",
		"TMPDIR=" + os.TempDir(),
		"SOCK=bin/compactd.sock",
		// The daemon's compiled-module cache, shared by test runs.
		"XDG_CACHE_HOME=" + filepath.Join(os.TempDir(), "compactd-readme-cache"),
	}
	// The go command (make run builds with it) keeps its caches: they are
	// found from HOME otherwise.
	goEnv, err := exec.Command("go", "env", "GOROOT", "GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	for i, name := range []string{"GOROOT", "GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY"} {
		if v := strings.Split(string(goEnv), "\n")[i]; v != "" {
			w.env = append(w.env, name+"="+v)
		}
	}
	return w
}

// builds remembers, for one TestREADME run, where `make run` built
// compactd and the plugins, so that later daemons reuse them.
type builds struct {
	root string // the repository
	bin  string // the first daemon's BIN, once it served; "" before
}

// startDaemon starts `make run` with BIN and SOCKET in the work directory
// and waits until the daemon answers; it is stopped (SIGTERM, as Ctrl-C
// would) when the test ends. The first daemon of a run builds compactd
// and the plugins; later ones get links to those files and run make with
// its build steps marked done.
func startDaemon(t *testing.T, w *workDir, b *builds) {
	bin := filepath.Join(w.dir, "bin")
	socket := filepath.Join(bin, "compactd.sock")
	args := []string{"-s", "-o", "deps"}
	if b.bin != "" {
		if err := linkBuild(b.bin, bin); err != nil {
			t.Fatalf("reusing the build of %s: %v", b.bin, err)
		}
		args = append(args, "-o", "build", "-o", "plugins")
	}
	cmd := exec.Command("make", append(args, "run", "BIN="+bin, "SOCKET="+socket)...)
	cmd.Dir = w.root
	cmd.Env = w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("make run: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(time.Minute):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("make run did not stop on SIGTERM; its output:\n%s", log.String())
		}
	})
	c := client.New(socket)
	defer c.Close()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		select {
		case err := <-done:
			t.Fatalf("make %s exited (%v) before the daemon answered:\n%s", strings.Join(args, " "), err, log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		h, err := c.Health(ctx)
		cancel()
		if err == nil && h.Status != "starting" { // "starting": the plugins are loading
			if h.Status != "ok" {
				t.Fatalf("the daemon is %s with %d policies:\n%s", h.Status, h.Policies, log.String())
			}
			if b.bin == "" {
				b.bin = bin
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not answer within 5 minutes:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// linkBuild gives the BIN directory dst what `make build plugins` wrote
// in src: the compactd binary and the plugins (hard links, copies where
// links fail). Of the first daemon's state it copies only the plugins'
// descriptions, which the registry keeps by their SHA-256 once they passed
// the smoke test (state/described/), so that the daemon serves at once, as
// after a restart, instead of checking every plugin again; conversations,
// status and config start empty.
func linkBuild(src, dst string) error {
	wasm, err := filepath.Glob(filepath.Join(src, "plugins", "*.wasm"))
	if err != nil {
		return err
	}
	if len(wasm) == 0 {
		return fmt.Errorf("no plugins in %s", filepath.Join(src, "plugins"))
	}
	if err := os.MkdirAll(filepath.Join(dst, "plugins"), 0o755); err != nil {
		return err
	}
	files := []string{"compactd"}
	for _, w := range wasm {
		files = append(files, filepath.Join("plugins", filepath.Base(w)))
	}
	described, err := filepath.Glob(filepath.Join(src, "state", "described", "*.json"))
	if err != nil {
		return err
	}
	if len(described) > 0 {
		if err := os.MkdirAll(filepath.Join(dst, "state", "described"), 0o755); err != nil {
			return err
		}
	}
	for _, d := range described {
		files = append(files, filepath.Join("state", "described", filepath.Base(d)))
	}
	for _, f := range files {
		from, to := filepath.Join(src, f), filepath.Join(dst, f)
		if os.Link(from, to) == nil {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	info, err := os.Stat(from)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, info.Mode().Perm())
}

// run runs an example and returns its output (stdout and stderr
// interleaved) and exit code.
func (w *workDir) run(ex *block) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), exampleTimeout)
	defer cancel()
	argv := append(append([]string{}, runners[ex.lang]...), ex.text)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = w.dir
	cmd.Env = w.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String(), -1, fmt.Errorf("timed out after %v; output so far:\n%s", exampleTimeout, out.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode(), nil
	}
	return out.String(), 0, err
}

// matchOutput reports whether got matches the output block want ("…"
// within a line matches any text; a line of "…" any lines).
func matchOutput(want, got string) bool {
	return matchLines(splitLines(want), splitLines(got))
}

// splitLines splits s into lines without trailing spaces, dropping
// trailing blank lines.
func splitLines(s string) []string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func matchLines(want, got []string) bool {
	// ok[i][j]: want[i:] matches got[j:].
	ok := make([][]bool, len(want)+1)
	for i := range ok {
		ok[i] = make([]bool, len(got)+1)
	}
	ok[len(want)][len(got)] = true
	for i := len(want) - 1; i >= 0; i-- {
		if want[i] == "…" {
			for j := len(got); j >= 0; j-- {
				ok[i][j] = ok[i+1][j] || j < len(got) && ok[i][j+1]
			}
			continue
		}
		re := linePattern(want[i])
		for j := len(got) - 1; j >= 0; j-- {
			ok[i][j] = ok[i+1][j+1] && re.MatchString(got[j])
		}
	}
	return ok[0][0]
}

func linePattern(want string) *regexp.Regexp {
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// volatile are the parts of an output that change from run to run; -update
// writes them as "…".
var volatile = []*regexp.Regexp{
	regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), // timestamps
	regexp.MustCompile(`\b(\d+(\.\d+)?(h|m|s|ms|µs|ns))+\b`),                      // durations
	regexp.MustCompile(`("(duration_ns|uptime_seconds|started_at|loaded_at|first_seen|last_seen|last_compacted)":)[0-9.]+`),
}

// generalize turns an example's output into an output block.
func generalize(out, workDir string) string {
	out = strings.ReplaceAll(out, workDir, "…")
	for _, re := range volatile {
		out = re.ReplaceAllStringFunc(out, func(m string) string {
			if sub := re.FindStringSubmatch(m); len(sub) > 1 && strings.HasPrefix(sub[1], `"`) {
				return sub[1] + "…"
			}
			return "…"
		})
	}
	lines := splitLines(out)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// rewriteOutputs replaces the text of the given output blocks.
func rewriteOutputs(path, doc string, blocks []*block, actual map[*block]string) error {
	lines := strings.Split(doc, "\n")
	var out []string
	next := 0
	for _, b := range blocks { // in document order
		out = append(out, lines[next:b.line]...) // through the opening fence
		out = append(out, splitLines(actual[b])...)
		next = b.end - 1 // the closing fence
	}
	out = append(out, lines[next:]...)
	return os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644)
}

// lockedBuffer is a bytes.Buffer that a command writes while the test
// may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMatchOutput(t *testing.T) {
	tests := []struct {
		name      string
		want, got string
		match     bool
	}{
		{"equal", "a\nb\n", "a\nb\n", true},
		{"trailing spaces and newlines", "a\nb", "a  \nb\n\n", true},
		{"different", "a\nb\n", "a\nc\n", false},
		{"missing line", "a\nb\n", "a\n", false},
		{"extra line", "a\n", "a\nb\n", false},
		{"ellipsis in a line", "took … (o200k_base)", "took 1.3ms (o200k_base)", true},
		{"ellipsis is not a line wildcard inside a line", "took … (x)", "took 1ms (y)", false},
		{"ellipsis line: none", "a\n…\nb", "a\nb", true},
		{"ellipsis line: many", "a\n…\nb", "a\nx\ny\nb", true},
		{"ellipsis line at the end", "a\n…", "a\nx\ny", true},
		{"regexp characters are literal", `{"a":[1]}.*`, `{"a":[1]}.*`, true},
		{"regexp characters do not match", `a.c`, `abc`, false},
		{"empty", "", "", true},
		{"empty want, some output", "", "x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := matchOutput(tt.want, tt.got); got != tt.match {
				t.Errorf("matchOutput(%q, %q) = %v", tt.want, tt.got, got)
			}
		})
	}
}

func TestParseExamples(t *testing.T) {
	const fenceSh, fenceText, end = "```sh\n", "```text\n", "```\n"
	tests := []struct {
		name    string
		doc     string
		n       int    // examples
		problem string // "" means none
	}{
		{name: "marked example with output",
			doc: "<!-- example -->\n" + fenceSh + "bin/compactd --version\n" + end + "<!-- output -->\n" + fenceText + "compactd …\n" + end, n: 1},
		{name: "skip with a reason", doc: "<!-- example skip: needs systemd -->\n" + fenceSh + "systemctl --user start compactd\n" + end, n: 1},
		{name: "unmarked shell block that runs the CLI",
			doc: fenceSh + "bin/compactd status\n" + end, problem: "is not marked"},
		{name: "unmarked curl", doc: fenceSh + "curl -s --unix-socket $SOCK http://localhost/healthz\n" + end, problem: "is not marked"},
		{name: "unmarked block that is not about compactd", doc: fenceSh + "go build ./...\n" + end},
		{name: "skip without a reason", doc: "<!-- example skip: -->\n" + fenceSh + "make run\n" + end, problem: "needs a reason"},
		{name: "output without an example", doc: "<!-- output -->\n" + fenceText + "x\n" + end, problem: "before any example"},
		{name: "two outputs", doc: "<!-- example -->\n" + fenceSh + "true\n" + end + "<!-- output -->\n" + fenceText + end + "<!-- output -->\n" + fenceText + end,
			problem: "a second output block"},
		{name: "unknown option", doc: "<!-- example slow -->\n" + fenceSh + "true\n" + end, problem: "unknown marker"},
		{name: "exit code", doc: "<!-- example exit=3 -->\n" + fenceSh + "false\n" + end, n: 1},
		{name: "no runner for the language", doc: "<!-- example -->\n```cobol\nDISPLAY 'x'.\n" + end, problem: "no runner"},
		{name: "unclosed block", doc: fenceSh + "bin/compactd\n", problem: "never closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			examples, err := parseExamples("README.md", tt.doc)
			if tt.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tt.problem) {
					t.Fatalf("err = %v, want %q", err, tt.problem)
				}
				return
			}
			if err != nil || len(examples) != tt.n {
				t.Fatalf("%d examples, err %v; want %d", len(examples), err, tt.n)
			}
		})
	}
	// A problem names the doc and the line.
	if _, err := parseExamples("docs/cli.md", "text\n```sh\nbin/compactd status\n```\n"); err == nil || !strings.HasPrefix(err.Error(), "docs/cli.md:2: ") {
		t.Errorf("err = %v, want it to start with docs/cli.md:2:", err)
	}
	examples, _ := parseExamples("README.md", "<!-- example exit=3 -->\n```sh\nfalse\n```\n<!-- output -->\n```text\nno\n```\n")
	if ex := examples[0]; ex.wantExit != 3 || ex.output == nil || ex.output.text != "no\n" || ex.text != "false\n" {
		t.Errorf("parsed %+v", ex)
	}
}

func TestGeneralize(t *testing.T) {
	in := `{"duration_ns":1397763,"loaded_at":"2026-11-01T10:00:00.123Z","file":"/tmp/readme1/bin/x"}` + "\n" +
		"sliding@1.0.0: 21368 → 1849 tokens, 73 → 10 messages, 1.3ms (o200k_base)\n  \n\n"
	want := `{"duration_ns":…,"loaded_at":"…","file":"…/bin/x"}` + "\n" +
		"sliding@1.0.0: 21368 → 1849 tokens, 73 → 10 messages, … (o200k_base)\n"
	if got := generalize(in, "/tmp/readme1"); got != want {
		t.Errorf("generalize:\n%s\nwant\n%s", got, want)
	}
	if !matchOutput(want, in) {
		t.Error("the generalized output does not match what it came from")
	}
}

func TestDocFiles(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"README.md":                  "# x\n",
		"docs/b.md":                  "no examples\n",
		"docs/a.md":                  "<!-- example -->\n```sh\ntrue\n```\n",
		"clients/x/README.md":        "<!-- example skip: elsewhere -->\n```sh\ncurl x\n```\n",
		"kits/y/README.md":           "```sh\nmake\n```\n",
		"node_modules/z/README.md":   "<!-- example -->\n```sh\ntrue\n```\n",
		"docs/sub/c.md":              "nothing\n",
		"plugins/p/notes.txt":        "<!-- example -->\n",
		"internal/q/doc.md":          "  <!-- output -->\n```text\n```\n",
		"internal/q/not-a-marker.md": "<!-- examples are below -->\n",
	}
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := docFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"README.md", "docs/a.md", "docs/b.md", "clients/x/README.md", "internal/q/doc.md"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("docFiles = %q, want %q", got, want)
	}
}
