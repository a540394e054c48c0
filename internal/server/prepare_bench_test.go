package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/provider"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
)

// slowSummarizer is the local provider answering after a delay.
type slowSummarizer struct {
	next  http.Handler
	delay time.Duration
}

func (s slowSummarizer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-time.After(s.delay):
	case <-r.Context().Done():
		return
	}
	s.next.ServeHTTP(w, r)
}

// BenchmarkProxyTriggerLatency measures the request that reaches the
// trigger, with the llm policy's summarizer (the local provider) answering
// after 5 s: "prepared" (proxy.prepare_threshold: its compaction was
// prepared in the background), "synchronous" (without preparation) and,
// for reference, "below" (a request that does not compact). Each
// iteration is one conversation; the preparations of a round of 8 run
// together before its trigger requests are timed, one at a time. It
// reports p50 and p99 in ms. The synchronous case takes the summarizer's
// time per iteration:
//
//	go test -run '^$' -bench 'BenchmarkProxyTriggerLatency/(prepared|below)' -benchtime 48x ./internal/server
//	go test -run '^$' -bench 'BenchmarkProxyTriggerLatency/synchronous' -benchtime 3x ./internal/server
func BenchmarkProxyTriggerLatency(b *testing.B) {
	full, k, _, fullTokens := prepareConversation(b)
	window := fullTokens * 10 / 8
	sum := httptest.NewServer(slowSummarizer{next: provider.New(provider.Options{OpenAIKey: upstreamtest.OpenAIKey}), delay: 5 * time.Second})
	defer sum.Close()
	up := upstreamtest.New()
	defer up.Close()
	daemon := func(extra string) *testDaemon {
		cfg := fmt.Sprintf("policy: llm\ncompact: {token_threshold: 1000, retention_window: 4}\n"+
			"limits: {plugins: {llm: {call_timeout: 5m, max_instances: 8}}}\n"+
			"llm: {provider: openai, base_url: '%s/v1', model: summarizer-1, api_key_env: K, concurrency: 64}\n"+
			"proxy: {openai: {upstream: '%s'}, context_window: %d%s}\n", sum.URL, up.OpenAIBase(), window, extra)
		td := setup(b, cfg, "plugins/llm")
		td.opts.Getenv = func(n string) string {
			if n == "K" {
				return upstreamtest.OpenAIKey
			}
			return ""
		}
		return td.start(b)
	}
	post := func(td *testDaemon, id string, body []byte) (time.Duration, http.Header) {
		req, _ := http.NewRequest(http.MethodPost, "http://compactd"+proxy.RouteOpenAI, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+upstreamtest.OpenAIKey)
		req.Header.Set(proxy.HeaderConversation, id)
		start := time.Now()
		resp, err := td.http.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return d, resp.Header
	}
	// Every message of a conversation names it, so the llm policy's
	// summary cache never answers for another's.
	bodies := func(id string) (prefix, whole []byte) {
		msgs := make([]json.RawMessage, len(full))
		for i, raw := range full {
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				b.Fatal(err)
			}
			if c, ok := m["content"].(string); ok && c != "" {
				m["content"] = c + "\n(run " + id + ")"
			}
			msgs[i], _ = json.Marshal(m)
		}
		return openAIBody(msgs[:k], ""), openAIBody(msgs, "")
	}
	report := func(b *testing.B, ds []time.Duration) {
		slices.Sort(ds)
		at := func(q float64) float64 { return float64(ds[min(int(q*float64(len(ds))), len(ds)-1)]) / 1e6 }
		b.ReportMetric(at(0.5), "p50-ms")
		b.ReportMetric(at(0.99), "p99-ms")
	}
	const round = 8
	for _, mode := range []string{"synchronous", "prepared", "below"} {
		extra := ""
		if mode != "synchronous" {
			extra = ", prepare_threshold: 0.5, prepare_workers: 8, prepare_queue: 1000"
		}
		td := daemon(extra)
		b.Run(mode, func(b *testing.B) {
			var ds []time.Duration
			b.StopTimer()
			for n := 0; n < b.N; {
				ids := make([]string, 0, round)
				for ; len(ids) < round && n < b.N; n++ {
					ids = append(ids, fmt.Sprintf("%s-%d-%d", mode, b.N, n))
				}
				if mode != "below" {
					var wg sync.WaitGroup
					for _, id := range ids {
						wg.Add(1)
						go func() { defer wg.Done(); prefix, _ := bodies(id); post(td, id, prefix) }()
					}
					wg.Wait()
					if mode == "prepared" {
						px := td.server.opts.Proxy
						waitFor(b, "the preparations", 5*time.Minute, func() bool { return px.PrepareStats().InFlight == 0 })
					}
				}
				for _, id := range ids {
					prefix, body := bodies(id)
					if mode == "below" {
						body = prefix
					}
					b.StartTimer()
					d, h := post(td, id, body)
					b.StopTimer()
					if (mode != "below") != (h.Get(proxy.HeaderCompacted) == "true") {
						b.Fatalf("%s: compacted=%q, warnings %q", mode, h.Get(proxy.HeaderCompacted), h.Values(proxy.HeaderWarning))
					}
					ds = append(ds, d)
				}
			}
			report(b, ds)
		})
	}
}
