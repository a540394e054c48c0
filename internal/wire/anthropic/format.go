package anthropic

import (
	"encoding/json"
	"net/http"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/usage"
	"github.com/compactd/compactd/internal/wire"
)

// Name is the format's name (/v1/compact's "format", the status's provider).
const Name = "anthropic"

// Route is the proxy's route for the format.
const Route = "/v1/messages"

// Format is Anthropic Messages.
type Format struct{}

var _ wire.Format = Format{}

// FromClient reports whether a request carries the headers every
// Anthropic client sends (anthropic-version, or x-api-key): compactd's
// own answers to it come in Anthropic's error shape.
func FromClient(h http.Header) bool {
	return h.Get("anthropic-version") != "" || h.Get("x-api-key") != ""
}

// Name returns "anthropic".
func (Format) Name() string { return Name }

// Route returns /v1/messages.
func (Format) Route() string { return Route }

// Provider returns wire.ProviderAnthropic.
func (Format) Provider() string { return wire.ProviderAnthropic }

// MessageUnit implements wire.Format.
func (Format) MessageUnit() string { return "Anthropic messages" }

// Target maps /v1/messages to {base}/v1/messages: an Anthropic base URL
// has no version (https://api.anthropic.com).
func (Format) Target(base, path string) string { return base + path }

// Fields returns "messages" and "system".
func (Format) Fields() (string, string) { return "messages", "system" }

// Uncompactable returns "": a Messages request carries its whole
// conversation.
func (Format) Uncompactable(func(string) json.RawMessage) string { return "" }

// MarkedCache returns true: Anthropic caches only what a cache_control
// marker ends.
func (Format) MarkedCache() bool { return true }

// StreamUsageOption returns false: message_start and message_delta always
// carry the usage.
func (Format) StreamUsageOption() bool { return false }

// Convert converts the request's system and messages.
func (Format) Convert(system json.RawMessage, list []json.RawMessage) (wire.Conversation, error) {
	c, err := Convert(system, list)
	if err != nil {
		return nil, err
	}
	return formatConversation{c}, nil
}

type formatConversation struct{ c *Conversation }

func (c formatConversation) Chat() *chat.Conversation { return c.c.Chat }
func (c formatConversation) List() []json.RawMessage  { return c.c.Messages }

// Back writes the result back (the system prompt stays the request's),
// with the marks as cache_control markers within the four a request may
// carry: the ones in the system prompt, the messages kept and reserved
// (the request's tools) count first.
func (c formatConversation) Back(out *chat.Conversation, origin []int, marks []int, reserved int) ([]json.RawMessage, []int, error) {
	return c.c.BackWithBreakpoints(out, origin, marks, reserved)
}

// ItemMessages converts one message, or the system prompt.
func (Format) ItemMessages(raw json.RawMessage, system bool) ([]abi.Message, error) {
	var c *Conversation
	var err error
	if system {
		c, err = Convert(raw, nil)
	} else {
		c, err = Convert(nil, []json.RawMessage{raw})
	}
	if err != nil {
		return nil, err
	}
	return c.Chat.Messages, nil
}

// Leading converts the system prompt and the messages up to and including
// the first user message.
func (Format) Leading(system json.RawMessage, list []json.RawMessage) ([]abi.Message, int, error) {
	n, settled := 0, 0
	for n < len(list) {
		var m struct {
			Role string `json:"role"`
		}
		json.Unmarshal(list[n], &m)
		n++
		if m.Role == abi.RoleUser {
			settled = n
			break
		}
	}
	c, err := Convert(system, list[:n])
	if err != nil {
		return nil, 0, err
	}
	return c.Chat.Messages, settled, nil
}

// apiUsage is Messages' usage. Counts outside usage's rule are ignored;
// without a valid input_tokens there is no usage to record.
type apiUsage struct {
	InputTokens              usage.Count `json:"input_tokens"`
	OutputTokens             usage.Count `json:"output_tokens"`
	CacheCreationInputTokens usage.Count `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     usage.Count `json:"cache_read_input_tokens"`
}

func (u *apiUsage) usage() (wire.Usage, bool) {
	return wire.Usage{
		InputTokens:  usage.Sum(u.InputTokens.N, u.CacheCreationInputTokens.N, u.CacheReadInputTokens.N),
		OutputTokens: u.OutputTokens.N, CacheReadTokens: u.CacheReadInputTokens.N, CacheWriteTokens: u.CacheCreationInputTokens.N,
	}, u.InputTokens.Set
}

func (u *apiUsage) refused() []string {
	return usage.Refused(map[string]usage.Count{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
		"cache_creation_input_tokens": u.CacheCreationInputTokens, "cache_read_input_tokens": u.CacheReadInputTokens})
}

// Usage reads a message's usage.
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

// NewStream returns a parser of a Messages stream.
func (Format) NewStream(bool) wire.Stream { return &stream{} }

// stream reads message_start (the prompt's usage) and message_delta (the
// output tokens so far; newer versions repeat the input counts there,
// where a 0 does not replace a count). A refused count is ignored.
type stream struct {
	u       apiUsage
	refused []string
}

func (s *stream) Event(typ string, data []byte) ([]byte, bool) {
	var u *apiUsage
	switch typ {
	case "message_start":
		var e struct {
			Message struct {
				Usage *apiUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &e) == nil {
			u = e.Message.Usage
		}
	case "message_delta":
		var e struct {
			Usage *apiUsage `json:"usage"`
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
	s.refused = wire.NoteRefused(s.refused, u.refused())
	return nil, false
}

func (s *stream) Usage() (wire.Usage, bool, []string) {
	u, ok := s.u.usage()
	return u, ok, s.refused
}

// ErrorBody is an error in Anthropic's shape ({"type": "error", "error":
// {type, message}}), its type chosen by the status as the API does.
func (Format) ErrorBody(status int, code, msg string) []byte {
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

// StreamError is an error event as Anthropic sends one mid-stream
// (event: error), which the SDKs raise as an APIError.
func (f Format) StreamError(status int, code, msg string) []byte {
	return wire.SSEEvent("error", f.ErrorBody(status, code, msg))
}
