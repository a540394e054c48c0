package server

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a local OTLP/HTTP trace receiver: it decodes what an
// exporter posts to /v1/traces as a collector would.
type otlpReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	service string
	headers http.Header
	posts   int
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a POST of application/x-protobuf to /v1/traces", http.StatusBadRequest)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.posts++
		rc.headers = r.Header.Clone()
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					rc.service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// snapshot returns the spans received so far.
func (rc *otlpReceiver) snapshot() ([]*tracepb.Span, string, http.Header, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...), rc.service, rc.headers, rc.posts
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			v := a.GetValue()
			switch {
			case v.GetArrayValue() != nil:
				var parts []string
				for _, e := range v.GetArrayValue().Values {
					parts = append(parts, e.GetStringValue())
				}
				return strings.Join(parts, ",")
			case v.GetStringValue() != "":
				return v.GetStringValue()
			default:
				return fmt.Sprint(v.GetIntValue(), v.GetBoolValue())
			}
		}
	}
	return ""
}

// contentMarker is prompt text no span may carry.
const contentMarker = "CONTENT-MARKER-never-traced"

// TestTracing: with the standard OTEL_* variables a daemon exports a
// span per proxied request with the compaction's stages and plugin calls
// and the upstream exchange under it, to a local OTLP receiver; the
// agent's traceparent is continued and the upstream gets the trace's.
func TestTracing(t *testing.T) {
	t.Parallel()
	rc := newOTLPReceiver(t)
	msgs, n := tauMessages(t, 12000)
	msgs = append(msgs, json.RawMessage(`{"role":"user","content":"`+contentMarker+`"}`))
	td, up := proxySetup(t, fmt.Sprintf("  context_window: %d\n", n), pluginSliding)
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rc.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-tenant=team%20a",
		"OTEL_SERVICE_NAME":           "compactd-under-test",
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	}
	td.opts.Getenv = func(k string) string { return env[k] }
	td.start(t)

	const agentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	const agentSpan = "00f067aa0ba902b7"
	resp, b := td.post(t, proxy.RouteOpenAI, openAIBody(msgs, ""), map[string]string{
		"X-Compactd-Conversation": "traced", "traceparent": "00-" + agentTrace + "-" + agentSpan + "-01",
	})
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	got := up.Last().Header.Get("traceparent")
	if !strings.HasPrefix(got, "00-"+agentTrace+"-") || strings.Contains(got, agentSpan) {
		t.Errorf("the upstream's traceparent %q: want the agent's trace with compactd's span", got)
	}
	// Shutdown flushes what the batcher holds.
	td.Daemon.Shutdown(bg)
	spans, service, headers, _ := rc.snapshot()
	if service != "compactd-under-test" || headers.Get("X-Tenant") != "team a" {
		t.Errorf("resource service.name %q, header x-tenant %q", service, headers.Get("X-Tenant"))
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		byName[s.Name] = s
		for _, a := range s.Attributes {
			if v := a.GetValue().GetStringValue(); strings.Contains(v, contentMarker) || strings.Contains(v, upstreamtest.OpenAIKey) {
				t.Errorf("span %s attribute %s holds content or a key: %q", s.Name, a.Key, v)
			}
		}
	}
	server, stage, call, client := byName["compactd proxy openai"], byName["compactd.stage sliding"], byName["compactd.plugin compact"], byName["upstream POST"]
	if server == nil || stage == nil || call == nil || client == nil {
		names := []string{}
		for n := range byName {
			names = append(names, n)
		}
		t.Fatalf("spans %v: want the request's, its stage's, the plugin call's and the upstream's", names)
	}
	hexID := func(b []byte) string { return hex.EncodeToString(b) }
	for _, s := range []*tracepb.Span{server, stage, call, client} {
		if hexID(s.TraceId) != agentTrace {
			t.Errorf("span %s in trace %s, want the agent's %s", s.Name, hexID(s.TraceId), agentTrace)
		}
	}
	if hexID(server.ParentSpanId) != agentSpan || server.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("the request's span: parent %s kind %v; want the agent's span, server", hexID(server.ParentSpanId), server.Kind)
	}
	if !bytes.Equal(stage.ParentSpanId, server.SpanId) || !bytes.Equal(call.ParentSpanId, stage.SpanId) || !bytes.Equal(client.ParentSpanId, server.SpanId) {
		t.Error("the stage, plugin call and upstream spans are not request → stage → call, request → upstream")
	}
	if client.Kind != tracepb.Span_SPAN_KIND_CLIENT || !strings.Contains(got, hexID(client.SpanId)) {
		t.Errorf("the upstream span (kind %v, id %s) is not the one the upstream's traceparent %q names", client.Kind, hexID(client.SpanId), got)
	}
	for k, want := range map[string]string{"compactd.conversation.id": "traced", "gen_ai.request.model": "gpt-4o", "compactd.compacted": "0 true",
		"compactd.pipeline": "sliding", "http.response.status_code": "200 false"} {
		if v := spanAttr(server, k); v != want {
			t.Errorf("request span %s = %q, want %q", k, v, want)
		}
	}
	if spanAttr(stage, "compactd.policy") != "sliding" || spanAttr(call, "compactd.plugin") != "sliding" {
		t.Errorf("stage/call attributes: %v / %v", stage.Attributes, call.Attributes)
	}
	if time.Duration(server.EndTimeUnixNano-server.StartTimeUnixNano) <= 0 {
		t.Error("the request span has no duration")
	}
}

