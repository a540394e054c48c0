package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/convo"
)

// Check re-checks a compacted request against the request it came from,
// from the bytes that would be sent and without trusting the host's own
// checks:
//
//   - the output is not empty, and its raw messages parse;
//   - convo.Check passes on the parsed output (roles, tool calls paired
//     with their results by position, only the last block incomplete);
//   - the input's leading system/developer messages come first, byte for
//     byte, and no new system/developer message appears after them
//     (Anthropic's API accepts system text only at the start);
//   - the last message is the input's last message, byte for byte, or
//     (convo.FinalReplacement) the same tool result shortened;
//   - when the input is valid for Anthropic's API (convo.CheckAnthropic),
//     so is the output;
//   - messages kept from the input keep their order and appear once (an
//     output message byte-identical to an input message before the last
//     one kept is an error), and every other (new) message without tool
//     calls has text content.
//
// It returns nil or an error saying what is wrong.
func Check(in, out *chat.Conversation) error {
	if out == nil || out.Len() == 0 {
		return fmt.Errorf("no messages")
	}
	if len(out.Messages) != out.Len() {
		return fmt.Errorf("%d raw messages but %d parsed", out.Len(), len(out.Messages))
	}
	n := in.Len()
	lead := convo.LeadingSystem(in.Messages)
	if out.Len() < lead+1 {
		return fmt.Errorf("%d messages, fewer than the %d leading system messages and the final message", out.Len(), lead)
	}
	parsed := make([]abi.Message, out.Len())
	next := 0 // the input index after the last kept message
	for i, raw := range out.Raw {
		j := next
		for j < n && !bytes.Equal(in.Raw[j], raw) {
			j++
		}
		if j < n {
			parsed[i] = in.Messages[j]
			next = j + 1
		} else {
			for k := 0; k < next; k++ {
				if bytes.Equal(in.Raw[k], raw) {
					return fmt.Errorf("message %d: input message %d again or out of order", i, k)
				}
			}
			var m abi.Message
			if err := json.Unmarshal(raw, &m); err != nil {
				return fmt.Errorf("message %d: not a message: %v", i, err)
			}
			if len(m.ToolCalls) == 0 && m.Text() == "" {
				return fmt.Errorf("message %d: a new %s message without text", i, m.Role)
			}
			if i >= lead && m.IsSystem() {
				return fmt.Errorf("message %d: a new %s message after the conversation's start", i, m.Role)
			}
			parsed[i] = m
		}
	}
	if err := convo.Check(parsed); err != nil {
		return err
	}
	for i := 0; i < lead; i++ {
		if !bytes.Equal(out.Raw[i], in.Raw[i]) {
			return fmt.Errorf("message %d: leading system message %d changed or moved", i, i)
		}
	}
	if last := out.Len() - 1; !bytes.Equal(out.Raw[last], in.Raw[n-1]) {
		// The one exception: a final tool result, shortened.
		if next == n || convo.FinalReplacement(&in.Messages[n-1], &parsed[last]) != nil {
			return fmt.Errorf("message %d: the final message changed", last)
		}
	}
	if convo.CheckAnthropic(in.Messages) == nil {
		if err := convo.CheckAnthropic(parsed); err != nil {
			return err
		}
	}
	return nil
}

// CheckMarks checks a policy's cache breakpoints on a request as sent: at
// most abi.MaxCacheBreakpoints distinct messages in range, and each marked
// message, with its cache_control added (chat.MarkCacheBreakpoint), still
// a message that reads the same (role, text, tool calls).
func CheckMarks(out *chat.Conversation, marks []int) error {
	if err := convo.CheckBreakpoints(out.Len(), marks); err != nil {
		return err
	}
	marked, err := out.WithCacheBreakpoints(marks)
	if err != nil {
		return err
	}
	for _, i := range marks {
		var m abi.Message
		if err := json.Unmarshal(marked.Raw[i], &m); err != nil {
			return fmt.Errorf("message %d: marked as a cache breakpoint, it is not a message: %v", i, err)
		}
		o := &out.Messages[i]
		if m.Role != o.Role || m.Text() != o.Text() || len(m.ToolCalls) != len(o.ToolCalls) || m.ToolCallID != o.ToolCallID {
			return fmt.Errorf("message %d: marking it as a cache breakpoint changed what it says", i)
		}
	}
	return nil
}

// TaskKept reports whether out still holds in's task: the text of its
// first user message, in a message of its own or within a message's text
// (a summary that quotes it whole). It returns nil when in has no user
// message.
func TaskKept(in, out *chat.Conversation) *bool {
	t := convo.Task(in.Messages)
	if t < 0 {
		return nil
	}
	kept := false
	for i := range out.Raw {
		if bytes.Equal(out.Raw[i], in.Raw[t]) {
			kept = true
			break
		}
	}
	if !kept {
		text := in.Messages[t].Text()
		for i := range out.Messages {
			if text != "" && strings.Contains(messageText(&out.Messages[i]), text) {
				kept = true
				break
			}
		}
	}
	return &kept
}
