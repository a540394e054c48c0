package host

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
)

func TestParseResult(t *testing.T) {
	for _, tt := range []struct {
		name, in, err string
	}{
		{"refs", `{"messages":[{"ref":0},{"ref":2}],"compacted":true,"summary":"s","entries_summarized":1,"rewritten":[1],"warnings":["w"],"state":{"a":[1]}}`, ""},
		{"new message", `{"messages":[{"ref":0},{"role":"user","content":"x\ny","tokens":5,"extra":1},{"ref":3}],"compacted":true}`, ""},
		{"nulls", `{"messages":null,"summary":null,"warnings":null,"rewritten":null,"state":null,"compacted":null}`, ""},
		{"unknown fields", `{"messages":[],"future":{"x":[1,2]}}`, ""},
		{"ref and role", `{"messages":[{"ref":0,"role":"user"}]}`, `both "ref" and "role"`},
		{"neither", `{"messages":[{"content":"x"}]}`, `neither "ref" nor "role"`},
		{"ref not integer", `{"messages":[{"ref":1.5}]}`, "want an integer"},
		{"ref string", `{"messages":[{"ref":"1"}]}`, "want an integer"},
		{"item not object", `{"messages":[1]}`, "want an object"},
		{"summary number", `{"messages":[],"summary":1}`, "summary: want a string"},
		{"not json", `{"messages":[`, "end of input"},
		{"trailing", `{"messages":[]} x`, "after the top-level value"},
		{"invalid utf8", "{\"messages\":[],\"summary\":\"\xff\"}", "invalid UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseResult([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want abi.CompactResult
			if err := json.Unmarshal([]byte(tt.in), &want); err != nil {
				t.Fatal(err)
			}
			if !sameResult(got, &want) {
				t.Errorf("parsed %+v, encoding/json %+v", got, want)
			}
		})
	}
}

// sameResult compares two results as the host uses them.
func sameResult(a, b *abi.CompactResult) bool {
	if a.Compacted != b.Compacted || a.Summary != b.Summary || a.EntriesSummarized != b.EntriesSummarized ||
		!sameSlice(a.Rewritten, b.Rewritten) || !sameSlice(a.Warnings, b.Warnings) ||
		!bytes.Equal(bytes.TrimSpace(a.State), bytes.TrimSpace(b.State)) && !(string(b.State) == "null" && a.State != nil) ||
		len(a.Messages) != len(b.Messages) {
		return false
	}
	for i := range a.Messages {
		x, y := a.Messages[i], b.Messages[i]
		if x.IsRef() != y.IsRef() || x.IsRef() && x.Ref != y.Ref {
			return false
		}
		if !x.IsRef() {
			p, q := x.Message, y.Message
			if p.Role != q.Role || p.Name != q.Name || p.ToolCallID != q.ToolCallID || p.Content.Text() != q.Content.Text() ||
				!reflect.DeepEqual(p.ToolCalls, q.ToolCalls) && len(p.ToolCalls)+len(q.ToolCalls) > 0 {
				return false
			}
		}
	}
	return true
}

// sameSlice compares slices, an empty one equal to nil.
func sameSlice[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzParseResult: what encoding/json decodes as a CompactResult (in
// valid UTF-8, keys in their exact case), parseResult decodes the same.
func FuzzParseResult(f *testing.F) {
	f.Add([]byte(`{"messages":[{"ref":0},{"role":"user","content":"x"},{"ref":2}],"compacted":true,"summary":"s","state":{"n":1}}`))
	f.Add([]byte(`{"messages":[{"ref":0}],"warnings":["a","b"],"rewritten":[1,2]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var want abi.CompactResult
		werr := json.Unmarshal(data, &want)
		got, err := parseResult(data)
		if werr != nil || !utf8.Valid(data) || bytes.ContainsAny(data, "ABCDEFGHIJKLMNOPQRSTUVWXYZ\\") {
			return
		}
		if err != nil {
			t.Fatalf("parseResult rejects what encoding/json reads: %v", err)
		}
		if !sameResult(got, &want) {
			t.Fatalf("parsed %+v, encoding/json %+v", got, want)
		}
	})
}

// TestMessageHashesOnTheWire: a fast-path plugin that asks for hashes gets
// one per message, equal for byte-identical messages and different
// otherwise; one that does not ask gets none.
func TestMessageHashesOnTheWire(t *testing.T) {
	t.Parallel()
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	conv, err := chat.Parse([]byte(`[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"hi"}]`))
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Conversation: conv, Config: json.RawMessage("{}")}
	for _, asks := range []bool{true, false} {
		p := &Plugin{engine: e, lazyPath: "fast", view: abi.ViewFull, desc: abi.Description{Hashes: asks}}
		got, err := abi.DecodeFastRequest(p.encode(req), nil)
		if err != nil {
			t.Fatal(err)
		}
		h := func(i int) [2]uint64 { return got.Messages[i].Hash }
		if !asks {
			if h(0) != ([2]uint64{}) {
				t.Fatalf("hashes sent to a plugin that did not ask: %v", h(0))
			}
			continue
		}
		if h(0) == ([2]uint64{}) || h(0) != h(2) || h(0) == h(1) {
			t.Fatalf("hashes %v %v %v: want equal for the same bytes, different otherwise, never zero", h(0), h(1), h(2))
		}
		for _, m := range conv.Messages {
			if m.Hash != ([2]uint64{}) {
				t.Fatal("the request's own messages were written")
			}
		}
	}
}
