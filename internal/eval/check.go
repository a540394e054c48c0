package eval

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/chat"
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
//   - the last message is the input's last message, byte for byte;
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
	if !bytes.Equal(out.Raw[out.Len()-1], in.Raw[n-1]) {
		return fmt.Errorf("message %d: the final message changed", out.Len()-1)
	}
	return nil
}
