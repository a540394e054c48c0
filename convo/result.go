package convo

import (
	"fmt"

	"github.com/compactd/compactd/abi"
)

// CheckItems applies the ABI's rules for a result's items against its
// input (abi/README.md, "What the host checks", rules 6-9): refs in range
// and strictly increasing, the leading system messages kept first as refs,
// the final message kept as the last ref, at least one item.
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
	if end := items[len(items)-1]; !end.IsRef() || end.Ref != n-1 {
		return structErr(len(items)-1, "the last item must be {\"ref\": %d}: the final message is never changed", n-1)
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
