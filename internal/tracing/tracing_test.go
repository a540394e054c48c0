package tracing

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func TestSetup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		on      bool
		errWant string
	}{
		{"nothing set: off", nil, false, ""},
		{"an endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{"the traces endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector:4318/v1/traces"}, true, ""},
		{"exporter otlp alone: on, default endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, ""},
		{"http/json, gzip, headers, timeout", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
			"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=x%20y", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}, true, ""},
		{"SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, ""},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, ""},
		{"an exporter compactd lacks", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTLP only"},
		{"an unknown protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, false, "want http/protobuf"},
		{"a bad timeout", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, false, "milliseconds"},
		{"bad headers", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, false, "key=value"},
		{"a bad compression", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, false, "gzip or none"},
		{"an endpoint that is no URL", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, false, "http:// or https://"},
		{"bad resource attributes", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_RESOURCE_ATTRIBUTES": "=x"}, false, "OTEL_RESOURCE_ATTRIBUTES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := Setup(context.Background(), func(k string) string { return tc.env[k] }, "test", nil)
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("err = %v, want one saying %q", err, tc.errWant)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tr != nil) != tc.on {
				t.Fatalf("tracer %v, want on=%v", tr, tc.on)
			}
			if err := tr.Shutdown(context.Background()); err != nil && tc.on {
				t.Logf("shutdown (nothing to flush): %v", err)
			}
		})
	}
}

// TestOffCostsNothing: a nil Tracer hands back the request and transport
// untouched, and Child under a context without a recording span starts
// nothing.
func TestOffCostsNothing(t *testing.T) {
	// Not parallel: AllocsPerRun measures the whole process.
	var tr *Tracer
	r, _ := http.NewRequest(http.MethodPost, "http://x/v1/chat/completions", nil)
	ctx := context.Background()
	if c, span := tr.StartServer(ctx, r, "x"); c != ctx || span.IsRecording() {
		t.Error("a nil tracer started a span")
	}
	if rt := tr.Transport(http.DefaultTransport); rt != http.DefaultTransport {
		t.Error("a nil tracer wrapped the transport")
	}
	if c, span := Child(ctx, "stage"); c != ctx || span.IsRecording() {
		t.Error("Child started a span without a recording parent")
	}
	if n := testing.AllocsPerRun(100, func() { Child(ctx, "stage") }); n != 0 {
		t.Errorf("Child without tracing allocates %v times", n)
	}
}

func BenchmarkChildOff(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		_, span := Child(ctx, "compactd.stage sliding")
		span.End()
	}
}

// idleCounter is a RoundTripper that counts CloseIdleConnections calls.
type idleCounter struct {
	http.RoundTripper
	closed int
}

func (c *idleCounter) CloseIdleConnections() { c.closed++ }

// TestTransportClosesIdleConnections: the traced transport passes
// CloseIdleConnections on, so a stopping proxy still closes its pool.
func TestTransportClosesIdleConnections(t *testing.T) {
	t.Parallel()
	tr, err := Setup(context.Background(), func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}[k]
	}, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	next := &idleCounter{RoundTripper: http.DefaultTransport}
	rt := tr.Transport(next)
	c, ok := rt.(interface{ CloseIdleConnections() })
	if !ok {
		t.Fatal("the traced transport has no CloseIdleConnections")
	}
	c.CloseIdleConnections()
	if next.closed != 1 {
		t.Fatalf("CloseIdleConnections reached the wrapped transport %d times", next.closed)
	}
}
