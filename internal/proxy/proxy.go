// Package proxy is compactd as a drop-in OpenAI- and Anthropic-compatible
// proxy: an agent changes its SDK's base URL to the daemon, and every
// request passes two filters on its way to the provider (the llms
// extension's request and response filters, seed 002):
//
//   - The request filter compacts a conversation before it is forwarded
//     when the provider's usage of the previous response reached the
//     threshold (the deferred trigger: needs_compaction), or when a
//     pre-flight count of this request does — either one suffices. The
//     conversation goes through the one compaction path
//     (internal/compactor), so policies see the same ABI for every wire
//     format (each converted at the edge by its package under
//     internal/wire, registered once in internal/wire/formats). A failed compaction never fails the agent's
//     call: the request goes on uncompacted with an X-Compactd-Warning
//     header and a log line.
//   - The response filter reads the provider's usage from the JSON body or
//     the event stream, records it in the conversation's status
//     (usage_ratio, last_usage) and sets needs_compaction. Streams pass
//     through event by event, flushed as they arrive; nothing but the
//     event in progress is held, and that within proxy.max_event_bytes.
//     Usage counts are believed only within 0 to 2^53 (internal/usage).
//
// An upstream that misbehaves costs a bounded amount and ends cleanly
// for the caller, in the provider's format: no headers within
// proxy.timeout or silence after them past proxy.read_timeout is a 504
// (a stream ends with an error event instead); a stream line or event
// past proxy.max_event_bytes ends the stream with an error event. Each
// fault is counted (Faults).
//
// The caller's headers, its provider key among them, are passed through
// untouched (compactd's own X-Compactd-* headers are removed); they are
// never stored or logged. Each conversation's last request body is kept
// in memory, bounded, for manual compaction (CompactStored).
//
// A Proxy is safe for concurrent use.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/convlabel"
	"github.com/compactd/compactd/internal/eval"
	"github.com/compactd/compactd/internal/models"
	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/tracing"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/anthropic"
	"github.com/compactd/compactd/internal/wire/openaichat"
	"github.com/compactd/compactd/internal/wire/responses"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Headers compactd reads and writes on proxied requests. The request
// headers are removed before a request goes upstream.
const (
	// HeaderConversation (request) names the conversation; without it the
	// id is derived from the leading system messages and the first user
	// message. (response) the id used.
	HeaderConversation = "X-Compactd-Conversation"
	// HeaderToken authenticates a proxied request on the TCP listener,
	// where Authorization carries the provider's key.
	HeaderToken = "X-Compactd-Token"
	// HeaderCompacted (response) is "true" when the request was compacted.
	HeaderCompacted = "X-Compactd-Compacted"
	// HeaderWarning (response) says what went wrong on compactd's side;
	// the request was still forwarded. It may repeat.
	HeaderWarning = "X-Compactd-Warning"
	// HeaderUpstream (response) names the provider ("openai" or
	// "anthropic") whose upstream gave the answer, on every answer that
	// came from an upstream (its status, headers and body passed
	// through). An answer without it is compactd's own: one of its errors
	// in the provider's format (proxy off, upstream unreachable or too
	// slow, missing token, bad conversation header).
	HeaderUpstream = "X-Compactd-Upstream"
)

// Routes the proxy serves. Other paths under /v1/ that compactd does not
// serve are forwarded as they are (Forwards, ServeForward).
const (
	RouteOpenAI    = openaichat.Route
	RouteAnthropic = anthropic.Route
	RouteResponses = responses.Route
)

// maxConversationID caps the X-Compactd-Conversation header, as
// /v1/compact caps conversation_id.
const maxConversationID = 256

// ErrNotStored is returned by CompactStored for a conversation whose last
// request the proxy does not hold.
var ErrNotStored = errors.New("no stored request for this conversation")

// Options configure a Proxy. Config, Compactor and Store are required.
type Options struct {
	Config    *config.Manager
	Compactor *compactor.Compactor
	Store     store.Backend
	// Tokens counts the pre-flight tokens (a new Counter if nil; the
	// daemon shares the compactor's, so counts are cached once).
	Tokens *tokens.Counter
	// Memory keeps each proxied conversation's last request (its counts,
	// calibration and body, for manual compaction), bounded by
	// proxy.max_stored_bytes, which the proxy sets on it (SetRequestLimit).
	// The daemon shares the one /v1/compact reads through; a new one if
	// nil.
	Memory *chat.Memory
	// Observe, if set, is told of every compaction the proxy runs, once
	// the conversation's status is recorded (the daemon counts it in its
	// metrics and keeps its record for the status page).
	Observe func(Compaction)
	// Transport sends upstream requests (a pooled http.Transport if nil).
	Transport http.RoundTripper
	// Logger receives one line per compaction and per failure; never a
	// header. Discarded if nil.
	Logger hclog.Logger
	// RequestLog, if set, gets one record per request served on a
	// format's route, once its answer has gone (SetRequestLog).
	RequestLog func(requestlog.Record)
	// Tracer, if set, traces each request: a server span, the compaction's
	// spans under it, and a client span per upstream exchange, whose
	// headers carry the trace context (nil: no tracing, no cost).
	Tracer *tracing.Tracer
}

