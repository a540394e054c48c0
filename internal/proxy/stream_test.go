package proxy

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/usage"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/anthropic"
	"github.com/compactd/compactd/internal/wire/openaichat"
)

// TestSSEReaderEndsWithErrorEvent: a stream whose upstream runs past the
// event bound ends, after the whole events before it, with the
// provider's error event and a clean end; the half event never reaches
// the client, and the usage seen so far is still reported.
func TestSSEReaderEndsWithErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		prov  wire.Format
		start string
	}{
		{openaichat.Format{}, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":1}}\n\n"},
		{anthropic.Format{}, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n"},
	} {
		t.Run(tc.prov.Name(), func(t *testing.T) {
			const limit = 64 << 10
			src := &endless{pattern: []byte("a")}
			body := io.NopCloser(io.MultiReader(strings.NewReader(tc.start+"data: {\"x\":\""), src))
			parser := tc.prov.NewStream(false)
			var got wire.Usage
			var ok bool
			done := 0
			r := newSSEReader(body, limit, parser, func(err error) []byte {
				var le *EventLimitError
				if !errors.As(err, &le) {
					t.Errorf("fail got %v", err)
				}
				return tc.prov.StreamError(502, "upstream_event_too_large", err.Error())
			}, func() { done++; got, ok, _ = parser.Usage() })
			out, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("the stream did not end cleanly: %v", err)
			}
			r.Close()
			rest, found := strings.CutPrefix(string(out), tc.start)
			if !found {
				t.Fatalf("the events before the fault are missing: %.200q", out)
			}
			if done != 1 || !ok || got.InputTokens != 12 {
				t.Fatalf("usage %+v %v after %d calls", got, ok, done)
			}
			if src.read > 2*limit {
				t.Fatalf("read %d bytes of the endless line for a limit of %d", src.read, limit)
			}
			typ, data := eventFields([]byte(rest))
			if !strings.HasSuffix(rest, "\n\n") || strings.Count(rest, "\n\n") != 1 {
				t.Fatalf("not one event: %q", rest)
			}
			checkStreamError(t, tc.prov, typ, data, "upstream_event_too_large")
		})
	}
}

// checkStreamError checks an error event as the provider's SDKs read it:
// OpenAI's a data line with {"error": {...}}, Anthropic's "event: error"
// with {"type": "error", "error": {...}}.
func checkStreamError(t *testing.T, prov wire.Format, typ string, data []byte, code string) {
	t.Helper()
	switch prov.Provider() {
	case OpenAI:
		var e struct {
			Error *struct {
				Message, Type, Code string
				Param               *string
			} `json:"error"`
		}
		if typ != "" || json.Unmarshal(data, &e) != nil || e.Error == nil || e.Error.Code != code || e.Error.Type != "compactd_error" || !strings.HasPrefix(e.Error.Message, "compactd: ") {
			t.Fatalf("OpenAI error event: %q %s", typ, data)
		}
	case Anthropic:
		var e struct {
			Type  string
			Error *struct{ Type, Message string } `json:"error"`
		}
		if typ != "error" || json.Unmarshal(data, &e) != nil || e.Type != "error" || e.Error == nil || e.Error.Type != "api_error" ||
			!strings.HasPrefix(e.Error.Message, "compactd ("+code+"): ") {
			t.Fatalf("Anthropic error event: %q %s", typ, data)
		}
	}
}

// TestSSEReaderPassesOtherErrors: a failure fail does not report (the
// client went away, the upstream broke the connection) is passed on, so
// the client's connection is aborted as the upstream's was.
func TestSSEReaderPassesOtherErrors(t *testing.T) {
	boom := errors.New("connection reset")
	r := newSSEReader(io.NopCloser(io.MultiReader(strings.NewReader("data: 1\n\ndata: 2"), &failing{boom})), 1<<20, nil,
		func(error) []byte { return nil }, nil)
	out, err := io.ReadAll(r)
	if err != boom || string(out) != "data: 1\n\n" {
		t.Fatalf("%q %v", out, err)
	}
}

// TestPooledSSEReader: a stream read through pooled buffers passes the
// same events, one after another stream's reader went back to the pool,
// and a reader closed (its buffer given back) reads nothing more.
func TestPooledSSEReader(t *testing.T) {
	t.Parallel()
	var pool relayBuffers
	stream := "data: 1\n\n" + "data: " + strings.Repeat("x", 3*relayBufferSize) + "\n\ndata: [DONE]\n\n"
	for round := 0; round < 3; round++ {
		r := newPooledSSEReader(&pool, io.NopCloser(strings.NewReader(stream)), 1<<20, nil, func(error) []byte { return nil }, nil)
		first := make([]byte, 16)
		n, err := r.Read(first)
		if err != nil || string(first[:n]) != "data: 1\n\n" {
			t.Fatalf("round %d: first read %q %v", round, first[:n], err)
		}
		if round == 1 {
			// Closed mid-stream (the client went away): the buffer goes
			// back, and the reader reads no more.
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if n, err := r.Read(first); n != 0 || err == nil {
				t.Fatalf("read after close: %d %v", n, err)
			}
			continue
		}
		rest, err := io.ReadAll(r)
		if err != nil || "data: 1\n\n"+string(rest) != stream {
			t.Fatalf("round %d: %d bytes, %v", round, len(rest), err)
		}
		r.Close()
	}
	if b := pool.Get(); len(b) != relayBufferSize {
		t.Fatalf("copy buffer of %d bytes", len(b))
	}
	pool.Put(make([]byte, 10)) // a foreign buffer is not kept
	if b := pool.Get(); len(b) != relayBufferSize {
		t.Fatalf("copy buffer of %d bytes", len(b))
	}
}

