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
	got, err := DecodeFastRequest(b, nil)
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
		if _, err := DecodeFastRequest(good[:cut], nil); !errors.Is(err, ErrFastRequest) {
			t.Fatalf("truncated at %d: err = %v", cut, err)
		}
	}
	var empty Context
	huge := AppendFastRequest(nil, nil, &empty, nil)
	huge = append(huge[:len(huge)-4], 0xff, 0xff, 0xff, 0x7f)
	if _, err := DecodeFastRequest(huge, nil); !errors.Is(err, ErrFastRequest) {
		t.Fatalf("absurd count: err = %v", err)
	}
	if _, err := DecodeFastRequest(append(good, 1), nil); !errors.Is(err, ErrFastRequest) {
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
		got, err := DecodeFastRequest(b, nil)
		if err != nil {
			if !errors.Is(err, ErrFastRequest) {
				t.Fatalf("error %v does not wrap ErrFastRequest", err)
			}
			return
		}
		again, err := DecodeFastRequest(AppendFastRequest(nil, got.Config, &got.Context, got.Messages), nil)
		if err != nil || len(again.Messages) != len(got.Messages) {
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

// mapSource serves contents from a request's full messages.
type mapSource struct {
	msgs  []Message
	calls int
}

func (s *mapSource) Content(i int) ([]byte, bool) {
	s.calls++
	if i < 0 || i >= len(s.msgs) {
		return nil, false
	}
	c := s.msgs[i].Content
	if c.IsString() {
		return []byte(c.Text()), true
	}
	return c.Raw(), true
}

// TestFastRequestHeaders: the header view (CDF2) leaves contents out,
// gives their kind and size, and reads them through the source.
func TestFastRequestHeaders(t *testing.T) {
	var want CompactRequest
	if err := json.Unmarshal([]byte(fastSample), &want); err != nil {
		t.Fatal(err)
	}
	full := AppendFastRequest(nil, want.Config, &want.Context, want.Messages)
	b := AppendFastRequestView(nil, want.Config, &want.Context, want.Messages, ViewHeaders)
	if string(b[:4]) != "CDF2" || len(b) >= len(full) {
		t.Fatalf("header view: %q..., %d bytes (full view %d)", b[:4], len(b), len(full))
	}
	src := &mapSource{msgs: want.Messages}
	got, err := DecodeFastRequest(b, src)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want.Messages {
		g := got.Messages[i]
		if g.Content.IsNull() != w.Content.IsNull() || g.Content.IsString() != w.Content.IsString() {
			t.Fatalf("message %d: kind differs", i)
		}
		if !w.Content.IsNull() && g.Content.Omitted() == "" {
			t.Fatalf("message %d: content sent in a header view", i)
		}
		if w.Content.IsString() && g.Content.Len() != len(w.Content.Text()) {
			t.Errorf("message %d: size %d, want %d", i, g.Content.Len(), len(w.Content.Text()))
		}
	}
	if src.calls != 0 {
		t.Fatalf("%d contents fetched before any was read", src.calls)
	}
	for i, w := range want.Messages {
		if g := got.Messages[i]; g.Text() != w.Text() || string(g.Content.Raw()) != string(w.Content.Raw()) && w.Content.IsString() == false {
			t.Errorf("message %d: fetched %q, want %q", i, g.Text(), w.Text())
		}
	}
	// The JSON form of the header view decodes to the same omitted
	// contents, connected by ConnectContents.
	var fromJSON CompactRequest
	js := `{"messages":[{"role":"user","content":{"omitted":"text","size":2}},{"role":"user","content":{"omitted":"parts","size":30}}]}`
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatal(err)
	}
	fromJSON.ConnectContents(&mapSource{msgs: []Message{{Content: TextContent("hi")}, {Content: RawContent(json.RawMessage(`[{"type":"text","text":"x"}]`))}}})
	if fromJSON.Messages[0].Text() != "hi" || fromJSON.Messages[1].Text() != "x" || fromJSON.Messages[0].Content.Len() != 2 {
		t.Errorf("JSON header view: %q %q", fromJSON.Messages[0].Text(), fromJSON.Messages[1].Text())
	}
	var bad Content
	if err := json.Unmarshal([]byte(`{"omitted":"image"}`), &bad); err == nil {
		t.Error("unknown omitted kind accepted")
	}
}

// TestFastRequestSaturates: integers beyond a u32 are sent as the largest
// u32, never wrapped (a window of 2^32 must not reach a plugin as 0).
func TestFastRequestSaturates(t *testing.T) {
	ctx := Context{ContextWindow: 1 << 32, TotalTokens: -5}
	got, err := DecodeFastRequest(AppendFastRequest(nil, nil, &ctx, []Message{{Role: RoleUser, Tokens: 1<<32 + 7}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Context.ContextWindow != math.MaxUint32 || got.Context.TotalTokens != 0 || got.Messages[0].Tokens != math.MaxUint32 {
		t.Errorf("context %+v, tokens %d", got.Context, got.Messages[0].Tokens)
	}
}

// TestFastDecision: the host's decision follows the messages, decodes back
// to Context.Compact, and a truncated trailer is an error.
func TestFastDecision(t *testing.T) {
	t.Parallel()
	msgs := []Message{{Role: RoleUser, Tokens: 3, Content: TextContent("hi")}}
	ctx := &Context{Model: "gpt-4o"}
	plain := AppendFastRequest(nil, json.RawMessage("{}"), ctx, msgs)
	for _, tt := range []struct {
		name string
		d    *Decision
	}{
		{"none", nil},
		{"usage", &Decision{Reason: ReasonUsage, TargetTokens: 64000}},
		{"manual without a target", &Decision{Reason: ReasonManual}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := AppendFastDecision(append([]byte(nil), plain...), tt.d)
			req, err := DecodeFastRequest(b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := req.Context.Compact; (got == nil) != (tt.d == nil) || got != nil && *got != *tt.d {
				t.Fatalf("decoded %+v, want %+v", got, tt.d)
			}
			for cut := len(plain) + 1; cut < len(b); cut++ {
				if _, err := DecodeFastRequest(b[:cut], nil); err == nil {
					t.Fatalf("a decision cut at byte %d of %d decoded", cut, len(b))
				}
			}
		})
	}
	if _, err := DecodeFastRequest(append(append([]byte(nil), plain...), 2), nil); err == nil {
		t.Fatal("a trailing byte other than the decision's tag decoded")
	}
}

// TestFastHashes: the messages' hashes follow the decision (or the
// messages), one per message, and decode into Message.Hash.
func TestFastHashes(t *testing.T) {
	t.Parallel()
	msgs := []Message{{Role: RoleUser, Content: TextContent("a")}, {Role: RoleAssistant, Content: TextContent("b")}}
	hashes := [][2]uint64{{1, 2}, {3, 4}}
	for _, d := range []*Decision{nil, {Reason: ReasonPreflight, TargetTokens: 7}} {
		b := AppendFastRequest(nil, json.RawMessage("{}"), &Context{}, msgs)
		b = AppendFastDecision(b, d)
		b = AppendFastHashes(b, hashes)
		req, err := DecodeFastRequest(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if req.Messages[0].Hash != hashes[0] || req.Messages[1].Hash != hashes[1] || (req.Context.Compact == nil) != (d == nil) {
			t.Fatalf("decoded %v %v, decision %+v", req.Messages[0].Hash, req.Messages[1].Hash, req.Context.Compact)
		}
		if _, err := DecodeFastRequest(b[:len(b)-1], nil); err == nil {
			t.Fatal("a truncated hash decoded")
		}
	}
	b := AppendFastHashes(AppendFastRequest(nil, json.RawMessage("{}"), &Context{}, msgs), hashes[:1])
	if _, err := DecodeFastRequest(b, nil); err == nil {
		t.Fatal("one hash for two messages decoded")
	}
}

// BenchmarkDecodeFastRequest decodes a 30-message request in the header
// view, as a guest does on every call; a Go guest pays most for it (run
// it as one: see internal/wasmbuild/wasmexec).
func BenchmarkDecodeFastRequest(b *testing.B) {
	msgs := make([]Message, 30)
	for i := range msgs {
		m := &msgs[i]
		m.Role, m.Tokens = []string{RoleUser, RoleAssistant, RoleTool, RoleAssistant}[i%4], 90
		m.Content = Content{text: "I'd like to change my flight to the one on May 17th, please.", hasText: true}
		switch i % 4 {
		case 1:
			m.ToolCalls = []ToolCall{{ID: "call_1", Type: "function", Function: FunctionCall{Name: "get_reservation_details", Arguments: `{"reservation_id":"4WQ150"}`}}}
		case 2:
			m.ToolCallID = "call_1"
		}
	}
	ctx := Context{Model: "gpt-4o", Encoding: "o200k_base", ContextWindow: 128000}
	in := AppendFastHashes(AppendFastRequestView(nil, json.RawMessage(`{}`), &ctx, msgs, ViewHeaders), make([][2]uint64, len(msgs)))
	// fresh allocates every request; reused is a guest's FastDecoder.
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeFastRequest(in, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reused", func(b *testing.B) {
		var d FastDecoder
		for b.Loop() {
			if _, err := d.Decode(in, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFastDecoderReuse: a decoder that decoded other requests before
// decodes each as a fresh one does, leaving nothing of the earlier ones
// (hashes, tool calls, left-out contents, a decision), and a message's
// tool calls cannot grow into the next message's.
func TestFastDecoderReuse(t *testing.T) {
	t.Parallel()
	var sample CompactRequest
	if err := json.Unmarshal([]byte(fastSample), &sample); err != nil {
		t.Fatal(err)
	}
	full := AppendFastRequest(nil, sample.Config, &sample.Context, sample.Messages)
	hashes := make([][2]uint64, len(sample.Messages))
	for i := range hashes {
		hashes[i] = [2]uint64{uint64(i) + 1, 7}
	}
	decided := sample.Context
	decided.Compact = &Decision{Reason: "over budget", TargetTokens: 10}
	headers := AppendFastHashes(AppendFastDecision(AppendFastRequestView(nil, sample.Config, &decided, sample.Messages, ViewHeaders), decided.Compact), hashes)
	// Fewer messages, none with tool calls, no hashes: what the larger
	// requests left must not show.
	plain := []Message{{Role: RoleUser, Content: StringContent([]byte(`"again"`), "again"), Tokens: 2}, {Role: RoleAssistant, Tokens: 1}}
	small := AppendFastRequest(nil, json.RawMessage(`{}`), &Context{Model: "m"}, plain)
	many := make([]Message, 40)
	for i := range many {
		many[i] = Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Type: "function", Function: FunctionCall{Name: "n", Arguments: "{}"}}}}
	}
	large := AppendFastRequest(nil, nil, &Context{}, many)

	var d FastDecoder
	for _, order := range [][]string{{"full", "small", "headers", "large", "small", "full"}, {"large", "headers", "small"}} {
		for _, name := range order {
			in := map[string][]byte{"full": full, "small": small, "headers": headers, "large": large}[name]
			want, err := DecodeFastRequest(in, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.Decode(in, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v, %s: reused decoder gave\n %+v\nwant\n %+v", order, name, got, want)
			}
			for i := range got.Messages {
				if calls := got.Messages[i].ToolCalls; cap(calls) != len(calls) {
					t.Fatalf("%s: message %d's tool calls have room for %d more", name, i, cap(calls)-len(calls))
				}
			}
			if cap(got.Messages) != len(got.Messages) {
				t.Fatalf("%s: messages have room for %d more", name, cap(got.Messages)-len(got.Messages))
			}
		}
	}
}

// TestFastRequestSize: the size an encoder makes room for is the header
// view's exact size and at least the full view's, with room for both
// trailers.
func TestFastRequestSize(t *testing.T) {
	t.Parallel()
	var req CompactRequest
	if err := json.Unmarshal([]byte(fastSample), &req); err != nil {
		t.Fatal(err)
	}
	long := make([]Message, 0, 40)
	for i := 0; i < 20; i++ {
		long = append(long,
			Message{Role: RoleAssistant, Content: TextContent("é\"\n"), ToolCalls: []ToolCall{{ID: "c", Type: "function",
				Function: FunctionCall{Name: "edit", Arguments: `{"path":"a.go","text":"` + string(make([]byte, 100*i)) + `"}`}}}},
			Message{Role: RoleTool, ToolCallID: "c", Content: RawContent(json.RawMessage(`[{"type":"text","text":"ok"}]`))})
	}
	// Texts the host decoded (TextContent, as its parser makes them)
	// and arrays of parts are counted exactly in the full view too.
	cases := []struct {
		name  string
		msgs  []Message
		ctx   Context
		exact bool
	}{
		{"sample", req.Messages, req.Context, false},
		{"empty", nil, Context{}, true},
		{"tool calls", long, Context{Model: "m", ConversationID: "id", State: json.RawMessage(`{"s":1}`)}, true},
	}
	for _, c := range cases {
		for _, view := range []string{ViewFull, ViewHeaders} {
			got := len(AppendFastRequestView(nil, req.Config, &c.ctx, c.msgs, view))
			size := FastRequestSize(req.Config, &c.ctx, c.msgs, view)
			if view == ViewHeaders && size != got || size < got || c.exact && size != got {
				t.Errorf("%s, %s view: size %d, encoding %d bytes", c.name, view, size, got)
			}
			hashes := make([][2]uint64, len(c.msgs))
			d := &Decision{Reason: "over the window", TargetTokens: 9}
			trailers := len(AppendFastHashes(AppendFastDecision(nil, d), hashes))
			if n := FastTrailersSize(len(c.msgs), len(d.Reason)); n < trailers {
				t.Errorf("%s: trailers size %d, encoding %d bytes", c.name, n, trailers)
			}
		}
	}
}