// TestNoTracingByDefault: without the variables nothing is exported and
// the upstream gets no trace context of compactd's.
func TestNoTracingByDefault(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	resp, b := td.post(t, proxy.RouteOpenAI, openAIBody([]json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)}, ""), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if h := up.Last().Header.Get("traceparent"); h != "" {
		t.Errorf("the upstream got traceparent %q with tracing off", h)
	}
	if td.Daemon.tracer != nil {
		t.Error("a tracer was set up without OTEL_* variables")
	}
}

// BenchmarkTracingCost: what tracing adds to a proxied request that does
// not compact — two daemons beside each other, one exporting every span
// to a local OTLP receiver, one without the variables, requests
// alternating between them (ratios within one run).
func BenchmarkTracingCost(b *testing.B) {
	up := benchUpstream()
	defer up.Close()
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(rc.Close) // after the daemons' shutdown, which flushes to it
	start := func(env map[string]string) string {
		td := setup(b, "", pluginSliding)
		tokenFile := filepath.Join(td.dir, "token")
		os.WriteFile(tokenFile, []byte(proxyToken), 0o600)
		os.WriteFile(td.config, []byte(fmt.Sprintf("policy: sliding\ntcp: {listen: '127.0.0.1:0', token_file: %s}\nproxy: {openai: {upstream: '%s/v1'}}\n", tokenFile, up.URL)), 0o600)
		td.opts.Getenv = func(k string) string { return env[k] }
		td.start(b)
		return "http://" + td.TCPAddr() + proxy.RouteOpenAI
	}
	traced := start(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rc.URL})
	plain := start(nil)
	body := openAIBody(tauConversation(b, 12000), "")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	send := func(url string) time.Duration { return timedProxyPost(b, hc, url, body, "bench-trace") }
	send(traced)
	send(plain)
	var with, without []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		with = append(with, send(traced))
		without = append(without, send(plain))
	}
	b.StopTimer()
	pw, po := p50(with), p50(without)
	b.ReportMetric(float64(pw.Microseconds()), "traced-p50-µs")
	b.ReportMetric(float64(po.Microseconds()), "untraced-p50-µs")
	b.ReportMetric(float64(pw-po)/1000, "added-p50-µs")
	b.ReportMetric(float64(pw)/float64(po), "ratio")
}
