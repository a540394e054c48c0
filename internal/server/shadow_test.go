package server

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
)

// TestProxyShadowForwardsTheSameBytes: a daemon with shadow policies
// forwards byte for byte what one without them forwards, below and at
// the trigger, while its shadows run on every request and are counted.
func TestProxyShadowForwardsTheSameBytes(t *testing.T) {
	t.Parallel()
	full, k, _, fullTokens := prepareConversation(t)
	start := func(extra string) (*testDaemon, *upstreamtest.Server) {
		up := upstreamtest.New()
		t.Cleanup(up.Close)
		cfg := fmt.Sprintf("policy: sliding\ncompact: {token_threshold: 1000, retention_window: 4}\n"+
			"proxy: {openai: {upstream: '%s'}, context_window: %d%s}\n", up.OpenAIBase(), fullTokens*10/9, extra)
		return startDaemon(t, cfg, "plugins/sliding", "plugins/deterministic", "plugins/toolresult"), up
	}
	plain, plainUp := start("")
	shadowed, shadowUp := start(", shadow: [deterministic, 'toolresult,sliding', sliding]")
	id := map[string]string{proxy.HeaderConversation: "same"}
	for i, msgs := range [][]byte{openAIBody(full[:k], ""), openAIBody(full, "")} {
		r1, b1 := plain.post(t, proxy.RouteOpenAI, msgs, id)
		r2, b2 := shadowed.post(t, proxy.RouteOpenAI, msgs, id)
		if r1.StatusCode != http.StatusOK || r2.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s / %d %s", i, r1.StatusCode, b1, r2.StatusCode, b2)
		}
		if r1.Header.Get(proxy.HeaderCompacted) != r2.Header.Get(proxy.HeaderCompacted) {
			t.Fatalf("request %d: compacted %q without shadows, %q with", i, r1.Header.Get(proxy.HeaderCompacted), r2.Header.Get(proxy.HeaderCompacted))
		}
		if i == 1 && r1.Header.Get(proxy.HeaderCompacted) != "true" {
			t.Fatalf("the full conversation was not compacted: the test does not cover a compacted request")
		}
		if a, b := plainUp.Last().Body, shadowUp.Last().Body; !bytes.Equal(a, b) {
			t.Fatalf("request %d: the upstream got %d bytes without shadows, %d different bytes with", i, len(a), len(b))
		}
	}
	px := shadowed.server.opts.Proxy
	waitFor(t, "the shadow runs", 2*time.Minute, func() bool { st := px.ShadowStats(); return st.Runs == 6 && st.InFlight == 0 })
	sc, ok := px.ShadowResults("same")
	res := sc.Pipelines
	if !ok || len(res) != 3 || res[0].Pipeline != "deterministic" || res[1].Pipeline != "sliding" || res[2].Pipeline != "toolresult,sliding" {
		t.Fatalf("shadow results: %+v", res)
	}
	// The live policy itself runs as a shadow (its state kept apart, so
	// the forwarded bytes above stay the same); at the trigger it was
	// told what the live one was, so it compacted there too.
	if r := res[1]; r.Compacted < 1 || r.TokensSent > sc.Live.TokensSent {
		t.Errorf("sliding as a shadow of sliding: %+v, live %+v", r, sc.Live)
	}
	if sc.Live.Requests != 2 || sc.Live.TokensSent >= sc.Full.TokensSent || sc.Live.ProbesKept > sc.Full.ProbesKept || sc.Full.Probes == 0 {
		t.Errorf("live %+v, full %+v: the compacted request should send less than everything", sc.Live, sc.Full)
	}
	_, metrics, _ := shadowed.raw(t, http.MethodGet, "/metrics", "")
	for _, want := range []string{`compactd_proxy_shadow_runs_total{pipeline="deterministic",outcome="ran"} 2`,
		`compactd_proxy_shadow_runs_total{pipeline="toolresult,sliding",outcome="ran"} 2`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(metrics), "shadow"))
		}
	}
	for _, r := range res {
		if r.Requests != 2 || r.Failed != 0 || r.Dropped != 0 || r.TokensSent <= 0 || len(r.CostsUSD) != len(px.ShadowCostModels()) {
			t.Errorf("%s: %+v", r.Pipeline, r)
		}
	}
	if st := plain.server.opts.Proxy.ShadowStats(); st.Runs != 0 {
		t.Errorf("no shadows configured, yet %+v", st)
	}
}

