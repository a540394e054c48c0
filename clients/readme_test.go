//go:build !unit

// `make test-unit` builds with -tags unit and leaves this file out: every
// test in it needs node and a daemon and skips in a unit run anyway
// (internal/testenv), and linking the test binary alone takes seconds.

package clients

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/testenv"
)

// clientsDoc is the doc whose client examples this package runs: the
// shell blocks marked `<!-- example skip: run by clients/readme_test.go …
// -->`, which the examples test at the top (readme_test.go) leaves to
// this one, since they need the clients built.
const clientsDoc = "docs/clients.md"

// ownMarker starts the marker of the blocks this package runs.
const ownMarker = "<!-- example skip: run by clients/readme_test.go"

// TestREADMEExamples runs the client examples of docs/clients.md, in
// order, against a real daemon ($SOCK is its socket, as after `make run`)
// and checks each trailing comment (`code  # expected`, `code // expected`)
// appears in the output, in order.
func TestREADMEExamples(t *testing.T) {
	testenv.Integration(t, "node and a daemon")
	python(t)
	need(t, "node", "node")
	root, _ := filepath.Abs("..")
	if _, err := os.Stat(filepath.Join(root, "clients", "ts", "node_modules", "typescript")); err != nil && !testing.Short() {
		t.Fatal("clients/ts/node_modules has no typescript: run `make deps`")
	}
	doc, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(clientsDoc)))
	if err != nil {
		t.Fatal(err)
	}
	blocks := ownBlocks(string(doc))
	// The Python and the TypeScript example at least.
	if len(blocks) < 2 {
		t.Fatalf("%s has %d blocks marked %q, want at least 2", clientsDoc, len(blocks), ownMarker+" …")
	}
	d := startDaemon(t)
	env := append(d.env(t), "SOCK="+d.socket)
	for _, b := range blocks {
		out := run(t, env, root, "bash", "-euo", "pipefail", "-c", b.script)
		rest := out
		for _, want := range expectations(b.script) {
			i := strings.Index(rest, want)
			if i < 0 {
				t.Errorf("%s:%d: the output lacks %q (in order):\n%s", clientsDoc, b.line, want, out)
				break
			}
			rest = rest[i+len(want):]
		}
	}
}

// docBlock is a shell block of a doc: its script and the line of its
// opening fence.
type docBlock struct {
	line   int
	script string
}

// ownBlocks returns the ```sh blocks of doc right after an ownMarker line.
func ownBlocks(doc string) []docBlock {
	lines := strings.Split(doc, "\n")
	var out []docBlock
	for i := 1; i < len(lines); i++ {
		if lines[i] != "```sh" || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), ownMarker) {
			continue
		}
		var body []string
		j := i + 1
		for ; j < len(lines) && lines[j] != "```"; j++ {
			body = append(body, lines[j])
		}
		out = append(out, docBlock{line: i + 1, script: strings.Join(body, "\n") + "\n"})
		i = j
	}
	return out
}

// expectations returns the trailing comments of a script's lines.
func expectations(script string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)\S[ \t]+(?:#|//) (.+)$`).FindAllStringSubmatch(script, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}
