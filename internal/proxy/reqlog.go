package proxy

import (
	"net/http"
	"time"

	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// Why a request went on uncompacted, in its request-log record (beside the
// Pass* reasons of the requests compactd could not read).
const (
	NotCompactedBelow      = "below_threshold" // no trigger fired
	NotCompactedNoPolicy   = "no_policy"       // due, but no policy is configured
	NotCompactedPolicyKept = "policy_kept"     // the policy returned the conversation as it was
	NotCompactedFailed     = "failed"          // the compaction or writing it back failed (see warnings)
	NotCompactedError      = "error"           // compactd answered with an error before the upstream
)

// timing is an exchange's clock for its request-log record.
type timing struct {
	start, sent, firstByte, done time.Time
}

// SetRequestLog sets where the proxy records each request (nil: nowhere).
// Call it before serving.
func (p *Proxy) SetRequestLog(f func(requestlog.Record)) { p.opts.RequestLog = f }

// logged records x in the request log, once its answer has gone.
func (x *exchange) logged() {
	f := x.p.opts.RequestLog
	if f == nil {
		return
	}
	t := &x.clock
	t.done = time.Now()
	r := requestlog.Record{
		Time: t.start, Kind: requestlog.KindProxy, ConversationID: x.id, Format: x.prov.Name(), Model: x.model,
		Pipeline: x.pipeline, Route: x.routeName(), Compacted: x.compacted, Reason: x.reason, NotCompacted: x.notCompacted,
		TokensBefore: x.tokensBefore, TokensAfter: x.forwarded, ContextWindow: x.window,
		Status: x.status, Upstream: x.upstream, Warnings: x.warnings,
	}
	if x.compacted {
		r.NotCompacted = ""
	} else if r.NotCompacted == "" {
		r.NotCompacted = NotCompactedBelow
	}
	if x.usageSeen != nil {
		u := x.usageSeen
		r.Usage = &requestlog.Usage{InputTokens: u.InputTokens, CachedTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens, OutputTokens: u.OutputTokens}
	}
	if t.sent.IsZero() {
		r.CompactdMS = ms(t.done.Sub(t.start))
	} else {
		r.CompactdMS = ms(t.sent.Sub(t.start))
		r.UpstreamMS = ms(t.done.Sub(t.sent))
		if !t.firstByte.IsZero() {
			r.FirstByteMS = ms(t.firstByte.Sub(t.sent))
		}
	}
	r.Price()
	x.endSpan(&r)
	f(r)
}

// endSpan ends x's trace span with its record's figures (no prompt
// content, no header).
func (x *exchange) endSpan(r *requestlog.Record) {
	if x.span == nil {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("compactd.conversation.id", r.ConversationID), attribute.String("gen_ai.request.model", r.Model),
		attribute.String("gen_ai.provider.name", x.prov.Provider()), attribute.Bool("compactd.compacted", r.Compacted),
		attribute.Int("compactd.tokens_before", r.TokensBefore), attribute.Int("compactd.tokens_after", r.TokensAfter),
		attribute.Int("http.response.status_code", r.Status),
	}
	if len(r.Pipeline) > 0 {
		attrs = append(attrs, attribute.StringSlice("compactd.pipeline", r.Pipeline))
	}
	if r.NotCompacted != "" {
		attrs = append(attrs, attribute.String("compactd.not_compacted", r.NotCompacted))
	}
	if u := r.Usage; u != nil {
		attrs = append(attrs, attribute.Int("gen_ai.usage.input_tokens", u.InputTokens), attribute.Int("gen_ai.usage.output_tokens", u.OutputTokens))
	}
	x.span.SetAttributes(attrs...)
	if r.Status >= 500 {
		x.span.SetStatus(codes.Error, http.StatusText(r.Status))
	}
	if r.Route != "" {
		x.span.SetAttributes(attribute.String("compactd.route", r.Route))
	}
	x.span.End()
}

// routeName is x's route for its record ("" before its model was read).
func (x *exchange) routeName() string {
	if x.route == nil {
		return ""
	}
	return x.route.Name
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cost prices x's answer with usage u as its request-log record does
// (nil when the model has no catalog price).
func (x *exchange) cost(u store.Usage) *store.Cost {
	removed := 0
	if x.compacted {
		removed = x.tokensBefore - x.forwarded
	}
	paid, full, ok := requestlog.Cost(x.model, requestlog.Usage{InputTokens: u.InputTokens, CachedTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens, OutputTokens: u.OutputTokens}, removed)
	if !ok {
		return nil
	}
	return &store.Cost{PaidUSD: paid, FullUSD: full}
}

// noteUsage keeps the usage of x's answer for its record.
func (x *exchange) noteUsage(u store.Usage) { x.usageSeen = &u }

// statusWriter notes the status compactd itself answers with.
type statusWriter struct {
	http.ResponseWriter
	x *exchange
}

func (w statusWriter) WriteHeader(code int) {
	w.x.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (deadlines, flushes, hijacking an upgraded connection).
func (w statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
