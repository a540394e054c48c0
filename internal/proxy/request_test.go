package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/anthropic"
	"github.com/compactd/compactd/internal/wire/openaichat"
)

func TestParseRequest(t *testing.T) {
	body := []byte(` { "model" : "gpt-4o", "mod\u0065l2": 1, "messages": [ {"role":"user","content":"a \"quoted\" ] } text\\"} ,{"role":"assistant","content":[1,{"x":"]"}]}],
	  "stream": true, "stream_options": {"foo": 1}, "n": -1.5e3, "x": null } `)
	r, err := parseRequest(body, openaichat.Format{})
	if err != nil {
		t.Fatal(err)
	}
	if r.model != "gpt-4o" || !r.stream || r.clientUsage || r.streamOptions == nil || len(r.messages) != 2 {
		t.Fatalf("%+v", r)
	}
	if string(r.messages[0]) != `{"role":"user","content":"a \"quoted\" ] } text\\"}` || string(r.messages[1]) != `{"role":"assistant","content":[1,{"x":"]"}]}` {
		t.Fatalf("messages %q", r.messages)
	}
	keys := []string{}
	for _, f := range r.fields {
		keys = append(keys, f.key)
	}
	if strings.Join(keys, ",") != "model,model2,messages,stream,stream_options,n,x" {
		t.Fatalf("keys %v", keys)
	}

	// Replacing the messages and adding include_usage keeps every other byte.
	out := r.withList([]json.RawMessage{json.RawMessage(`{"role":"user","content":"b"}`)})
	parts, err := r.withStreamUsage(out)
	if err != nil {
		t.Fatal(err)
	}
	if &parts[0][0] != &out[0] {
		t.Fatal("the body was copied to add stream_options")
	}
	out = bytes.Join(parts, nil)
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	so := m["stream_options"].(map[string]any)
	if so["include_usage"] != true || so["foo"] != 1.0 || len(m["messages"].([]any)) != 1 || m["n"] != -1500.0 {
		t.Fatalf("%s", out)
	}
	if !bytes.HasPrefix(out, []byte(` { "model" : "gpt-4o", "mod\u0065l2": 1, "messages": [{"role":"user","content":"b"}],`)) {
		t.Fatalf("prefix changed: %s", out)
	}

	// Without stream_options, it is added as a member.
	r, _ = parseRequest([]byte(`{"messages":[],"stream":true}`), openaichat.Format{})
	parts, _ = r.withStreamUsage(r.body)
	if out = bytes.Join(parts, nil); string(out) != `{"messages":[],"stream":true,"stream_options":{"include_usage":true}}` {
		t.Fatalf("%s", out)
	}

	for _, bad := range []string{``, `[]`, `{"messages":{}}`, `{"model":"x"}`, `{"messages":[1,}`, `{"messages":[] `, `{"messages":["unterminated]}`, `{"model":1,"messages":[]}`} {
		if _, err := parseRequest([]byte(bad), openaichat.Format{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzScan checks the request parser against encoding/json: on any
// UTF-8 input encoding/json accepts as an object with a "messages" array,
// the parser finds the same messages. (jsonscan refuses invalid UTF-8,
// which encoding/json replaces: such a request is forwarded unchanged.)
func FuzzScan(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x\"]"}],"stream":true}`)
	f.Add(`{"messages":[ {"a":[1,2,{"b":"}"}]} , "s", 1e5, null, true ]}`)
	f.Add(`{"a\\"b":"c","messages":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		// Keys match exactly, as the providers' APIs match them (not
		// case-insensitively, as encoding/json does into a struct).
		var probe map[string]json.RawMessage
		var want struct{ Messages []json.RawMessage }
		r, err := parseRequest([]byte(s), openaichat.Format{})
		if !utf8.ValidString(s) || json.Unmarshal([]byte(s), &probe) != nil || json.Unmarshal(probe["messages"], &want.Messages) != nil || want.Messages == nil {
			return // the scanner may accept what encoding/json refuses: the upstream judges
		}
		if err != nil {
			t.Fatalf("valid request refused: %v", err)
		}
		if len(r.messages) != len(want.Messages) {
			t.Fatalf("%d messages, encoding/json found %d", len(r.messages), len(want.Messages))
		}
		for i := range r.messages {
			var a, b any
			json.Unmarshal(r.messages[i], &a)
			json.Unmarshal(want.Messages[i], &b)
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if !bytes.Equal(ja, jb) {
				t.Fatalf("message %d: %s, encoding/json: %s", i, r.messages[i], want.Messages[i])
			}
		}
	})
}

