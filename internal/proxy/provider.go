package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/anthropic"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/usage"
	"github.com/compactd/compactd/internal/wire/responses"
)

// Provider names, as the status reports them.
const (
	OpenAI    = "openai"
	Anthropic = "anthropic"
)

// Responses is the OpenAI Responses API's format name (the status's
// provider of a conversation proxied through /v1/responses); its upstream
// is OpenAI's.
const Responses = responses.Name

// formats are the wire formats the proxy serves, by format name: one
// registration per format.
var formats = map[string]provider{OpenAI: openAI{}, Anthropic: anthropicAPI{}, Responses: responsesAPI{}}

// provider is one wire format: where its requests go, how its
// conversation is read and written back, and how its usage is reported.
type provider interface {
	// name is the provider whose upstream serves the format (OpenAI or
	// Anthropic): its config section, faults and X-Compactd-Upstream.
	name() string
	// format is the wire format's name (OpenAI, Anthropic, Responses):
	// the status's provider, the stored request's format.
	format() string
	// fields names the request's conversation member ("messages",
	// "input") and its top-level system prompt ("" when the format has
	// none).
	fields() (list, system string)
	// uncompactable says why a request that parsed cannot be compacted
	// ("" when it can).
	uncompactable(r *request) string
	// upstream returns the configured base URL ("" when not proxied).
	upstream(p *config.Proxy) string
	// target returns the upstream URL for an inbound path under /v1/.
	target(base, path string) string
	// items returns what is counted: the messages, and for Anthropic the
	// system prompt first. hasSystem says whether items[0] is it.
	items(r *request) (items []json.RawMessage, hasSystem bool)
	// chatItem converts one item to chat messages for counting.
	chatItem(raw json.RawMessage, system bool) ([]abi.Message, error)
	// leading returns the leading system messages and the first user
	// message, in chat form, for the derived conversation id.
	leading(r *request) ([]abi.Message, error)
	// conversation converts the request's conversation to chat form, with
	// the function that writes a compaction's result back as a messages
	// array in the provider's format.
	conversation(r *request) (*chat.Conversation, func(*compactor.Response) ([]byte, error), error)
	// usage reads a JSON response body's usage: ok when it has one to
	// record, and the counts it refused (name=value), if any.
	usage(body []byte) (u store.Usage, ok bool, refused []string)
	// newStream returns a parser for one streamed response.
	newStream(addedUsage bool) streamParser
	// errorBody renders an error compactd itself answers, in the
	// provider's error format.
	errorBody(status int, code, msg string) []byte
	// streamError renders the event that ends a stream compactd cannot
	// complete, in the provider's format for an error mid-stream.
	streamError(status int, code, msg string) []byte
}

// streamParser reads the events of a streamed response.
type streamParser interface {
	// event sees one event's type ("" if none) and data; drop removes the
	// event from what the client receives, and a non-nil data replaces
	// the event's data.
	event(typ string, data []byte) (replace []byte, drop bool)
	// usage returns the usage seen so far (ok when there is one to
	// record) and the counts refused on the way.
	usage() (u store.Usage, ok bool, refused []string)
}

// maxRefused bounds the refused counts a stream's parser keeps for its
// log line, however many usage events a stream holds.
const maxRefused = 8

func noteRefused(dst, more []string) []string {
	if room := maxRefused - len(dst); room > 0 {
		dst = append(dst, more[:min(room, len(more))]...)
	}
	return dst
}

// --- OpenAI Chat Completions ---

type openAI struct{}

func (openAI) name() string                    { return OpenAI }
func (openAI) format() string                  { return OpenAI }
func (openAI) fields() (string, string)        { return "messages", "" }
func (openAI) uncompactable(*request) string   { return "" }
func (openAI) upstream(p *config.Proxy) string { return p.OpenAI.Upstream }

// target maps /v1/chat/completions to {base}/chat/completions: an OpenAI
// base URL includes the version (https://api.openai.com/v1).
func (openAI) target(base, path string) string { return base + strings.TrimPrefix(path, "/v1") }

func (openAI) items(r *request) ([]json.RawMessage, bool) { return r.messages, false }

func (openAI) chatItem(raw json.RawMessage, _ bool) ([]abi.Message, error) {
	c, err := chat.FromRaw([]json.RawMessage{raw})
	if err != nil {
		return nil, err
	}
	return c.Messages, nil
}

func (openAI) leading(r *request) ([]abi.Message, error) {
	var out []abi.Message
	for _, raw := range r.messages {
		c, err := chat.FromRaw([]json.RawMessage{raw})
		if err != nil {
			return nil, err
		}
		out = append(out, c.Messages[0])
		if c.Messages[0].Role == abi.RoleUser {
			break
		}
	}
	return out, nil
}

func (openAI) conversation(r *request) (*chat.Conversation, func(*compactor.Response) ([]byte, error), error) {
	c, err := chat.FromRaw(r.messages)
	if err != nil {
		return nil, nil, err
	}
	return c, func(resp *compactor.Response) ([]byte, error) { return resp.Conversation.MessagesJSON(), nil }, nil
}

