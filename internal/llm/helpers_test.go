package llm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/abi"
)

const testKey = "sk-test-0123456789"

// fakeProvider is a local HTTP server speaking one provider's wire format.
// Each request is answered by the next reply in replies (the last one
// repeats); it records what it received.
type fakeProvider struct {
	t       *testing.T
	kind    string
	srv     *httptest.Server
	mu      sync.Mutex
	replies []reply
	got     []recorded
}

// reply is one canned answer. A nil body with status 200 answers a
// well-formed completion echoing the request's model.
type reply struct {
	status  int
	header  map[string]string
	body    string
	delay   time.Duration // wait before answering (or until the client gives up)
	handler func(w http.ResponseWriter, r *http.Request, body []byte)
}

type recorded struct {
	method, path string
	header       http.Header
	body         map[string]any
	raw          []byte
}

func newFake(t *testing.T, kind string, replies ...reply) *fakeProvider {
	t.Helper()
	f := &fakeProvider{t: t, kind: kind, replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProvider) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	f.mu.Lock()
	f.got = append(f.got, recorded{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body, raw: raw})
	rep := reply{status: 200}
	if n := len(f.got) - 1; len(f.replies) > 0 {
		rep = f.replies[min(n, len(f.replies)-1)]
	}
	f.mu.Unlock()
	if rep.delay > 0 {
		select {
		case <-time.After(rep.delay):
		case <-r.Context().Done():
			return
		}
	}
	if rep.handler != nil {
		rep.handler(w, r, raw)
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	if rep.status == 0 {
		rep.status = 200
	}
	w.WriteHeader(rep.status)
	if rep.body == "" && rep.status == 200 {
		model, _ := body["model"].(string)
		rep.body = f.success("summary of "+lastContent(body), model, 120, 30)
	}
	_, _ = io.WriteString(w, rep.body)
}

func lastContent(body map[string]any) string {
	msgs, _ := body["messages"].([]any)
	if len(msgs) == 0 {
		return ""
	}
	m, _ := msgs[len(msgs)-1].(map[string]any)
	s, _ := m["content"].(string)
	return s
}

// success is a real success body of the provider's format.
func (f *fakeProvider) success(text, model string, in, out int) string {
	var v any
	if f.kind == KindAnthropic {
		v = map[string]any{
			"id": "msg_01", "type": "message", "role": "assistant", "model": model,
			"content":     []any{map[string]any{"type": "text", "text": text}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out},
		}
	} else {
		v = map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": text, "refusal": nil}}},
			"usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// errorBody is a real error body of the provider's format.
func (f *fakeProvider) errorBody(typ, msg string) string {
	var v any
	if f.kind == KindAnthropic {
		v = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	} else {
		v = map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": typ}}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (f *fakeProvider) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.got...)
}

func (f *fakeProvider) baseURL() string {
	if f.kind == KindOpenAI {
		return f.srv.URL + "/v1"
	}
	return f.srv.URL
}

// client returns a Client for f whose sleeps are recorded, not slept.
func (f *fakeProvider) client(t *testing.T, mod func(*Config), opts ...Option) (*Client, *[]time.Duration) {
	t.Helper()
	cfg := Config{Provider: f.kind, BaseURL: f.baseURL(), Model: "default-model", Timeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	opts = append([]Option{WithGetenv(func(string) string { return testKey })}, opts...)
	c, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	slept := &[]time.Duration{}
	c.sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		*slept = append(*slept, d)
		mu.Unlock()
		return ctx.Err()
	}
	c.jitter = func(d time.Duration) time.Duration { return d }
	return c, slept
}

func request(text string) abi.LLMRequest {
	return abi.LLMRequest{
		Model: "summarizer-1",
		Messages: []abi.LLMMessage{
			{Role: abi.RoleSystem, Content: "You summarize."},
			{Role: abi.RoleUser, Content: text},
		},
		MaxTokens: 500,
	}
}

func kinds() []string { return []string{KindOpenAI, KindAnthropic} }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
