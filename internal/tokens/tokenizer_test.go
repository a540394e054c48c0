package tokens

import (
	"encoding/json"
	"testing"

	"github.com/compactd/compactd/abi"
)

// Counts published in OpenAI's cookbook ("How to count tokens with
// tiktoken"), produced by OpenAI's own tiktoken: not derived from the
// library under test.
func TestCountKnown(t *testing.T) {
	c := New(Options{})
	tests := []struct {
		name   string
		text   string
		o200k  int
		cl100k int
	}{
		{name: "empty", text: "", o200k: 0, cl100k: 0},
		{name: "hello world", text: "hello world", o200k: 2, cl100k: 2},
		{name: "cookbook tiktoken", text: "tiktoken is great!", o200k: 6, cl100k: 6},
		{name: "cookbook long word", text: "antidisestablishmentarianism", o200k: 6, cl100k: 6},
		{name: "cookbook arithmetic", text: "2 + 2 = 4", o200k: 7, cl100k: 7},
		// The encodings differ: o200k_base merges 生日 into one token.
		{name: "cookbook japanese", text: "お誕生日おめでとう", o200k: 8, cl100k: 9},
		// DEL (0x7f) is a token of its own in both vocabularies and part of
		// no other token, so each one is one token (see encoding.count).
		{name: "DEL", text: "\x7f", o200k: 1, cl100k: 1},
		{name: "DELs in text", text: "a\x7fb\x7f\x7f", o200k: 5, cl100k: 5},
	}
	o200k, cl100k := c.ForModel("gpt-4o"), c.ForModel("gpt-4")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := o200k.Count(tt.text); got != tt.o200k {
				t.Errorf("o200k_base Count(%q) = %d, want %d", tt.text, got, tt.o200k)
			}
			if got := cl100k.Count(tt.text); got != tt.cl100k {
				t.Errorf("cl100k_base Count(%q) = %d, want %d", tt.text, got, tt.cl100k)
			}
		})
	}
}

// cookbookMessages are the example messages of OpenAI's cookbook, for which
// the OpenAI API reported 124 prompt tokens on gpt-4o and gpt-4o-mini and
// 129 on gpt-4 and gpt-3.5-turbo (reply priming included).
var cookbookMessages = []abi.Message{
	{Role: "system", Content: abi.TextContent("You are a helpful, pattern-following assistant that translates corporate jargon into plain English.")},
	{Role: "system", Name: "example_user", Content: abi.TextContent("New synergies will help drive top-line growth.")},
	{Role: "system", Name: "example_assistant", Content: abi.TextContent("Things working well together will increase revenue.")},
	{Role: "system", Name: "example_user", Content: abi.TextContent("Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.")},
	{Role: "system", Name: "example_assistant", Content: abi.TextContent("Let's talk later when we're less busy about how to do better.")},
	{Role: "user", Content: abi.TextContent("This late pivot means we don't have time to boil the ocean for the client deliverable.")},
}

func TestCookbookPromptTokens(t *testing.T) {
	tests := []struct {
		name  string
		model string
		want  int
	}{
		{name: "gpt-4o", model: "gpt-4o", want: 124},
		{name: "gpt-4o-mini", model: "gpt-4o-mini", want: 124},
		{name: "gpt-4", model: "gpt-4", want: 129},
		{name: "gpt-3.5-turbo", model: "gpt-3.5-turbo", want: 129},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := clone(cookbookMessages)
			got := New(Options{}).ForModel(tt.model).CountMessages(msgs) + ReplyPrimingTokens
			if got != tt.want {
				t.Errorf("prompt tokens = %d, want %d (OpenAI API)", got, tt.want)
			}
		})
	}
}

// ceil6of5 is ceil(1.2 × n) in integer arithmetic.
func ceil6of5(n int) int { return (6*n + 4) / 5 }

