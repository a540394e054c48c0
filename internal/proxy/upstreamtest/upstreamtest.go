// Package upstreamtest is a local LLM provider for tests and benchmarks:
// one HTTP server that speaks OpenAI's Chat Completions and Anthropic's
// Messages wire formats, JSON and streamed (SSE), with tool calls, usage
// and each provider's error bodies, and records what it received.
//
// It answers deterministically: with tools in the request and a user
// message last, it calls the first tool with the user's text; with a tool
// result last, it answers "result: <the result>"; otherwise "echo: <the
// last user text>". Its usage counts the prompt with compactd's tokenizer
// (o200k_base) plus a quarter of the tools' JSON bytes, so a conversation's
// usage grows as a real provider's would.
//
// Like a provider, it checks what it is sent: the API key (Authorization:
// Bearer for OpenAI, x-api-key or Authorization: Bearer for Anthropic), a valid
// conversation (tool calls paired with their results, Anthropic's tool
// results first in the next user message) and no compactd header; a bad
// request gets a 400 in the provider's format.
//
// Tests steer it with request headers, which the proxy passes through:
// X-Upstream-Status: 503 answers that status with an error body,
// X-Upstream-Delay: 2s waits before answering, X-Upstream-Cut: 3 ends a
// stream after 3 events without finishing it.
package upstreamtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/anthropic"
	"github.com/compactd/compactd/internal/tokens"
)

// Keys the upstream accepts.
const (
	OpenAIKey    = "sk-test-openai"
	AnthropicKey = "sk-ant-test"
)

// Received is one request the upstream got.
type Received struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// Server is a running upstream. Its OpenAI base URL is URL+"/v1"; its
// Anthropic base URL is URL.
type Server struct {
	*httptest.Server
	tok *tokens.Tokenizer

	mu       sync.Mutex
	received []Received
}

// New starts an upstream on a loopback port; Close stops it.
func New() *Server {
	s := &Server{tok: tokens.New(tokens.Options{}).ForModel("gpt-4o")}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// OpenAIBase is the base URL an OpenAI SDK (or the proxy) takes.
func (s *Server) OpenAIBase() string { return s.URL + "/v1" }

// AnthropicBase is the base URL an Anthropic SDK (or the proxy) takes.
func (s *Server) AnthropicBase() string { return s.URL }

// Received returns the requests received so far.
func (s *Server) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// Last returns the last request received (zero if none).
func (s *Server) Last() Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.received) == 0 {
		return Received{}
	}
	return s.received[len(s.received)-1]
}