// Proxy forwards provider API requests through the request and response
// filters.
type Proxy struct {
	opts      Options
	logger    hclog.Logger
	seed      maphash.Seed
	mem       requestMemory
	transport http.RoundTripper
	faults    faults
	passed    passthroughs
	prep      *preparer
	shadow    *shadower
	biller    *eval.Biller // prices the shadow figures (nil: shadows are not measured)
	rec       recoveries
	relay     relayBuffers
}

// New returns a Proxy.
func New(opts Options) *Proxy {
	p := &Proxy{opts: opts, logger: opts.Logger, seed: maphash.MakeSeed(), transport: opts.Transport}
	if p.logger == nil {
		p.logger = hclog.NewNullLogger()
	}
	if p.opts.Tokens == nil {
		p.opts.Tokens = tokens.New(tokens.Options{})
	}
	if p.transport == nil {
		p.transport = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	p.transport = opts.Tracer.Transport(p.transport)
	if opts.Memory != nil {
		p.mem = opts.Memory
		p.mem.SetRequestLimit(opts.Config.Current().Proxy.MaxStoredBytes)
	} else {
		p.mem = chat.NewMemory(chat.MemoryOptions{MaxRequestBytes: opts.Config.Current().Proxy.MaxStoredBytes})
	}
	p.prep = newPreparer(opts.Config.Current().Proxy.PrepareWorkers)
	pc := opts.Config.Current().Proxy
	p.shadow = newShadower(pc.ShadowWorkers, pc.ShadowQueue, p.runShadow)
	if b, err := newShadowBiller(p.opts.Tokens); err != nil {
		p.logger.Error("proxy: the shadow policies' pricing table cannot be read: shadows are not run", "error", err)
	} else {
		p.biller = b
	}
	return p
}

// Compaction is one compaction the proxy ran, for Options.Observe.
type Compaction struct {
	// Input is the conversation compacted, in chat form (an Anthropic
	// request's converted one); Response.Origin indexes it.
	Input    *chat.Conversation
	Response *compactor.Response
	Model    string
	Pipeline []string
	// Format is the request's wire format, and MessagesBefore and
	// MessagesAfter count its messages (or items) in that format: an
	// Anthropic request's tool results are messages of their own in
	// Input, so the counts differ from Input's.
	Format                        string
	MessagesBefore, MessagesAfter int
}

// SetObserver sets Options.Observe (the daemon's metrics exist only once
// the server that uses the proxy does). Call it before serving.
func (p *Proxy) SetObserver(f func(Compaction)) { p.opts.Observe = f }

func (p *Proxy) observe(c *Compaction) {
	if c != nil && p.opts.Observe != nil {
		p.opts.Observe(*c)
	}
}

// ConfigChanged applies a new config's bounds (the daemon calls it after
// a reload or update).
func (p *Proxy) ConfigChanged(c *config.Config) { p.mem.SetRequestLimit(c.Proxy.MaxStoredBytes) }

// Close cancels the background preparations, waits for them to end, and
// releases idle upstream connections.
func (p *Proxy) Close() {
	p.prep.close()
	p.shadow.close()
	if t, ok := p.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// Stored reports how many conversations' last requests are held, and
// their size in bytes.
func (p *Proxy) Stored() (conversations int, bytes int64) {
	st := p.mem.Stats()
	return st.Requests, st.RequestBytes
}

// ServeFormat serves POST on the format's route (Formats).
func (p *Proxy) ServeFormat(f wire.Format) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, f) }
}

// ErrorFor renders an error of compactd's outside the proxy's routes in
// the shape r's client reads: Anthropic's ({"type": "error", "error":
// {type, message}}) for a request with Anthropic's headers, ok false
// otherwise (compactd's own shape).
func ErrorFor(r *http.Request, status int, code, msg string) (body []byte, ok bool) {
	if !anthropic.FromClient(r.Header) {
		return nil, false
	}
	return anthropic.Format{}.ErrorBody(status, code, msg), true
}

// Forwards reports whether r, a path under /v1/ that compactd does not
// serve, goes upstream unchanged: it does when the provider it is for
// (Anthropic when it carries anthropic-version or x-api-key, else OpenAI)
// has an upstream. Models lists, embeddings, token counts and the like
// reach the provider; nothing is compacted or recorded.
func (p *Proxy) Forwards(r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		return false
	}
	cfg := p.opts.Config.Current()
	base, _ := upstreamOf(&cfg.Proxy, formatFor(r))
	return base != ""
}

