package responses

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/wire"
)

// Format is the OpenAI Responses API. Its upstream is OpenAI's.
type Format struct{}

var _ wire.Format = Format{}

// Name returns "responses".
func (Format) Name() string { return Name }

// Route returns /v1/responses.
func (Format) Route() string { return Route }

// Provider returns wire.ProviderOpenAI.
func (Format) Provider() string { return wire.ProviderOpenAI }

// MessageUnit implements wire.Format.
func (Format) MessageUnit() string { return "Responses items" }

// Target maps /v1/responses to {base}/responses, as for Chat Completions.
func (Format) Target(base, path string) string { return base + strings.TrimPrefix(path, "/v1") }

// Fields returns "input" and "instructions".
func (Format) Fields() (string, string) { return "input", "instructions" }

// Uncompactable: a request that continues a stored response holds its
// history on the provider's side, where compactd cannot see it.
func (Format) Uncompactable(get func(string) json.RawMessage) string {
	if v := get("previous_response_id"); len(v) > 0 && string(v) != "null" && string(v) != `""` {
		return "previous_response_id: the conversation's history is stored by the provider, where compactd cannot see or compact it (send the whole input with store: false to have it compacted)"
	}
	return ""
}

// MarkedCache returns false: OpenAI caches the longest repeated prefix.
func (Format) MarkedCache() bool { return false }

// StreamUsageOption returns false: response.completed carries the usage.
func (Format) StreamUsageOption() bool { return false }

// stringInput reports whether list is a string "input" (one user message).
func stringInput(list []json.RawMessage) bool {
	return len(list) == 1 && len(list[0]) > 0 && list[0][0] == '"'
}

// Convert converts "instructions" and the input items (or the string
// input).
func (Format) Convert(system json.RawMessage, list []json.RawMessage) (wire.Conversation, error) {
	var c *Conversation
	var err error
	if stringInput(list) {
		c, err = Convert(system, list[0])
	} else {
		c, err = ConvertItems(system, list)
	}
	if err != nil {
		return nil, err
	}
	return formatConversation{c}, nil
}

type formatConversation struct{ c *Conversation }

func (c formatConversation) Chat() *chat.Conversation { return c.c.Chat }

func (c formatConversation) List() []json.RawMessage {
	out := make([]json.RawMessage, len(c.c.Items))
	for i, it := range c.c.Items {
		out[i] = it.Raw
	}
	return out
}

// Back writes the result back as input items; OpenAI caches prefixes
// without markers, so marks are not written.
func (c formatConversation) Back(out *chat.Conversation, origin []int, _ []int, _ int) ([]json.RawMessage, []int, error) {
	items, err := c.c.Back(out, origin)
	return items, nil, err
}

// ItemMessages converts one input item, the string input, or (system) the
// instructions.
func (Format) ItemMessages(raw json.RawMessage, system bool) ([]abi.Message, error) {
	switch {
	case system:
		return InstructionsMessage(raw)
	case len(raw) > 0 && raw[0] == '"': // a string input
		return []abi.Message{{Role: abi.RoleUser, Content: abi.RawContent(raw)}}, nil
	}
	return ItemMessages(raw)
}

// Leading converts the instructions and the items up to and including the
// first user message; only those items are read (as Chat Completions'
// Leading reads only those messages).
//
// A string input is one user message: it settles the lead (1).
func (Format) Leading(system json.RawMessage, list []json.RawMessage) ([]abi.Message, int, error) {
	if stringInput(list) {
		lead, err := Leading(system, list[0])
		if err != nil {
			return nil, 0, err
		}
		return lead, 1, nil
	}
	items := make([]Item, 0, 4)
	settled := 0
	for i, raw := range list {
		it, err := readItem(raw)
		if err != nil {
			return nil, 0, fmt.Errorf("input item %d: %w", i, err)
		}
		items = append(items, it)
		if it.Type == TypeMessage && it.Role == abi.RoleUser {
			settled = i + 1
			break
		}
	}
	lead, err := leading(system, items)
	if err != nil {
		return nil, 0, err
	}
	return lead, settled, nil
}

// Usage reads a response object's usage.
func (Format) Usage(body []byte) (wire.Usage, bool, []string) {
	return ResponseUsage(body).wire()
}

func (u *Usage) wire() (wire.Usage, bool, []string) {
	if u == nil {
		return wire.Usage{}, false, nil
	}
	return wire.Usage{InputTokens: u.InputTokens.N, OutputTokens: u.OutputTokens.N, CacheReadTokens: u.Cached()},
		u.InputTokens.Set, u.Refused()
}

// NewStream returns a parser of response.* events.
func (Format) NewStream(bool) wire.Stream { return &stream{} }

// stream reads the response.* events; the usage is in response.completed's
// response (or response.incomplete's, or response.failed's).
type stream struct {
	u       wire.Usage
	ok      bool
	refused []string
}

func (s *stream) Event(typ string, data []byte) ([]byte, bool) {
	u, ok, refused := EventUsage(typ, data).wire()
	if ok {
		s.u, s.ok = u, true
	}
	s.refused = wire.NoteRefused(s.refused, refused)
	return nil, false
}

func (s *stream) Usage() (wire.Usage, bool, []string) { return s.u, s.ok, s.refused }

// ErrorBody is ErrorBody in the Format's terms.
func (Format) ErrorBody(_ int, code, msg string) []byte { return ErrorBody(code, msg) }

// StreamError is StreamError in the Format's terms.
func (Format) StreamError(_ int, code, msg string) []byte { return StreamError(code, msg) }
