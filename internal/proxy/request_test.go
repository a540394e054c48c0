package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

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
	out, err = r.withStreamUsage(out)
	if err != nil {
		t.Fatal(err)
	}
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
	out, _ = r.withStreamUsage(r.body)
	if string(out) != `{"messages":[],"stream":true,"stream_options":{"include_usage":true}}` {
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