// ServeForward forwards r unchanged (see Forwards).
func (p *Proxy) ServeForward(w http.ResponseWriter, r *http.Request) {
	cfg := p.opts.Config.Current()
	prov := formatFor(r)
	base, _ := upstreamOf(&cfg.Proxy, prov)
	if base == "" {
		p.writeError(w, prov, http.StatusNotFound, "not_found", fmt.Sprintf("no endpoint %s %s, and no %s upstream to forward it to", r.Method, r.URL.Path, prov.Provider()))
		return
	}
	extendDeadline(w, cfg.Proxy.Timeout.D())
	var body io.Reader
	if r.Body != nil && r.Body != http.NoBody {
		body = r.Body
	}
	if r.Method == http.MethodPost {
		// A POST may carry a conversation compactd cannot see here.
		msg := fmt.Sprintf("compactd does not compact %s (it compacts %s): forwarded unchanged", r.URL.Path, routes())
		if alt := doubledVersion(r.URL.Path); alt != "" {
			msg = fmt.Sprintf("%s has /v1 twice: the SDK's base URL ends in /v1 and the SDK adds it too (did you mean %s?); forwarded unchanged", r.URL.Path, alt)
		}
		w.Header().Add(HeaderWarning, headerValue(msg))
		if p.passed.note(r.URL.Path, PassPath, r.Header.Get(HeaderConversation)) {
			p.logger.Warn("proxy: "+msg, "provider", prov.Provider(), "path", r.URL.Path)
		}
	}
	p.forward(w, r, cfg, prov, prov.Target(base, r.URL.Path), body, r.ContentLength, nil)
}

// routes lists the formats' routes, for messages: "A, B and C".
func routes() string {
	var rs []string
	for _, f := range Formats() {
		rs = append(rs, f.Route())
	}
	if len(rs) < 2 {
		return strings.Join(rs, "")
	}
	return strings.Join(rs[:len(rs)-1], ", ") + " and " + rs[len(rs)-1]
}

// Unauthorized answers 401 in the provider's format (the TCP listener's
// check).
func (p *Proxy) Unauthorized(w http.ResponseWriter, r *http.Request, msg string) {
	p.writeError(w, formatFor(r), http.StatusUnauthorized, "unauthorized", msg)
}

func (p *Proxy) writeError(w http.ResponseWriter, prov wire.Format, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(prov.ErrorBody(status, code, msg))
}

// extendDeadline lets a proxied exchange outlive the server's write
// timeout, which is sized for compaction requests, not for model calls.
func extendDeadline(w http.ResponseWriter, d time.Duration) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

// exchange is one proxied request on its way through the filters.
type exchange struct {
	p        *Proxy
	prov     wire.Format
	cfg      *config.Config
	id       string
	path     string
	model    string
	window   int
	warnings []string
	// forwarded is compactd's count of the prompt sent upstream, to
	// calibrate the next pre-flight count against the provider's usage.
	forwarded int
	compacted bool
	// fromPrepared: the request was sent as its conversation's prepared
	// compaction plus its new messages (prepare.go).
	fromPrepared bool
	addedUsage   bool
	tracked      bool        // the conversation is in the store and gets the usage
	compaction   *Compaction // the compaction run on the request, if any
	labels       convlabel.Labels
	// chosen is the pipeline the request's X-Compactd-Policy named (nil:
	// none); route is what the request runs under (routeFor), set once
	// its model is read.
	chosen []string
	route  *config.Route
	// span is the request's trace span (nil without tracing).
	span trace.Span

	// For the request log.
	clock        timing
	pipeline     []string
	reason       string // why a compaction ran
	notCompacted string // why the request went on as it came
	tokensBefore int
	status       int
	upstream     bool
	usageSeen    *store.Usage

	// For overflow recovery (recover.go): the request as read, the
	// pipeline, compactd's count of it, and whether it was retried.
	req     *request
	total   int
	retried bool
}

func (x *exchange) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	x.warnings = append(x.warnings, msg)
	x.p.logger.Warn("proxy: "+msg, "provider", x.prov.Name(), "conversation", x.id)
}

// passThrough is warn for a request forwarded uncompacted because
// compactd does not understand its shape: the warning header, counted by
// path and reason, logged once per conversation.
func (x *exchange) passThrough(reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	x.warnings = append(x.warnings, msg)
	x.notCompacted = reason
	if x.p.passed.note(x.path, reason, x.id) {
		x.p.logger.Warn("proxy: "+msg, "provider", x.prov.Name(), "conversation", x.id, "path", x.path,
			"note", "logged once per conversation; compactd_proxy_uncompacted_total counts every one")
	}
}

