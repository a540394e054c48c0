// Package provider is a local LLM provider: one HTTP handler that speaks
// OpenAI's Chat Completions (POST /v1/chat/completions), Anthropic's
// Messages (POST /v1/messages) and OpenAI's Responses (POST
// /v1/responses) wire formats, JSON and streamed (SSE, with each API's
// real event shapes), and answers with a scripted, tool-using model.
// `compactd provider` serves it; tests and benchmarks start it with
// internal/proxy/upstreamtest.
//
// It checks what it receives as the real APIs do, independently of
// compactd's own parsers (it is their oracle): unknown top-level fields,
// missing required ones, tool calls each answered by a result with its id
// and no result without its call (in each format's terms), Anthropic's
// first user turn, its alternation and tool-result placement, non-empty
// content, at most four cache_control markers, and stream_options only
// with stream. A request it refuses gets a 400 in the provider's error
// shape, and is counted (Stats) and logged.
//
// The model is a script (see script.go): a user turn with tools gets a
// tool call (two in parallel for one question in ParallelEvery) whose arguments
// follow the tool's JSON schema and name files and record ids; the tool
// results get a short answer quoting them; without tools it echoes the
// user. Ids are unique per provider. Usage counts the prompt with
// compactd's tokenizer, so a conversation's usage grows as a real
// provider's would; streamed OpenAI chunks carry "usage": null when the
// client asked for usage, as OpenAI's do.
//
// Fault-injection headers (which compactd's proxy passes through):
// X-Upstream-Status: 503 answers that status with an error body,
// X-Upstream-Delay: 2s waits before answering, X-Upstream-Cut: 3 ends a
// stream after 3 events without finishing it, X-Upstream-Context-Limit:
// 5000 answers a prompt past 5000 tokens with the API's context-length
// error, X-Upstream-Max-Bytes: 20000 a body past 20000 bytes with a 413
// (overflow.go).
package provider

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/internal/tokens"
)

// API names, as Stats and the error shapes know them.
const (
	APIChat      = "chat.completions"
	APIMessages  = "messages"
	APIResponses = "responses"
)

// MaxBody is the largest request body the provider reads (as large as
// the real APIs' limits are, in bytes of JSON).
const MaxBody = 32 << 20

// Options configure a Provider.
type Options struct {
	// OpenAIKey and AnthropicKey are the keys the provider accepts
	// (Authorization: Bearer for OpenAI; x-api-key or a bearer token for
	// Anthropic). Empty accepts any non-empty key.
	OpenAIKey, AnthropicKey string
	// ParallelEvery makes one user question in n (picked by its text, so
	// a compacted conversation gets them as often) answer with two tool
	// calls in parallel, where the request allows parallel calls; 0 never
	// does.
	ParallelEvery int
	// ContextLimit, if > 0, refuses a prompt of more tokens with the
	// API's context-length error (HeaderContextLimit overrides it per
	// request).
	ContextLimit int
	// Record keeps every request received (Received); for tests.
	Record bool
	// Logf, when set, gets one line per refused request.
	Logf func(format string, args ...any)
}

// Received is one request the provider got.
type Received struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// APIStats counts one API's requests.
type APIStats struct {
	Requests int64 `json:"requests"`
	Rejected int64 `json:"rejected"` // refused as invalid (400s), not faults asked for
	Streamed int64 `json:"streamed"`
	ToolCall int64 `json:"tool_calls"` // tool calls issued
}

// Stats are the provider's counts per API, and the refusals' messages
// (the first hundred).
type Stats struct {
	APIs       map[string]APIStats `json:"apis"`
	Rejections []string            `json:"rejections"`
}

// Provider is the handler. Its zero value is not usable: call New.
type Provider struct {
	opts   Options
	tok    *tokens.Tokenizer
	prefix string // of every id it issues, random per provider
	ids    atomic.Int64
	store  *responseStore

	mu         sync.Mutex
	received   []Received
	stats      map[string]*APIStats
	rejections []string
}

// New returns a provider.
func New(opts Options) *Provider {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; a fixed
		// prefix still gives unique ids within the process.
		copy(b[:], "cdpv")
	}
	return &Provider{
		opts:   opts,
		tok:    tokens.New(tokens.Options{}).ForModel("gpt-4o"),
		prefix: hex.EncodeToString(b[:]),
		store:  newResponseStore(4096),
		stats:  map[string]*APIStats{},
	}
}

// newID returns a fresh id with a kind's prefix ("call_", "toolu_", …).
func (p *Provider) newID(kind string) string {
	return fmt.Sprintf("%s%s%08d", kind, p.prefix, p.ids.Add(1))
}

// Received returns the requests received so far (with Options.Record).
func (p *Provider) Received() []Received {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Received(nil), p.received...)
}

// Reset forgets the requests received and the counts.
func (p *Provider) Reset() {
	p.mu.Lock()
	p.received = nil
	p.stats = map[string]*APIStats{}
	p.rejections = nil
	p.mu.Unlock()
}

// Stats returns a copy of the counts.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Stats{APIs: map[string]APIStats{}, Rejections: append([]string(nil), p.rejections...)}
	for k, v := range p.stats {
		st.APIs[k] = *v
	}
	return st
}

func (p *Provider) count(api string, f func(*APIStats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats[api]
	if s == nil {
		s = &APIStats{}
		p.stats[api] = s
	}
	f(s)
}

// apiError is a refusal in the provider's terms.
type apiError struct {
	status  int
	typ     string // invalid_request_error, authentication_error, …
	message string
	param   string // OpenAI's param ("" is null)
	code    string // OpenAI's code ("" is null)
}

func (e *apiError) Error() string { return e.message }

func invalid(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: fmt.Sprintf(format, args...)}
}

