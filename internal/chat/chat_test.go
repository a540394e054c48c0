package chat

import (
	"errors"
	"strings"
	"testing"
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
		{"unknown part type", `[{"role":"user","content":[{"type":"image","source":{}}]}]`, 0, ErrMalformed, `type "image" is not a content part of user messages`},
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
	if err := c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "message 0") {
		t.Fatalf("err = %v", err)
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