// unreadable is passThrough for an error reading the request's
// conversation: input compactd does not convert, or a malformed one.
func (x *exchange) unreadable(what string, err error) {
	reason := PassUnreadable
	if errors.Is(err, chat.ErrUnsupportedFormat) {
		reason = PassUnsupported
	}
	x.passThrough(reason, "%s could not be read (%v): forwarded uncompacted", what, err)
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, prov wire.Format) {
	x := &exchange{p: p, prov: prov, path: r.URL.Path, clock: timing{start: time.Now()}, notCompacted: NotCompactedError}
	if t := p.opts.Tracer; t != nil {
		var ctx context.Context
		ctx, x.span = t.StartServer(r.Context(), r, "compactd proxy "+prov.Name(), attribute.String("compactd.format", prov.Name()))
		r = r.WithContext(ctx)
	}
	defer x.logged()
	p.warnIfStoreDown(w.Header())
	cfg := p.opts.Config.Current()
	x.cfg = cfg
	w = statusWriter{w, x}
	base, env := upstreamOf(&cfg.Proxy, prov)
	if base == "" {
		p.writeError(w, prov, http.StatusNotFound, "proxy_off",
			fmt.Sprintf("the %s proxy is off: set proxy.%s.upstream in the config file, or $%s", prov.Provider(), prov.Provider(), env))
		return
	}
	id := r.Header.Get(HeaderConversation)
	if len(id) > maxConversationID || !utf8.ValidString(id) || strings.ContainsFunc(id, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		p.writeError(w, prov, http.StatusBadRequest, "bad_request", fmt.Sprintf("%s must be at most %d bytes of printable UTF-8", HeaderConversation, maxConversationID))
		return
	}
	labels, err := convlabel.Parse(r.Header.Get(convlabel.HeaderTitle), r.Header.Get(convlabel.HeaderTags), r.Header.Get(convlabel.HeaderUser),
		func(l string) string { return "X-Compactd-" + strings.ToUpper(l[:1]) + l[1:] })
	if err != nil {
		p.writeError(w, prov, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	chosen, err := p.parsePolicyHeader(r.Context(), r.Header.Get(HeaderPolicy))
	if err != nil {
		p.writeError(w, prov, http.StatusBadRequest, err.(*policyError).code, err.Error())
		return
	}
	extendDeadline(w, cfg.Limits.RequestTimeout.D()+cfg.Proxy.Timeout.D())
	x.id, x.notCompacted, x.labels, x.chosen = id, "", labels, chosen

	limit := cfg.Limits.MaxBodyBytes
	body, err := readBody(r, limit)
	if err != nil {
		p.writeError(w, prov, http.StatusBadRequest, "bad_request", "reading the request body: "+err.Error())
		return
	}
	var out io.Reader
	length := int64(-1)
	if int64(len(body)) > limit {
		// Too large to inspect: forwarded as it is, read on from the client.
		x.passThrough(PassTooLarge, "request body over %d bytes (limits.max_body_bytes): forwarded without compaction", limit)
		out = io.MultiReader(bytes.NewReader(body), r.Body)
		length = r.ContentLength
	} else {
		parts := x.filterRequest(r.Context(), body)
		length = 0
		for _, b := range parts {
			length += int64(len(b))
		}
		out = &parts
	}

	h := w.Header()
	if x.id != "" {
		h.Set(HeaderConversation, x.id)
	}
	if x.compacted {
		h.Set(HeaderCompacted, "true")
	}
	for _, msg := range x.warnings {
		h.Add(HeaderWarning, headerValue(msg))
	}
	p.warnIfStoreDown(h) // an outage this request's compaction found
	p.forward(w, r, cfg, prov, prov.Target(base, r.URL.Path), out, length, x)
}

// readBody reads up to limit+1 bytes of r's body: into a buffer of its
// exact size when the request says it (io.ReadAll grows its buffer by
// copying), else as it comes. More than limit bytes means the body is
// over the limit (the caller forwards the rest as it comes).
func readBody(r *http.Request, limit int64) ([]byte, error) {
	n := r.ContentLength
	if n < 0 || n > limit {
		return io.ReadAll(io.LimitReader(r.Body, limit+1))
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("the body ends before its Content-Length of %d bytes", n)
		}
		return nil, err
	}
	return buf, nil
}

// headerValue makes a warning safe for a header: one line, at most 1 KiB.
func headerValue(s string) string {
	s = strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, s)
	if len(s) > 1024 {
		s = strings.ToValidUTF8(s[:1024], "") + "…"
	}
	return s
}

