package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/dataset"
	llmclient "github.com/compactd/compactd/internal/llm"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/compactd/compactd/policyconfig"
)

// TestWasmWithProvider runs llm.wasm in the real host, on both call paths,
// with llm_complete served by an llm.Client talking to a local
// OpenAI-compatible server: the whole chain from the guest PDK to HTTP.
// A second identical request is served from the summary cache and gives
// byte-identical output.
func TestWasmWithProvider(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("builds and compiles the plugin to Wasm (the race detector does not see into the guest anyway)")
	}
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conv := dataset.Prefix(convs[0].Chat, convs[0].Chat.Len()-1)
	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	tok.CountMessages(conv.Messages)

	wasm, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/llm"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fast := range []bool{true, false} {
		name := "extism"
		if fast {
			name = "fast"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			engine, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(t), DisableFastPath: !fast})
			if err != nil {
				t.Fatal(err)
			}
			defer engine.Close(ctx)
			p, err := engine.Load(ctx, wasm, host.LoadOptions{Source: "plugins/llm"})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ctx)
			cfg, err := p.Schema().Resolve(policyconfig.Layer{Source: "test", Values: map[string]any{"token_threshold": 8000, "model": "summarizer-x"}})
			if err != nil {
				t.Fatal(err)
			}
			stub := newStubProvider(t, 0.1)
			client, err := llmclient.New(llmclient.Config{Provider: llmclient.KindOpenAI, BaseURL: stub.srv.URL + "/v1"},
				llmclient.WithGetenv(func(string) string { return "" }))
			if err != nil {
				t.Fatal(err)
			}
			var outs [][]byte
			for i := 0; i < 2; i++ {
				resp, err := p.Compact(ctx, &host.Request{Conversation: conv, Config: cfg,
					Env: host.CallEnv{CountTokens: tok.Count, LLM: client.Budgeted()}})
				if err != nil {
					t.Fatal(err)
				}
				if !resp.Compacted || len(resp.Result.Warnings) != 0 || len(resp.NewMessages) != 1 {
					t.Fatalf("compacted %v, warnings %q, new %v", resp.Compacted, resp.Result.Warnings, resp.NewMessages)
				}
				out := resp.Conversation.Encode()
				if !bytes.Contains(out, []byte(headerPrefix)) || !bytes.Contains(out, []byte("summary of ")) {
					t.Fatalf("no LLM summary in the output")
				}
				outs = append(outs, out)
			}
			st := client.Stats()
			if st.Calls == 0 || st.CacheHits != st.Calls || stub.calls.Load() != st.Calls {
				t.Fatalf("stats %+v, provider calls %d: the second request must be all cache hits", st, stub.calls.Load())
			}
			if m := stub.model.Load(); m != "summarizer-x" {
				t.Fatalf("the provider got model %v, not the policy's summarizer", m)
			}
			if !bytes.Equal(outs[0], outs[1]) {
				t.Fatal("the same history gave different bytes")
			}
			if !strings.Contains(string(outs[0]), `"role":"assistant","content":"[compactd summary of `) {
				t.Fatal("summary role")
			}

			// No provider: the deterministic summary, with a warning.
			resp, err := p.Compact(ctx, &host.Request{Conversation: conv, Config: cfg, Env: host.CallEnv{CountTokens: tok.Count}})
			if err != nil {
				t.Fatal(err)
			}
			if !resp.Compacted || len(resp.Result.Warnings) != 1 || !strings.Contains(resp.Result.Warnings[0], "no_provider") ||
				!bytes.Contains(resp.Conversation.Encode(), []byte("Previous ")) {
				t.Fatalf("fallback: compacted %v, warnings %q", resp.Compacted, resp.Result.Warnings)
			}
		})
	}
}

// BenchmarkCompact measures one request on the longest mini-swe-agent
// conversation (token_threshold 8000, every summary already cached), in
// Wasm and natively, with the state of the previous call (no llm_complete
// call at all) and without it (every step replayed as a cache hit):
//
//	go test ./plugins/llm -run XXX -bench Compact
func BenchmarkCompact(b *testing.B) {
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	conv := convs[0].Chat
	for _, c := range convs {
		if c.Chat.Len() > conv.Len() {
			conv = c.Chat
		}
	}
	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	tok.CountMessages(conv.Messages)
	stub := newStubProvider(b, 0.1)
	client, err := llmclient.New(llmclient.Config{Provider: llmclient.KindOpenAI, BaseURL: stub.srv.URL + "/v1"},
		llmclient.WithGetenv(func(string) string { return "" }))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	engine, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer engine.Close(ctx)
	wasm, err := os.ReadFile(wasmbuild.ForTest(b, "plugins/llm"))
	if err != nil {
		b.Fatal(err)
	}
	p, err := engine.Load(ctx, wasm, host.LoadOptions{Source: "plugins/llm"})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	cfg, err := p.Schema().Resolve(policyconfig.Layer{Source: "bench", Values: map[string]any{"token_threshold": 8000}})
	if err != nil {
		b.Fatal(err)
	}
	first, err := p.Compact(ctx, &host.Request{Conversation: conv, Config: cfg, Context: abi.Context{Model: "gpt-4o"},
		Env: host.CallEnv{CountTokens: tok.Count, LLM: client}})
	if err != nil || !first.Compacted {
		b.Fatalf("%v %v", err, first)
	}
	state := first.Result.State
	native := &abi.CompactRequest{ABI: abi.Version, Messages: plugtestMessages(conv), Config: cfg, Context: abi.Context{Model: "gpt-4o"}}
	h := clientHost{tok: tok, llm: client}
	for _, withState := range []bool{true, false} {
		st := json.RawMessage(nil)
		name := "no-state"
		if withState {
			st, name = state, "state"
		}
		b.Run("wasm/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := p.Compact(ctx, &host.Request{Conversation: conv, Config: cfg, Context: abi.Context{Model: "gpt-4o", State: st},
					Env: host.CallEnv{CountTokens: tok.Count, LLM: client}}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("native/"+name, func(b *testing.B) {
			native.Context.State = st
			for i := 0; i < b.N; i++ {
				if _, err := compact(h, native); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Logf("%d messages, %d summary steps; provider calls %d", conv.Len(), len(schedule(native.Messages, defaultsWith(8000), 0)), stub.calls.Load())
}

func defaultsWith(threshold int) config {
	c := defaults
	c.TokenThreshold = threshold
	return c
}

// plugtestMessages returns conv's messages with decoded text contents, as
// the fast path delivers them.
func plugtestMessages(conv *chat.Conversation) []abi.Message {
	msgs := make([]abi.Message, len(conv.Messages))
	for i, m := range conv.Messages {
		if m.Content.IsString() {
			m.Content = abi.TextContent(m.Content.Text())
		}
		msgs[i] = m
	}
	return msgs
}
