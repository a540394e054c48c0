package chat

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestMarkCacheBreakpoint(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"string content", `{"role":"user","content":"hi"}`,
			`{"role":"user","content":"hi","cache_control":{"type":"ephemeral"}}`},
		{"white space kept", "{ \"role\" : \"user\" ,\n \"content\" : \"hi\" \n}",
			"{ \"role\" : \"user\" ,\n \"content\" : \"hi\",\"cache_control\":{\"type\":\"ephemeral\"} \n}"},
		{"null content with tool calls", `{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}`,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}],"cache_control":{"type":"ephemeral"}}`},
		{"content blocks: the last one", `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"},{"type":"text","text":"go on"}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"},{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}`},
		{"content parts, content not last", `{"content":[{"type":"text","text":"a"}],"role":"user"}`,
			`{"content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],"role":"user"}`},
		{"empty block", `{"role":"user","content":[{}]}`,
			`{"role":"user","content":[{"cache_control":{"type":"ephemeral"}}]}`},
		{"empty array", `{"role":"user","content":[]}`,
			`{"role":"user","content":[],"cache_control":{"type":"ephemeral"}}`},
		{"last element not an object", `{"role":"user","content":["x"]}`,
			`{"role":"user","content":["x"],"cache_control":{"type":"ephemeral"}}`},
		{"caller's own mark on the message kept", `{"role":"user","content":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}`,
			`{"role":"user","content":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}`},
		{"caller's own mark on the block kept", `{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"1h"}}]}`,
			`{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"1h"}}]}`},
		{"unknown fields kept", `{"role":"tool","tool_call_id":"c","content":"r","x-extra":[1,{"a":2}]}`,
			`{"role":"tool","tool_call_id":"c","content":"r","x-extra":[1,{"a":2}],"cache_control":{"type":"ephemeral"}}`},
		{"empty object", `{}`, `{"cache_control":{"type":"ephemeral"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := json.RawMessage(tt.in)
			got, err := MarkCacheBreakpoint(in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if string(in) != tt.in {
				t.Fatal("the input changed")
			}
			if !json.Valid(got) {
				t.Fatal("not JSON")
			}
		})
	}
	for _, bad := range []string{``, `[]`, `{"a":}`, `{"a":1} x`, `{"content":[{"a":1]}`} {
		if _, err := MarkCacheBreakpoint(json.RawMessage(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestWithCacheBreakpoints(t *testing.T) {
	c, err := Parse([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	before := string(c.Encode())
	marked, err := c.WithCacheBreakpoints([]int{0, 2})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","messages":[{"role":"system","content":"s","cache_control":{"type":"ephemeral"}},{"role":"user","content":"u"},{"role":"assistant","content":"a","cache_control":{"type":"ephemeral"}}]}`
	if got := string(marked.Encode()); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if string(c.Encode()) != before {
		t.Fatal("the original conversation changed")
	}
	if _, err := c.WithCacheBreakpoints([]int{3}); err == nil {
		t.Fatal("an index out of range was accepted")
	}
	if same, _ := c.WithCacheBreakpoints(nil); same != c {
		t.Fatal("no marks should return the conversation itself")
	}
}

func FuzzMarkCacheBreakpoint(f *testing.F) {
	f.Add(`{"role":"user","content":"hi"}`)
	f.Add(`{"role":"user","content":[{"type":"text","text":"a"}]}`)
	f.Add(`{"content":[1,{"cache_control":0}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		out, err := MarkCacheBreakpoint(json.RawMessage(s))
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q marked as invalid JSON %q", s, out)
		}
		var m map[string]any
		if json.Unmarshal(out, &m) != nil {
			t.Fatalf("%q: the result is not an object: %q", s, out)
		}
	})
}
