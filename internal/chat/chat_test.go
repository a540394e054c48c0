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