// filterRequest is the request filter: it returns the body to forward,
// in parts sent one after the other (the request's bytes are not copied
// to add stream_options).
func (x *exchange) filterRequest(ctx context.Context, body []byte) net.Buffers {
	p, cfg := x.p, x.cfg
	// The conversation's last request, when the header names the
	// conversation, else the last request that shares the longest prefix
	// with this one among those that opened the same way (the id is
	// derived from the messages, after the parse): the scan resumes past
	// what this one repeats of it, compared byte for byte.
	var last chat.LastRequest
	haveLast := false
	var after *chat.LastRequest
	if x.id != "" {
		if last, haveLast = p.mem.LastRequest(x.id); haveLast && last.Format == x.prov.Name() {
			after = &last
		}
	} else {
		after = likeliestPrevious(body, p.mem.RequestsSharing(x.prov.Name(), body, nil))
	}
	req, err := parseRequestAfter(body, x.prov, after)
	if err != nil {
		x.unreadable("the request", err)
		return net.Buffers{body}
	}
	x.model = req.model
	x.route = routeFor(cfg, req.model, x.chosen)
	if why := x.prov.Uncompactable(req.get); why != "" {
		x.passThrough(PassProviderHistory, "%s: forwarded uncompacted", why)
		return net.Buffers{body}
	}
	// A header-less request's id is derived from its leading elements
	// and system prompt; when they are the previous request's bytes, its
	// id is taken as it is (sameLead), without converting them again.
	var lead []abi.Message
	derived := chat.LastRequest{}
	if x.id == "" {
		if sameLead(req, after) {
			x.id = after.DerivedID
			derived.LeadElems, derived.System = after.LeadElems, req.systemSpan
		} else {
			var settled int
			lead, settled, err = x.prov.Leading(req.system, req.messages)
			if err != nil {
				x.unreadable("the conversation", err)
				return net.Buffers{body}
			}
			x.id = compactor.ConversationID(lead)
			derived.LeadElems, derived.System = settled, req.systemSpan
		}
		derived.DerivedID = x.id
		last, haveLast = p.mem.LastRequest(x.id)
	}
	x.window = cfg.Proxy.ContextWindow
	if x.window <= 0 {
		x.window = models.ContextWindow(req.model)
	}
	x.window = p.windowFor(req.model, x.window) // lowered to a limit an upstream stated

	// The pre-flight count: only messages not in the previous request are
	// tokenized.
	tok := p.opts.Tokens.ForModel(req.model)
	items, hasSystem := req.items()
	var prev *chat.LastRequest
	if haveLast && last.Model == req.model && last.Format == x.prov.Name() {
		prev = &last
	}
	hashes, counts, total, err := p.count(x.prov, tok, items, hasSystem, prev)
	if err != nil {
		x.unreadable("the conversation", err)
		return net.Buffers{body}
	}
	total += tokens.ReplyPrimingTokens
	offset := 0
	if prev != nil {
		offset = prev.Offset
	}
	estimate := total + offset
	p.mem.RememberRequest(x.id, chat.LastRequest{Format: x.prov.Name(), Model: req.model, Body: body, Hashes: hashes, Counts: counts, Pipeline: x.chosen,
		ListStart: req.msgs.start, Spans: req.spans, DerivedID: derived.DerivedID, LeadElems: derived.LeadElems, System: derived.System})

	status, known := p.opts.Store.Conversation(x.id)
	pc, rt := &cfg.Proxy, x.route
	reason, why := "", ""
	switch {
	case known && status.NeedsCompaction:
		reason, why = "the last response's usage reached the threshold", abi.ReasonUsage
	case x.window > 0 && float64(estimate) >= rt.Threshold*float64(x.window):
		reason, why = fmt.Sprintf("%d tokens are %.0f%% of the %d-token window", estimate, 100*float64(estimate)/float64(x.window), x.window), abi.ReasonPreflight
	case pc.TriggerTokens > 0 && estimate >= pc.TriggerTokens:
		reason, why = fmt.Sprintf("%d tokens reach proxy.trigger_tokens", estimate), abi.ReasonTriggerTokens
	}

	pipeline := rt.Pipeline
	x.tokensBefore, x.reason = total, reason
	if reason != "" {
		x.pipeline = pipeline
	}
	obs := store.Observation{
		ConversationID: x.id, Model: req.model, Pipeline: pipeline, Route: rt.Name, Provider: x.prov.Name(),
		MessagesBefore: len(req.messages), TokensBefore: total, MessagesAfter: len(req.messages), TokensAfter: total,
		ContextWindow: x.window, Title: x.labels.Title, Tags: x.labels.Tags, User: x.labels.User,
	}
	if obs.Title == "" && cfg.State.DeriveTitles() && (!known || status.Title == "") {
		obs.DerivedTitle = x.title(req, lead)
	}
	x.forwarded = total
	x.req, x.pipeline, x.total = req, pipeline, total
	out := body
	if reason != "" {
		if b, ok := x.usePrepared(ctx, req, hashes, counts, pipeline, &obs); ok {
			out = b
		} else {
			decision := &abi.Decision{Reason: why, TargetTokens: targetTokens(rt, pc.TriggerTokens, why, x.window, extraCount(status, known, offset))}
			out = x.compact(ctx, req, pipeline, reason, decision, &obs)
		}
	}
	x.maybePrepare(req, hashes, estimate, pipeline, offset)
	p.opts.Store.Observe(obs)
	p.observe(x.compaction)
	if len(pc.Shadow) > 0 {
		var d *abi.Decision
		if reason != "" {
			d = &abi.Decision{Reason: why, TargetTokens: targetTokens(rt, pc.TriggerTokens, why, x.window, extraCount(status, known, offset))}
		}
		x.shadowRequest(req, cfg, d, out)
	}
	x.tracked = true

	if x.prov.StreamUsageOption() && req.stream && !req.clientUsage && pc.IncludeStreamUsage() {
		parts, err := req.withStreamUsage(out)
		if err == nil {
			x.addedUsage = true
			return parts
		}
		x.warn("stream_options could not be set (%v): the response's usage is not recorded", err)
	}
	return net.Buffers{out}
}

