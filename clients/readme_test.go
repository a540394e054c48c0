package clients

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/testenv"
)

// readmeSections are the README sections whose examples this package's
// clients own; TestREADMEExamples runs their shell blocks, in order.
var readmeSections = []string{"## Use from Python", "## Use from TypeScript", "## The status page"}

// TestREADMEExamples runs the README's client and status page examples
// against a real daemon ($SOCK is its socket, as after `make run`) and
// checks each trailing comment (`code  # expected`, `code // expected`)
// appears in the output, in order.
func TestREADMEExamples(t *testing.T) {
	testenv.Integration(t, "node and a daemon")
	python(t)
	need(t, "node", "node")
	need(t, "curl", "curl")
	root, _ := filepath.Abs("..")
	if _, err := os.Stat(filepath.Join(root, "clients", "ts", "node_modules", "typescript")); err != nil && !testing.Short() {
		t.Fatal("clients/ts/node_modules has no typescript: run `make deps`")
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t)
	env := append(d.env(t), "SOCK="+d.socket)
	blocks := 0
	for _, section := range readmeSections {
		body := sectionOf(string(readme), section)
		if body == "" {
			t.Fatalf("README.md has no section %q", section)
		}
		for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(body, -1) {
			blocks++
			script := block[1]
			out := run(t, env, root, "bash", "-euo", "pipefail", "-c", script)
			rest := out
			for _, want := range expectations(script) {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Errorf("%s: the output lacks %q (in order):\n%s", section, want, out)
					break
				}
				rest = rest[i+len(want):]
			}
		}
	}
	if blocks < 3 {
		t.Errorf("ran %d README blocks, want at least 3", blocks)
	}
}

// sectionOf returns the text of the README section that starts with
// heading, up to the next heading of the same level.
func sectionOf(readme, heading string) string {
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := readme[i+1+len(heading):]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// expectations returns the trailing comments of a script's lines.
func expectations(script string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)\S[ \t]+(?:#|//) (.+)$`).FindAllStringSubmatch(script, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}
