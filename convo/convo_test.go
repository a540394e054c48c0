package convo

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
)

func msgs(t *testing.T, js string) []abi.Message {
	t.Helper()
	var m []abi.Message
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

const (
	sys   = `{"role":"system","content":"s"}`
	user  = `{"role":"user","content":"u"}`
	asst  = `{"role":"assistant","content":"a"}`
	call1 = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	call2 = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]}`
	res1  = `{"role":"tool","tool_call_id":"c1","content":"r1"}`
	res2  = `{"role":"tool","tool_call_id":"c2","content":"r2"}`
)

func conv(parts ...string) string { return "[" + strings.Join(parts, ",") + "]" }

func TestCheck(t *testing.T) {
	tests := []struct {
		name, conv, wantErr string
	}{
		{"plain chat", conv(sys, user, asst, user), ""},
		{"tool call answered", conv(sys, user, call1, res1, asst), ""},
		{"parallel calls in any order", conv(user, call2, res2, res1, asst), ""},
		{"ids reused later", conv(user, call1, res1, call1, res1), ""},
		{"unanswered call at the end", conv(user, call1), ""},
		{"partly answered parallel call at the end", conv(user, call2, res1), ""},
		{"system in the middle", conv(user, sys, asst), ""},
		{"empty", conv(), "no messages"},
		{"orphan tool result", conv(user, res1), "message 1: tool result \"c1\" does not follow"},
		{"unanswered call in the middle", conv(user, call1, user), "1 of 1 tool calls have no result before message 2"},
		{"wrong id", conv(user, call1, res2), "does not answer a call of message 1"},
		{"duplicate answer", conv(user, call2, res1, res1), "does not answer"},
		{"extra result", conv(user, call1, res1, res1), "one more than"},
		{"unknown role", conv(`{"role":"function","content":"x"}`), `unknown role "function"`},
		{"missing role", conv(`{"content":"x"}`), "missing role"},
		{"user with tool calls", conv(`{"role":"user","content":"x","tool_calls":[{"id":"a","type":"function","function":{"name":"f"}}]}`), "cannot have tool_calls"},
		{"call without id", conv(user, `{"role":"assistant","tool_calls":[{"id":"","type":"function","function":{"name":"f"}}]}`), "has no id"},
		{"call without name", conv(user, `{"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":""}}]}`), "no function name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(msgs(t, tt.conv))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestUnits(t *testing.T) {
	m := msgs(t, conv(sys, user, call2, res2, res1, asst, call1, res1))
	got := Units(m)
	want := []Unit{{0, 1}, {1, 2}, {2, 5}, {5, 6}, {6, 8}}
	if len(got) != len(want) {
		t.Fatalf("units = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("units = %v, want %v", got, want)
		}
	}
	if LeadingSystem(m) != 1 || UnitStartAtOrBefore(m, 4) != 2 || UnitStartAtOrAfter(m, 3) != 5 || !IsUnitStart(m, 8) {
		t.Fatal("unit helpers disagree with Units")
	}
}

func TestCheckResult(t *testing.T) {
	in := msgs(t, conv(sys, user, call1, res1, asst, user))
	marker := abi.New(abi.Message{Role: abi.RoleUser, Content: abi.TextContent("[dropped]")})
	tests := []struct {
		name    string
		items   []abi.Item
		wantErr string
	}{
		{"all refs", []abi.Item{abi.Ref(0), abi.Ref(1), abi.Ref(2), abi.Ref(3), abi.Ref(4), abi.Ref(5)}, ""},
		{"drop a whole unit", []abi.Item{abi.Ref(0), marker, abi.Ref(4), abi.Ref(5)}, ""},
		{"empty", nil, "no messages"},
		{"out of range", []abi.Item{abi.Ref(0), abi.Ref(9), abi.Ref(5)}, "out of range"},
		{"duplicate", []abi.Item{abi.Ref(0), abi.Ref(4), abi.Ref(4), abi.Ref(5)}, "strictly increasing"},
		{"system dropped", []abi.Item{abi.Ref(1), abi.Ref(5)}, "leading system message 0"},
		{"system replaced", []abi.Item{marker, abi.Ref(5)}, "leading system message 0"},
		{"final changed", []abi.Item{abi.Ref(0), abi.Ref(4), marker}, "final message"},
		{"split pair", []abi.Item{abi.Ref(0), abi.Ref(3), abi.Ref(5)}, "tool result"},
		{"call without result", []abi.Item{abi.Ref(0), abi.Ref(2), abi.Ref(4), abi.Ref(5)}, "no result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckResult(in, tt.items)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckAnthropic(t *testing.T) {
	tests := []struct {
		name, conv, wantErr string
	}{
		{"plain chat", conv(sys, user, asst, user), ""},
		{"tool loop", conv(sys, user, call1, res1, asst), ""},
		{"consecutive users merge", conv(user, user, asst), ""},
		{"consecutive assistants merge", conv(user, asst, asst, user), ""},
		{"tool result then user text", conv(user, call1, res1, user), ""},
		{"final assistant may be empty", conv(user, `{"role":"assistant","content":""}`), ""},
		{"assistant with calls and no text", conv(user, call1, res1), ""},
		{"content parts", conv(user, `{"role":"assistant","content":[{"type":"text","text":"x"}]}`), ""},
		{"assistant first", conv(sys, asst, user), "first message after the system prompt is the assistant's"},
		{"only system", conv(sys), "no message after the system prompt"},
		{"system in the middle", conv(user, sys, asst), "message 1: Anthropic: a system message after the conversation's start"},
		{"empty user text", conv(user, asst, `{"role":"user","content":""}`, asst), "message 2: Anthropic: a user message without content"},
		{"null content", conv(user, `{"role":"assistant","content":null}`, user), "without content"},
		{"empty parts", conv(user, `{"role":"assistant","content":[ ]}`, user), "without content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAnthropic(msgs(t, tt.conv))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestTaskAndPinned(t *testing.T) {
	tests := []struct {
		name       string
		conv       string
		task       int
		keep, drop int
	}{
		{"system then task", conv(sys, user, asst, user), 1, 2, 1},
		{"no system", conv(user, asst, user), 0, 1, 0},
		{"task is the final message", conv(sys, user), 1, 1, 1},
		{"no user at all", conv(sys, asst), -1, 1, 1},
		{"greeting before the task", conv(sys, asst, user, asst), 2, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := msgs(t, tt.conv)
			if got := Task(m); got != tt.task {
				t.Errorf("Task = %d, want %d", got, tt.task)
			}
			if got := Pinned(m, true); got != tt.keep {
				t.Errorf("Pinned(keep) = %d, want %d", got, tt.keep)
			}
			if got := Pinned(m, false); got != tt.drop {
				t.Errorf("Pinned(drop) = %d, want %d", got, tt.drop)
			}
		})
	}
}

func TestFinalReplacement(t *testing.T) {
	in := msgs(t, conv(user, call1, `{"role":"tool","tool_call_id":"c1","name":"f","content":"a long tool result"}`))
	ref := func(i int) abi.Item { return abi.Ref(i) }
	tool := func(id, name, text string) abi.Item {
		return abi.New(abi.Message{Role: abi.RoleTool, ToolCallID: id, Name: name, Content: abi.TextContent(text)})
	}
	tests := []struct {
		name    string
		items   []abi.Item
		wantErr string
	}{
		{"shortened", []abi.Item{ref(0), ref(1), tool("c1", "f", "short")}, ""},
		{"same length", []abi.Item{ref(0), ref(1), tool("c1", "f", "a long tool resulT")}, ""},
		{"longer", []abi.Item{ref(0), ref(1), tool("c1", "f", "a longer tool result!")}, "longer than the original"},
		{"other id", []abi.Item{ref(0), ref(1), tool("c2", "f", "x")}, `tool_call_id "c2" replaces "c1"`},
		{"other name", []abi.Item{ref(0), ref(1), tool("c1", "g", "x")}, "name"},
		{"not a tool message", []abi.Item{ref(0), ref(1), abi.New(abi.Message{Role: abi.RoleUser, Content: abi.TextContent("x")})}, "a user message replaces"},
		{"final ref and a new message after it", []abi.Item{ref(0), ref(1), ref(2), tool("c1", "f", "x")}, "must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckResult(in, tt.items)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
	// Only a tool result may be replaced.
	chat := msgs(t, conv(user, asst, user))
	if err := CheckItems(chat, []abi.Item{ref(0), ref(1), abi.New(abi.Message{Role: abi.RoleUser, Content: abi.TextContent("x")})}); err == nil {
		t.Fatal("a changed final user message was accepted")
	}
}

func TestCheckBreakpoints(t *testing.T) {
	tests := []struct {
		marks   []int
		wantErr string
	}{
		{nil, ""}, {[]int{0, 4, 2}, ""},
		{[]int{0, 1, 2, 3}, "at most 3"},
		{[]int{5}, "out of range"}, {[]int{-1}, "out of range"},
		{[]int{1, 1}, "twice"},
	}
	for _, tt := range tests {
		err := CheckBreakpoints(5, tt.marks)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%v: unexpected error: %v", tt.marks, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%v: err = %v, want %q", tt.marks, err, tt.wantErr)
		}
	}
}
