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
		{"a long string content, its first line only", []abi.Message{{Role: abi.RoleUser, Content: abi.RawContent(longRaw(strings.Repeat(`a \\ "b" é`, 20) + "\nmore"))}}, Cut(strings.Repeat(`a \\ "b" é`, 20), TitleLength)},
		{"no user message", []abi.Message{msg("system", "s"), msg("assistant", "hi")}, ""},
		{"blank user message", []abi.Message{msg("user", "  \n "), msg("user", "later")}, ""},
	} {
		if got := Title(tt.msgs); got != tt.want {
			t.Errorf("%s: Title = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// longRaw is s and a long tail, as a JSON string (an escape falls across
// every possible cut of the prefix leadingText decodes in one of the cases).
func longRaw(s string) json.RawMessage {
	raw, _ := json.Marshal(s + strings.Repeat("\\\"é\n", 2000))
	return raw
}

func TestTitleCutsAcrossEscapes(t *testing.T) {
	t.Parallel()
	for pad := 0; pad < 16; pad++ {
		text := strings.Repeat("x", pad) + " title\n" + strings.Repeat(`\"é😀`, 600)
		raw, _ := json.Marshal(text)
		if got := leadingText(abi.RawContent(raw)); !strings.HasPrefix(text, got) || len(got) < prefixBytes/4 {
			t.Errorf("pad %d: leadingText is %d bytes, not a long prefix of the text", pad, len(got))
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

// BenchmarkTitle: a task whose first user message is 256 KiB of JSON
// string (a pasted file), as /v1/compact and the proxy read it.
func BenchmarkTitle(b *testing.B) {
	text := "Fix the parser\n" + strings.Repeat("line of a pasted file with \"quotes\" and \\ slashes\n", 5000)
	raw, _ := json.Marshal(text)
	msgs := []abi.Message{msg("system", "s"), {Role: abi.RoleUser, Content: abi.RawContent(raw)}}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if Title(msgs) != "Fix the parser" {
			b.Fatal("wrong title")
		}
	}
}