// openAIUsage is Chat Completions' usage. Counts outside usage's rule
// (negative, fractional, over 2^53, not numbers) are ignored; without a
// valid prompt_tokens there is no usage to record.
type openAIUsage struct {
	PromptTokens        usage.Count `json:"prompt_tokens"`
	CompletionTokens    usage.Count `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens usage.Count `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *openAIUsage) store() (store.Usage, bool) {
	s := store.Usage{InputTokens: u.PromptTokens.N, OutputTokens: u.CompletionTokens.N}
	if u.PromptTokensDetails != nil {
		s.CacheReadTokens = min(u.PromptTokensDetails.CachedTokens.N, s.InputTokens)
	}
	return s, u.PromptTokens.Set
}

func (u *openAIUsage) refused() []string {
	named := map[string]usage.Count{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		named["prompt_tokens_details.cached_tokens"] = u.PromptTokensDetails.CachedTokens
	}
	return usage.Refused(named)
}

func (openAI) usage(body []byte) (store.Usage, bool, []string) {
	var r struct {
		Usage *openAIUsage `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return store.Usage{}, false, nil
	}
	u, ok := r.Usage.store()
	return u, ok, r.Usage.refused()
}

func (openAI) newStream(addedUsage bool) streamParser { return &openAIStream{added: addedUsage} }

// openAIStream reads chat.completion.chunk events. With
// stream_options.include_usage the last chunk before [DONE] has empty
// choices and the usage, and OpenAI-style upstreams put "usage": null on
// every other chunk; when the proxy asked for it, the client gets what it
// would have got without: the usage chunk is dropped and the usage field
// removed from every other chunk.
type openAIStream struct {
	added   bool
	u       store.Usage
	ok      bool
	refused []string
}

var usageKey = []byte(`"usage"`)

func (s *openAIStream) event(_ string, data []byte) ([]byte, bool) {
	if !bytes.Contains(data, usageKey) {
		return nil, false
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *openAIUsage      `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil {
		return nil, false
	}
	if c.Usage != nil {
		if u, ok := c.Usage.store(); ok {
			s.u, s.ok = u, true
		}
		s.refused = noteRefused(s.refused, c.Usage.refused())
	}
	if !s.added {
		return nil, false
	}
	if c.Usage != nil && len(c.Choices) == 0 {
		return nil, true
	}
	if out, ok := withoutMember(data, "usage"); ok {
		return out, false
	}
	return nil, false
}

func (s *openAIStream) usage() (store.Usage, bool, []string) { return s.u, s.ok, s.refused }

func (openAI) errorBody(status int, code, msg string) []byte {
	var body struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	body.Error.Message, body.Error.Type, body.Error.Code = "compactd: "+msg, "compactd_error", code
	b, _ := json.Marshal(body)
	return b
}

// streamError is an error event as OpenAI sends one mid-stream: a data
// line with an error object, which the SDKs raise as an APIError.
func (p openAI) streamError(status int, code, msg string) []byte {
	return sseEvent("", p.errorBody(status, code, msg))
}

// sseEvent writes one event: its type line if typ is set, its data line
// (data holds no newline: it is compact JSON) and the blank line.
func sseEvent(typ string, data []byte) []byte {
	b := make([]byte, 0, len(typ)+len(data)+16)
	if typ != "" {
		b = append(append(append(b, "event: "...), typ...), '\n')
	}
	return append(append(append(b, "data: "...), data...), "\n\n"...)
}

// --- Anthropic Messages ---

type anthropicAPI struct{}

func (anthropicAPI) name() string                    { return Anthropic }
func (anthropicAPI) format() string                  { return Anthropic }
func (anthropicAPI) fields() (string, string)        { return "messages", "system" }
func (anthropicAPI) uncompactable(*request) string   { return "" }
func (anthropicAPI) upstream(p *config.Proxy) string { return p.Anthropic.Upstream }

// target maps /v1/messages to {base}/v1/messages: an Anthropic base URL
// has no version (https://api.anthropic.com).
func (anthropicAPI) target(base, path string) string { return base + path }

func (anthropicAPI) items(r *request) ([]json.RawMessage, bool) {
	if len(r.system) == 0 {
		return r.messages, false
	}
	items := make([]json.RawMessage, 0, len(r.messages)+1)
	return append(append(items, r.system), r.messages...), true
}

func (anthropicAPI) chatItem(raw json.RawMessage, system bool) ([]abi.Message, error) {
	var c *anthropic.Conversation
	var err error
	if system {
		c, err = anthropic.Convert(raw, nil)
	} else {
		c, err = anthropic.Convert(nil, []json.RawMessage{raw})
	}
	if err != nil {
		return nil, err
	}
	return c.Chat.Messages, nil
}

func (anthropicAPI) leading(r *request) ([]abi.Message, error) {
	n := 0
	for n < len(r.messages) {
		var m struct {
			Role string `json:"role"`
		}
		json.Unmarshal(r.messages[n], &m)
		n++
		if m.Role == abi.RoleUser {
			break
		}
	}
	c, err := anthropic.Convert(r.system, r.messages[:n])
	if err != nil {
		return nil, err
	}
	return c.Chat.Messages, nil
}

func (anthropicAPI) conversation(r *request) (*chat.Conversation, func(*compactor.Response) ([]byte, error), error) {
	c, err := anthropic.Convert(r.system, r.messages)
	if err != nil {
		return nil, nil, err
	}
	return c.Chat, func(resp *compactor.Response) ([]byte, error) {
		// The policies' cache breakpoints become cache_control markers
		// (Anthropic caches only what a marker ends), within the four a
		// request may carry: the ones the agent put on its tools, system
		// prompt and the messages kept count first.
		var tools json.RawMessage
		for _, f := range r.fields {
			if f.key == "tools" {
				tools = r.body[f.start:f.end]
			}
		}
		msgs, _, err := c.BackWithBreakpoints(resp.Conversation, resp.Origin, resp.CacheBreakpoints, anthropic.CountCacheControls(tools))
		if err != nil {
			return nil, err
		}
		return arrayJSON(msgs), nil
	}, nil
}

// anthropicUsage is Messages' usage. Counts outside usage's rule are
// ignored; without a valid input_tokens there is no usage to record.
type anthropicUsage struct {
	InputTokens              usage.Count `json:"input_tokens"`
	OutputTokens             usage.Count `json:"output_tokens"`
	CacheCreationInputTokens usage.Count `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     usage.Count `json:"cache_read_input_tokens"`
}

func (u *anthropicUsage) store() (store.Usage, bool) {
	return store.Usage{
		InputTokens:  usage.Sum(u.InputTokens.N, u.CacheCreationInputTokens.N, u.CacheReadInputTokens.N),
		OutputTokens: u.OutputTokens.N, CacheReadTokens: u.CacheReadInputTokens.N, CacheWriteTokens: u.CacheCreationInputTokens.N,
	}, u.InputTokens.Set
}

func (u *anthropicUsage) refused() []string {
	return usage.Refused(map[string]usage.Count{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
		"cache_creation_input_tokens": u.CacheCreationInputTokens, "cache_read_input_tokens": u.CacheReadInputTokens})
}

func (anthropicAPI) usage(body []byte) (store.Usage, bool, []string) {
	var r struct {
		Usage *anthropicUsage `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return store.Usage{}, false, nil
	}
	u, ok := r.Usage.store()
	return u, ok, r.Usage.refused()
}

