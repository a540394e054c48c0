package proxy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/store"
)

// HeaderRecovered (response) is "context_overflow" on an answer the
// upstream gave after compactd recovered from its context-length error:
// the first attempt was refused as too long, the request was compacted
// and sent again once, and this is the retry's successful answer.
const HeaderRecovered = "X-Compactd-Recovered"

// RecoveredOverflow is HeaderRecovered's value.
const RecoveredOverflow = "context_overflow"

// maxErrorBody bounds the error body read to tell a context-length error:
// the real ones are a few hundred bytes. A larger one passes through.
const maxErrorBody = 64 << 10

// maxLearnedModels bounds the models whose learned context limit is kept.
const maxLearnedModels = 1024

// Recovery outcomes (Proxy.Recoveries; the daemon's /metrics reports them
// as compactd_proxy_overflow_recoveries_total).
const (
	// RecoveryRecovered: the retry succeeded.
	RecoveryRecovered = "recovered"
	// RecoveryRetryFailed: the retry was refused again; its error was
	// passed on unchanged.
	RecoveryRetryFailed = "retry_failed"
	// RecoveryNotCompacted: the policy could not make the request
	// smaller (or failed); the first error was passed on, nothing retried.
	RecoveryNotCompacted = "not_compacted"
)

// Recovery counts one provider's overflow recoveries of one outcome.
type Recovery struct {
	Provider string
	Outcome  string
	Count    uint64
}

// recoveries counts overflow recoveries and keeps the context limits
// the upstreams stated, per model.
type recoveries struct {
	mu      sync.Mutex
	n       map[[2]string]*atomic.Uint64
	learned map[string]int
}

func (p *Proxy) countRecovery(provider, outcome string) {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	if p.rec.n == nil {
		p.rec.n = map[[2]string]*atomic.Uint64{}
	}
	c := p.rec.n[[2]string{provider, outcome}]
	if c == nil {
		c = new(atomic.Uint64)
		p.rec.n[[2]string{provider, outcome}] = c
	}
	c.Add(1)
}

// Recoveries returns the overflow recoveries counted since the proxy was
// made, by provider and outcome.
func (p *Proxy) Recoveries() []Recovery {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	out := make([]Recovery, 0, len(p.rec.n))
	for k, c := range p.rec.n {
		out = append(out, Recovery{Provider: k[0], Outcome: k[1], Count: c.Load()})
	}
	slices.SortFunc(out, func(a, b Recovery) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Outcome, b.Outcome))
	})
	return out
}

// learn remembers a model's context limit as an upstream stated it.
func (p *Proxy) learn(model string, limit int) {
	if model == "" || limit <= 0 {
		return
	}
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	if p.rec.learned == nil {
		p.rec.learned = map[string]int{}
	}
	if _, ok := p.rec.learned[model]; !ok && len(p.rec.learned) >= maxLearnedModels {
		return // bounded: the first models keep theirs
	}
	p.rec.learned[model] = limit
}

// LearnedLimit returns the context limit an upstream stated for model in
// a context-length error, if one did.
func (p *Proxy) LearnedLimit(model string) (int, bool) {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	n, ok := p.rec.learned[model]
	return n, ok
}

// windowFor is the window threshold decisions use for model: the
// configured or known one, lowered to the limit an upstream stated.
func (p *Proxy) windowFor(model string, window int) int {
	if n, ok := p.LearnedLimit(model); ok && (window <= 0 || n < window) {
		return n
	}
	return window
}

// The limits the real APIs state in their context-length errors.
var (
	// OpenAI: "This model's maximum context length is 128000 tokens."
	openAILimit = regexp.MustCompile(`maximum context length is (\d+) tokens`)
	// Anthropic: "prompt is too long: 210000 tokens > 200000 maximum",
	// "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000".
	anthropicLimit = regexp.MustCompile(`(?:tokens >|>) (\d+)(?: maximum|,|$)`)
)

// contextOverflow reports whether an upstream's answer is a
// context-length error, and the limit it states (0 when it states none):
// OpenAI's (Chat Completions and Responses) code context_length_exceeded,
// Anthropic's invalid_request_error "prompt is too long" (or "exceed
// context limit"), and a 413 from either.
func contextOverflow(status int, body []byte) (ok bool, limit int) {
	if status == http.StatusRequestEntityTooLarge {
		return true, 0
	}
	if status != http.StatusBadRequest {
		return false, 0
	}
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return false, 0
	}
	msg := e.Error.Message
	switch {
	case e.Error.Code == "context_length_exceeded":
		if m := openAILimit.FindStringSubmatch(msg); m != nil {
			limit, _ = strconv.Atoi(m[1])
		}
		return true, limit
	case e.Error.Type == "invalid_request_error" && (strings.HasPrefix(msg, "prompt is too long") || strings.Contains(msg, "exceed context limit")):
		if m := anthropicLimit.FindStringSubmatch(msg); m != nil {
			limit, _ = strconv.Atoi(m[1])
		}
		return true, limit
	case e.Error.Type == "request_too_large":
		return true, 0
	}
	return false, 0
}

