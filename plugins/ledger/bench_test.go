package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/compactd/compactd/pdk"
)

// fullDataFile reads a file of the full data set, skipping the benchmark
// when the data set is not beside the checkout.
func fullDataFile(b *testing.B, file string) []dataset.Conversation {
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
	return convs
}

// benchConversation returns the conversation of a data file whose size is
// closest to chars characters of JSON, with tokens counted.
func benchConversation(b *testing.B, file string, chars int) *chat.Conversation {
	b.Helper()
	convs := fullDataFile(b, file)
	best, bestDiff := convs[0].Chat, -1
	for _, c := range convs {
		d := len(c.Chat.Encode()) - chars
		if d < 0 {
			d = -d
		}
		if bestDiff < 0 || d < bestDiff {
			best, bestDiff = c.Chat, d
		}
	}
	tokens.New(tokens.Options{}).ForModel("gpt-4o").CountMessages(best.Messages)
	return best
}

// BenchmarkCompact compares one request's cost through the host (fast
// path: request encode, transfer, guest, result checks) for ledger and
// deterministic — the policy it must not cost more than — on a long
// coding session and a short customer-service one. Each iteration calls
// both, alternately, so a machine's load shifts both alike; the metrics
// are each policy's mean time per request and their ratio.
func BenchmarkCompact(b *testing.B) {
	ctx := context.Background()
	cases := []struct {
		name, file string
		chars      int
	}{
		{"long-mini-swe", "mini_swe_agent_deepseek_swebench.jsonl", 120_000},
		{"short-tau-bench", "tau_bench_gpt4o_airline.jsonl", 13_000},
	}
	e, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	load := func(name string) (*host.Plugin, json.RawMessage) {
		wasm, err := os.ReadFile(wasmbuild.ForTest(b, "plugins/"+name))
		if err != nil {
			b.Fatal(err)
		}
		p, err := e.Load(ctx, wasm, host.LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		cfg, err := p.Schema().Resolve()
		if err != nil {
			b.Fatal(err)
		}
		return p, cfg
	}
	ledger, ledgerCfg := load("ledger")
	defer ledger.Close(ctx)
	det, detCfg := load("deterministic")
	defer det.Close(ctx)
	for _, bc := range cases {
		conv := benchConversation(b, bc.file, bc.chars)
		lreq := &host.Request{Conversation: conv, Config: ledgerCfg}
		dreq := &host.Request{Conversation: conv, Config: detCfg}
		b.Run(bc.name, func(b *testing.B) {
			var lt, dt time.Duration
			for i := 0; b.Loop(); i++ {
				// Alternate which goes first.
				first, second := func() { lt += timed(b, ctx, ledger, lreq) }, func() { dt += timed(b, ctx, det, dreq) }
				if i%2 == 1 {
					first, second = second, first
				}
				first()
				second()
			}
			n := float64(b.N)
			b.ReportMetric(float64(lt)/n, "ledger-ns/req")
			b.ReportMetric(float64(dt)/n, "deterministic-ns/req")
			b.ReportMetric(float64(lt)/float64(dt), "ledger/deterministic")
		})
	}
}

// BenchmarkReplay is the eval's measure of issue 23 ("ledger costs no more
// than deterministic at p50"): every turn of the first 12 mini-swe-agent
// conversations as the agent sent them, through the host, each request to
// ledger and to deterministic in turn (alternating which goes first), with
// the state each policy returned carried to its next turn. Each iteration
// loads fresh plugins, so ledger's memo starts empty as in `compactd
// eval`: its jumps extract and render, where BenchmarkCompact repeats one
// request the memo answers. The metrics are each policy's p50 per request
// and their ratio.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	convs := fullDataFile(b, "mini_swe_agent_deepseek_swebench.jsonl")
	convs = convs[:min(12, len(convs))]
	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	for _, c := range convs {
		tok.CountMessages(c.Chat.Messages)
	}
	e, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	wasm := map[string][]byte{}
	for _, name := range []string{"ledger", "deterministic"} {
		if wasm[name], err = os.ReadFile(wasmbuild.ForTest(b, "plugins/"+name)); err != nil {
			b.Fatal(err)
		}
	}
	type policy struct {
		p     *host.Plugin
		cfg   json.RawMessage
		state map[string]json.RawMessage
		lat   []time.Duration
	}
	var lat [2][]time.Duration
	for b.Loop() {
		var pols [2]*policy
		for i, name := range []string{"ledger", "deterministic"} {
			p, err := e.Load(ctx, wasm[name], host.LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			cfg, err := p.Schema().Resolve()
			if err != nil {
				b.Fatal(err)
			}
			pols[i] = &policy{p: p, cfg: cfg, state: map[string]json.RawMessage{}}
		}
		k := 0
		for _, c := range convs {
			for i := 1; i < c.Chat.Len(); i++ {
				if c.Chat.Messages[i].Role != abi.RoleAssistant {
					continue
				}
				in := dataset.Prefix(c.Chat, i)
				for j := range pols {
					x := pols[(j+k)%2]
					req := &host.Request{Conversation: in, Config: x.cfg, Context: abi.Context{State: x.state[c.ID], Model: "gpt-4o"}}
					start := time.Now()
					res, err := x.p.Compact(ctx, req)
					x.lat = append(x.lat, time.Since(start))
					if err != nil {
						b.Fatal(err)
					}
					x.state[c.ID] = res.Result.State
				}
				k++
			}
		}
		for i, x := range pols {
			lat[i] = append(lat[i], x.lat...)
			x.p.Close(ctx)
		}
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2])
	}
	l, d := p50(lat[0]), p50(lat[1])
	b.ReportMetric(l, "ledger-p50-ns")
	b.ReportMetric(d, "deterministic-p50-ns")
	b.ReportMetric(l/d, "ledger/deterministic-p50")
}

func timed(b *testing.B, ctx context.Context, p *host.Plugin, req *host.Request) time.Duration {
	start := time.Now()
	if _, err := p.Compact(ctx, req); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkNative is the policy alone, natively, on every turn of one long
// conversation (what a replay costs per request).
func BenchmarkNative(b *testing.B) {
	convs := plugtest.LoadFull(b, true, "mini_swe_agent_deepseek_swebench.jsonl")
	c := convs[0]
	for _, cv := range convs {
		if len(cv.Messages) > len(c.Messages) && len(cv.Messages) < 200 {
			c = cv
		}
	}
	req := plugtest.Request(c.Messages, nil, nil)
	for b.Loop() {
		if _, err := compact(&pdk.TestHost{}, req); err != nil {
			b.Fatal(err)
		}
	}
}
