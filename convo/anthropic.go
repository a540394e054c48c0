package convo

import (
	"bytes"

	"github.com/compactd/compactd/abi"
)

// CheckAnthropic reports whether msgs, valid under Check, is also a
// conversation Anthropic's Messages API accepts once converted the usual
// way: system and developer messages become the top-level system prompt,
// tool results become user turns of tool_result blocks, and consecutive
// turns of one role are merged (as the API itself does). That leaves these
// rules:
//
//   - system and developer messages only at the start (the API has no
//     system role among its messages);
//   - the first message after them is the user's;
//   - every message has content: text, content parts or tool calls (the
//     API rejects empty text blocks), except a final assistant message
//     (a prefill).
//
// Assistant tool calls and their results are paired by Check. It returns a
// *StructureError or nil.
func CheckAnthropic(msgs []abi.Message) error {
	lead := LeadingSystem(msgs)
	if lead == len(msgs) {
		return &StructureError{Index: -1, Reason: "Anthropic: no message after the system prompt"}
	}
	if r := msgs[lead].Role; r != abi.RoleUser {
		return structErr(lead, "Anthropic: the first message after the system prompt is the %s's, not the user's", r)
	}
	for i := lead; i < len(msgs); i++ {
		m := &msgs[i]
		switch {
		case m.IsSystem():
			return structErr(i, "Anthropic: a %s message after the conversation's start", m.Role)
		case len(m.ToolCalls) > 0:
		case m.Role == abi.RoleAssistant && i == len(msgs)-1:
		case !hasContent(m.Content):
			return structErr(i, "Anthropic: a %s message without content", m.Role)
		}
	}
	return nil
}

// Task returns the index of the conversation's task: its first user
// message, or -1 when it has none.
func Task(msgs []abi.Message) int {
	for i := range msgs {
		if msgs[i].Role == abi.RoleUser {
			return i
		}
	}
	return -1
}

// Pinned returns the length of the prefix a policy keeps verbatim: the
// leading system messages and, with keepTask, everything up to and
// including the task (the first user message; in practice right after
// the system messages). The final message is never part of it: a prefix
// that would reach it stops at the leading system messages, since the
// final message is kept anyway.
func Pinned(msgs []abi.Message, keepTask bool) int {
	lead := LeadingSystem(msgs)
	if !keepTask {
		return lead
	}
	t := Task(msgs)
	if t < 0 || t >= len(msgs)-1 {
		return lead
	}
	return max(lead, t+1)
}

// hasContent reports whether c holds text or at least one content part.
func hasContent(c abi.Content) bool {
	switch {
	case c.IsNull():
		return false
	case c.IsString():
		return c.Text() != ""
	}
	var empty []byte
	for _, b := range c.Raw() {
		if b != ' ' && b != '\t' && b != '\n' && b != '\r' {
			empty = append(empty, b)
		}
		if len(empty) > 2 {
			return true
		}
	}
	return !bytes.Equal(empty, []byte("[]"))
}