// compact runs the proxy's pipeline on the request and returns the body
// to forward (the input body when anything fails). It fills obs.
func (x *exchange) compact(ctx context.Context, req *request, pipeline []string, reason string, decision *abi.Decision, obs *store.Observation) []byte {
	p, cfg := x.p, x.cfg
	if len(pipeline) == 0 {
		x.warn("compaction is due (%s) but no policy is configured (proxy.routes, proxy.policy, or the config's policy): forwarded uncompacted", reason)
		x.notCompacted = NotCompactedNoPolicy
		return req.body
	}
	wc, err := x.prov.Convert(req.system, req.messages)
	if err != nil {
		x.unreadable("compaction is due but the conversation", err)
		obs.Failed = true
		return req.body
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.Limits.RequestTimeout.D())
	defer cancel()
	resp, err := p.opts.Compactor.Compact(cctx, compactor.Request{
		Conversation: wc.Chat(), Pipeline: pipeline, Model: req.model, ConversationID: x.id, ContextWindow: cfg.Proxy.ContextWindow,
		SummarizerModel: cfg.LLMModel(), Decision: decision,
	})
	if err != nil {
		x.warn("compaction failed (%v): forwarded uncompacted", err)
		obs.Failed = true
		x.notCompacted = NotCompactedFailed
		return req.body
	}
	x.compaction = &Compaction{Input: wc.Chat(), Response: resp, Model: req.model, Pipeline: pipeline,
		Format: x.prov.Name(), MessagesBefore: obs.MessagesBefore, MessagesAfter: obs.MessagesBefore}
	for _, w := range resp.Warnings {
		x.warn("%s", w)
	}
	for _, st := range resp.Stats.Stages {
		if st.Error != "" {
			obs.Failed = true
		}
	}
	if !resp.Compacted {
		p.logger.Debug("proxy: compaction due, policy kept the conversation", "conversation", x.id, "reason", reason)
		x.notCompacted = NotCompactedPolicyKept
		return req.body
	}
	list, err := req.back(x.prov, wc, resp)
	if err != nil {
		x.warn("the compacted conversation could not be written back (%v): forwarded uncompacted", err)
		obs.Failed = true
		x.notCompacted = NotCompactedFailed
		return req.body
	}
	n := len(list)
	obs.Compacted, obs.MessagesAfter, obs.TokensAfter = true, n, resp.Stats.TokensAfter+tokens.ReplyPrimingTokens
	x.compacted, x.forwarded = true, obs.TokensAfter
	x.compaction.MessagesAfter = n
	p.logger.Info("proxy: compacted", "provider", x.prov.Name(), "conversation", x.id, "reason", reason,
		"messages", fmt.Sprintf("%d→%d", obs.MessagesBefore, n), "tokens", fmt.Sprintf("%d→%d", obs.TokensBefore, obs.TokensAfter),
		"summary", resp.Summary)
	return req.withList(list)
}

// extraCount is what the provider counted beyond compactd for the
// conversation's last request: from the shared status (its usage less
// compactd's count of what was forwarded) when it holds a usage, so every
// replica of a fleet aims a decision at the same target; else what this
// process remembers (memOffset).
func extraCount(status store.Conversation, known bool, memOffset int) int {
	if known && status.LastUsage != nil && status.TokensAfter > 0 {
		return max(status.LastUsage.InputTokens-status.TokensAfter, 0)
	}
	return memOffset
}

// targetTokens is the token budget a compaction the proxy decided on aims
// at, in compactd's count: the route's target of the window (the trigger
// at its threshold of it), or, when proxy.trigger_tokens fired, the same
// share of those (target/threshold × trigger_tokens); less what the
// provider counted beyond compactd last time (offset), at least 1 (as
// small as the policy can). 0 when neither is known: no target.
func targetTokens(rt *config.Route, triggerTokens int, why string, window, offset int) int {
	var t float64
	switch {
	case why == abi.ReasonTriggerTokens && triggerTokens > 0:
		t = rt.Target / rt.Threshold * float64(triggerTokens)
	case window > 0:
		t = rt.Target * float64(window)
	default:
		return 0
	}
	return max(int(t)-offset, 1)
}

// count returns each item's hash and token count, and their sum. Items of
// prev (the conversation's previous request) are not counted again.
func (p *Proxy) count(prov wire.Format, tok *tokens.Tokenizer, items []json.RawMessage, hasSystem bool, prev *chat.LastRequest) ([]uint64, []int, int, error) {
	hashes, counts, missing := p.mem.ItemCounts(items, prev)
	var msgs []abi.Message
	var owner []int
	for _, i := range missing {
		ms, err := prov.ItemMessages(items[i], hasSystem && i == 0)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("message %d: %w", i, err)
		}
		for range ms {
			owner = append(owner, i)
		}
		msgs = append(msgs, ms...)
	}
	tok.CountMessages(msgs)
	for k := range msgs {
		counts[owner[k]] += msgs[k].Tokens
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	return hashes, counts, total, nil
}

// usage is handed what the response filter read of a response's usage:
// the usage, whether there is one to record, and the counts it refused.
func (x *exchange) usage(u wire.Usage, ok bool, refused []string) {
	if len(refused) > 0 {
		x.p.fault(x.prov, FaultUsageRefused)
		x.p.logger.Warn("proxy: the upstream reported token counts that are not whole numbers from 0 to 2^53; they are ignored",
			"provider", x.prov.Provider(), "conversation", x.id, "counts", strings.Join(refused, ", "), "recorded", ok)
	}
	if ok {
		x.responseFilter(storeUsage(u))
	}
}