// Reset forgets the requests received.
func (s *Server) Reset() {
	s.mu.Lock()
	s.received = nil
	s.mu.Unlock()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.received = append(s.received, Received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	s.mu.Unlock()

	anth := strings.HasPrefix(r.URL.Path, "/v1/messages") || r.URL.Path == "/v1/models" && r.Header.Get("anthropic-version") != ""
	fail := func(status int, typ, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if anth {
			fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
		} else {
			fmt.Fprintf(w, `{"error":{"message":%q,"type":%q,"param":null,"code":null}}`, msg, typ)
		}
	}
	if d, err := time.ParseDuration(r.Header.Get("X-Upstream-Delay")); err == nil {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	if st, err := strconv.Atoi(r.Header.Get("X-Upstream-Status")); err == nil {
		fail(st, "server_error", fmt.Sprintf("the upstream was told to answer %d", st))
		return
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "X-Compactd-") {
			fail(http.StatusBadRequest, "invalid_request_error", "compactd's header "+k+" reached the provider")
			return
		}
	}
	if anth {
		// The SDK sends its key as x-api-key or, since 1.x, as a bearer token.
		if r.Header.Get("x-api-key") != AnthropicKey && r.Header.Get("Authorization") != "Bearer "+AnthropicKey || r.Header.Get("anthropic-version") == "" {
			fail(http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
			return
		}
	} else if r.Header.Get("Authorization") != "Bearer "+OpenAIKey {
		fail(http.StatusUnauthorized, "invalid_request_error", "Incorrect API key provided")
		return
	}
	switch {
	case r.Method == http.MethodGet && (r.URL.Path == "/v1/models"):
		w.Header().Set("Content-Type", "application/json")
		if anth {
			io.WriteString(w, `{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5","created_at":"2025-09-29T00:00:00Z"}],"has_more":false,"first_id":"claude-sonnet-4-5","last_id":"claude-sonnet-4-5"}`)
		} else {
			io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1715367049,"owned_by":"system"}]}`)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		s.openAI(w, r, body, fail)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.anthropic(w, r, body, fail)
	default:
		fail(http.StatusNotFound, "not_found_error", "no route "+r.Method+" "+r.URL.Path)
	}
}

// reply is what the model "says".
type reply struct {
	text     string
	toolName string
	toolArgs string
}

// decide picks the reply to a conversation.
func decide(msgs []abi.Message, tools []string) reply {
	last := msgs[len(msgs)-1]
	switch {
	case last.Role == abi.RoleTool:
		return reply{text: "result: " + last.Text()}
	case last.Role == abi.RoleUser && len(tools) > 0:
		args, _ := json.Marshal(map[string]string{"query": last.Text()})
		return reply{toolName: tools[0], toolArgs: string(args)}
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == abi.RoleUser {
			return reply{text: "echo: " + msgs[i].Text()}
		}
	}
	return reply{text: "hello"}
}

func words(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

type sse struct {
	w     http.ResponseWriter
	f     http.Flusher
	cut   int
	count int
}

// send writes one event; false once the stream was cut.
func (e *sse) send(typ string, v any) bool {
	if e.cut > 0 && e.count >= e.cut {
		return false
	}
	e.count++
	b, _ := json.Marshal(v)
	if typ != "" {
		fmt.Fprintf(e.w, "event: %s\n", typ)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", b)
	e.f.Flush()
	return true
}

func newSSE(w http.ResponseWriter, r *http.Request) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	cut, _ := strconv.Atoi(r.Header.Get("X-Upstream-Cut"))
	return &sse{w: w, f: w.(http.Flusher), cut: cut}
}

func (s *Server) openAI(w http.ResponseWriter, r *http.Request, body []byte, fail func(int, string, string)) {
	var req struct {
		Model         string            `json:"model"`
		Messages      []json.RawMessage `json:"messages"`
		Stream        bool              `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Model == "" || len(req.Messages) == 0 {
		fail(http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("want a model and messages (%v)", err))
		return
	}
	conv, err := chat.FromRaw(req.Messages)
	if err == nil {
		err = conv.Validate()
	}
	if err != nil {
		fail(http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	var tools []string
	for _, t := range req.Tools {
		tools = append(tools, t.Function.Name)
	}
	rep := decide(conv.Messages, tools)
	prompt := s.tok.CountMessages(conv.Messages) + tokens.ReplyPrimingTokens + toolTokens(body, "tools")
	completion := s.tok.Count(rep.text+rep.toolArgs) + 1
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
		"prompt_tokens_details": map[string]int{"cached_tokens": 0}}
	id, created := "chatcmpl-test", time.Now().Unix()
	finish := "stop"
	if rep.toolName != "" {
		finish = "tool_calls"
	}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
		if rep.toolName != "" {
			msg["tool_calls"] = []any{map[string]any{"id": "call_1", "type": "function", "function": map[string]string{"name": rep.toolName, "arguments": rep.toolArgs}}}
		} else {
			msg["content"] = rep.text
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}}, "usage": usage})
		return
	}
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	e := newSSE(w, r)
	chunk := func(delta map[string]any, finish any) bool {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
		if withUsage {
			c["usage"] = nil
		}
		return e.send("", c)
	}
	if !chunk(map[string]any{"role": "assistant", "content": ""}, nil) {
		return
	}
	if rep.toolName != "" {
		if !chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": "call_1", "type": "function", "function": map[string]string{"name": rep.toolName, "arguments": ""}}}}, nil) {
			return
		}
		for _, part := range halves(rep.toolArgs) {
			if !chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]string{"arguments": part}}}}, nil) {
				return
			}
		}
	} else {
		for _, wd := range words(rep.text) {
			if !chunk(map[string]any{"content": wd}, nil) {
				return
			}
		}
	}
	if !chunk(map[string]any{}, finish) {
		return
	}
	if withUsage && !e.send("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model, "choices": []any{}, "usage": usage}) {
		return
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func halves(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	return []string{s[:len(s)/2], s[len(s)/2:]}
}

// toolTokens estimates the tokens of a request's tool definitions.
func toolTokens(body []byte, key string) int {
	var m map[string]json.RawMessage
	json.Unmarshal(body, &m)
	return len(m[key]) / 4
}

func (s *Server) anthropic(w http.ResponseWriter, r *http.Request, body []byte, fail func(int, string, string)) {
	var req struct {
		Model     string            `json:"model"`
		MaxTokens int               `json:"max_tokens"`
		System    json.RawMessage   `json:"system"`
		Messages  []json.RawMessage `json:"messages"`
		Stream    bool              `json:"stream"`
		Tools     []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Model == "" || req.MaxTokens <= 0 || len(req.Messages) == 0 {
		fail(http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("want model, max_tokens and messages (%v)", err))
		return
	}
	if msg := checkAnthropic(req.Messages); msg != "" {
		fail(http.StatusBadRequest, "invalid_request_error", msg)
		return
	}
	// As the API does: at most four blocks with cache_control in a
	// request (tools, system and messages together).
	if n := anthropic.CountCacheControls(body); n > anthropic.MaxCacheControls {
		fail(http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("A maximum of %d blocks with cache_control may be provided. Found %d.", anthropic.MaxCacheControls, n))
		return
	}
	conv, err := anthropic.Convert(req.System, req.Messages)
	if err == nil {
		err = conv.Chat.Validate()
	}
	if err != nil {
		fail(http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	var tools []string
	for _, t := range req.Tools {
		tools = append(tools, t.Name)
	}
	rep := decide(conv.Chat.Messages, tools)
	input := s.tok.CountMessages(conv.Chat.Messages) + toolTokens(body, "tools")
	output := s.tok.Count(rep.text+rep.toolArgs) + 1
	// A tenth of the prompt is "read from the cache", so cache fields are
	// exercised; input_tokens is the rest, as Anthropic reports it.
	cached := input / 10
	usage := map[string]int{"input_tokens": input - cached, "output_tokens": output, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}
	stop := "end_turn"
	var block map[string]any
	if rep.toolName != "" {
		stop = "tool_use"
		block = map[string]any{"type": "tool_use", "id": "toolu_1", "name": rep.toolName, "input": json.RawMessage(rep.toolArgs)}
	} else {
		block = map[string]any{"type": "text", "text": rep.text}
	}
	msg := map[string]any{"id": "msg_test", "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(msg)
		return
	}
	e := newSSE(w, r)
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	start["usage"] = map[string]int{"input_tokens": input - cached, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}
	if !e.send("message_start", map[string]any{"type": "message_start", "message": start}) {
		return
	}
	if rep.toolName != "" {
		if !e.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": "toolu_1", "name": rep.toolName, "input": map[string]any{}}}) {
			return
		}
		for _, part := range halves(rep.toolArgs) {
			if !e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": part}}) {
				return
			}
		}
	} else {
		if !e.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) {
			return
		}
		if !e.send("ping", map[string]any{"type": "ping"}) {
			return
		}
		for _, wd := range words(rep.text) {
			if !e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": wd}}) {
				return
			}
		}
	}
	if !e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) {
		return
	}
	if !e.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": output}}) {
		return
	}
	e.send("message_stop", map[string]any{"type": "message_stop"})
}

