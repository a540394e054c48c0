package host

import (
	"errors"
	"strings"
	"testing"

	"github.com/compactd/compactd/chat"
)

// TestDecodeResultContentParts: a message a plugin writes must be in
// OpenAI's format, as a request's messages must: content parts the role
// may carry, with their required fields; other fields are kept.
func TestDecodeResultContentParts(t *testing.T) {
	for _, tt := range []struct {
		name, content, role, want string
	}{
		{"text part", `[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]`, "user", ""},
		{"image for user", `[{"type":"image_url","image_url":{"url":"data:,"}}]`, "user", ""},
		{"anthropic image", `[{"type":"image","source":{}}]`, "user", `message 1 (user): content part 0: type "image" is not a content part of user messages`},
		{"image for assistant", `[{"type":"image_url","image_url":{"url":"x"}}]`, "assistant", `type "image_url" is not a content part of assistant messages`},
		{"text without text", `[{"type":"text"}]`, "user", `a text part needs a "text" string`},
		{"not an object", `["x"]`, "user", "want an object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := testConversation(t)
			out := `{"messages":[{"ref":0},{"role":"` + tt.role + `","content":` + tt.content + `},{"ref":` + itoa(in.Len()-1) + `}],"compacted":true}`
			resp, pe := decodeResult(in, []byte(out))
			switch {
			case tt.want == "" && pe != nil:
				t.Fatalf("refused: %v", pe)
			case tt.want == "" && !strings.Contains(string(resp.Conversation.Raw[1]), "image_url") && !strings.Contains(string(resp.Conversation.Raw[1]), "cache_control"):
				t.Fatalf("the part's fields were not kept: %s", resp.Conversation.Raw[1])
			case tt.want != "" && (pe == nil || !errors.Is(pe, ErrInvalidResult) || !strings.Contains(pe.Error(), tt.want)):
				t.Fatalf("got %v, want an invalid result containing %q", pe, tt.want)
			}
		})
	}
}

// TestDecodeResultPartsOfOtherFormats: a conversation converted from
// another format (Anthropic's chat form has bare {"type":"image"} parts)
// is not held to OpenAI's parts: it is converted back by its own rules.
func TestDecodeResultPartsOfOtherFormats(t *testing.T) {
	in := testConversation(t)
	converted := &chat.Conversation{Raw: in.Raw, Messages: in.Messages}
	out := `{"messages":[{"ref":0},{"role":"user","content":[{"type":"image"}]},{"ref":` + itoa(in.Len()-1) + `}],"compacted":true}`
	if _, pe := decodeResult(converted, []byte(out)); pe != nil {
		t.Fatalf("refused: %v", pe)
	}
	if _, pe := decodeResult(in, []byte(out)); pe == nil {
		t.Fatal("an OpenAI-format conversation took a part OpenAI's format does not have")
	}
}

// TestEncodeNewMessage: a new message's bytes are encoding/json's
// (marshalMessage), whether written directly (a summary: a plain role and
// a string content) or not.
func TestEncodeNewMessage(t *testing.T) {
	t.Parallel()
	for _, item := range []string{
		`{"role":"assistant","content":"[compactd ledger: a <b> & c]\nran: bash"}`,
		`{"role":"user","content":"caf\u00e9 \"quoted\" \\ tab\t é \u2028 </script>"}`,
		`{"role":"assistant","content":""}`,
		`{"role":"assistant","content":"x","name":"bot"}`,
		`{"role":"Assistant","content":"capitalised role"}`,
		`{"role":"assistant","content":[{"type":"text", "text":"parts, spaced"}]}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`,
		`{"role":"tool","content":"done","tool_call_id":"c1"}`,
	} {
		res, err := parseResult([]byte(`{"messages":[` + item + `]}`))
		if err != nil {
			t.Fatalf("%s: %v", item, err)
		}
		m := *res.Messages[0].Message
		got, err := encodeNewMessage(&m)
		if err != nil {
			t.Fatalf("%s: %v", item, err)
		}
		want, err := marshalMessage(&m)
		if err != nil {
			t.Fatalf("%s: %v", item, err)
		}
		if string(got) != string(want) {
			t.Errorf("%s:\n got %s\nwant %s", item, got, want)
		}
	}
}
