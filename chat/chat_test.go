package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		n       int
		wantErr error
		errText string
	}{
		{"array", `[{"role":"user","content":"hi"}]`, 1, nil, ""},
		{"envelope", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"tools":[]}`, 1, nil, ""},
		{"empty input", ``, 0, ErrMalformed, "empty input"},
		{"not json", "[{\"role\":\"user\",\n \"content\": hi}]", 0, ErrMalformed, "line 2, column"},
		{"truncated", `[{"role":"user"`, 0, ErrMalformed, ""},
		{"scalar", `42`, 0, ErrMalformed, "want a JSON array"},
		{"object without messages", `{"model":"x"}`, 0, ErrMalformed, `no "messages"`},
		{"messages not array", `{"messages":{}}`, 0, ErrMalformed, "must be an array"},
		{"element not object", `["hi"]`, 0, ErrMalformed, "message 0 is not a JSON object"},
		{"bad content type", `[{"role":"user","content":7}]`, 0, ErrMalformed, "message 0"},
		{"messages twice", `{"messages":[],"messages":[]}`, 0, ErrMalformed, "twice"},
		{"not UTF-8", "[{\"role\":\"user\",\"content\":\"caf\xe9\"}]", 0, ErrMalformed, "not UTF-8"},
		// F9: content parts are checked against OpenAI's message format.
		{"parts", `[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"image_url","image_url":{"url":"data:,x","detail":"low"}},` +
			`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},{"type":"file","file":{"file_id":"f1"}}]},` +
			`{"role":"assistant","content":[{"type":"text","text":"b"},{"type":"refusal","refusal":"no"}]},{"role":"tool","content":[]}]`, 3, nil, ""},
		{"part not an object", `[{"role":"user","content":["hi"]}]`, 0, ErrMalformed, `message 0 (user): content part 0: want an object`},
		{"part without type", `[{"role":"user","content":[{"text":"hi"}]}]`, 0, ErrMalformed, `want a "type" string (text, image_url, input_audio, file)`},
		{"unknown part type", `[{"role":"user","content":[{"type":"video","video":{}}]}]`, 0, ErrMalformed, `type "video" is not a content part of user messages`},
		{"image in a system message", `[{"role":"system","content":[{"type":"image_url","image_url":{"url":"x"}}]}]`, 0, ErrMalformed, "system messages in OpenAI's format (they take text)"},
		{"refusal from a user", `[{"role":"user","content":[{"type":"refusal","refusal":"no"}]}]`, 0, ErrMalformed, "refusal"},
		{"text part without text", `[{"role":"user","content":[{"type":"text","text":7}]}]`, 0, ErrMalformed, `a text part needs a "text" string`},
		{"image without url", `[{"role":"user","content":[{"type":"image_url","image_url":"x"}]}]`, 0, ErrMalformed, `image_url part: "image_url" must be an object`},
		{"audio without format", `[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x"}}]}]`, 0, ErrMalformed, "input_audio"},
		{"file without data or id", `[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf"}}]}]`, 0, ErrMalformed, "file_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.errText)
				}
				return
			}
			if err != nil || c.Len() != tt.n {
				t.Fatalf("got %v, %v", c, err)
			}
		})
	}
}

func TestEncodeKeepsEnvelope(t *testing.T) {
	in := `{"model":"gpt-4o",  "messages": [{"role":"user","content":"a"}, {"role":"assistant","content":"b"}], "tools":[1]}`
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(c.Encode()); got != `{"model":"gpt-4o",  "messages": [{"role":"user","content":"a"},{"role":"assistant","content":"b"}], "tools":[1]}` {
		t.Fatalf("Encode = %s", got)
	}
	out := c.WithMessages(c.Raw[1:], c.Messages[1:])
	if got := string(out.Encode()); got != `{"model":"gpt-4o",  "messages": [{"role":"assistant","content":"b"}], "tools":[1]}` {
		t.Fatalf("Encode after WithMessages = %s", got)
	}
}

func TestValidate(t *testing.T) {
	c, _ := Parse([]byte(`[{"role":"tool","tool_call_id":"x","content":"r"}]`))
	err := c.Validate()
	var se *convo.StructureError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &se) || se.Index != 0 {
		t.Fatalf("err = %v", err)
	}
	// convo's reason already says "invalid conversation": once is enough.
	if want := "invalid conversation: message 0: "; !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "invalid conversation") != 1 {
		t.Errorf("err = %q, want it to start %q, once", err, want)
	}
}

func TestCallerTokensIgnored(t *testing.T) {
	c, _ := Parse([]byte(`[{"role":"user","content":"a","tokens":999}]`))
	if c.Messages[0].Tokens != 0 {
		t.Fatal("a caller's tokens field must not be trusted")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`[{"role":"user","content":"hi"}]`))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		_ = c.Validate()
		back, err := Parse(c.Encode())
		if err != nil || back.Len() != c.Len() {
			t.Fatalf("Encode does not parse back: %v", err)
		}
	})
}

