// Package tracing is compactd's OpenTelemetry tracing: spans exported over
// OTLP when the standard OTEL_* environment asks for it, and nothing at
// all (no provider, no exporter, no work on the request path) when it does
// not.
//
// Setup reads the variables every OpenTelemetry SDK reads for traces:
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT turn
// tracing on (as does OTEL_TRACES_EXPORTER=otlp, to the default
// endpoint); OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none keep it
// off. OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf, the default;
// http/json; grpc), _HEADERS, _TIMEOUT and _COMPRESSION apply; the
// sampler (OTEL_TRACES_SAMPLER, _ARG), the batch processor (OTEL_BSP_*)
// and the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) are the
// SDK's own. Trace context travels as W3C traceparent/tracestate and
// baggage.
package tracing

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of compactd's spans.
const ScopeName = "github.com/compactd/compactd"

// Tracer starts compactd's spans. A nil *Tracer is tracing off: its
// methods do nothing and cost nothing.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	endpoint string
	protocol string
}

// Setup returns the tracer the environment (read with getenv) asks for,
// or nil when it asks for none. version is compactd's, for the resource.
// onError, if set, is told of the exporter's failures (an unreachable
// collector), which the SDK otherwise prints with the log package; it is
// the SDK's process-wide error handler, so the last daemon set up in a
// process gets them.
func Setup(ctx context.Context, getenv func(string) string, version string, onError func(error)) (*Tracer, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch exp := strings.ToLower(env("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return nil, nil
	case "", "otlp":
		if exp == "" && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
			return nil, nil
		}
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: compactd exports traces over OTLP only (otlp, or none)", exp)
	}
	traces := func(k string) string {
		if v := env("OTEL_EXPORTER_OTLP_TRACES_" + k); v != "" {
			return v
		}
		return env("OTEL_EXPORTER_OTLP_" + k)
	}
	protocol := strings.ToLower(traces("PROTOCOL"))
	if protocol == "" {
		protocol = "http/protobuf"
	}
	headers, err := parsePairs("OTEL_EXPORTER_OTLP_[TRACES_]HEADERS", traces("HEADERS"))
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if v := traces("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT=%q: want a positive number of milliseconds", v)
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	gzip := false
	switch c := strings.ToLower(traces("COMPRESSION")); c {
	case "", "none":
	case "gzip":
		gzip = true
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION=%s: want gzip or none", c)
	}
	// The endpoint: the traces one as it is, else the base one (HTTP:
	// with /v1/traces added), else the SDK's default.
	endpoint := env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		if base := env("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			endpoint = base
			if protocol != "grpc" {
				endpoint = strings.TrimRight(base, "/") + "/v1/traces"
			}
		}
	}
	if endpoint != "" {
		if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("OTLP traces endpoint %q: want an http:// or https:// URL", endpoint)
		}
	}

	var exporter sdktrace.SpanExporter
	switch protocol {
	case "http/protobuf", "http/json":
		opts := []otlptracehttp.Option{}
		if endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		if protocol == "http/json" {
			opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
		}
		if headers != nil {
			opts = append(opts, otlptracehttp.WithHeaders(headers))
		}
		if timeout > 0 {
			opts = append(opts, otlptracehttp.WithTimeout(timeout))
		}
		if gzip {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		}
		exporter, err = otlptracehttp.New(ctx, opts...)
	case "grpc":
		opts := []otlptracegrpc.Option{}
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		if headers != nil {
			opts = append(opts, otlptracegrpc.WithHeaders(headers))
		}
		if timeout > 0 {
			opts = append(opts, otlptracegrpc.WithTimeout(timeout))
		}
		if gzip {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		exporter, err = otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=%s: want http/protobuf, http/json or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// The resource: compactd and its version, then OTEL_RESOURCE_ATTRIBUTES,
	// then OTEL_SERVICE_NAME (the later wins, as the SDKs do).
	attrs := []attribute.KeyValue{semconv.ServiceName("compactd"), semconv.ServiceVersion(version)}
	extra, err := parsePairs("OTEL_RESOURCE_ATTRIBUTES", env("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return nil, err
	}
	for k, v := range extra {
		attrs = append(attrs, attribute.String(k, v))
	}
	if name := env("OTEL_SERVICE_NAME"); name != "" {
		attrs = append(attrs, semconv.ServiceName(name))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	if onError != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(onError))
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	if endpoint == "" {
		endpoint = "the SDK's default"
	}
	return &Tracer{
		provider: provider,
		tracer:   provider.Tracer(ScopeName, trace.WithInstrumentationVersion(version)),
		prop:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		endpoint: endpoint, protocol: protocol,
	}, nil
}

// parsePairs reads a variable (named name) of key=value pairs,
// comma-separated, values URL-encoded (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_RESOURCE_ATTRIBUTES); nil when s is empty.
func parsePairs(name, s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: want key=value pairs separated by commas", name)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: the value of %s: %w", name, k, err)
		}
		out[k] = dv
	}
	return out, nil
}

// Describe says where spans go ("" when t is off), for the start's log.
func (t *Tracer) Describe() string {
	if t == nil {
		return ""
	}
	return t.protocol + " to " + t.endpoint
}

// Shutdown sends the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing spans: %w", err)
	}
	return nil
}

// noSpan is what a nil Tracer hands out: a span that records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// StartServer starts the span of one request compactd serves, continuing
// the trace of the caller's traceparent when it sent one. Without
// tracing, ctx and a span that does nothing.
func (t *Tracer) StartServer(ctx context.Context, r *http.Request, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	ctx = t.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
	attrs = append(attrs, semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path))
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// Transport returns rt sending each request in a client span of the
// request's trace, with the trace context in its headers (rt itself
// without tracing).
func (t *Tracer) Transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil {
		return rt
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &transport{t: t, next: rt}
}

type transport struct {
	t    *Tracer
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper: the span ends with the
// response's body (a stream's last byte), or with the error.
func (tr *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, span := tr.t.tracer.Start(r.Context(), "upstream "+r.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.ServerAddress(r.URL.Hostname()), semconv.URLPath(r.URL.Path)))
	r = r.Clone(ctx)
	tr.t.prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
	resp, err := tr.next.RoundTrip(r)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return nil, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, resp.Status)
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		span.End()
		return resp, nil
	}
	resp.Body = &endOnClose{ReadCloser: resp.Body, span: span}
	return resp, nil
}

// CloseIdleConnections closes the wrapped transport's idle connections,
// as the proxy does when it stops.
func (tr *transport) CloseIdleConnections() {
	if c, ok := tr.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// endOnClose ends a span when the body it wraps is closed.
type endOnClose struct {
	io.ReadCloser
	span trace.Span
	done bool
}

func (b *endOnClose) Close() error {
	err := b.ReadCloser.Close()
	if !b.done {
		b.done = true
		b.span.End()
	}
	return err
}

// Child starts a span under ctx's span when that one records (tracing is
// on and the trace sampled), else returns ctx and a span that does
// nothing, at the cost of a context lookup. Packages that are handed no
// Tracer (the compactor, the plugin host) use it: the span's provider is
// the one that started the request's.
func Child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(ScopeName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// Fail marks span failed with err (nothing when err is nil).
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
