// Package convo knows the structure of a chat conversation: which messages
// belong together (an assistant's tool calls and their results form one
// unit), where the leading system messages end, and whether a conversation
// is valid for the providers' APIs.
//
// It works on abi.Message values, builds for the host and for wasip1 guests,
// and is meant for policy authors as much as for the host.
package convo

import (
	"fmt"

	"github.com/compactd/compactd/abi"
)

// Unit is a half-open range [Start, End) of messages that must be kept or
// dropped together: a message that is not a tool result, followed by the
// tool results that answer it.
type Unit struct {
	Start, End int
}

// Len returns the number of messages in the unit.
func (u Unit) Len() int { return u.End - u.Start }

// Units splits msgs into units. Every tool message joins the unit of the
// message before it, so in a valid conversation an assistant message with
// tool calls and all its results (parallel calls included) form one unit.
func Units(msgs []abi.Message) []Unit {
	return AppendUnits(make([]Unit, 0, len(msgs)), msgs)
}

// AppendUnits appends the units of msgs (see Units) to units, which a
// caller may reuse from one call to the next.
func AppendUnits(units []Unit, msgs []abi.Message) []Unit {
	first := len(units)
	for i := range msgs {
		if msgs[i].Role == abi.RoleTool && len(units) > first {
			units[len(units)-1].End = i + 1
			continue
		}
		units = append(units, Unit{Start: i, End: i + 1})
	}
	return units
}

// IsUnitStart reports whether a conversation may be cut before message i
// without separating a tool result from its call.
func IsUnitStart(msgs []abi.Message, i int) bool {
	return i >= len(msgs) || msgs[i].Role != abi.RoleTool
}

// UnitStartAtOrBefore returns the largest unit start <= i (0 if none).
func UnitStartAtOrBefore(msgs []abi.Message, i int) int {
	for i > 0 && !IsUnitStart(msgs, i) {
		i--
	}
	return i
}

// UnitStartAtOrAfter returns the smallest unit start >= i (len(msgs) if none).
func UnitStartAtOrAfter(msgs []abi.Message, i int) int {
	for i < len(msgs) && !IsUnitStart(msgs, i) {
		i++
	}
	return i
}

// LeadingSystem returns how many messages at the start are system or
// developer messages. They are never dropped or changed.
func LeadingSystem(msgs []abi.Message) int {
	n := 0
	for n < len(msgs) && msgs[n].IsSystem() {
		n++
	}
	return n
}

// StructureError says why a conversation is not valid and where.
type StructureError struct {
	// Index is the offending message's index, -1 for the whole conversation.
	Index  int
	Reason string
}

func (e *StructureError) Error() string {
	if e.Index < 0 {
		return "invalid conversation: " + e.Reason
	}
	return fmt.Sprintf("invalid conversation: message %d: %s", e.Index, e.Reason)
}

func structErr(i int, format string, args ...any) error {
	return &StructureError{Index: i, Reason: fmt.Sprintf(format, args...)}
}

// Check reports whether msgs is a conversation the providers accept:
//
//   - every role is system, developer, user, assistant or tool;
//   - an assistant message with k tool calls is followed by exactly k tool
//     messages whose tool_call_ids are the calls' ids in any order (pairing
//     is by position, so ids may repeat elsewhere in the conversation);
//   - every tool message is part of such a block;
//   - only the final block may be incomplete: the agent has made calls whose
//     results it has not sent yet.
//
// It returns a *StructureError or nil.
func Check(msgs []abi.Message) error {
	if len(msgs) == 0 {
		return &StructureError{Index: -1, Reason: "no messages"}
	}
	for i := 0; i < len(msgs); {
		m := &msgs[i]
		switch m.Role {
		case abi.RoleSystem, abi.RoleDeveloper, abi.RoleUser:
			if len(m.ToolCalls) > 0 {
				return structErr(i, "a %s message cannot have tool_calls", m.Role)
			}
			i++
		case abi.RoleTool:
			return structErr(i, "tool result %q does not follow an assistant message that called it", m.ToolCallID)
		case abi.RoleAssistant:
			next, err := checkToolBlock(msgs, i)
			if err != nil {
				return err
			}
			i = next
		case "":
			return structErr(i, "missing role")
		default:
			return structErr(i, "unknown role %q (want system, developer, user, assistant or tool)", m.Role)
		}
	}
	return nil
}

// checkToolBlock checks the assistant message at i and its tool results and
// returns the index after the block.
func checkToolBlock(msgs []abi.Message, i int) (int, error) {
	calls := msgs[i].ToolCalls
	pending := make(map[string]int, len(calls))
	for k, c := range calls {
		if c.ID == "" {
			return 0, structErr(i, "tool call %d has no id", k)
		}
		if c.Function.Name == "" {
			return 0, structErr(i, "tool call %q has no function name", c.ID)
		}
		pending[c.ID]++
	}
	j := i + 1
	for ; j < len(msgs) && j-i-1 < len(calls) && msgs[j].Role == abi.RoleTool; j++ {
		id := msgs[j].ToolCallID
		if pending[id] == 0 {
			return 0, structErr(j, "tool result %q does not answer a call of message %d", id, i)
		}
		pending[id]--
	}
	answered := j - i - 1
	if answered < len(calls) && j < len(msgs) {
		return 0, structErr(i, "%d of %d tool calls have no result before message %d", len(calls)-answered, len(calls), j)
	}
	if j < len(msgs) && msgs[j].Role == abi.RoleTool {
		return 0, structErr(j, "tool result %q is one more than the %d calls of message %d", msgs[j].ToolCallID, len(calls), i)
	}
	return j, nil
}