func (e *apiError) withParam(param, code string) *apiError {
	e.param, e.code = param, code
	return e
}

// writeError writes e in the API's error shape.
func writeError(w http.ResponseWriter, api string, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	var body any
	if api == APIMessages {
		body = map[string]any{"type": "error", "error": map[string]string{"type": e.typ, "message": e.message}}
	} else {
		body = map[string]any{"error": map[string]any{"message": e.message, "type": e.typ, "param": nullable(e.param), "code": nullable(e.code)}}
	}
	json.NewEncoder(w).Encode(body)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ServeHTTP routes a request to its API.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if p.opts.Record {
		p.mu.Lock()
		p.received = append(p.received, Received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		p.mu.Unlock()
	}
	api := APIChat
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/messages"), r.Header.Get("anthropic-version") != "":
		api = APIMessages
	case strings.HasPrefix(r.URL.Path, "/v1/responses"):
		api = APIResponses
	}
	if err != nil {
		writeError(w, api, invalid("reading the request body: %v", err))
		return
	}
	if len(body) > MaxBody {
		writeError(w, api, &apiError{status: http.StatusRequestEntityTooLarge, typ: "request_too_large", message: fmt.Sprintf("Request exceeds the maximum size of %d bytes.", MaxBody)})
		return
	}
	if d, err := time.ParseDuration(r.Header.Get("X-Upstream-Delay")); err == nil {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if st, err := strconv.Atoi(r.Header.Get("X-Upstream-Status")); err == nil {
		writeError(w, api, &apiError{status: st, typ: "server_error", message: fmt.Sprintf("the upstream was told to answer %d", st)})
		return
	}
	if e := p.authorize(r, api); e != nil {
		writeError(w, api, e)
		return
	}
	if e := tooLarge(r, body); e != nil {
		writeError(w, api, e)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		if api == APIMessages {
			io.WriteString(w, `{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5","created_at":"2025-09-29T00:00:00Z"}],"has_more":false,"first_id":"claude-sonnet-4-5","last_id":"claude-sonnet-4-5"}`)
		} else {
			io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1715367049,"owned_by":"system"},{"id":"gpt-4.1","object":"model","created":1744316542,"owned_by":"system"}]}`)
		}
		return
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		p.serveAPI(w, r, APIChat, body, p.chatCompletions)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		p.serveAPI(w, r, APIMessages, body, p.messages)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/responses":
		p.serveAPI(w, r, APIResponses, body, p.responses)
	default:
		writeError(w, api, &apiError{status: http.StatusNotFound, typ: "not_found_error", message: "no route " + r.Method + " " + r.URL.Path})
	}
}

// authorize checks the key and that no compactd header reached the
// provider.
func (p *Provider) authorize(r *http.Request, api string) *apiError {
	for k := range r.Header {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Compactd-") {
			return invalid("compactd's header %s reached the provider", k)
		}
	}
	bearer, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if api == APIMessages {
		key := r.Header.Get("x-api-key")
		if key == "" && hasBearer {
			key = bearer // the SDK sends its key as x-api-key or, since 1.x, as a bearer token
		}
		if key == "" || p.opts.AnthropicKey != "" && key != p.opts.AnthropicKey {
			return &apiError{status: http.StatusUnauthorized, typ: "authentication_error", message: "invalid x-api-key"}
		}
		if r.Header.Get("anthropic-version") == "" {
			return invalid("anthropic-version: header is required")
		}
		return nil
	}
	if !hasBearer || bearer == "" || p.opts.OpenAIKey != "" && bearer != p.opts.OpenAIKey {
		return &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", message: "Incorrect API key provided.", code: "invalid_api_key"}
	}
	return nil
}

// serveAPI validates and answers one API request, counting it.
func (p *Provider) serveAPI(w http.ResponseWriter, r *http.Request, api string, body []byte, answer func(http.ResponseWriter, *http.Request, []byte) *apiError) {
	e := answer(w, r, body)
	p.count(api, func(s *APIStats) {
		s.Requests++
		if e != nil {
			s.Rejected++
		}
	})
	if e == nil {
		return
	}
	p.mu.Lock()
	if len(p.rejections) < 100 {
		p.rejections = append(p.rejections, api+": "+e.message)
	}
	p.mu.Unlock()
	if p.opts.Logf != nil {
		p.opts.Logf("provider: refused %s %s: %d %s", r.Method, r.URL.Path, e.status, e.message)
	}
	writeError(w, api, e)
}

// sse writes server-sent events.
type sse struct {
	w     http.ResponseWriter
	f     http.Flusher
	cut   int
	count int
}

func newSSE(w http.ResponseWriter, r *http.Request) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	cut, _ := strconv.Atoi(r.Header.Get("X-Upstream-Cut"))
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f, cut: cut}
}

// send writes one event (with an event: line when typ is set); false once
// the stream was cut or the client left.
func (e *sse) send(typ string, v any) bool {
	if e.cut > 0 && e.count >= e.cut {
		return false
	}
	e.count++
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	if typ != "" {
		if _, err := fmt.Fprintf(e.w, "event: %s\n", typ); err != nil {
			return false
		}
	}
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return false
	}
	if e.f != nil {
		e.f.Flush()
	}
	return true
}

// done writes OpenAI's closing [DONE] line.
func (e *sse) done() {
	if e.cut > 0 && e.count >= e.cut {
		return
	}
	io.WriteString(e.w, "data: [DONE]\n\n")
	if e.f != nil {
		e.f.Flush()
	}
}
