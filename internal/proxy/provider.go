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
)

// Provider names, as the status reports them.
const (
	OpenAI    = "openai"
	Anthropic = "anthropic"
)

// provider is one wire format: where its requests go, how its
// conversation is read and written back, and how its usage is reported.
type provider interface {
	name() string
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
	// usage reads a JSON response body's usage.
	usage(body []byte) (store.Usage, bool)
	// newStream returns a parser for one streamed response.
	newStream(addedUsage bool) streamParser
	// errorBody renders an error compactd itself answers, in the
	// provider's error format.
	errorBody(status int, code, msg string) []byte
}

// streamParser reads the events of a streamed response.
type streamParser interface {
	// event sees one event's type ("" if none) and data; drop removes the
	// event from what the client receives.
	event(typ string, data []byte) (drop bool)
	// usage returns the usage seen so far.
	usage() (store.Usage, bool)
}

// --- OpenAI Chat Completions ---

type openAI struct{}

func (openAI) name() string                    { return OpenAI }
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

type openAIUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *openAIUsage) store() store.Usage {
	s := store.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		s.CacheReadTokens = u.PromptTokensDetails.CachedTokens
	}
	return s
}

func (openAI) usage(body []byte) (store.Usage, bool) {
	var r struct {
		Usage *openAIUsage `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return store.Usage{}, false
	}
	return r.Usage.store(), true
}

func (openAI) newStream(addedUsage bool) streamParser { return &openAIStream{added: addedUsage} }

// openAIStream reads chat.completion.chunk events. With
// stream_options.include_usage the last chunk before [DONE] has empty
// choices and the usage; when the proxy asked for it, that chunk is
// dropped.
type openAIStream struct {
	added bool
	u     store.Usage
	ok    bool
}

var usageKey = []byte(`"usage"`)

func (s *openAIStream) event(_ string, data []byte) bool {
	if !bytes.Contains(data, usageKey) {
		return false
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *openAIUsage      `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil || c.Usage == nil {
		return false
	}
	s.u, s.ok = c.Usage.store(), true
	return s.added && len(c.Choices) == 0
}

func (s *openAIStream) usage() (store.Usage, bool) { return s.u, s.ok }

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

// --- Anthropic Messages ---

type anthropicAPI struct{}

func (anthropicAPI) name() string                    { return Anthropic }
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

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

func (u *anthropicUsage) store() store.Usage {
	return store.Usage{
		InputTokens:  u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens,
	}
}

func (anthropicAPI) usage(body []byte) (store.Usage, bool) {
	var r struct {
		Usage *anthropicUsage `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return store.Usage{}, false
	}
	return r.Usage.store(), true
}

func (anthropicAPI) newStream(bool) streamParser { return &anthropicStream{} }

// anthropicStream reads message_start (the prompt's usage) and
// message_delta (the output tokens so far; newer versions repeat the
// input counts there).
type anthropicStream struct {
	u  anthropicUsage
	ok bool
}

func (s *anthropicStream) event(typ string, data []byte) bool {
	switch typ {
	case "message_start":
		var e struct {
			Message struct {
				Usage *anthropicUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &e) == nil && e.Message.Usage != nil {
			s.u, s.ok = *e.Message.Usage, true
		}
	case "message_delta":
		var e struct {
			Usage *anthropicUsage `json:"usage"`
		}
		if json.Unmarshal(data, &e) == nil && e.Usage != nil {
			s.ok = true
			s.u.OutputTokens = e.Usage.OutputTokens
			if e.Usage.InputTokens > 0 {
				s.u.InputTokens = e.Usage.InputTokens
			}
			if e.Usage.CacheCreationInputTokens > 0 {
				s.u.CacheCreationInputTokens = e.Usage.CacheCreationInputTokens
			}
			if e.Usage.CacheReadInputTokens > 0 {
				s.u.CacheReadInputTokens = e.Usage.CacheReadInputTokens
			}
		}
	}
	return false
}

func (s *anthropicStream) usage() (store.Usage, bool) { return s.u.store(), s.ok }

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