// decodeOld is how messages were read before the scanner: encoding/json
// into abi.Message. The scanner must agree with it on every valid input.
func decodeOld(raw []byte) (abi.Message, error) {
	var m abi.Message
	err := json.Unmarshal(raw, &m)
	m.Tokens = 0
	return m, err
}

func sameMessage(a, b abi.Message) bool {
	if a.Role != b.Role || a.Name != b.Name || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) ||
		a.Content.IsNull() != b.Content.IsNull() || a.Content.IsString() != b.Content.IsString() || a.Content.Text() != b.Content.Text() {
		return false
	}
	for i := range a.ToolCalls {
		if a.ToolCalls[i] != b.ToolCalls[i] {
			return false
		}
	}
	return string(a.Content.Raw()) == string(b.Content.Raw()) || a.Content.IsString()
}

func TestScanMessageFields(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		err      string
	}{
		{"plain", `{"role":"user","content":"hello"}`, ""},
		{"escaped", `{"role":"user","content":"a\nb \"c\" \u00e9\ud83d\ude00"}`, ""},
		{"null content", `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}`, ""},
		{"parts", `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}`, ""},
		{"unknown fields", `{"role":"user","content":"x","cache_control":{"type":"ephemeral"},"extra":[1,2,{"a":null}]}`, ""},
		{"name and tool", `{"role":"tool","name":"bash","tool_call_id":"c1","content":"ok"}`, ""},
		{"nulls", `{"role":null,"name":null,"tool_call_id":null,"tool_calls":null,"content":null}`, ""},
		{"escaped key", `{"r\u006fle":"user","content":"x"}`, ""},
		{"tokens ignored", `{"role":"user","content":"x","tokens":99}`, ""},
		{"content number", `{"role":"user","content":7}`, "content: want a string, an array of parts or null, got a number"},
		{"content object", `{"role":"user","content":{}}`, "got an object"},
		{"role number", `{"role":1}`, "role: want a string"},
		{"tool_calls object", `{"role":"assistant","tool_calls":{}}`, "tool_calls: want an array"},
		{"tool call string", `{"role":"assistant","tool_calls":["x"]}`, "tool_calls[0]: want an object"},
		{"function string", `{"role":"assistant","tool_calls":[{"id":"a","function":"f"}]}`, "tool_calls[0].function: want an object"},
		{"arguments object", `{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":{}}}]}`, "arguments: want a string"},
		{"invalid utf8", "{\"role\":\"user\",\"content\":\"\xff\"}", "invalid UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromRaw([]json.RawMessage{json.RawMessage(tt.in)})
			if tt.err != "" {
				if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := decodeOld([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "escaped key" {
				want.Role = "user" // encoding/json matched "role" case-insensitively; so does nothing else here
			}
			if !sameMessage(c.Messages[0], want) {
				t.Errorf("scanned %+v, encoding/json %+v", c.Messages[0], want)
			}
		})
	}
}

// TestScanMatchesEncodingJSON parses every fixture conversation both ways.
func TestScanMatchesEncodingJSON(t *testing.T) {
	files, err := filepath.Glob("../testdata/conversations/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v", err)
	}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			c, err := Parse(line)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for i, raw := range c.Raw {
				want, err := decodeOld(raw)
				if err != nil {
					t.Fatal(err)
				}
				if !sameMessage(c.Messages[i], want) {
					t.Fatalf("%s: message %d: scanned %+v, encoding/json %+v", f, i, c.Messages[i], want)
				}
				n++
			}
		}
	}
	t.Logf("%d messages agree", n)
}

// FuzzScanMessage checks the scanner against encoding/json on single
// messages: whatever encoding/json decodes (in valid UTF-8), the scanner
// decodes the same way.
func FuzzScanMessage(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"hi"}`))
	f.Add([]byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}`))
	f.Add([]byte(`{"role":"user","content":[{"type":"text","text":"a\n"}],"x":[1,{"y":null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := FromRaw([]json.RawMessage{b})
		want, werr := decodeOld(b)
		if werr != nil || !utf8.Valid(b) || bytes.Contains(bytes.ToLower(b), []byte(`"tokens"`)) {
			return // encoding/json rejects it, or it differs on purpose (UTF-8, tokens, key case)
		}
		if err != nil {
			if strings.Contains(err.Error(), "content: want") {
				return // encoding/json's Content accepts any value starting with n (e.g. "nul")
			}
			t.Fatalf("scanner rejects what encoding/json reads: %v", err)
		}
		if !sameMessage(c.Messages[0], want) && !caseFolded(b) {
			t.Fatalf("scanned %+v, encoding/json %+v", c.Messages[0], want)
		}
	})
}

// caseFolded reports whether b has a key that only encoding/json's
// case-insensitive matching would take for a known field.
func caseFolded(b []byte) bool {
	lower := bytes.ToLower(b)
	for _, k := range []string{"role", "content", "name", "tool_call_id", "tool_calls", "id", "type", "function", "arguments"} {
		if bytes.Count(lower, []byte(`"`+k+`"`)) != bytes.Count(b, []byte(`"`+k+`"`)) {
			return true
		}
	}
	return bytes.Contains(b, []byte(`\u`)) || bytes.Contains(b, []byte(`\`))
}
