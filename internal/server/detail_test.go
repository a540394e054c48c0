package server

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
)

// TestContentPrefix: a long string content is decoded only as far as a
// preview needs, whatever its escapes, and the preview is the beginning of
// the full text.
func TestContentPrefix(t *testing.T) {
	tests := []struct{ name, text string }{
		{"short", "hello"},
		{"ascii", strings.Repeat("line of output\n", 500)},
		{"escapes", strings.Repeat("a \"quoted\"\tword\\ ", 400)},
		{"unicode", strings.Repeat("héllo wörld 😀 ", 400)},
		{"control characters", strings.Repeat("\x01\x02 bell\x07 ", 600)},
	}
	for _, tt := range tests {
		for _, limit := range []int{1, 7, 160, 2000} {
			raw, _ := json.Marshal(tt.text)
			m := abi.Message{Role: "tool", Content: abi.RawContent(raw)}
			p := preview(&m, 3, limit)
			body := strings.TrimSuffix(p.Text, "…")
			if !strings.HasPrefix(tt.text, body) || !utf8.ValidString(p.Text) || len(body) > limit {
				t.Errorf("%s, limit %d: preview %.40q is not the text's beginning within the limit", tt.name, limit, p.Text)
			}
			if p.Cut != (len(tt.text) > limit) || p.Bytes != len(raw) {
				t.Errorf("%s, limit %d: cut %v, bytes %d (raw %d)", tt.name, limit, p.Cut, p.Bytes, len(raw))
			}
		}
	}
}