// checkAnthropic applies the Messages API's rules the chat form cannot
// see: roles user and assistant, the first message the user's, every
// tool_result in the message right after its tool_use and before any
// other block there.
func checkAnthropic(msgs []json.RawMessage) string {
	pending := map[string]bool{}
	for i, raw := range msgs {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Sprintf("messages.%d: %v", i, err)
		}
		if m.Role != "user" && m.Role != "assistant" || i == 0 && m.Role != "user" {
			return fmt.Sprintf("messages.%d: unexpected role %q", i, m.Role)
		}
		var blocks []struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			ToolUseID string `json:"tool_use_id"`
		}
		if bytes.HasPrefix(bytes.TrimSpace(m.Content), []byte("[")) {
			json.Unmarshal(m.Content, &blocks)
		}
		other := false
		answered := map[string]bool{}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				if other || !pending[b.ToolUseID] {
					return fmt.Sprintf("messages.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s", i, b.ToolUseID)
				}
				answered[b.ToolUseID] = true
			} else {
				other = true
			}
		}
		for id := range pending {
			if !answered[id] {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i, id)
			}
		}
		pending = map[string]bool{}
		for _, b := range blocks {
			if b.Type == "tool_use" {
				pending[b.ID] = true
			}
		}
	}
	return ""
}
