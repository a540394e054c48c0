package pdk

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
)

// stdlibString is what encoding/json writes for s without HTML escaping.
func stdlibString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(buf.String(), "\n")
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	tests := []string{
		"", "plain ascii text that is longer than eight bytes",
		"quote \" backslash \\ newline \n tab \t cr \r bs \b ff \f nul \x00 esc \x1b del \x7f",
		"<html> & </html>", "ünïcödé ✓ 日本語 🙂", "\u2028 and \u2029",
		"bad utf8 \xff\xfe end", "truncated \xe2\x82", "overlong \xc0\xaf", "surrogate \xed\xa0\x80",
		strings.Repeat("abcdefg\"", 20), strings.Repeat("x", 1000) + "\n",
	}
	for _, s := range tests {
		if got, want := string(appendString(nil, s)), stdlibString(s); got != want {
			t.Errorf("appendString(%q)\n got %s\nwant %s", s, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("hello \"world\"\n")
	f.Add("\xff\x00\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		got := appendString(nil, s)
		if want := stdlibString(s); string(got) != want {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("round trip changed %q to %q", s, back)
		}
	})
}

func TestAppendResultMatchesEncodingJSON(t *testing.T) {
	results := []*abi.CompactResult{
		{Messages: []abi.Item{abi.Ref(0), abi.Ref(3)}},
		{
			Messages: []abi.Item{
				abi.Ref(0),
				abi.New(abi.Message{Role: abi.RoleUser, Content: abi.TextContent("[3 earlier <entries> discarded]")}),
				abi.New(abi.Message{Role: abi.RoleAssistant, Name: "bot", ToolCalls: []abi.ToolCall{{ID: "c", Type: "function", Function: abi.FunctionCall{Name: "f", Arguments: `{"a":"<b>"}`}}}}),
				abi.New(abi.Message{Role: abi.RoleTool, ToolCallID: "c", Content: abi.RawContent(json.RawMessage(`[{"type":"text","text":"x"}]`))}),
				abi.New(abi.Message{Role: abi.RoleAssistant, Content: StringContent("made once: \"<ledger>\"\n\u2028 ünï")}),
				abi.Ref(7),
			},
			Compacted: true, Summary: "did \"things\"\n", EntriesSummarized: 4, Rewritten: []int{2, 5},
			State: json.RawMessage(`{"cycle":3,"tiers":["a"]}`), Warnings: []string{"w1", "w<2>"},
			CacheBreakpoints: []int{1, 4},
		},
	}
	for i, res := range results {
		got, err := appendResult(nil, res)
		if err != nil {
			t.Fatal(err)
		}
		want, err := marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("result %d\n got %s\nwant %s", i, got, want)
		}
	}
	if _, err := appendResult(nil, &abi.CompactResult{Messages: []abi.Item{abi.Ref(0)}, State: json.RawMessage(`{bad`)}); err == nil {
		t.Error("invalid state accepted")
	}
}

// TestStringContent: a StringContent's JSON is made once, is what the
// encoder would write for its text, and is what the encoder copies.
func TestStringContent(t *testing.T) {
	for _, s := range []string{"", "plain", "quote \" <tag> \n \x00 \xff ✓", strings.Repeat("ab\"", 40)} {
		c := StringContent(s)
		raw, ok := c.StringJSON()
		if !ok || string(raw) != stdlibString(s) || c.Text() != s {
			t.Fatalf("StringContent(%q): JSON %s (%v), text %q", s, raw, ok, c.Text())
		}
		// The encoder copies the JSON it holds: a Content whose JSON
		// differs from its text's (which callers must not make) shows it.
		m := abi.Message{Role: abi.RoleUser, Content: abi.StringContent(json.RawMessage(`"held"`), s)}
		if got := string(appendMessage(nil, &m)); !strings.Contains(got, `"content":"held"`) {
			t.Fatalf("the encoder did not copy the held JSON: %s", got)
		}
	}
}