// responseFilter is handed the usage of a successful response.
func (x *exchange) responseFilter(u store.Usage) {
	x.noteUsage(u)
	if !x.tracked {
		return
	}
	p := x.p
	u.Cost = x.cost(u)
	ratio, needs := p.opts.Store.RecordUsage(x.id, u, x.window, x.route.Threshold, x.cfg.Proxy.TriggerTokens)
	p.mem.Calibrate(x.id, u.InputTokens-x.forwarded)
	p.logger.Debug("proxy: usage", "provider", x.prov.Provider(), "conversation", x.id, "input_tokens", u.InputTokens,
		"output_tokens", u.OutputTokens, "usage_ratio", ratio, "needs_compaction", needs)
}

// Why compactd cut an exchange short (context.Cause of its context).
var (
	errHeaderTimeout = errors.New("no answer within proxy.timeout")
	errStalled       = errors.New("the upstream went silent for proxy.read_timeout")
	// errBrokenAnswer wraps a failure reading an answer the proxy holds.
	errBrokenAnswer = errors.New("reading the answer")
)

// writeGrace is how long past proxy.read_timeout a write to the client
// may take: the last event (an error event after a stall) gets through,
// and a client that stops reading is let go.
const writeGrace = 30 * time.Second

// forward sends the request upstream through httputil.ReverseProxy and
// the response back, through x's response filter (x nil: unfiltered).
//
// The upstream has proxy.timeout to send its headers, then at most
// proxy.read_timeout of silence between reads of its body (stallWatch),
// however long the whole answer takes; the client's write deadline moves
// with it. Of the body the proxy holds at most proxy.max_event_bytes at a
// time: a stream is passed on event by event (sseReader), and any other
// answer of known size within the bound, and every JSON answer, is held
// whole before its headers go to the client, so that an upstream that
// stalls in the middle of it gets a 504 rather than half an answer.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, cfg *config.Config, prov wire.Format, target string, body io.Reader, length int64, x *exchange) {
	u, err := url.Parse(target)
	if err != nil {
		p.writeError(w, prov, http.StatusBadGateway, "bad_upstream", err.Error())
		return
	}
	u.RawQuery = r.URL.RawQuery
	pc := &cfg.Proxy
	limit := int(pc.MaxEventBytes)
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	headers := time.AfterFunc(pc.Timeout.D(), func() { cancel(errHeaderTimeout) })
	defer headers.Stop()
	rc := http.NewResponseController(w)
	watch := newStallWatch(pc.ReadTimeout.D(), func() { cancel(errStalled) }, func() {
		rc.SetWriteDeadline(time.Now().Add(pc.ReadTimeout.D() + writeGrace))
	})
	defer watch.stop()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL, pr.Out.Host = u, ""
			for k := range pr.Out.Header {
				if strings.HasPrefix(k, "X-Compactd-") {
					delete(pr.Out.Header, k)
				}
			}
			// The transport asks for gzip itself and decompresses, so the
			// response filter reads plain text.
			pr.Out.Header.Del("Accept-Encoding")
			if body == nil {
				pr.Out.Body, pr.Out.ContentLength = nil, 0
			} else {
				pr.Out.Body, pr.Out.ContentLength = io.NopCloser(body), length
			}
		},
		Transport:  p.transport,
		BufferPool: &p.relay,
		ModifyResponse: func(resp *http.Response) error {
			if x.recoverable(resp) {
				if err := x.recoverOverflow(ctx, resp, w.Header(), headers); err != nil {
					return err
				}
			}
			headers.Stop()
			if x != nil {
				x.clock.firstByte, x.status, x.upstream = time.Now(), resp.StatusCode, true
			}
			resp.Header.Set(HeaderUpstream, prov.Provider())
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return nil // an upgraded connection is the two ends' own
			}
			watch.start()
			resp.Body = watch.watched(resp.Body)
			filter := x != nil && resp.StatusCode >= 200 && resp.StatusCode <= 299
			ct := resp.Header.Get("Content-Type")
			switch {
			case strings.HasPrefix(ct, "text/event-stream"):
				var parser wire.Stream
				var done func()
				if filter {
					parser = prov.NewStream(x.addedUsage)
					done = func() { x.usage(parser.Usage()) }
				}
				resp.Body = newPooledSSEReader(&p.relay, resp.Body, limit, parser, func(err error) []byte {
					return p.streamFailed(ctx, prov, u.Host, pc.ReadTimeout.D(), err)
				}, done)
			case holdable(r, resp, limit):
				held, err := hold(resp, limit)
				if err != nil {
					return err // the ErrorHandler answers: a stall is a 504
				}
				if held == nil {
					p.fault(prov, FaultAnswerTooLarge)
					p.logger.Warn("proxy: an upstream answer over proxy.max_event_bytes passes through as it comes; its usage is not read",
						"provider", prov.Provider(), "upstream", u.Host, "limit", limit)
				} else if filter && isJSON(ct) {
					x.usage(prov.Usage(held))
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if x != nil {
				x.upstream = false // compactd's own answer replaces the upstream's
			}
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errHeaderTimeout):
				p.fault(prov, FaultTimeout)
				p.logger.Warn("proxy: upstream timed out", "provider", prov.Provider(), "upstream", u.Host, "timeout", pc.Timeout.D())
				p.writeError(w, prov, http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("the %s upstream did not answer within proxy.timeout (%v)", prov.Provider(), pc.Timeout.D()))
			case errors.Is(cause, errStalled):
				p.fault(prov, FaultStalled)
				p.logger.Warn("proxy: upstream stalled after its headers", "provider", prov.Provider(), "upstream", u.Host, "read_timeout", pc.ReadTimeout.D())
				p.writeError(w, prov, http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("the %s upstream sent its headers, then nothing for proxy.read_timeout (%v)", prov.Provider(), pc.ReadTimeout.D()))
			case r.Context().Err() != nil:
				return // the client went away
			case errors.Is(err, errBrokenAnswer):
				p.fault(prov, FaultUnreachable)
				p.logger.Warn("proxy: upstream broke off its answer", "provider", prov.Provider(), "upstream", u.Host, "error", err)
				p.writeError(w, prov, http.StatusBadGateway, "upstream_unreachable", fmt.Sprintf("the %s upstream broke off its answer: %v", prov.Provider(), err))
			default:
				p.fault(prov, FaultUnreachable)
				p.logger.Warn("proxy: upstream unreachable", "provider", prov.Provider(), "upstream", u.Host, "error", err)
				p.writeError(w, prov, http.StatusBadGateway, "upstream_unreachable", fmt.Sprintf("the %s upstream could not be reached: %v", prov.Provider(), err))
			}
		},
		ErrorLog: p.logger.Named("reverseproxy").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	if x != nil {
		x.clock.sent = time.Now()
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
}

