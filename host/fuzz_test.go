package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/convo"
)

// FuzzDecodeResult feeds arbitrary plugin output to the result decoder
// against a fixed conversation. It must never panic or change the input;
// it either refuses the output as invalid, or returns a valid conversation
// of UTF-8 JSON messages whose refs are the caller's bytes, ending with
// the caller's last message, that compactd would accept as a request
// (content parts in OpenAI's format).
func FuzzDecodeResult(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"ref":0},{"ref":1},{"ref":2},{"ref":3},{"ref":4},{"ref":5},{"ref":6},{"ref":7},{"ref":8}],"compacted":false}`,
		`{"messages":[{"ref":0},{"role":"user","content":"[7 entries dropped] <ok> & more"},{"ref":7},{"ref":8}],"compacted":true,"summary":"s","state":{"k":1},"warnings":["w"]}`,
		`{"messages":[{"ref":0},{"ref":999999}],"compacted":true}`,
		`{"messages":[{"ref":0},{"role":"tool","tool_call_id":"ghost","content":"x"},{"ref":8}]}`,
		`{"messages":[{"ref":0,"role":"user"},{"ref":8}]}`,
		"{\"messages\":[{\"ref\":0},{\"ref\":8}],\"summary\":\"\xff\"}",
		`{"messages":[{"ref":0},{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]},{"ref":8}],"compacted":true}`,
		`{"messages":[{"ref":0},{"role":"user","content":[{"type":"image","source":{}}]},{"ref":8}],"compacted":true}`,
		`{"messages":[{"ref":0},{"role":"tool","tool_call_id":"c1","content":[{"type":"image_url","image_url":{"url":"x"}}]},{"ref":8}]}`,
		`{"messages":[]}`,
		`not json`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		in := testConversation(t)
		before := snapshot(in)
		resp, pe := decodeResult(in, out)
		if !bytes.Equal(before, snapshot(in)) {
			t.Fatal("decoding changed the input conversation")
		}
		if pe != nil {
			if !errors.Is(pe, ErrInvalidOutput) && !errors.Is(pe, ErrInvalidResult) {
				t.Fatalf("refused with kind %v: %v", pe.Kind, pe)
			}
			return
		}
		c := resp.Conversation
		if err := convo.Check(c.Messages); err != nil {
			t.Fatalf("accepted an invalid conversation: %v", err)
		}
		if !utf8.Valid(out) {
			t.Fatal("accepted output that is not UTF-8")
		}
		if _, err := chat.FromRaw(c.Raw); err != nil {
			t.Fatalf("accepted output compactd would refuse as a request: %v", err)
		}
		if c.Len() == 0 || !bytes.Equal(c.Raw[c.Len()-1], in.Raw[in.Len()-1]) {
			t.Fatal("the last message is not the caller's")
		}
		newAt := map[int]bool{}
		for _, i := range resp.NewMessages {
			newAt[i] = true
		}
		for i, raw := range c.Raw {
			if !json.Valid(raw) || !utf8.Valid(raw) {
				t.Fatalf("message %d is not UTF-8 JSON: %q", i, raw)
			}
			if newAt[i] {
				var m abi.Message
				if err := json.Unmarshal(raw, &m); err != nil || m.Role != c.Messages[i].Role {
					t.Fatalf("new message %d does not decode to itself: %v", i, err)
				}
				continue
			}
			found := false
			for _, r := range in.Raw {
				found = found || bytes.Equal(r, raw)
			}
			if !found {
				t.Fatalf("kept message %d is not one of the caller's: %s", i, raw)
			}
		}
		if resp.Compacted != (len(resp.Dropped) > 0 || len(resp.NewMessages) > 0) {
			t.Fatalf("compacted=%v with %d dropped, %d new", resp.Compacted, len(resp.Dropped), len(resp.NewMessages))
		}
	})
}

// FuzzParseDescription feeds arbitrary describe output to the description
// decoder. It must never panic; what it accepts has a valid name, a short
// version, UTF-8 throughout, and defaults that satisfy the schema.
func FuzzParseDescription(f *testing.F) {
	for _, seed := range []string{
		`{"abi":"1.0","name":"lastn","version":"0.1.0","description":"Keeps the last n.","config_schema":{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"additionalProperties":false},"defaults":{"n":8},"exports":["should_compact"]}`,
		`{"abi":1,"name":"x","version":"1"}`,
		`{"abi":"2.0","name":"x","version":"1"}`,
		`{"abi":"1.0","name":"Bad Name","version":"1"}`,
		`{"abi":"1.0","name":"x","version":"1","config_schema":{"$ref":"http://example.com/s.json"}}`,
		`{"abi":"1.0","name":"x","version":"1","config_schema":{"type":"object","properties":{"n":{"type":"integer"}}},"defaults":{"n":"eight"}}`,
		`{"abi":"1.0","name":"x","version":"1","config_schema":{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}}`,
		"{\"abi\":\"1.0\",\"name\":\"x\",\"version\":\"1\",\"description\":\"caf\xe9\"}",
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		desc, schema, pe := parseDescription(out)
		if pe != nil {
			if pe.Kind == nil || pe.Detail == "" {
				t.Fatalf("refused without a kind or detail: %+v", pe)
			}
			return
		}
		if !utf8.Valid(out) || len(out) > abi.MaxDescribeBytes {
			t.Fatal("accepted output that is not UTF-8 or too large")
		}
		if !abi.ValidName(desc.Name) || desc.Version == "" || len(desc.Version) > maxVersionBytes || !abi.Compatible(abi.Version, desc.ABI) {
			t.Fatalf("accepted %+v", desc)
		}
		if schema == nil {
			t.Fatal("accepted without a schema")
		}
		if _, err := schema.Resolve(); err != nil {
			t.Fatalf("accepted defaults that do not resolve: %v", err)
		}
	})
}
