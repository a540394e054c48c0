package main

import (
	"context"
	"os"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/compactd/compactd/pdk"
)

// benchConversation returns the conversation of a data file whose size is
// closest to chars characters of JSON, with tokens counted.
func benchConversation(b *testing.B, file string, chars int) *chat.Conversation {
	b.Helper()
	path, err := dataset.File(file)
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		b.Skipf("benchmarks use the full data set: %v", err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	best, bestDiff := convs[0].Chat, -1
	for _, c := range convs {
		size := len(c.Chat.Encode())
		if d := abs(size - chars); bestDiff < 0 || d < bestDiff {
			best, bestDiff = c.Chat, d
		}
	}
	tokens.New(tokens.Options{}).ForModel("gpt-4o").CountMessages(best.Messages)
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

var benchCases = []struct {
	name, file string
	chars      int
}{
	{"long-mini-swe", "mini_swe_agent_deepseek_swebench.jsonl", 120_000},
	{"short-tau-bench", "tau_bench_gpt4o_airline.jsonl", 13_000},
}

// BenchmarkCompact compares the sliding policy called natively (JSON
// decode + policy + JSON encode, what the guest does) with the same policy
// through the host on both paths (request encode, transfer, guest, result
// checks and assembly).
func BenchmarkCompact(b *testing.B) {
	ctx := context.Background()
	wasm, err := os.ReadFile(wasmbuild.ForTest(b, "plugins/sliding"))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range benchCases {
		conv := benchConversation(b, bc.file, bc.chars)
		cfg := []byte(`{"window_size":5,"step":5,"include_summary_marker":true,"keep_first_user":true,"max_tokens":0,"low_water":0.6,"start_on":""}`)
		req := &host.Request{Conversation: conv, Config: cfg}
		input := hostRequestJSON(b, conv, cfg)
		b.Run(bc.name+"/native", func(b *testing.B) {
			p := policy()
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				if _, err := pdk.Call(&p, &pdk.TestHost{}, abi.ExportCompact, input); err != nil {
					b.Fatal(err)
				}
			}
		})
		fast := host.EncodeFastRequestForTest(req)
		b.Run(bc.name+"/native-fast", func(b *testing.B) {
			p := policy()
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				if _, err := pdk.CallFast(&p, &pdk.TestHost{}, abi.ExportCompact, fast); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, path := range []struct {
			name    string
			disable bool
		}{{"wasm-fast", false}, {"wasm-extism", true}} {
			b.Run(bc.name+"/"+path.name, func(b *testing.B) {
				e, err := host.NewEngine(host.Config{DisableFastPath: path.disable, CacheDir: wasmbuild.TestCacheDir(b)})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close(ctx)
				p, err := e.Load(ctx, wasm, host.LoadOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close(ctx)
				b.SetBytes(int64(len(input)))
				for b.Loop() {
					if _, err := p.Compact(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// hostRequestJSON returns the request bytes the host sends for conv, by
// asking a plugin that echoes... simpler: rebuild it the way the host does.
func hostRequestJSON(b *testing.B, conv *chat.Conversation, cfg []byte) []byte {
	b.Helper()
	return host.EncodeRequestForTest(&host.Request{Conversation: conv, Config: cfg})
}