// chunkedReader returns its chunks one Read at a time, as a network
// connection would.
type chunkedReader struct{ chunks []string }

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if c.chunks[0] == "" {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

func (c *chunkedReader) Close() error { return nil }

func TestSSEReaderOpenAI(t *testing.T) {
	events := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n",
		": keep-alive comment\n\n",
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\r\n\r\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
		"data: [DONE]\n\n",
	}
	for _, added := range []bool{true, false} {
		// Split the stream at awkward places: mid-line, mid-event.
		all := strings.Join(events, "")
		var chunks []string
		for i := 0; i < len(all); i += 7 {
			chunks = append(chunks, all[i:min(i+7, len(all))])
		}
		var got wire.Usage
		calls := 0
		parser := openaichat.Format{}.NewStream(added)
		r := newSSEReader(&chunkedReader{chunks: chunks}, 1<<20, parser, nil, func() {
			calls++
			got, _, _ = parser.Usage()
		})
		var reads []string
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				reads = append(reads, string(buf[:n]))
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		r.Close()
		want := events
		if added {
			// What the client would have got without include_usage: no
			// usage chunk, and no "usage": null on the others.
			want = []string{
				"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
				events[1],
				"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
				events[4],
			}
		}
		if strings.Join(reads, "|") != strings.Join(want, "|") {
			t.Fatalf("added=%v: reads (one per event)\n%q\nwant\n%q", added, reads, want)
		}
		if calls != 1 || got.InputTokens != 10 || got.OutputTokens != 2 || got.CacheReadTokens != 4 {
			t.Fatalf("usage %+v after %d calls", got, calls)
		}
	}
}

func TestSSEReaderAnthropic(t *testing.T) {
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":50,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	parser := anthropic.Format{}.NewStream(false)
	var got wire.Usage
	r := newSSEReader(io.NopCloser(strings.NewReader(stream)), 1<<20, parser, nil, func() { got, _, _ = parser.Usage() })
	out, err := io.ReadAll(r)
	if err != nil || string(out) != stream {
		t.Fatalf("the stream changed: %v\n%s", err, out)
	}
	if got.InputTokens != 155 || got.OutputTokens != 7 || got.CacheReadTokens != 50 || got.CacheWriteTokens != 5 {
		t.Fatalf("usage %+v", got)
	}
}

func TestJSONUsage(t *testing.T) {
	if u, ok, _ := (openaichat.Format{}).Usage([]byte(`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`)); !ok || u.InputTokens != 3 || u.OutputTokens != 4 {
		t.Fatalf("%+v %v", u, ok)
	}
	if u, ok, _ := (anthropic.Format{}).Usage([]byte(`{"usage":{"input_tokens":3,"cache_read_input_tokens":2,"output_tokens":4}}`)); !ok || u.InputTokens != 5 || u.OutputTokens != 4 {
		t.Fatalf("%+v %v", u, ok)
	}
	if _, ok, _ := (openaichat.Format{}).Usage([]byte(`not json`)); ok {
		t.Fatal("usage from garbage")
	}
}

