package steps

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
)

func msg(role, text string) abi.Message {
	return abi.Message{Role: role, Content: abi.TextContent(text)}
}

func call(text string, names ...string) abi.Message {
	m := msg(abi.RoleAssistant, text)
	for k, n := range names {
		m.ToolCalls = append(m.ToolCalls, abi.ToolCall{ID: fmt.Sprintf("c%d", k), Type: "function", Function: abi.FunctionCall{Name: n, Arguments: "{}"}})
	}
	return m
}

func result(id, text string) abi.Message {
	m := msg(abi.RoleTool, text)
	m.ToolCallID = id
	return m
}

func TestEntries(t *testing.T) {
	conv := []abi.Message{
		msg(abi.RoleSystem, "sys"),           // 0
		msg(abi.RoleUser, "fix the bug"),     // 1
		call("looking", "bash"),              // 2
		result("c0", "file.go"),              // 3
		call("", "search", "bash", "search"), // 4
		result("c0", "r1"),                   // 5
		result("c1", "r2"),                   // 6
		result("c2", "r3"),                   // 7
		msg(abi.RoleDeveloper, "note"),       // 8
		msg(abi.RoleAssistant, "done"),       // 9
		msg(abi.RoleUser, "thanks"),          // 10
		call("", "submit"),                   // 11 (unanswered)
	}
	tests := []struct {
		name     string
		from, to int
		want     string
	}{
		{"whole conversation", 0, len(conv), "1-2 user [fix the bug]; 2-4 bash [file.go]; 4-8 search+bash [r1\nr2\nr3]; 9-10 reply [done]; 10-11 user [thanks]; 11-12 submit []"},
		{"a window", 2, 9, "2-4 bash [file.go]; 4-8 search+bash [r1\nr2\nr3]"},
		{"cut inside a unit", 3, 6, "3-4 tool [file.go]; 4-6 search+bash [r1]"},
		{"clamped", -5, 100, "1-2 user [fix the bug]; 2-4 bash [file.go]; 4-8 search+bash [r1\nr2\nr3]; 9-10 reply [done]; 10-11 user [thanks]; 11-12 submit []"},
		{"empty", 5, 5, ""},
		{"only system", 0, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []string
			for _, e := range Entries(conv, tt.from, tt.to) {
				parts = append(parts, fmt.Sprintf("%d-%d %s [%s]", e.Start, e.End, e.Action, e.Output))
			}
			if got := strings.Join(parts, "; "); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestActionCountsFirstSeenOrder(t *testing.T) {
	entries := []Entry{{Action: "search"}, {Action: "code"}, {Action: "search"}, {Action: "code"}, {Action: "code"}, {Action: "reply"}}
	got := fmt.Sprint(ActionCounts(entries))
	if want := "[{search 2} {code 3} {reply 1}]"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if got := strings.Join(Actions(entries), ","); got != "search,code,reply" {
		t.Fatalf("Actions = %s", got)
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"short", "hello", 10, "hello"},
		{"cut", "hello world", 5, "hello"},
		{"white space collapsed", "  a\n\n\tb   c  ", 0, "a b c"},
		{"no trailing space at the cut", "abcd efgh", 5, "abcd"},
		{"space counts", "ab cd", 4, "ab c"},
		{"runes, not bytes", "héllo wörld", 8, "héllo wö"},
		{"empty", " \n ", 3, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Clip(tt.in, tt.n)
			if got != tt.want {
				t.Fatalf("Clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
			if !utf8.ValidString(got) || (tt.n > 0 && utf8.RuneCountInString(got) > tt.n) {
				t.Fatalf("Clip(%q, %d) = %q: invalid or too long", tt.in, tt.n, got)
			}
		})
	}
}

func TestDeterministicSummary(t *testing.T) {
	seed := []Entry{
		{Action: "code", Output: "x = 1"},
		{Action: "search", Output: "found 3 files"},
		{Action: "code", Output: "Traceback: NameError"},
		{Action: "code", Output: ""},
		{Action: "search", Output: "docs/api.md:\n  line 4"},
		{Action: "code", Output: "ok"},
	}
	tests := []struct {
		name    string
		entries []Entry
		opts    SummaryOptions
		want    string
	}{
		{"seed format", seed, SummaryOptions{}, "Previous 6 steps: code(4), search(2) | Key outputs: x = 1; found 3 files; docs/api.md: line 4"},
		{"outputs cut", seed, SummaryOptions{MaxOutputChars: 4, MaxOutputs: 2}, "Previous 6 steps: code(4), search(2) | Key outputs: x =; foun"},
		{"no counts", seed[:2], SummaryOptions{OmitActionCounts: true}, "Key outputs: x = 1; found 3 files"},
		{"no outputs", []Entry{{Action: "code", Output: "ERROR"}, {Action: "code"}}, SummaryOptions{}, "Previous 2 steps: code(2)"},
		{"never empty", []Entry{{Action: "code", Output: "an error"}}, SummaryOptions{OmitActionCounts: true}, "Previous 1 steps"},
		{"nothing", nil, SummaryOptions{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DeterministicSummary(tt.entries, tt.opts); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func ExampleDeterministicSummary() {
	conv := []abi.Message{
		msg(abi.RoleSystem, "You are a coding agent."),
		msg(abi.RoleUser, "Fix the failing test."),
		call("", "bash"),
		result("c0", "--- FAIL: TestSplit"),
		call("", "bash"),
		result("c0", "ok  \tpkg/parse\t0.01s"),
		msg(abi.RoleAssistant, "Fixed."),
	}
	entries := Entries(conv, 0, len(conv))
	fmt.Println(DeterministicSummary(entries, SummaryOptions{MaxOutputChars: 40}))
	// Output:
	// Previous 4 steps: user(1), bash(2), reply(1) | Key outputs: Fix the failing test.; --- FAIL: TestSplit; ok pkg/parse 0.01s
}

// FuzzClip: any text comes out as valid UTF-8 on one line, within n
// characters, with no white space at its ends.
func FuzzClip(f *testing.F) {
	f.Add("hello\n\tworld", 5)
	f.Add("\xff\xfe a", 2)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := Clip(s, n)
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\n\t\r") || strings.TrimSpace(got) != got {
			t.Fatalf("Clip(%q, %d) = %q", s, n, got)
		}
		if n > 0 && utf8.RuneCountInString(got) > n {
			t.Fatalf("Clip(%q, %d) = %q: too long", s, n, got)
		}
	})
}