// streamFailed returns the event that ends a stream whose upstream body
// failed with err, or nil when the failure is not compactd's to report
// (the client went away, the upstream broke the connection: the client's
// connection is then aborted too).
func (p *Proxy) streamFailed(ctx context.Context, prov wire.Format, host string, read time.Duration, err error) []byte {
	var le *EventLimitError
	switch {
	case errors.As(err, &le):
		p.fault(prov, FaultEventTooLarge)
		p.logger.Warn("proxy: upstream stream event over the limit; the stream ends with an error event", "provider", prov.Provider(), "upstream", host, "error", err)
		return prov.StreamError(http.StatusBadGateway, "upstream_event_too_large", err.Error())
	case errors.Is(context.Cause(ctx), errStalled):
		p.fault(prov, FaultStalled)
		p.logger.Warn("proxy: upstream stream stalled; it ends with an error event", "provider", prov.Provider(), "upstream", host, "read_timeout", read)
		return prov.StreamError(http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("the %s upstream's stream went silent for proxy.read_timeout (%v)", prov.Provider(), read))
	}
	return nil
}

// holdable reports whether a response is held whole before it is passed
// on: one with a body of known size within limit, or a JSON one (which
// the response filter reads). Streams of other types pass through as
// they come.
func holdable(r *http.Request, resp *http.Response, limit int) bool {
	if r.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		resp.Body == http.NoBody || resp.ContentLength == 0 {
		return false
	}
	return isJSON(resp.Header.Get("Content-Type")) || resp.ContentLength > 0 && resp.ContentLength <= int64(limit)
}

// isJSON reports whether a Content-Type is JSON (application/json or
// +json; not a stream of JSON lines).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// hold reads resp's body whole when it is within limit and puts it back
// as a body of known length, returning it; a larger body is put back
// as it came (what was read first, then the rest) and hold returns nil.
// An error reading it (a stall: the stall watch cancelled the exchange)
// is returned.
func hold(resp *http.Response, limit int) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, min(max(resp.ContentLength, 512), int64(limit))+1))
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBrokenAnswer, err)
	}
	if buf.Len() > limit {
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(buf.Bytes()), resp.Body), resp.Body}
		return nil, nil
	}
	resp.Body.Close()
	b := buf.Bytes()
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	resp.TransferEncoding = nil
	return b, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// storeWarning is the HeaderWarning a proxied answer carries while the
// state store is unreachable.
const storeWarning = "state store unavailable: compacted from the request alone; the deferred trigger and status are not saved"

// warnIfStoreDown adds storeWarning to h while the store is degraded,
// once: serve calls it when the request starts and again before the
// request goes upstream, so the request whose compaction found the outage
// carries it too. The request is served either way.
func (p *Proxy) warnIfStoreDown(h http.Header) {
	if p.opts.Store.Health().Degraded && !slices.Contains(h.Values(HeaderWarning), storeWarning) {
		h.Add(HeaderWarning, storeWarning)
	}
}

// title derives the conversation's title from the first line of its
// task (convlabel.Title), from lead when the id's derivation read it.
func (x *exchange) title(req *request, lead []abi.Message) string {
	if lead == nil {
		var err error
		if lead, _, err = x.prov.Leading(req.system, req.messages); err != nil {
			return "" // the compaction, if due, reports the unreadable conversation
		}
	}
	return convlabel.Title(lead)
}
