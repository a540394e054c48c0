package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
)

// ErrUnsupportedFormat means the messages are in another provider's
// format than OpenAI chat messages (today: Anthropic Messages). They are
// refused rather than compacted as if they were OpenAI messages, which
// could return them invalid for their provider (tool_use/tool_result
// blocks split, for one). The error is a *FormatError; test with
// errors.Is.
var ErrUnsupportedFormat = errors.New("unsupported message format")

// Anthropic is the name FormatError gives Anthropic's Messages API format.
const Anthropic = "Anthropic Messages"

// FormatError reports a message in a format compactd does not take.
type FormatError struct {
	Format  string // the format recognised, e.g. Anthropic
	Index   int    // the message's index
	Feature string // what gave it away, e.g. `content block of type "tool_use"`
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: message %d is in the %s format (%s); OpenAI chat messages are the default (role, content, tool_calls, tool_call_id): send Anthropic's with \"format\": \"anthropic\" to /v1/compact, or through the /v1/messages proxy",
		ErrUnsupportedFormat, e.Index, e.Format, e.Feature)
}

// Is makes errors.Is(err, ErrUnsupportedFormat) true.
func (e *FormatError) Is(target error) bool { return target == ErrUnsupportedFormat }

// checkMessage checks that message i's content is in OpenAI's format
// (CheckContent); one recognisably in Anthropic's is a *FormatError.
func checkMessage(i int, m *abi.Message) error {
	if err := CheckContent(m.Role, m.Content); err != nil {
		if f := AnthropicFeature(m); f != "" {
			return &FormatError{Format: Anthropic, Index: i, Feature: f}
		}
		return fmt.Errorf("%w: message %d (%s): %v", ErrMalformed, i, m.Role, err)
	}
	return nil
}

// CheckFormat returns a *FormatError for the first message that is not an
// OpenAI chat message but recognisably another provider's (see
// AnthropicFeature), or nil.
func CheckFormat(msgs []abi.Message) error {
	for i := range msgs {
		if f := AnthropicFeature(&msgs[i]); f != "" {
			return &FormatError{Format: Anthropic, Index: i, Feature: f}
		}
	}
	return nil
}

// anthropicBlocks are content block types that exist in Anthropic's
// Messages API and not in OpenAI's chat format (whose parts are text,
// image_url, input_audio, file and refusal). Types ending in "_tool_use"
// or "_tool_result" (server tools) count too.
var anthropicBlocks = map[string]bool{
	"tool_use":          true,
	"tool_result":       true,
	"thinking":          true,
	"redacted_thinking": true,
	"image":             true, // OpenAI: image_url
	"document":          true, // OpenAI: file
	"search_result":     true,
	"container_upload":  true,
}

// AnthropicFeature returns what marks m as an Anthropic Messages message
// rather than an OpenAI chat message — a content block whose type only
// Anthropic has ("tool_use", "tool_result", "thinking", an "image" with a
// "source", …) — or "" when nothing does. Plain string contents and
// "text" blocks are valid in both formats and are not flagged. It decodes
// only array contents, so it costs nothing on string messages.
func AnthropicFeature(m *abi.Message) string {
	raw := m.Content.Raw()
	if len(raw) == 0 || raw[0] != '[' {
		return ""
	}
	var blocks []struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "" // not ours to judge: malformed parts are reported elsewhere
	}
	for _, b := range blocks {
		if anthropicBlocks[b.Type] || strings.HasSuffix(b.Type, "_tool_use") || strings.HasSuffix(b.Type, "_tool_result") {
			return fmt.Sprintf("content block of type %q", b.Type)
		}
	}
	return ""
}