// TestUsageSanitized: every place usage is read (OpenAI and Anthropic,
// JSON answers and stream events) keeps only whole counts from 0 to
// 2^53; a bad count is ignored and reported, and without a valid prompt
// count there is no usage to record.
func TestUsageSanitized(t *testing.T) {
	const huge = "9223372036854775807"
	type want struct {
		ok            bool
		input, output int
		refused       string
	}
	for _, tc := range []struct {
		name   string
		prov   wire.Format
		stream bool
		body   string
		want   want
	}{
		{"openai json", openaichat.Format{}, false, `{"usage":{"prompt_tokens":100,"completion_tokens":5}}`, want{true, 100, 5, ""}},
		{"openai json negative prompt", openaichat.Format{}, false, `{"usage":{"prompt_tokens":-5000,"completion_tokens":10}}`, want{false, 0, 10, "prompt_tokens=-5000"}},
		{"openai json huge prompt", openaichat.Format{}, false, `{"usage":{"prompt_tokens":` + huge + `,"completion_tokens":10}}`, want{false, 0, 10, "prompt_tokens=" + huge}},
		{"openai json bad completion", openaichat.Format{}, false, `{"usage":{"prompt_tokens":900,"completion_tokens":1.5}}`, want{true, 900, 0, "completion_tokens=1.5"}},
		{"openai json cached over prompt", openaichat.Format{}, false, `{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":-1}}}`, want{true, 9, 0, "prompt_tokens_details.cached_tokens=-1"}},
		{"openai json string", openaichat.Format{}, false, `{"usage":{"prompt_tokens":"12"}}`, want{false, 0, 0, `prompt_tokens="12"`}},
		{"openai stream", openaichat.Format{}, true, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" + huge + ",\"completion_tokens\":3}}\n\n", want{false, 0, 0, "prompt_tokens=" + huge}},
		{"openai stream good then bad", openaichat.Format{}, true, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":-1}}\n\n", want{true, 7, 3, "prompt_tokens=-1"}},
		{"anthropic json", anthropic.Format{}, false, `{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":2}}`, want{true, 15, 2, ""}},
		{"anthropic json huge", anthropic.Format{}, false, `{"usage":{"input_tokens":` + huge + `,"output_tokens":2}}`, want{false, 0, 2, "input_tokens=" + huge}},
		{"anthropic json at the cap", anthropic.Format{}, false, `{"usage":{"input_tokens":9007199254740992,"cache_read_input_tokens":9007199254740992,"output_tokens":2}}`, want{true, usage.Max, 2, ""}},
		{"anthropic json bad cache", anthropic.Format{}, false, `{"usage":{"input_tokens":10,"cache_creation_input_tokens":-3,"output_tokens":2}}`, want{true, 10, 2, "cache_creation_input_tokens=-3"}},
		{"anthropic stream", anthropic.Format{}, true,
			"event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":-4,\"output_tokens\":1}}}\n\n" +
				"event: message_delta\ndata: {\"usage\":{\"output_tokens\":" + huge + "}}\n\n", want{false, 0, 1, "input_tokens=-4"}},
		{"anthropic stream delta repeats input", anthropic.Format{}, true,
			"event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":40,\"output_tokens\":1}}}\n\n" +
				"event: message_delta\ndata: {\"usage\":{\"input_tokens\":0,\"output_tokens\":9}}\n\n", want{true, 40, 9, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u wire.Usage
			var ok bool
			var refused []string
			if tc.stream {
				parser := tc.prov.NewStream(false)
				out, err := io.ReadAll(newSSEReader(io.NopCloser(strings.NewReader(tc.body)), 1<<20, parser, nil, nil))
				if err != nil || string(out) != tc.body {
					t.Fatalf("the stream changed: %q %v", out, err)
				}
				u, ok, refused = parser.Usage()
			} else {
				u, ok, refused = tc.prov.Usage([]byte(tc.body))
			}
			got := strings.Join(refused, ",")
			if ok != tc.want.ok || ok && (u.InputTokens != tc.want.input || u.OutputTokens != tc.want.output) ||
				(tc.want.refused == "") != (got == "") || !strings.Contains(got, tc.want.refused) {
				t.Fatalf("usage %+v ok=%v refused=%q; want %+v", u, ok, refused, tc.want)
			}
			if u.InputTokens < 0 || u.InputTokens > usage.Max || u.OutputTokens < 0 || u.OutputTokens > usage.Max || u.CacheReadTokens < 0 || u.CacheWriteTokens < 0 {
				t.Fatalf("a count outside 0 to 2^53 got through: %+v", u)
			}
		})
	}
	// However many usage events a stream holds, the refusals kept for the
	// log line are bounded.
	parser := openaichat.Format{}.NewStream(false)
	ev := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":-1}}\n\n"
	io.ReadAll(newSSEReader(io.NopCloser(strings.NewReader(strings.Repeat(ev, 1000))), 1<<20, parser, nil, nil))
	if _, _, refused := parser.Usage(); len(refused) > wire.MaxRefused {
		t.Fatalf("%d refusals kept", len(refused))
	}
}