func (anthropicAPI) newStream(bool) streamParser { return &anthropicStream{} }

// anthropicStream reads message_start (the prompt's usage) and
// message_delta (the output tokens so far; newer versions repeat the
// input counts there, where a 0 does not replace a count). A refused
// count is ignored.
type anthropicStream struct {
	u       anthropicUsage
	refused []string
}

func (s *anthropicStream) event(typ string, data []byte) ([]byte, bool) {
	var u *anthropicUsage
	switch typ {
	case "message_start":
		var e struct {
			Message struct {
				Usage *anthropicUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &e) == nil {
			u = e.Message.Usage
		}
	case "message_delta":
		var e struct {
			Usage *anthropicUsage `json:"usage"`
		}
		if json.Unmarshal(data, &e) == nil {
			u = e.Usage
		}
	}
	if u == nil {
		return nil, false
	}
	if u.OutputTokens.Set {
		s.u.OutputTokens = u.OutputTokens
	}
	for _, c := range []struct{ dst, src *usage.Count }{
		{&s.u.InputTokens, &u.InputTokens},
		{&s.u.CacheCreationInputTokens, &u.CacheCreationInputTokens}, {&s.u.CacheReadInputTokens, &u.CacheReadInputTokens},
	} {
		if c.src.Set && (c.src.N > 0 || !c.dst.Set) {
			*c.dst = *c.src
		}
	}
	s.refused = noteRefused(s.refused, u.refused())
	return nil, false
}

func (s *anthropicStream) usage() (store.Usage, bool, []string) {
	u, ok := s.u.store()
	return u, ok, s.refused
}

func (anthropicAPI) errorBody(status int, code, msg string) []byte {
	typ := "api_error"
	switch {
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case status < 500:
		typ = "invalid_request_error"
	}
	var body struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Type, body.Error.Type, body.Error.Message = "error", typ, "compactd ("+code+"): "+msg
	b, _ := json.Marshal(body)
	return b
}

// streamError is an error event as Anthropic sends one mid-stream
// (event: error), which the SDKs raise as an APIError.
func (p anthropicAPI) streamError(status int, code, msg string) []byte {
	return sseEvent("error", p.errorBody(status, code, msg))
}
