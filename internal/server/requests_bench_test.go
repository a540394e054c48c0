package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/proxy"
)

// BenchmarkRequestLogCost proxies the tau 12 KB conversation (JSON, not
// compacted) with the request log on (memory, the bbolt store's copy and
// an access file) and off, alternating request by request in one run, so
// a shared machine's noise falls on both alike. It reports each p50 and
// their ratio.
func BenchmarkRequestLogCost(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	access := filepath.Join(b.TempDir(), "access.jsonl")
	td := benchProxyDaemon(b, fmt.Sprintf("proxy: {openai: {upstream: '%s/v1'}}\nlog: {access_file: %s}\n", up.URL, access))
	msgs := tauConversation(b, 12000)
	body := openAIBody(msgs, "")
	url := "http://" + td.TCPAddr() + proxy.RouteOpenAI
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	send := func() time.Duration { return timedProxyPost(b, hc, url, body, "bench-log") }
	p := td.proxy
	on, off := td.server.logRequest, p.SetRequestLog
	send() // warm
	var with, without []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.SetRequestLog(on)
		with = append(with, send())
		off(nil)
		without = append(without, send())
	}
	b.StopTimer()
	p.SetRequestLog(on)
	pw, po := p50(with), p50(without)
	b.ReportMetric(float64(pw.Microseconds()), "log-p50-µs")
	b.ReportMetric(float64(po.Microseconds()), "nolog-p50-µs")
	b.ReportMetric(float64(pw-po)/1000, "added-p50-µs")
	b.ReportMetric(float64(pw)/float64(po), "ratio")
}

// timedProxyPost sends body to the proxied OpenAI route at url through the
// TCP listener, as an SDK does, and returns how long the whole exchange
// took; an error or a status other than 200 fails the benchmark.
func timedProxyPost(b *testing.B, hc *http.Client, url string, body []byte, conversation string) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-bench")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(proxy.HeaderToken, proxyToken)
	req.Header.Set(proxy.HeaderConversation, conversation)
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%d", resp.StatusCode)
	}
	return time.Since(start)
}