// TestProxyShadowDropAndShutdown: with one shadow worker and a queue of
// one, a shadow run held by the summarizer and one queued make the third
// request's run be dropped and counted (the request itself goes on
// untouched); a daemon stopped with one run held and one queued cancels
// both and stops.
func TestProxyShadowDropAndShutdown(t *testing.T) {
	t.Parallel()
	td, gate, send := oneWorkerDaemon(t, ", shadow: [llm], shadow_workers: 1, shadow_queue: 1")
	px := td.server.opts.Proxy
	send("a")
	waitFor(t, "a's shadow run to hold the worker", 2*time.Minute, func() bool { return gate.arrived.Load() > 0 })
	send("b") // queued
	send("c") // the worker is busy and the queue full: dropped
	if st := px.ShadowStats(); st.Dropped != 1 || st.InFlight != 2 || st.Runs != 0 {
		t.Fatalf("one worker, a queue of one, three requests: %+v", st)
	}
	if r, _ := px.ShadowResults("c"); len(r.Pipelines) != 1 || r.Pipelines[0].Dropped != 1 || r.Pipelines[0].Requests != 0 || r.Live.Requests != 0 {
		t.Fatalf("c's shadow results: %+v", r)
	}
	_, metrics, _ := td.raw(t, http.MethodGet, "/metrics", "")
	if !strings.Contains(string(metrics), `compactd_proxy_shadow_runs_total{pipeline="llm",outcome="dropped"} 1`) ||
		!strings.Contains(string(metrics), `compactd_proxy_shadow_in_flight 2`) {
		t.Errorf("/metrics does not count the dropped shadow run:\n%s", grepLines(string(metrics), "shadow"))
	}

	stopsWithin(t, td, "a shadow run held by the summarizer")
	if st := px.ShadowStats(); st.InFlight != 0 || st.Runs != 0 {
		t.Fatalf("after the stop: %+v", st)
	}
}

// BenchmarkShadowCost: what shadow policies add to a proxied request —
// two daemons beside each other, one with two shadows (deterministic,
// and toolresult then sliding) measuring every request, one without,
// requests alternating between them (ratios within one run). The shadow
// work itself runs off the request path but on the same CPUs, so the
// figure includes its competition for them; "dropped" counts the
// requests the shadows' queue was too full to take.
func BenchmarkShadowCost(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	start := func(extra string) (*testDaemon, string) {
		td := setup(b, "", pluginSliding, "plugins/deterministic", pluginToolresult)
		tokenFile := filepath.Join(td.dir, "token")
		os.WriteFile(tokenFile, []byte(proxyToken), 0o600)
		os.WriteFile(td.config, []byte(fmt.Sprintf("policy: sliding\ntcp: {listen: '127.0.0.1:0', token_file: %s}\nproxy: {openai: {upstream: '%s/v1'}%s}\n", tokenFile, up.URL, extra)), 0o600)
		td.start(b)
		return td, "http://" + td.TCPAddr() + proxy.RouteOpenAI
	}
	shadowed, withURL := start(", shadow: [deterministic, 'toolresult,sliding']")
	_, plainURL := start("")
	body := openAIBody(tauConversation(b, 12000), "")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	send := func(url string, i int) time.Duration {
		return timedProxyPost(b, hc, url, body, fmt.Sprintf("bench-shadow-%d", i%8))
	}
	send(withURL, 0)
	send(plainURL, 0)
	var with, without []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		with = append(with, send(withURL, i))
		without = append(without, send(plainURL, i))
	}
	b.StopTimer()
	pw, po := p50(with), p50(without)
	b.ReportMetric(float64(pw.Microseconds()), "shadowed-p50-µs")
	b.ReportMetric(float64(po.Microseconds()), "plain-p50-µs")
	b.ReportMetric(float64(pw-po)/1000, "added-p50-µs")
	b.ReportMetric(float64(pw)/float64(po), "ratio")
	st := shadowed.server.opts.Proxy.ShadowStats()
	b.ReportMetric(float64(st.Dropped)/2/float64(b.N+1), "dropped/req")
}
