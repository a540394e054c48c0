//go:build !unit

// `make test-unit` builds with -tags unit and leaves this file out: every
// test in it needs the kits' compilers and a daemon and skips in a unit
// run anyway (internal/testenv), and linking the test binary alone takes
// seconds.

package kits_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// BenchmarkKits measures one compact call of the example policy in each
// language, on each path (fast: the binary request in the plugin's memory;
// extism: JSON through the Extism SDK), on a short and a long fixture
// conversation, with a config that masks and drops.
func BenchmarkKits(b *testing.B) {
	convs := benchConversations(b)
	ctx := context.Background()
	cfg := json.RawMessage(`{"keep_units":4,"mask_units":8,"step":2}`)
	for _, l := range langs {
		wasm, err := os.ReadFile(project(b, l.lang, l.name))
		if err != nil {
			b.Fatal(err)
		}
		for _, path := range []string{"fast", "extism"} {
			e, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(b), DisableFastPath: path == "extism"})
			if err != nil {
				b.Fatal(err)
			}
			p, err := e.Load(ctx, wasm, host.LoadOptions{Source: l.name + ".wasm"})
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range convs {
				b.Run(fmt.Sprintf("%s/%s/%s", l.lang, c.name, path), func(b *testing.B) {
					req := &host.Request{Conversation: c.conv, Config: cfg}
					if _, err := p.Compact(ctx, req); err != nil { // warm the instance
						b.Fatal(err)
					}
					b.SetBytes(int64(len(c.conv.Encode())))
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if _, err := p.Compact(ctx, req); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			// The linear memory a warm instance holds after the long call.
			if st := p.Stats(); st.Idle > 0 {
				b.Run(fmt.Sprintf("%s/instance-memory/%s", l.lang, path), func(b *testing.B) {
					b.ReportMetric(float64(st.IdleMemoryBytes)/float64(st.Idle)/(1<<20), "MiB/instance")
				})
			}
			p.Close(ctx)
			e.Close(ctx)
		}
		// A cold load: compile (no compilation cache), instantiate, describe.
		b.Run(l.lang+"/load-cold", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				e, err := host.NewEngine(host.Config{})
				if err != nil {
					b.Fatal(err)
				}
				p, err := e.Load(ctx, wasm, host.LoadOptions{Source: l.name + ".wasm"})
				if err != nil {
					b.Fatal(err)
				}
				p.Close(ctx)
				e.Close(ctx)
			}
		})
	}
}

type benchConv struct {
	name string
	conv *chat.Conversation
}

// benchConversations returns a 12-message and a 150-message prefix of the
// longest fixture conversation.
func benchConversations(b *testing.B) []benchConv {
	files, err := dataset.FixtureFiles()
	if err != nil {
		b.Fatal(err)
	}
	var longest *chat.Conversation
	for _, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range convs {
			if longest == nil || c.Chat.Len() > longest.Len() {
				longest = c.Chat
			}
		}
	}
	if longest.Len() < 150 {
		b.Fatalf("the longest fixture conversation has %d messages", longest.Len())
	}
	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	var out []benchConv
	for _, n := range []int{12, 150} {
		// Cut where a prefix is valid: not inside a tool block.
		for n < longest.Len() && longest.Messages[n].Role == "tool" {
			n++
		}
		p := dataset.Prefix(longest, n)
		tok.CountMessages(p.Messages)
		out = append(out, benchConv{fmt.Sprintf("%dmsgs", p.Len()), p})
	}
	return out
}
