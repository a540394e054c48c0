package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/wire/anthropic"
)

// benchUpstream answers every request at once with a fixed answer, so what
// a benchmark measures beyond it is the proxy: a JSON completion with
// usage, or (stream: true) five events flushed one by one.
func benchUpstream() *httptest.Server {
	answer := []byte(`{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":1,"total_tokens":101}}`)
	message := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":100,"output_tokens":1}}`)
	response := []byte(`{"id":"resp_1","object":"response","status":"completed","model":"gpt-4o","output":[{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"ok","annotations":[]}]}],"usage":{"input_tokens":100,"output_tokens":1,"total_tokens":101}}`)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/v1/responses":
			w.Header().Set("Content-Type", "application/json")
			w.Write(response)
			return
		case "/v1/messages":
			w.Header().Set("Content-Type", "application/json")
			w.Write(message)
			return
		}
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(answer)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < 4; i++ {
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"}}],\"usage\":null}\n\n", i)
			f.Flush()
		}
		io.WriteString(w, "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
		f.Flush()
	}))
}

// BenchmarkProxyOverhead compares calling a local upstream directly with
// calling it through the proxy (the daemon's TCP listener, as an SDK
// does), for requests that are not compacted: the same conversation sent
// again, as an agent re-sends its history. Direct and proxied requests
// alternate in one loop; each sub-benchmark reports the p50 of both and
// the p50 added by the proxy, for the whole exchange (json) and for the
// time to the first byte of a streamed answer (stream-ttfb). Each row
// runs twice: with X-Compactd-Conversation naming the conversation, and
// (".../no-header") without it, its id derived from its messages, as an
// agent that changes only its base URL sends it.
func BenchmarkProxyOverhead(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	td := benchProxyDaemon(b, fmt.Sprintf("proxy: {openai: {upstream: '%s/v1'}, anthropic: {upstream: '%s'}}\n", up.URL, up.URL))
	proxied := "http://" + td.TCPAddr() + "/v1/chat/completions"
	direct := up.URL + "/v1/chat/completions"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	convs := []struct {
		name string
		msgs []json.RawMessage
	}{{"small-1KB", chatMessages(4)}}
	for _, f := range []struct{ name, file string }{{"tau-12KB", "tau_bench_gpt4o_airline.jsonl"}, {"mini-swe-85KB", "mini_swe_agent_deepseek_swebench.jsonl"}} {
		want := map[string]int{"tau-12KB": 12000, "mini-swe-85KB": 85000}[f.name]
		path, err := dataset.Fixture(f.file)
		if err != nil {
			b.Fatal(err)
		}
		cs, err := dataset.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		best, diff := cs[0].Chat, -1
		for _, c := range cs {
			for _, n := range dataset.TurnPrefixes(c.Chat) {
				p := dataset.Prefix(c.Chat, n)
				if d := abs(len(p.MessagesJSON()) - want); diff < 0 || d < diff {
					best, diff = p, d
				}
			}
		}
		convs = append(convs, struct {
			name string
			msgs []json.RawMessage
		}{f.name, best.Raw})
	}

	for _, mode := range []string{"json", "stream-ttfb", "responses", "anthropic"} {
		for _, c := range convs {
			extra := ""
			if mode == "stream-ttfb" {
				extra = `,"stream":true`
			}
			body := openAIBody(c.msgs, extra)
			proxied, direct := proxied, direct
			if mode == "responses" {
				if c.name != "small-1KB" {
					continue
				}
				// A Codex session of about 12 KB: reasoning, calls,
				// outputs.
				c.name = "codex-12KB"
				body = responsesBody(codexSession(8, 1000), "")
				proxied = "http://" + td.TCPAddr() + proxy.RouteResponses
				direct = up.URL + proxy.RouteResponses
			}
			if mode == "anthropic" {
				if c.name != "tau-12KB" {
					continue
				}
				// The same conversation as Anthropic Messages.
				cc, err := chat.FromRaw(c.msgs)
				if err != nil {
					b.Fatal(err)
				}
				system, msgs, err := anthropic.FromChat(cc.Messages)
				if err != nil {
					b.Fatal(err)
				}
				body, err = json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 64, "system": system, "messages": msgs})
				if err != nil {
					b.Fatal(err)
				}
				proxied = "http://" + td.TCPAddr() + proxy.RouteAnthropic
				direct = up.URL + proxy.RouteAnthropic
			}
			for _, header := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s", mode, c.name)
				if !header {
					name += "/no-header"
				}
				b.Run(name, func(b *testing.B) {
					send := func(url string, viaProxy bool) time.Duration {
						req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
						req.Header.Set("Authorization", "Bearer sk-bench")
						req.Header.Set("Content-Type", "application/json")
						if viaProxy {
							req.Header.Set(proxy.HeaderToken, proxyToken)
							if header {
								req.Header.Set(proxy.HeaderConversation, "bench-"+mode+"-"+c.name)
							}
						}
						start := time.Now()
						resp, err := hc.Do(req)
						if err != nil {
							b.Fatal(err)
						}
						var first [1]byte
						if _, err := io.ReadFull(resp.Body, first[:]); err != nil {
							b.Fatal(err)
						}
						ttfb := time.Since(start)
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
							b.Fatalf("%d, compacted %q", resp.StatusCode, resp.Header.Get(proxy.HeaderCompacted))
						}
						if mode != "stream-ttfb" {
							return time.Since(start)
						}
						return ttfb
					}
					send(proxied, true) // warm: the conversation's counts are remembered
					var d, p []time.Duration
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						d = append(d, send(direct, false))
						p = append(p, send(proxied, true))
					}
					b.StopTimer()
					pd, pp := p50(d), p50(p)
					b.ReportMetric(float64(pd.Microseconds()), "direct-p50-µs")
					b.ReportMetric(float64(pp.Microseconds()), "proxied-p50-µs")
					b.ReportMetric(float64((pp - pd).Microseconds()), "added-p50-µs")
					b.ReportMetric(float64(len(body)), "body-bytes")
				})
			}
		}
	}
}

// benchProxyDaemon starts a daemon serving sliding, its TCP listener
// taking the benchmarks' proxy token; extra is more of its config (the
// proxy's upstreams, the log).
func benchProxyDaemon(b *testing.B, extra string) *testDaemon {
	b.Helper()
	td := setup(b, "", pluginSliding)
	tokenFile := filepath.Join(td.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(proxyToken), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := fmt.Sprintf("policy: sliding\ntcp: {listen: '127.0.0.1:0', token_file: %s}\n", tokenFile) + extra
	if err := os.WriteFile(td.config, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	td.start(b)
	return td
}

func p50(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