// TestWithListOneCopy: a compacted list goes into the body in one
// allocation, the caller's bytes around it unchanged.
func TestWithListOneCopy(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"stream":false}`)
	r, err := parseRequest(body, openaichat.Format{})
	if err != nil {
		t.Fatal(err)
	}
	list := []json.RawMessage{r.messages[1], json.RawMessage(`{"role":"system","content":"summary"}`)}
	want := `{"model":"gpt-4o","messages":[{"role":"user","content":"b"},{"role":"system","content":"summary"}],"stream":false}`
	if got := r.withList(list); string(got) != want {
		t.Fatalf("withList = %s\nwant %s", got, want)
	}
	if got := r.withList(nil); string(got) != `{"model":"gpt-4o","messages":[],"stream":false}` {
		t.Fatalf("withList(nil) = %s", got)
	}
	if n := testing.AllocsPerRun(100, func() { r.withList(list) }); n != 1 {
		t.Fatalf("withList allocates %v times, want 1 (one copy of the body)", n)
	}
}

// lastOf is what the request filter remembers of r for the next request's
// parse.
func lastOf(r *request) *chat.LastRequest {
	return &chat.LastRequest{Body: r.body, ListStart: r.msgs.start, Spans: r.spans}
}

// sameParse fails unless a and b (one body, parsed with and without its
// previous request) read alike.
func sameParse(t *testing.T, a, b *request, errA, errB error) {
	t.Helper()
	if (errA == nil) != (errB == nil) {
		t.Fatalf("errors differ: %v, %v", errA, errB)
	}
	if errA != nil {
		return
	}
	if a.model != b.model || a.stream != b.stream || a.msgs != b.msgs || !slices.Equal(a.fields, b.fields) || !slices.Equal(a.spans, b.spans) ||
		!slices.EqualFunc(a.messages, b.messages, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) }) || !bytes.Equal(a.system, b.system) {
		t.Fatalf("read differently:\n%+v\n%+v", a, b)
	}
	for i, m := range a.messages {
		if &m[0] != &a.body[a.spans[i][0]] || len(m) != a.spans[i][1]-a.spans[i][0] {
			t.Fatalf("message %d is not a view of the body at its span", i)
		}
	}
}

// TestParseRequestAfter checks that a request read past what it repeats
// of the conversation's previous one is read as a whole read would, and
// that only elements equal in bytes and place, with all before them, are
// taken.
func TestParseRequestAfter(t *testing.T) {
	t.Parallel()
	const head = `{"model":"gpt-4o","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"a \"b\" ]"},{"role":"assistant","content":"ok"}`
	prevBody := head + `],"stream":true}`
	for _, tc := range []struct {
		name   string
		prev   string
		body   string
		reused int
	}{
		{"the same request", prevBody, prevBody, 3},
		{"two messages more", prevBody, head + `,{"role":"user","content":"go on"},{"role":"assistant","content":"done"}],"stream":false}`, 3},
		{"the last message changed", prevBody, strings.Replace(prevBody, `"ok"`, `"no"`, 1), 2},
		{"the first message changed", prevBody, strings.Replace(prevBody, `"be brief"`, `"be short"`, 1), 0},
		{"a field before the list grew", prevBody, strings.Replace(prevBody, `"gpt-4o"`, `"gpt-4o-mini"`, 1), 0},
		{"the list moved", `{"model":"gpt-4o", "messages":[{"role":"user","content":"x"}]}`, `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`, 0},
		{"a space moved before the list", `{"model":"gpt-4o", "messages":[{"role":"user","content":"x"}]}`, `{"model":"gpt-4o","messages": [{"role":"user","content":"x"}]}`, 0},
		{"a message cut short", prevBody, head[:len(head)-3], 0},
		{"invalid after the shared messages", prevBody, head + `,{"role":}]}`, 3},
		{"unterminated after the shared messages", prevBody, head, 3},
		{"fewer messages", prevBody, `{"model":"gpt-4o","messages":[{"role":"system","content":"be brief"}]}`, 1},
		{"no previous body", "", prevBody, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prev *chat.LastRequest
			if tc.prev != "" {
				r, err := parseRequest([]byte(tc.prev), openaichat.Format{})
				if err != nil {
					t.Fatal(err)
				}
				prev = lastOf(r)
			} else {
				prev = &chat.LastRequest{}
			}
			a, errA := parseRequestAfter([]byte(tc.body), openaichat.Format{}, prev)
			b, errB := parseRequest([]byte(tc.body), openaichat.Format{})
			sameParse(t, a, b, errA, errB)
			if errA == nil && a.reused != tc.reused {
				t.Fatalf("reused %d messages, want %d", a.reused, tc.reused)
			}
		})
	}

	// An Anthropic request (system apart), as the filter reads it.
	ant := `{"model":"claude-sonnet-4-5","system":"be brief","max_tokens":64,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"ok"}]}`
	r, err := parseRequest([]byte(ant+`]}`), anthropic.Format{})
	if err != nil {
		t.Fatal(err)
	}
	next := []byte(ant + `,{"role":"user","content":"more"}]}`)
	a, errA := parseRequestAfter(next, anthropic.Format{}, lastOf(r))
	b, errB := parseRequest(next, anthropic.Format{})
	sameParse(t, a, b, errA, errB)
	if a.reused != 2 || len(a.messages) != 3 {
		t.Fatalf("reused %d of %d messages", a.reused, len(a.messages))
	}
}

// FuzzParseRequestAfter checks that reading a body past what it repeats
// of any earlier body gives what reading it whole gives.
func FuzzParseRequestAfter(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`, `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"},{"role":"user","content":"z"}]}`)
	f.Add(`{"messages":[1,2,3]}`, `{"messages":[1,2,3`)
	f.Add(`{"messages":[1,2,3]}`, `{"messages":[1,2,3,]}`)
	f.Add(`{"messages":["a","b"]}`, `{"messages":["a","b\`)
	f.Fuzz(func(t *testing.T, prev, body string) {
		r, err := parseRequest([]byte(prev), openaichat.Format{})
		if err != nil {
			return
		}
		a, errA := parseRequestAfter([]byte(body), openaichat.Format{}, lastOf(r))
		b, errB := parseRequest([]byte(body), openaichat.Format{})
		sameParse(t, a, b, errA, errB)
	})
}

// TestParseRequestWithoutHeader: a request whose conversation is not
// named (its id is derived after the parse) is read past what it shares
// with the likeliest last request that opened the same way
// (RequestsSharing, likeliestPrevious): with two conversations that share
// their first kilobytes (one long system prompt, different tasks) each
// turn picks its own conversation's last request, and whatever is picked
// (the other conversation's, when its own was dropped) the request reads
// as a whole read would.
func TestParseRequestWithoutHeader(t *testing.T) {
	t.Parallel()
	mem := chat.NewMemory(chat.MemoryOptions{})
	prov := openaichat.Format{}
	system := `{"role":"system","content":"` + strings.Repeat("You are a careful agent. ", 100) + `"}`
	convs := map[string][]string{
		"a": {system, `{"role":"user","content":"fix the parser"}`},
		"b": {system, `{"role":"user","content":"fix the printer"}`},
	}
	body := func(msgs []string) []byte {
		return []byte(`{"model":"gpt-4o","messages":[` + strings.Join(msgs, ",") + `],"stream":false}`)
	}
	remember := func(id string, r *request) {
		mem.RememberRequest(id, chat.LastRequest{Format: prov.Name(), Model: r.model, Body: r.body, ListStart: r.msgs.start, Spans: r.spans})
	}
	parse := func(b []byte) *request {
		t.Helper()
		prev := likeliestPrevious(b, mem.RequestsSharing(prov.Name(), b, nil))
		got, errA := parseRequestAfter(b, prov, prev)
		want, errB := parseRequest(b, prov)
		sameParse(t, got, want, errA, errB)
		return got
	}
	for turn := range 4 {
		for _, id := range []string{"a", "b"} {
			prevLen := len(convs[id])
			convs[id] = append(convs[id], `{"role":"assistant","content":"`+id+` step `+strings.Repeat("x", turn)+`"}`, `{"role":"user","content":"go on"}`)
			r := parse(body(convs[id]))
			want := prevLen // its own last request, whole
			switch {
			case turn == 0 && id == "a":
				want = 0 // nothing held yet
			case turn == 0:
				want = 1 // a's first request: the system prompt they share
			}
			if r.reused != want {
				t.Fatalf("turn %d of %s: reused %d messages, want %d", turn, id, r.reused, want)
			}
			remember(id, r)
		}
	}
	// Conversation a's last request dropped: b's is the one found, and
	// only the opening they share (the system prompt) is taken from it.
	mem.SetRequestLimit(int64(len(body(convs["b"]))) + 1024) // b's alone
	if _, ok := mem.LastRequest("a"); ok {
		t.Fatal("a was not dropped")
	}
	convs["a"] = append(convs["a"], `{"role":"assistant","content":"done"}`)
	if r := parse(body(convs["a"])); r.reused != 1 {
		t.Fatalf("reused %d messages of the other conversation, want 1 (the system prompt)", r.reused)
	}
	// A body that does not open as any held request is read whole.
	if r := parse(body([]string{`{"role":"user","content":"` + strings.Repeat("y", 2000) + `"}`})); r.reused != 0 {
		t.Fatalf("reused %d", r.reused)
	}
}
