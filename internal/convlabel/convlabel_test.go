package convlabel

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
)

func msg(role, text string) abi.Message {
	return abi.Message{Role: role, Content: abi.TextContent(text)}
}

func TestTitle(t *testing.T) {
	t.Parallel()
	long := "Refactor the tokenizer cache so that concurrent requests for the same model share one loaded vocabulary instead of three"
	parts := abi.Message{Role: abi.RoleUser, Content: abi.RawContent(json.RawMessage(`[{"type":"text","text":"\n  Fix   the\tflaky test\nthen run CI"}]`))}
	for _, tt := range []struct {
		name string
		msgs []abi.Message
		want string
	}{
		{"first line of the first user message", []abi.Message{msg("system", "You are a coder."), msg("user", "\n\n  Fix the parser  \nIt fails on empty input."), msg("user", "other")}, "Fix the parser"},
		{"content parts, spaces collapsed", []abi.Message{parts}, "Fix the flaky test"},
		{"cut on a word boundary", []abi.Message{msg("user", long)}, "Refactor the tokenizer cache so that concurrent requests for the same model…"},
		{"one long word cut mid-word", []abi.Message{msg("user", strings.Repeat("x", 100))}, strings.Repeat("x", 79) + "…"},
		{"runes, not bytes", []abi.Message{msg("user", strings.Repeat("é", 90))}, strings.Repeat("é", 79) + "…"},
		{"control characters dropped", []abi.Message{msg("user", "a\x00b\x1b[31mred")}, "a b [31mred"},
		{"no user message", []abi.Message{msg("system", "s"), msg("assistant", "hi")}, ""},
		{"blank user message", []abi.Message{msg("user", "  \n "), msg("user", "later")}, ""},
	} {
		if got := Title(tt.msgs); got != tt.want {
			t.Errorf("%s: Title = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	where := func(l string) string { return "header " + l }
	l, err := Parse("  My task ", " ci, night ,,ci", " ana ", where)
	if err != nil || l.Title != "My task" || fmt.Sprint(l.Tags) != "[ci night]" || l.User != "ana" {
		t.Fatalf("Parse = %+v, %v", l, err)
	}
	if l, err := Parse("", "", "", where); err != nil || l.Title != "" || l.Tags != nil || l.User != "" {
		t.Fatalf("empty Parse = %+v, %v", l, err)
	}
	for _, tt := range []struct{ title, tags, user, want string }{
		{strings.Repeat("t", MaxTitle+1), "", "", "header title: 201 bytes, at most 200"},
		{"a\tb", "", "", "header title must be printable UTF-8"},
		{"", "", "\xff", "header user must be printable UTF-8"},
		{"", "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", "", "header tags: 17 tags, at most 16"},
		{"", strings.Repeat("x", MaxTag+1), "", "header tags (each tag): 65 bytes, at most 64"},
	} {
		if _, err := Parse(tt.title, tt.tags, tt.user, where); err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q, %q, %q) error = %v, want %q", tt.title, tt.tags, tt.user, err, tt.want)
		}
	}
}
