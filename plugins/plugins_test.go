// Package plugins_test runs every built-in plugin, built to Wasm from its
// sources during the test, through the host on real conversations: every
// turn-by-turn prefix sampled from every file of the shared data. The
// output must be valid, preserved messages byte-identical, the final
// message unchanged and the caller's input untouched.
package plugins_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/conform"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// builtins lists the plugin sources under plugins/: a directory with a
// main.go is a Go plugin, one with a .c file a C plugin.
func builtins(t *testing.T) []string {
	t.Helper()
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "internal" || d.Name() == "testdata" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d.Name(), "main.go")); err == nil {
			out = append(out, "plugins/"+d.Name())
			continue
		}
		cs, _ := filepath.Glob(filepath.Join(d.Name(), "*.c"))
		if len(cs) == 1 {
			out = append(out, "plugins/"+filepath.ToSlash(cs[0]))
		}
	}
	sort.Strings(out)
	if len(out) < 2 {
		t.Fatalf("found only %v under plugins/", out)
	}
	return out
}

// TestLayout checks that every plugin directory has the files a plugin
// needs: a README.md with a config table, tests, and (for Go) a tiny
// main.go that registers the policy.
func TestLayout(t *testing.T) {
	for _, rel := range builtins(t) {
		dir := strings.TrimPrefix(rel, "plugins/")
		if filepath.Ext(dir) == ".c" {
			dir = filepath.Dir(dir)
		}
		readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
		if err != nil {
			t.Errorf("%s: %v", dir, err)
		} else if !bytes.Contains(readme, []byte("| ")) {
			t.Errorf("%s/README.md has no config table", dir)
		}
		if main, err := os.ReadFile(filepath.Join(dir, "main.go")); err == nil {
			if !bytes.Contains(main, []byte("pdk.Register(")) || bytes.Count(main, []byte("\n")) > 30 {
				t.Errorf("%s/main.go should only register the policy", dir)
			}
			tests, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
			if len(tests) == 0 {
				t.Errorf("%s has no tests", dir)
			}
		}
	}
}

func TestBuiltinsOnRealData(t *testing.T) {
	files, err := dataset.FixtureFiles()
	if err != nil {
		t.Fatal(err)
	}
	var convs []dataset.Conversation
	for _, f := range files {
		cs, err := dataset.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		convs = append(convs, cs...)
	}
	prefixes := 10
	if testing.Short() {
		prefixes = 3
	}
	counter := tokens.New(tokens.Options{})
	tok := counter.ForModel("gpt-4o")
	for _, c := range convs {
		tok.CountMessages(c.Chat.Messages)
	}
	engine, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close(context.Background())
	ctx := context.Background()

	for _, rel := range builtins(t) {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			t.Parallel()
			wasm, err := os.ReadFile(wasmbuild.ForTest(t, rel))
			if err != nil {
				t.Fatal(err)
			}
			p, err := engine.Load(ctx, wasm, host.LoadOptions{Source: rel})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ctx)
			if report := conform.Run(ctx, p, tok, nil); !report.OK() {
				for _, f := range report.Failures() {
					t.Errorf("conformance: %s: %v", f.Check, f.Err)
				}
			}
			cfg, err := p.Schema().Resolve()
			if err != nil {
				t.Fatal(err)
			}
			calls, compacted := 0, 0
			for _, c := range convs {
				for _, n := range dataset.SamplePrefixes(c.Chat, prefixes) {
					in := dataset.Prefix(c.Chat, n)
					before := in.Encode()
					resp, err := p.Compact(ctx, &host.Request{Conversation: in, Config: cfg, Env: host.CallEnv{CountTokens: tok.Count}})
					if err != nil {
						t.Fatalf("%s (%s) prefix %d: %v", c.ID, c.File, n, err)
					}
					calls++
					if resp.Compacted {
						compacted++
					}
					if !bytes.Equal(before, in.Encode()) {
						t.Fatalf("%s prefix %d: the input changed", c.ID, n)
					}
					checkRefs(t, c.ID, in.Raw, resp)
				}
			}
			t.Logf("%s: %d prefixes of %d conversations, %d compacted", p.Name(), calls, len(convs), compacted)
		})
	}
}

// checkRefs verifies that every output message that is not new is a
// byte-identical copy of an input message, in input order, and that the
// final message is the input's final message.
func checkRefs(t *testing.T, id string, in []json.RawMessage, resp *host.Response) {
	t.Helper()
	out := resp.Conversation.Raw
	isNew := map[int]bool{}
	for _, i := range resp.NewMessages {
		isNew[i] = true
	}
	j := 0
	for i, raw := range out {
		if isNew[i] {
			continue
		}
		for j < len(in) && !bytes.Equal(in[j], raw) {
			j++
		}
		if j == len(in) {
			t.Fatalf("%s: output message %d is not a byte-identical input message in order", id, i)
		}
		j++
	}
	if !bytes.Equal(out[len(out)-1], in[len(in)-1]) {
		t.Fatalf("%s: the final message changed", id)
	}
}
