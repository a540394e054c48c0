package convo

import (
	"fmt"

	"github.com/compactd/compactd/abi"
)

// CheckItems applies the ABI's rules for a result's items against its
// input (abi/README.md, "What the host checks", rules 6-9): refs in range
// and strictly increasing, the leading system messages kept first as refs,
// the final message kept as the last ref (or, when it is a tool result,
// replaced by the same result shortened: see FinalReplacement), at least
// one item.
func CheckItems(in []abi.Message, items []abi.Item) error {
	n := len(in)
	if len(items) == 0 {
		return &StructureError{Index: -1, Reason: "the result has no messages"}
	}
	last := -1
	for i, it := range items {
		if !it.IsRef() {
			continue
		}
		switch {
		case it.Ref < 0 || it.Ref >= n:
			return structErr(i, "ref %d is out of range (the input has %d messages)", it.Ref, n)
		case it.Ref <= last:
			return structErr(i, "ref %d does not follow ref %d (refs must be strictly increasing)", it.Ref, last)
		}
		last = it.Ref
	}
	for i := 0; i < LeadingSystem(in); i++ {
		if i >= len(items) || !items[i].IsRef() || items[i].Ref != i {
			return structErr(i, "leading system message %d must be kept first and unchanged (as {\"ref\": %d})", i, i)
		}
	}
	end := items[len(items)-1]
	switch {
	case end.IsRef() && end.Ref == n-1:
	case !end.IsRef() && n > 0 && last < n-1 && in[n-1].Role == abi.RoleTool:
		if err := FinalReplacement(&in[n-1], end.Message); err != nil {
			return structErr(len(items)-1, "the last item must be {\"ref\": %d} or the same tool result shortened: %v", n-1, err)
		}
	default:
		return structErr(len(items)-1, "the last item must be {\"ref\": %d}: the final message is never changed (except a tool result, shortened)", n-1)
	}
	return nil
}

// FinalReplacement reports whether m may stand in for orig, the input's
// final message, in a result: the one exception to "the final message is
// never changed" (abi/README.md, rule 8). It allows exactly a tool result
// compressed as it arrives: orig is a tool message, and m is a tool
// message with the same tool_call_id and name, no tool calls, and string
// content no longer (in bytes of text) than orig's text.
func FinalReplacement(orig, m *abi.Message) error {
	switch {
	case orig.Role != abi.RoleTool:
		return fmt.Errorf("the final message is a %s message, not a tool result", orig.Role)
	case m.Role != abi.RoleTool:
		return fmt.Errorf("a %s message replaces the final tool result", m.Role)
	case m.ToolCallID != orig.ToolCallID:
		return fmt.Errorf("tool_call_id %q replaces %q", m.ToolCallID, orig.ToolCallID)
	case m.Name != orig.Name:
		return fmt.Errorf("name %q replaces %q", m.Name, orig.Name)
	case len(m.ToolCalls) > 0:
		return fmt.Errorf("a tool result with tool_calls")
	case !m.Content.IsString():
		return fmt.Errorf("the new content is not a string")
	case len(m.Content.Text()) > len(orig.Content.Text()):
		return fmt.Errorf("the new content (%d bytes) is longer than the original (%d bytes)", len(m.Content.Text()), len(orig.Content.Text()))
	}
	return nil
}

// CheckBreakpoints checks a result's cache breakpoints against its n
// output messages: at most abi.MaxCacheBreakpoints distinct indices, each
// in range.
func CheckBreakpoints(n int, marks []int) error {
	if len(marks) > abi.MaxCacheBreakpoints {
		return &StructureError{Index: -1, Reason: fmt.Sprintf("%d cache breakpoints; at most %d are allowed", len(marks), abi.MaxCacheBreakpoints)}
	}
	for k, i := range marks {
		if i < 0 || i >= n {
			return &StructureError{Index: -1, Reason: fmt.Sprintf("cache breakpoint %d is out of range (the result has %d messages)", i, n)}
		}
		for _, j := range marks[:k] {
			if i == j {
				return &StructureError{Index: -1, Reason: fmt.Sprintf("cache breakpoint %d is given twice", i)}
			}
		}
	}
	return nil
}

// Resolve returns the output messages a result's items describe: refs
// resolved to the input messages, new messages as they are.
func Resolve(in []abi.Message, items []abi.Item) ([]abi.Message, error) {
	out := make([]abi.Message, len(items))
	for i, it := range items {
		if it.IsRef() {
			if it.Ref < 0 || it.Ref >= len(in) {
				return nil, structErr(i, "ref %d is out of range", it.Ref)
			}
			out[i] = in[it.Ref]
			continue
		}
		out[i] = *it.Message
	}
	return out, nil
}

// CheckCompactResult checks a whole result as the host does: CheckResult
// on its messages, then CheckBreakpoints on its cache breakpoints.
func CheckCompactResult(in []abi.Message, res *abi.CompactResult) error {
	if err := CheckResult(in, res.Messages); err != nil {
		return err
	}
	if err := CheckBreakpoints(len(res.Messages), res.CacheBreakpoints); err != nil {
		return fmt.Errorf("result: %w", err)
	}
	return nil
}

// CheckResult checks a result as the host does: CheckItems, then Check on
// the conversation it describes. Policy authors can run it in native tests.
func CheckResult(in []abi.Message, items []abi.Item) error {
	if err := CheckItems(in, items); err != nil {
		return fmt.Errorf("result: %w", err)
	}
	out, err := Resolve(in, items)
	if err != nil {
		return fmt.Errorf("result: %w", err)
	}
	if err := Check(out); err != nil {
		return fmt.Errorf("result: %w", err)
	}
	return nil
}
