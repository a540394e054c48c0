package proxy

import (
	"testing"

	"github.com/compactd/compactd/abi"
)

func TestPendingToolCall(t *testing.T) {
	t.Parallel()
	call := func(ids ...string) abi.Message {
		m := abi.Message{Role: abi.RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, abi.ToolCall{ID: id, Type: "function"})
		}
		return m
	}
	result := func(id string) abi.Message { return abi.Message{Role: abi.RoleTool, ToolCallID: id} }
	user := abi.Message{Role: abi.RoleUser}
	for _, tc := range []struct {
		name string
		msgs []abi.Message
		want bool
	}{
		{"no calls", []abi.Message{user, {Role: abi.RoleAssistant}, user}, false},
		{"answered", []abi.Message{user, call("a"), result("a"), user}, false},
		{"parallel, both answered", []abi.Message{user, call("a", "b"), result("b"), result("a")}, false},
		{"ends with a call", []abi.Message{user, call("a")}, true},
		{"one of two answered", []abi.Message{user, call("a", "b"), result("a")}, true},
	} {
		if got := pendingToolCall(tc.msgs); got != tc.want {
			t.Errorf("%s: pendingToolCall = %v, want %v", tc.name, got, tc.want)
		}
	}
}
