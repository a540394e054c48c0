package compactd_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

const module = "github.com/compactd/compactd"

// TestPublicPackagesStandAlone: no package outside internal/ and cmd/
// depends, even through another package, on a package of the top-level
// internal/ directory, so what they export can be used by another module
// (RATIONALE.md, "Public packages stand alone"). A public package's
// private machinery lives beneath it (host/internal/…). Tests are not
// counted: they are never built into another module.
func TestPublicPackagesStandAlone(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		pkg, deps, _ := strings.Cut(sc.Text(), " ")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "internal" || strings.HasPrefix(rel, "internal/") || strings.HasPrefix(rel, "cmd/") {
			continue
		}
		checked++
		for _, d := range strings.Fields(deps) {
			if strings.HasPrefix(d, module+"/internal/") {
				t.Errorf("%s depends on %s: a public package must not reach into the top-level internal/ (move what it needs beneath it, or take an interface)", pkg, d)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d packages: go list printed\n%s", checked, out)
	}
}

// TestEmbedFromOutside builds examples/embed, a module of its own whose
// go.mod replaces this module with the checkout, so it can import only
// public packages, and runs it on a real plugin: another Go program can
// embed the host and the registry. RATIONALE.md quotes the example; the
// quote must be the file's. A unit run skips it: like the tests that run
// the compactd binary, it links and runs a program of its own.
func TestEmbedFromOutside(t *testing.T) {
	testenv.Integration(t, "a program built from examples/embed")
	t.Parallel()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "examples", "embed")
	bin := filepath.Join(t.TempDir(), "embed")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in examples/embed: %v\n%s\n(after a change of this module's requirements: cd examples/embed && go mod tidy)", err, out)
	}

	plugins := t.TempDir()
	lastn, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/lastn/lastn.c"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(plugins, "lastn.wasm"), lastn, 0o644)
	os.WriteFile(filepath.Join(plugins, "broken.wasm"), []byte("not wasm"), 0o644)
	input := firstConversation(t, filepath.Join(root, "testdata", "conversations", "tau_bench_gpt4o_airline.jsonl"))
	in, err := chat.Parse(input)
	if err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (stdout, stderr string, err error) {
		cmd := exec.Command(bin, args...)
		cmd.Stdin = bytes.NewReader(input)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}

	t.Run("compacts", func(t *testing.T) {
		stdout, stderr, err := run("-plugins", plugins, "-policy", "lastn", "-set", "n=2")
		if err != nil {
			t.Fatalf("embed: %v\n%s", err, stderr)
		}
		if !strings.Contains(stderr, "lastn@") || !strings.Contains(stderr, "broken.wasm did not load") {
			t.Errorf("stderr does not report the call and the broken file:\n%s", stderr)
		}
		out, err := chat.Parse([]byte(stdout))
		if err != nil {
			t.Fatalf("the output is not a conversation: %v\n%s", err, stdout)
		}
		if err := out.Validate(); err != nil {
			t.Fatal(err)
		}
		if out.Len() >= in.Len() {
			t.Fatalf("%d messages in, %d out: nothing compacted", in.Len(), out.Len())
		}
		// Refs keep the caller's bytes: the system message and the last.
		if !bytes.Equal(out.Raw[0], in.Raw[0]) || !bytes.Equal(out.Raw[out.Len()-1], in.Raw[in.Len()-1]) {
			t.Error("the kept messages are not the input's bytes")
		}
		// The envelope's other keys are kept.
		if !strings.Contains(stdout, `"id": "tau-bench/`) {
			t.Error("the input's other keys are lost")
		}
	})
	t.Run("unknown policy", func(t *testing.T) {
		_, stderr, err := run("-plugins", plugins, "-policy", "nope")
		if err == nil || !strings.Contains(stderr, `no plugin in `+plugins+` serves "nope"`) {
			t.Errorf("err %v, stderr:\n%s", err, stderr)
		}
	})
	t.Run("RATIONALE quotes the example", func(t *testing.T) {
		checkExcerpts(t, filepath.Join(root, "RATIONALE.md"), root)
	})
}

// firstConversation returns the first line of a JSONL fixture.
func firstConversation(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return line
}

var excerptMark = regexp.MustCompile("(?m)^<!-- excerpt: (\\S+) -->\n```[a-z]*\n((?s:.*?))```\n")

// checkExcerpts checks every fenced block of doc marked
// <!-- excerpt: PATH --> is a contiguous part of PATH (relative to root).
func checkExcerpts(t *testing.T, doc, root string) {
	t.Helper()
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	marks := excerptMark.FindAllSubmatch(text, -1)
	if len(marks) == 0 {
		t.Fatalf("%s has no <!-- excerpt: PATH --> block", doc)
	}
	for _, m := range marks {
		src, err := os.ReadFile(filepath.Join(root, string(m[1])))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(src, m[2]) {
			t.Errorf("%s: the excerpt of %s is not in the file:\n%s", doc, m[1], m[2])
		}
	}
}