func TestClaudeEstimate(t *testing.T) {
	c := New(Options{})
	claude, base := c.ForModel("claude-3-5-sonnet-20241022"), c.ForModel("gpt-4o")
	if claude.Exact() {
		t.Error("claude reports Exact")
	}
	texts := []struct {
		name string
		text string
	}{
		{name: "empty", text: ""},
		{name: "hello", text: "hello world"},       // 2 → 3
		{name: "five", text: "tiktoken is great!"}, // 6 → 8
		{name: "prose", text: "The quick brown fox jumps over the lazy dog, twice, and then once more."},
		{name: "code", text: "func main() {\n\tfor i := range 10 {\n\t\tfmt.Println(i * i)\n\t}\n}\n"},
	}
	for _, tt := range texts {
		t.Run(tt.name, func(t *testing.T) {
			n := base.Count(tt.text)
			if got, want := claude.Count(tt.text), ceil6of5(n); got != want {
				t.Errorf("claude Count = %d, want ceil(1.2 × %d) = %d", got, n, want)
			}
			m := abi.Message{Role: "user", Content: abi.TextContent(tt.text)}
			n = base.CountMessage(&m)
			if got, want := claude.CountMessage(&m), ceil6of5(n); got != want {
				t.Errorf("claude CountMessage = %d, want ceil(1.2 × %d) = %d", got, n, want)
			}
		})
	}
	// Exact multiples must not round up through floating-point error.
	for n := range 1000 {
		if got, want := claude.scaled(n), ceil6of5(n); got != want {
			t.Fatalf("scaled(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestCountMessage(t *testing.T) {
	c := New(Options{})
	parts := abi.RawContent(json.RawMessage(`[{"type":"text","text":"look at this"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},` +
		`{"type":"text","text":"and this"}]`))
	tests := []struct {
		name string
		msg  abi.Message
		want func(tok *Tokenizer) int
	}{
		{
			name: "plain user",
			msg:  abi.Message{Role: "user", Content: abi.TextContent("What is the weather in Paris?")},
			want: func(tok *Tokenizer) int {
				return 3 + tok.Count("user") + tok.Count("What is the weather in Paris?")
			},
		},
		{
			name: "named system",
			msg:  abi.Message{Role: "system", Name: "example_user", Content: abi.TextContent("Hi.")},
			want: func(tok *Tokenizer) int {
				return 3 + tok.Count("system") + tok.Count("Hi.") + 1 + tok.Count("example_user")
			},
		},
		{
			name: "null content",
			msg:  abi.Message{Role: "assistant"},
			want: func(tok *Tokenizer) int { return 3 + tok.Count("assistant") },
		},
		{
			name: "tool calls, empty content",
			msg: abi.Message{Role: "assistant", Content: abi.TextContent(""), ToolCalls: []abi.ToolCall{
				{ID: "call_1", Type: "function", Function: abi.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
				{ID: "call_2", Type: "function", Function: abi.FunctionCall{Name: "get_time", Arguments: `{}`}},
			}},
			want: func(tok *Tokenizer) int {
				return 3 + tok.Count("assistant") +
					tok.Count("get_weather") + tok.Count(`{"city":"Paris"}`) + 3 +
					tok.Count("get_time") + tok.Count(`{}`) + 3
			},
		},
		{
			name: "text and tool call",
			msg: abi.Message{Role: "assistant", Content: abi.TextContent("Checking."), ToolCalls: []abi.ToolCall{
				{ID: "c", Type: "function", Function: abi.FunctionCall{Name: "bash", Arguments: `{"command":"ls -la"}`}},
			}},
			want: func(tok *Tokenizer) int {
				return 3 + tok.Count("assistant") + tok.Count("Checking.") +
					tok.Count("bash") + tok.Count(`{"command":"ls -la"}`) + 3
			},
		},
		{
			name: "tool result, id not counted",
			msg:  abi.Message{Role: "tool", ToolCallID: "call_abcdefghijklmnopqrstuvwxyz", Content: abi.TextContent(`{"temp":21}`)},
			want: func(tok *Tokenizer) int { return 3 + tok.Count("tool") + tok.Count(`{"temp":21}`) },
		},
		{
			name: "parts: text joined, image not counted",
			msg:  abi.Message{Role: "user", Content: parts},
			want: func(tok *Tokenizer) int { return 3 + tok.Count("user") + tok.Count("look at this\nand this") },
		},
	}
	for _, model := range []string{"gpt-4o", "gpt-4"} {
		tok := c.ForModel(model)
		for _, tt := range tests {
			t.Run(model+"/"+tt.name, func(t *testing.T) {
				m := tt.msg
				want := tt.want(tok)
				if got := tok.CountMessage(&m); got != want {
					t.Errorf("CountMessage = %d, want %d", got, want)
				}
				if got := tok.CountMessage(&m); got != want { // cached
					t.Errorf("second CountMessage = %d, want %d", got, want)
				}
				if m.Tokens != 0 {
					t.Errorf("CountMessage set Tokens = %d", m.Tokens)
				}
				msgs := []abi.Message{tt.msg, tt.msg}
				if got := tok.CountMessages(msgs); got != 2*want || msgs[0].Tokens != want || msgs[1].Tokens != want {
					t.Errorf("CountMessages = %d, Tokens %d %d; want %d, %d each", got, msgs[0].Tokens, msgs[1].Tokens, 2*want, want)
				}
			})
		}
	}
}

func TestLazyVocabulary(t *testing.T) {
	c := New(Options{})
	tok := c.ForModel("gpt-4")
	tok.Count("")
	for i := range c.encs {
		if c.encs[i].codec != nil {
			t.Fatalf("%s loaded before first use", c.encs[i].name)
		}
	}
	tok.Count("hello")
	if c.encs[encCl100k].codec == nil || c.encs[encO200k].codec != nil {
		t.Errorf("after counting cl100k_base text: cl100k loaded %v, o200k loaded %v (want true, false)",
			c.encs[encCl100k].codec != nil, c.encs[encO200k].codec != nil)
	}
}

func clone(msgs []abi.Message) []abi.Message { return append([]abi.Message(nil), msgs...) }

// Any text, valid UTF-8 or not, counts without panicking, and a message's
// count follows the formula whether or not it was cached.
func FuzzCountMessage(f *testing.F) {
	for _, s := range []string{"", "hello world", "お誕生日おめでとう", "\xff\xfe bad utf-8", "<|endoftext|>", "    \n\n\t", `{"a":[1,2,3]}`} {
		f.Add(s, "get_weather", `{"city":"Paris"}`)
	}
	c := New(Options{CacheEntries: 64})
	f.Fuzz(func(t *testing.T, text, fn, args string) {
		for _, model := range []string{"gpt-4o", "gpt-4", "claude-3-5-sonnet"} {
			tok := c.ForModel(model)
			n := tok.Count(text)
			if n < 0 || (text == "") != (n == 0) {
				t.Fatalf("%s: Count(%q) = %d", model, text, n)
			}
			m := abi.Message{Role: "assistant", Content: abi.TextContent(text),
				ToolCalls: []abi.ToolCall{{Function: abi.FunctionCall{Name: fn, Arguments: args}}}}
			if tok.Exact() {
				want := 3 + tok.Count("assistant") + tok.Count(m.Text()) + tok.Count(fn) + tok.Count(args) + 3
				if got := tok.CountMessage(&m); got != want {
					t.Fatalf("%s: CountMessage = %d, want %d", model, got, want)
				}
			}
			msgs := []abi.Message{m, m}
			if got, one := tok.CountMessages(msgs), tok.CountMessage(&m); got != 2*one {
				t.Fatalf("%s: CountMessages = %d, want 2 × %d", model, got, one)
			}
		}
	})
}
