package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/proxy"
)

// BenchmarkProxyCompacting compares a proxied request that is compacted
// with what an agent would do without the proxy: ask /v1/compact (over
// the Unix socket, with the Go client) for the same conversation, then
// send the compacted messages to the upstream itself. Every request is
// past proxy.trigger_tokens, so each proxied one is compacted (sliding);
// the two ways alternate in one loop, each on its own conversation id.
// It reports the p50 of both and of the proxy's time minus the other's
// (issue 22: a compacting request costs no more than /v1/compact plus the
// forward).
//
//	go test -run '^$' -bench BenchmarkProxyCompacting -benchtime 1000x ./internal/server
func BenchmarkProxyCompacting(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	td := benchProxyDaemon(b, fmt.Sprintf("proxy: {openai: {upstream: '%s/v1'}, trigger_tokens: 1000}\n", up.URL))
	proxied := "http://" + td.TCPAddr() + "/v1/chat/completions"
	direct := up.URL + "/v1/chat/completions"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	// A plain client (the tests' own validates every exchange against
	// the OpenAPI document, which costs more than the request).
	cc := client.New(td.Socket())
	defer cc.Close()
	for _, chars := range []int{12000, 40000} {
		msgs := tauConversation(b, chars)
		body := openAIBody(msgs, "")
		b.Run(fmt.Sprintf("tau-%dKB", len(body)/1000), func(b *testing.B) {
			post := func(url string, body []byte, viaProxy bool) {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer sk-bench")
				req.Header.Set("Content-Type", "application/json")
				if viaProxy {
					req.Header.Set(proxy.HeaderToken, proxyToken)
					req.Header.Set(proxy.HeaderConversation, fmt.Sprintf("bench-proxied-%d", chars))
				}
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || (viaProxy && resp.Header.Get(proxy.HeaderCompacted) == "") {
					b.Fatalf("%d, compacted %q", resp.StatusCode, resp.Header.Get(proxy.HeaderCompacted))
				}
			}
			creq := &client.CompactRequest{Policy: "sliding", Model: "gpt-4o", Messages: msgs, ConversationID: fmt.Sprintf("bench-compact-%d", chars)}
			compactThenForward := func() {
				resp, err := cc.Compact(bg, creq)
				if err != nil || !resp.Compacted {
					b.Fatalf("compact: %+v %v", resp, err)
				}
				post(direct, openAIBody(resp.Messages, ""), false)
			}
			post(proxied, body, true) // warm both ways alike
			compactThenForward()
			var own, via, added []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				compactThenForward()
				o := time.Since(start)
				start = time.Now()
				post(proxied, body, true)
				v := time.Since(start)
				own, via, added = append(own, o), append(via, v), append(added, v-o)
			}
			b.StopTimer()
			b.ReportMetric(float64(p50(own).Microseconds()), "compact+forward-p50-µs")
			b.ReportMetric(float64(p50(via).Microseconds()), "proxied-p50-µs")
			b.ReportMetric(float64(p50(added).Microseconds()), "difference-p50-µs")
			b.ReportMetric(float64(len(body)), "body-bytes")
		})
	}
}
