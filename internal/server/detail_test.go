package server

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
)

// TestContentPrefix: a long string content is decoded only as far as a
// preview needs, whatever its escapes, and the preview is the beginning of
// the full text.
func TestContentPrefix(t *testing.T) {
	t.Parallel()
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

// TestChangedRowsUnequalSides: a summary that replaces several messages
// is not taken for a one-for-one rewrite, even when the messages after it
// happen to line up by role (deterministic on tau-bench did that, and the
// answer was a 500).
func TestChangedRowsUnequalSides(t *testing.T) {
	t.Parallel()
	msg := func(role, text string) string { return `{"role":"` + role + `","content":"` + text + `"}` }
	var in, out []string
	in = append(in, msg("system", "s"))
	out = append(out, msg("system", "s"))
	for i := 0; i < 8; i++ {
		role := []string{"user", "assistant"}[i%2]
		in = append(in, msg(role, "m"))
	}
	out = append(out, msg("user", "summary of 7"))
	out = append(out, in[8])
	for k := 0; k < 6; k++ { // more output, lined up by role with the removed input
		out = append(out, msg([]string{"user", "assistant"}[k%2], "x"))
	}
	ci, err := chat.Parse([]byte("[" + strings.Join(in, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	co, err := chat.Parse([]byte("[" + strings.Join(out, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	rows := changedRows(ci, co, 1, 8, 1, 2, map[int]bool{})
	if len(rows) != 1 || rows[0].Kind != client.RowSummarized || len(rows[0].Before) != 7 || len(rows[0].After) != 1 {
		t.Fatalf("rows %+v", rows)
	}
}