// recoverable reports whether x may retry resp's request after a
// context-length error: recovery is on, the request was read and
// tracked, and the answer is a 400 or 413.
func (x *exchange) recoverable(resp *http.Response) bool {
	return x != nil && x.req != nil && x.tracked && !x.retried && x.cfg.Proxy.RecoverOverflowOn() &&
		(resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestEntityTooLarge)
}

// recoverOverflow is called with an upstream's 400 or 413 before anything
// of it reached the client. When it is a context-length error, the
// request is compacted with the proxy's pipeline, ignoring the trigger,
// and sent once more; resp becomes the retry's answer (a second error is
// passed on as the upstream gave it). Otherwise resp is left as it came
// (its body read and put back). headers is the exchange's proxy.timeout
// timer, still armed while the error's body is read: it is stopped for
// the compaction (which has its own bound) and armed again for the
// retry's wait for headers. An error (the retry could not be sent) is
// the ErrorHandler's.
func (x *exchange) recoverOverflow(ctx context.Context, resp *http.Response, client http.Header, headers *time.Timer) error {
	held, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody+1))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("%w: %w", errBrokenAnswer, err)
	}
	putBack := func() {
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(held)), int64(len(held))
		resp.Header.Set("Content-Length", strconv.Itoa(len(held)))
		resp.TransferEncoding = nil
	}
	ok, limit := false, 0
	if len(held) <= maxErrorBody {
		ok, limit = contextOverflow(resp.StatusCode, held)
	}
	if !ok {
		putBack()
		return nil
	}
	p, pc := x.p, &x.cfg.Proxy
	x.retried = true
	p.learn(x.model, limit)
	window := p.windowFor(x.model, x.window)
	if limit == 0 && (window <= 0 || x.forwarded < window) {
		// The error states no limit: the real one is below what was sent
		// (a 413, the Responses API), the best bound known.
		window = x.forwarded
	}
	p.logger.Info("proxy: the upstream refused the request as too long; compacting and retrying once", "provider", x.prov.Name(),
		"conversation", x.id, "status", resp.StatusCode, "stated_limit", limit, "model", x.model)

	headers.Stop()
	req := x.req
	obs := store.Observation{
		ConversationID: x.id, Model: req.model, Pipeline: x.pipeline, Route: x.route.Name, Provider: x.prov.Name(),
		MessagesBefore: len(req.messages), TokensBefore: x.total, MessagesAfter: len(req.messages), TokensAfter: x.total,
		ContextWindow: window, Recovery: true,
	}
	nWarn := len(x.warnings)
	x.compacted = false
	reason := fmt.Sprintf("the upstream answered %d: context length exceeded", resp.StatusCode)
	offset := 0
	if last, ok := p.mem.LastRequest(x.id); ok {
		offset = last.Offset
	}
	decision := &abi.Decision{Reason: abi.ReasonOverflow, TargetTokens: targetTokens(x.route, pc.TriggerTokens, abi.ReasonOverflow, window, offset)}
	out := x.compact(ctx, req, x.pipeline, reason, decision, &obs)
	p.opts.Store.Observe(obs)
	p.observe(x.compaction)
	for _, w := range x.warnings[nWarn:] {
		resp.Header.Add(HeaderWarning, headerValue(w))
	}
	if !x.compacted {
		p.countRecovery(x.prov.Provider(), RecoveryNotCompacted)
		resp.Header.Add(HeaderWarning, headerValue("the upstream refused the request as too long and the policy could not compact it: the upstream's error is passed on"))
		putBack()
		return nil
	}
	if x.addedUsage {
		if parts, err := req.withStreamUsage(out); err == nil {
			out = bytes.Join(parts, nil)
		}
	}
	retry := resp.Request.Clone(resp.Request.Context())
	retry.Body, retry.ContentLength = io.NopCloser(bytes.NewReader(out)), int64(len(out))
	retry.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out)), nil }
	retry.Header.Del("Content-Length")
	headers.Reset(pc.Timeout.D())
	next, err := p.transport.RoundTrip(retry)
	headers.Stop()
	if err != nil {
		return err
	}
	removeHopByHop(next.Header)
	warnings := resp.Header.Values(HeaderWarning)
	next.Request = resp.Request
	*resp = *next
	for _, w := range warnings {
		resp.Header.Add(HeaderWarning, w)
	}
	if client.Get(HeaderCompacted) == "" {
		resp.Header.Set(HeaderCompacted, "true")
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		p.countRecovery(x.prov.Provider(), RecoveryRecovered)
		resp.Header.Set(HeaderRecovered, RecoveredOverflow)
		return nil
	}
	p.countRecovery(x.prov.Provider(), RecoveryRetryFailed)
	p.logger.Warn("proxy: the retry after compacting for a context-length error failed too; its error is passed on", "provider", x.prov.Name(),
		"conversation", x.id, "status", resp.StatusCode)
	return nil
}

// hopByHop are the headers one hop's connection owns (RFC 9110, 7.6.1),
// which httputil.ReverseProxy removes from the answer it got; a retry's
// answer needs the same.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}
