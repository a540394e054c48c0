package eval

import (
	"reflect"
	"testing"

	"github.com/compactd/compactd/abi"
)

func msg(role, text string) abi.Message {
	return abi.Message{Role: role, Content: abi.TextContent(text)}
}

func call(id, name, args string) abi.Message {
	return abi.Message{Role: abi.RoleAssistant, ToolCalls: []abi.ToolCall{{ID: id, Type: "function", Function: abi.FunctionCall{Name: name, Arguments: args}}}}
}

func result(id, text string) abi.Message {
	m := msg(abi.RoleTool, text)
	m.ToolCallID = id
	return m
}

// probeConversation has four early messages (1-4) after the system
// prompt and four late ones.
func probeConversation() []abi.Message {
	return []abi.Message{
		msg("system", "You are a coding agent. Flight codes look like HAT170."),
		msg("user", "Fix the bug in src/parser/lexer.py. You must not modify the tests. My booking is ABC123."),
		call("c1", "bash", `{"cmd":"cat src/parser/lexer.py tests/test_lexer.py"}`),
		result("c1", "def tokenize_input(text):\n    raise ValueError: bad token at 1234\ncount = 56.78 of 4,500 in v1.2.3 for HAT170"),
		msg("assistant", "Calling self.parser.reset() next."),
		msg("user", "Never touch setup.cfg at all, it holds 98765."),
		call("c2", "bash", `{"cmd":"pytest"}`),
		result("c2", "FAILED tests/test_lexer.py::test_x"),
		msg("user", "Now run tests/test_lexer.py again."),
	}
}

func TestExtractProbes(t *testing.T) {
	got := ExtractProbes(probeConversation(), ProbeOptions{})
	want := []Probe{
		{Kind: ProbePath, Text: "src/parser/lexer.py", Message: 1, Word: true},
		{Kind: ProbeID, Text: "ABC123", Message: 1, Word: true},
		{Kind: ProbeConstraint, Text: "You must not modify the tests.", Message: 1},
		// tests/test_lexer.py (message 2) is in the last message: excluded.
		{Kind: ProbeFunction, Text: "tokenize_input", Message: 3, Word: true},
		{Kind: ProbeError, Text: "ValueError: bad token at 1234", Message: 3},
		// HAT170 is in the system prompt: excluded. 170 is part of it,
		// 1.2 part of a version.
		{Kind: ProbeNumber, Text: "1234", Message: 3, Word: true},
		{Kind: ProbeNumber, Text: "56.78", Message: 3, Word: true},
		{Kind: ProbeNumber, Text: "4,500", Message: 3, Word: true},
		{Kind: ProbeFunction, Text: "self.parser.reset", Message: 4, Word: true},
		// Messages 5-8 are not early: setup.cfg, 98765 and FAILED are not
		// probes.
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ExtractProbes:\n got  %+v\n want %+v", got, want)
	}

	capped := ExtractProbes(probeConversation(), ProbeOptions{PerKind: 1})
	kinds := map[string]int{}
	for _, p := range capped {
		kinds[p.Kind]++
	}
	for k, n := range kinds {
		if n > 1 {
			t.Errorf("PerKind 1: %d probes of kind %s", n, k)
		}
	}
	if kinds[ProbeNumber] != 1 || capped[len(capped)-1].Text != "1234" {
		t.Errorf("PerKind 1 should keep the earliest number: %+v", capped)
	}
	if ps := ExtractProbes(probeConversation()[:2], ProbeOptions{}); ps != nil {
		t.Errorf("a conversation of a system and one message has no early part: %+v", ps)
	}
}

func TestIsID(t *testing.T) {
	for w, want := range map[string]bool{
		"ZFA04Y": true, "HAT170": true, "mia_li_3668": true, "a1b2c3d": true, "credit_card_4421486": true,
		"address1": false, "utf8": false, "64-bit": false, "RSA-1024": false, "hello": false, "12345": false,
	} {
		if got := isID(w); got != want {
			t.Errorf("isID(%q) = %v, want %v", w, got, want)
		}
	}
}

func TestProbeIn(t *testing.T) {
	tests := []struct {
		probe Probe
		text  string
		want  bool
	}{
		{Probe{Text: "123", Word: true}, "a1234 x123 123.", true},
		{Probe{Text: "123", Word: true}, "a1234 x123 1234", false},
		{Probe{Text: "pyx_f", Word: true}, "__pyx_f_5numpy", false},
		{Probe{Text: "ABC123", Word: true}, `{"id":"ABC123"}`, true},
		{Probe{Text: "src/a.py", Word: true}, "see src/a.py:12", true},
		{Probe{Text: "src/a.py", Word: true}, "see src/a.pyc", false},
		{Probe{Text: "ValueError: bad tok"}, "raise ValueError: bad token", true},
	}
	for _, tt := range tests {
		if got := tt.probe.In(tt.text); got != tt.want {
			t.Errorf("%q in %q = %v, want %v", tt.probe.Text, tt.text, got, tt.want)
		}
	}
}

func TestRetain(t *testing.T) {
	conv := probeConversation()
	probes := ExtractProbes(conv, ProbeOptions{})
	// A compaction that dropped messages 1, 2 and 4.
	kept := []abi.Message{conv[0], conv[3], conv[5], conv[6], conv[7], conv[8]}
	r := Retain(probes, kept)
	if r.Probes != 9 || r.Retained != 5 {
		t.Errorf("retained %d of %d, want 5 of 9", r.Retained, r.Probes)
	}
	wantKinds := map[string][2]int{
		ProbePath: {1, 0}, ProbeID: {1, 0}, ProbeConstraint: {1, 0},
		ProbeFunction: {2, 1}, ProbeError: {1, 1}, ProbeNumber: {3, 3},
	}
	if !reflect.DeepEqual(r.ByKind, wantKinds) {
		t.Errorf("ByKind = %v, want %v", r.ByKind, wantKinds)
	}
	var lost []string
	for _, p := range r.Lost {
		lost = append(lost, p.Text)
	}
	if want := []string{"src/parser/lexer.py", "ABC123", "You must not modify the tests.", "self.parser.reset"}; !reflect.DeepEqual(lost, want) {
		t.Errorf("lost %q, want %q", lost, want)
	}
	// A summary that mentions a fact keeps it.
	summary := msg("user", "Summary: the user wants src/parser/lexer.py fixed (booking ABC123).")
	r2 := Retain(probes, append([]abi.Message{conv[0], summary}, kept[1:]...))
	if r2.Retained != 7 {
		t.Errorf("with a summary: retained %d, want 7", r2.Retained)
	}
	if full := Retain(probes, conv); full.Retained != full.Probes || full.Share() != 1 {
		t.Errorf("the uncompressed conversation must retain every probe: %d of %d", full.Retained, full.Probes)
	}
	if (Retention{}).Share() != 1 {
		t.Error("no probes: share must be 1")
	}
}
