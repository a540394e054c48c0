package host

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeResultBreakpoints: a result's cache breakpoints are kept when
// valid and make the result invalid otherwise; a final tool result may
// come back shortened (the one exception to rule 8), nothing else.
func TestDecodeResultBreakpoints(t *testing.T) {
	in := testConversation(t) // 9 messages, the last a user message
	refs := `{"ref":0},{"ref":1},{"ref":7},{"ref":8}`
	tests := []struct {
		name, out string
		wantErr   string
		marks     []int
	}{
		{"valid marks", `{"messages":[` + refs + `],"cache_breakpoints":[1,3]}`, "", []int{1, 3}},
		{"no marks", `{"messages":[` + refs + `]}`, "", nil},
		{"out of range", `{"messages":[` + refs + `],"cache_breakpoints":[4]}`, "out of range", nil},
		{"negative", `{"messages":[` + refs + `],"cache_breakpoints":[-1]}`, "out of range", nil},
		{"twice", `{"messages":[` + refs + `],"cache_breakpoints":[1,1]}`, "twice", nil},
		{"four", `{"messages":[` + refs + `],"cache_breakpoints":[0,1,2,3]}`, "at most 3", nil},
		{"not integers", `{"messages":[` + refs + `],"cache_breakpoints":["1"]}`, "not a JSON CompactResult", nil},
		{"a changed final user message", `{"messages":[{"ref":0},{"ref":1},{"ref":7},{"role":"user","content":"Fix"}]}`, "final message is never changed", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, pe := decodeResult(in, []byte(tt.out))
			if tt.wantErr != "" {
				if pe == nil || !strings.Contains(pe.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", pe, tt.wantErr)
				}
				if !errors.Is(pe, ErrInvalidResult) && !errors.Is(pe, ErrInvalidOutput) {
					t.Fatalf("err kind %v", pe.Kind)
				}
				return
			}
			if pe != nil {
				t.Fatal(pe)
			}
			if got := resp.Result.CacheBreakpoints; len(got) != len(tt.marks) || len(got) > 0 && (got[0] != tt.marks[0] || got[1] != tt.marks[1]) {
				t.Fatalf("marks %v", got)
			}
			if resp.Refs[2] != 7 || len(resp.Refs) != 4 {
				t.Fatalf("refs %v", resp.Refs)
			}
		})
	}
	// A conversation ending with a tool result: it may come back shorter,
	// under the same tool_call_id and name, and in no other form.
	tool := testConversation(t)
	tool.Raw, tool.Messages = tool.Raw[:7], tool.Messages[:7] // ends with the result of c2
	okRes := `{"messages":[{"ref":0},{"ref":1},{"ref":4},{"ref":5},{"role":"tool","tool_call_id":"c2","content":"pkg a"}]}`
	resp, pe := decodeResult(tool, []byte(okRes))
	if pe != nil || len(resp.NewMessages) != 1 || resp.Refs[4] != -1 {
		t.Fatalf("shortened final tool result: %v %+v", pe, resp)
	}
	for _, bad := range []string{
		`{"messages":[{"ref":0},{"ref":1},{"ref":4},{"ref":5},{"role":"tool","tool_call_id":"c2","content":"package a, longer"}]}`,
		`{"messages":[{"ref":0},{"ref":1},{"ref":4},{"ref":5},{"role":"tool","tool_call_id":"c3","content":"x"}]}`,
		`{"messages":[{"ref":0},{"ref":1},{"ref":4},{"ref":5},{"ref":6},{"role":"tool","tool_call_id":"c2","content":"x"}]}`,
	} {
		if _, pe := decodeResult(tool, []byte(bad)); pe == nil || !errors.Is(pe, ErrInvalidResult) {
			t.Fatalf("%s: err = %v", bad, pe)
		}
	}
}
