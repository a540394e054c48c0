package chat

import (
	"errors"
	"strings"
	"testing"
)

func TestAnthropicFormatRefused(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		feature string // "" means accepted
		index   int
	}{
		{name: "openai strings", in: `[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]`},
		{name: "openai text and image parts", in: `[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]`},
		{name: "openai tool call and result", in: `[{"role":"user","content":"ls"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"a.go"}]`},
		{name: "text blocks with cache_control (OpenAI-compatible gateways pass it)", in: `[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]`},
		{name: "anthropic tool_use", in: `[{"role":"user","content":"ls"},{"role":"assistant","content":[{"type":"text","text":"Listing."},{"type":"tool_use","id":"toolu_1","name":"ls","input":{}}]}]`,
			feature: `content block of type "tool_use"`, index: 1},
		{name: "anthropic tool_result", in: `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.go"}]}]`,
			feature: `content block of type "tool_result"`},
		{name: "anthropic thinking", in: `[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"…","signature":"x"}]}]`,
			feature: `content block of type "thinking"`, index: 1},
		{name: "anthropic image", in: `[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]`,
			feature: `content block of type "image"`},
		{name: "anthropic server tool", in: `[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"server_tool_use","id":"s1","name":"web_search","input":{}},{"type":"web_search_tool_result","tool_use_id":"s1","content":[]}]}]`,
			feature: `content block of type "server_tool_use"`, index: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if tt.feature == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *FormatError
			if !errors.Is(err, ErrUnsupportedFormat) || !errors.As(err, &fe) {
				t.Fatalf("err = %v, want ErrUnsupportedFormat", err)
			}
			if fe.Format != Anthropic || fe.Feature != tt.feature || fe.Index != tt.index {
				t.Errorf("got %+v, want %s at message %d", fe, tt.feature, tt.index)
			}
			if errors.Is(err, ErrMalformed) || errors.Is(err, ErrInvalid) {
				t.Errorf("a format error must not read as malformed or invalid: %v", err)
			}
			for _, want := range []string{"Anthropic Messages", tt.feature, "OpenAI chat messages"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not say %q", err, want)
				}
			}
		})
	}
	// The envelope shape gets the same check.
	if _, err := Parse([]byte(`{"model":"claude","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`)); !errors.Is(err, ErrUnsupportedFormat) {
		t.Errorf("envelope: err = %v", err)
	}
}
