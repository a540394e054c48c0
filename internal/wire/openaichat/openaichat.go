// Package openaichat is the OpenAI Chat Completions wire format
// (POST /v1/chat/completions): its messages are the chat form policies see
// (package chat reads them), so converting is reading, and writing back is
// writing the kept messages' bytes. It is the default format of
// /v1/compact.
package openaichat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/usage"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/jsonscan"
)

// Name is the format's name (/v1/compact's "format", the status's provider).
const Name = "openai"

// Route is the proxy's route for the format.
const Route = "/v1/chat/completions"

// Format is OpenAI Chat Completions.
type Format struct{}

var _ wire.Format = Format{}

// Name returns "openai".
func (Format) Name() string { return Name }

// Route returns /v1/chat/completions.
func (Format) Route() string { return Route }

// Provider returns wire.ProviderOpenAI.
func (Format) Provider() string { return wire.ProviderOpenAI }

// MessageUnit implements wire.Format.
func (Format) MessageUnit() string { return "OpenAI messages" }

// Target maps /v1/chat/completions to {base}/chat/completions: an OpenAI
// base URL includes the version (https://api.openai.com/v1).
func (Format) Target(base, path string) string { return base + strings.TrimPrefix(path, "/v1") }

// Fields returns "messages" and no system prompt (system messages are in
// the messages).
func (Format) Fields() (string, string) { return "messages", "" }

// Uncompactable returns "": every Chat Completions request carries its
// whole conversation.
func (Format) Uncompactable(func(string) json.RawMessage) string { return "" }

// MarkedCache returns false: OpenAI caches the longest repeated prefix.
func (Format) MarkedCache() bool { return false }

// StreamUsageOption returns true: a stream reports its usage only with
// stream_options.include_usage.
func (Format) StreamUsageOption() bool { return true }

// Convert reads the messages (system must be nil: the format has none).
func (Format) Convert(system json.RawMessage, list []json.RawMessage) (wire.Conversation, error) {
	if system != nil {
		return nil, fmt.Errorf("%w: OpenAI chat messages carry their system messages in the messages", chat.ErrMalformed)
	}
	c, err := chat.FromRaw(list)
	if err != nil {
		return nil, err
	}
	return FromChat(c), nil
}

// FromChat wraps a conversation chat has already read (POST /v1/compact
// reads OpenAI messages in its own pass, through chat.Memory).
func FromChat(c *chat.Conversation) wire.Conversation { return conversation{c} }

type conversation struct{ c *chat.Conversation }

func (c conversation) Chat() *chat.Conversation { return c.c }
func (c conversation) List() []json.RawMessage  { return c.c.Raw }

// Back returns out's messages: kept ones are the caller's bytes already.
// Marks become cache_control markers on the marked messages (for
// OpenAI-compatible gateways that pass them on; OpenAI ignores them);
// when they cannot be written the error wraps wire.ErrBreakpoints.
func (c conversation) Back(out *chat.Conversation, _ []int, marks []int, _ int) ([]json.RawMessage, []int, error) {
	if len(marks) == 0 {
		return out.Raw, nil, nil
	}
	marked, err := out.WithCacheBreakpoints(marks)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", wire.ErrBreakpoints, err)
	}
	return marked.Raw, marks, nil
}

// ItemMessages converts one message.
func (Format) ItemMessages(raw json.RawMessage, _ bool) ([]abi.Message, error) {
	c, err := chat.FromRaw([]json.RawMessage{raw})
	if err != nil {
		return nil, err
	}
	return c.Messages, nil
}

// Leading returns the messages up to and including the first user message.
func (Format) Leading(_ json.RawMessage, list []json.RawMessage) ([]abi.Message, int, error) {
	var out []abi.Message
	for i, raw := range list {
		c, err := chat.FromRaw([]json.RawMessage{raw})
		if err != nil {
			return nil, 0, err
		}
		out = append(out, c.Messages[0])
		if c.Messages[0].Role == abi.RoleUser {
			return out, i + 1, nil
		}
	}
	return out, 0, nil
}

