package abi

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
)

const fastSample = `{"abi":"1.0","config":{"n":3},"context":{"model":"gpt-4o","total_tokens":42,"state":{"k":[1,2]}},
 "messages":[
  {"role":"system","content":"be \"brief\"\n<ok>","tokens":5},
  {"role":"user","name":"alice","content":[{"type":"text","text":"hi"}],"tokens":3},
  {"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}},{"id":"b","type":"function","function":{"name":"g","arguments":""}}],"tokens":9},
  {"role":"tool","tool_call_id":"a","content":"","tokens":1},
  {"role":"tool","tool_call_id":"b","content":"ünïcode ✓","tokens":2}]}`

// TestFastRequestMatchesJSON: the fast encoding decodes to the same request
// as the JSON encoding, field for field.
func TestFastRequestMatchesJSON(t *testing.T) {
	var want CompactRequest
	if err := json.Unmarshal([]byte(fastSample), &want); err != nil {
		t.Fatal(err)
	}
	b := AppendFastRequest(nil, want.Config, &want.Context, want.Messages)
	got, err := DecodeFastRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Config) != string(want.Config) || !reflect.DeepEqual(got.Context, want.Context) || len(got.Messages) != len(want.Messages) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for i := range want.Messages {
		g, w := got.Messages[i], want.Messages[i]
		if g.Role != w.Role || g.Tokens != w.Tokens || g.Name != w.Name || g.ToolCallID != w.ToolCallID ||
			!reflect.DeepEqual(g.ToolCalls, w.ToolCalls) || g.Text() != w.Text() || g.Content.IsNull() != w.Content.IsNull() ||
			string(g.Content.Raw()) != string(w.Content.Raw()) {
			t.Errorf("message %d:\n got %+v %s\nwant %+v %s", i, g, g.Content.Raw(), w, w.Content.Raw())
		}
	}
}

func TestFastRequestRejectsGarbage(t *testing.T) {
	var req CompactRequest
	_ = json.Unmarshal([]byte(fastSample), &req)
	good := AppendFastRequest(nil, req.Config, &req.Context, req.Messages)
	for cut := 0; cut < len(good); cut++ {
		if _, err := DecodeFastRequest(good[:cut]); !errors.Is(err, ErrFastRequest) {
			t.Fatalf("truncated at %d: err = %v", cut, err)
		}
	}
	var empty Context
	huge := AppendFastRequest(nil, nil, &empty, nil)
	huge = append(huge[:len(huge)-4], 0xff, 0xff, 0xff, 0x7f)
	if _, err := DecodeFastRequest(huge); !errors.Is(err, ErrFastRequest) {
		t.Fatalf("absurd count: err = %v", err)
	}
	if _, err := DecodeFastRequest(append(good, 1)); !errors.Is(err, ErrFastRequest) {
		t.Fatalf("trailing byte: err = %v", err)
	}
}

// FuzzDecodeFastRequest: the decoder never panics, never allocates more
// than its input can describe, and what it accepts survives a round trip
// through the encoder field for field.
func FuzzDecodeFastRequest(f *testing.F) {
	var req CompactRequest
	_ = json.Unmarshal([]byte(fastSample), &req)
	f.Add(AppendFastRequest(nil, req.Config, &req.Context, req.Messages))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeFastRequest(b)
		if err != nil {
			if !errors.Is(err, ErrFastRequest) {
				t.Fatalf("error %v does not wrap ErrFastRequest", err)
			}
			return
		}
		again, err := DecodeFastRequest(AppendFastRequest(nil, got.Config, &got.Context, got.Messages))
		if err != nil {
			t.Fatalf("re-encoding a decoded request fails: %v", err)
		}
		if string(again.Config) != string(got.Config) || !reflect.DeepEqual(again.Context, got.Context) || len(again.Messages) != len(got.Messages) {
			t.Fatalf("round trip changed the request:\n got %+v\nthen %+v", got, again)
		}
		for i := range got.Messages {
			g, a := got.Messages[i], again.Messages[i]
			if g.Role != a.Role || g.Tokens != a.Tokens || g.Name != a.Name || g.ToolCallID != a.ToolCallID ||
				g.Text() != a.Text() || g.Content.IsNull() != a.Content.IsNull() || len(g.ToolCalls) != len(a.ToolCalls) ||
				len(g.ToolCalls) > 0 && !reflect.DeepEqual(g.ToolCalls, a.ToolCalls) {
				t.Fatalf("message %d changed in a round trip:\n got %+v\nthen %+v", i, g, a)
			}
		}
	})
}

// TestFastRequestSaturates: integers beyond a u32 are sent as the largest
// u32, never wrapped (a window of 2^32 must not reach a plugin as 0).
func TestFastRequestSaturates(t *testing.T) {
	ctx := Context{ContextWindow: 1 << 32, TotalTokens: -5}
	got, err := DecodeFastRequest(AppendFastRequest(nil, nil, &ctx, []Message{{Role: RoleUser, Tokens: 1<<32 + 7}}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Context.ContextWindow != math.MaxUint32 || got.Context.TotalTokens != 0 || got.Messages[0].Tokens != math.MaxUint32 {
		t.Errorf("context %+v, tokens %d", got.Context, got.Messages[0].Tokens)
	}
}