// apiUsage is Chat Completions' usage. Counts outside usage's rule
// (negative, fractional, over 2^53, not numbers) are ignored; without a
// valid prompt_tokens there is no usage to record.
type apiUsage struct {
	PromptTokens        usage.Count `json:"prompt_tokens"`
	CompletionTokens    usage.Count `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens usage.Count `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *apiUsage) usage() (wire.Usage, bool) {
	s := wire.Usage{InputTokens: u.PromptTokens.N, OutputTokens: u.CompletionTokens.N}
	if u.PromptTokensDetails != nil {
		s.CacheReadTokens = min(u.PromptTokensDetails.CachedTokens.N, s.InputTokens)
	}
	return s, u.PromptTokens.Set
}

func (u *apiUsage) refused() []string {
	named := map[string]usage.Count{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		named["prompt_tokens_details.cached_tokens"] = u.PromptTokensDetails.CachedTokens
	}
	return usage.Refused(named)
}

// Usage reads a chat.completion's usage.
func (Format) Usage(body []byte) (wire.Usage, bool, []string) {
	var r struct {
		Usage *apiUsage `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return wire.Usage{}, false, nil
	}
	u, ok := r.Usage.usage()
	return u, ok, r.Usage.refused()
}

// NewStream returns a parser of chat.completion.chunk events.
func (Format) NewStream(addedUsage bool) wire.Stream { return &stream{added: addedUsage} }

// stream reads chat.completion.chunk events. With
// stream_options.include_usage the last chunk before [DONE] has empty
// choices and the usage, and OpenAI-style upstreams put "usage": null on
// every other chunk; when the proxy asked for it, the client gets what it
// would have got without: the usage chunk is dropped and the usage field
// removed from every other chunk.
type stream struct {
	added   bool
	u       wire.Usage
	ok      bool
	refused []string
}

var usageKey = []byte(`"usage"`)

func (s *stream) Event(_ string, data []byte) ([]byte, bool) {
	if !bytes.Contains(data, usageKey) {
		return nil, false
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *apiUsage         `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil {
		return nil, false
	}
	if c.Usage != nil {
		if u, ok := c.Usage.usage(); ok {
			s.u, s.ok = u, true
		}
		s.refused = wire.NoteRefused(s.refused, c.Usage.refused())
	}
	if !s.added {
		return nil, false
	}
	if c.Usage != nil && len(c.Choices) == 0 {
		return nil, true
	}
	if out, ok := WithoutMember(data, "usage"); ok {
		return out, false
	}
	return nil, false
}

func (s *stream) Usage() (wire.Usage, bool, []string) { return s.u, s.ok, s.refused }

// ErrorBody is an error in OpenAI's shape ({"error": {message, type,
// param, code}}).
func (Format) ErrorBody(_ int, code, msg string) []byte {
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

// StreamError is an error event as OpenAI sends one mid-stream: a data
// line with an error object, which the SDKs raise as an APIError.
func (f Format) StreamError(status int, code, msg string) []byte {
	return wire.SSEEvent("", f.ErrorBody(status, code, msg))
}

// WithoutMember returns the JSON object data without its top-level member
// key (its value whatever it is, null included), and whether it had one.
func WithoutMember(data []byte, key string) ([]byte, bool) {
	s := jsonscan.New(data)
	if s.Peek() != jsonscan.Object {
		return nil, false
	}
	s.BeginObject()
	prevEnd := -1 // where the previous member's value ends
	for first := true; ; first = false {
		before := s.Pos() // before the ',' (or the first key)
		k, esc, more, err := s.NextMember(first)
		if err != nil || !more {
			return nil, false
		}
		_, _, end, err := s.Skip()
		if err != nil {
			return nil, false
		}
		if string(jsonscan.Key(k, esc)) != key {
			prevEnd = end
			continue
		}
		if prevEnd >= 0 {
			// Cut from the end of the previous value through this one.
			return splice(data, prevEnd, end), true
		}
		// The first member: cut it and the ',' after it, if any.
		rest := end
		for rest < len(data) && (data[rest] == ' ' || data[rest] == '\t' || data[rest] == '\n' || data[rest] == '\r') {
			rest++
		}
		if rest < len(data) && data[rest] == ',' {
			rest++
		}
		start := bytes.IndexByte(data[before:], '"') + before
		return splice(data, start, rest), true
	}
}

// splice returns b without [start, end), in a new slice.
func splice(b []byte, start, end int) []byte {
	out := make([]byte, 0, len(b)-(end-start))
	return append(append(out, b[:start]...), b[end:]...)
}
