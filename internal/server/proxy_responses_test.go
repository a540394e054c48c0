package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/wire/responses"
	"github.com/hashicorp/go-hclog"
)

// responsesUpstream is a local OpenAI Responses provider over a real
// socket: POST /v1/responses, JSON or SSE (response.* events, the usage in
// response.completed). It checks what it is sent as the API does: the
// key, the input's shape and its pairing (every call answered by its
// output, by call_id), and answers 400 in OpenAI's error shape otherwise.
type responsesUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	received [][]byte
}

func newResponsesUpstream(t *testing.T) *responsesUpstream {
	u := &responsesUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *responsesUpstream) last() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.received) == 0 {
		return nil
	}
	return u.received[len(u.received)-1]
}

func (u *responsesUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.received = append(u.received, body)
	u.mu.Unlock()
	if d, err := time.ParseDuration(r.Header.Get("X-Upstream-Delay")); err == nil {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, msg)
	}
	switch {
	case r.Header.Get("Authorization") != "Bearer "+upstreamtest.OpenAIKey:
		fail(http.StatusUnauthorized, "Incorrect API key provided")
		return
	case r.Method != http.MethodPost || r.URL.Path != "/v1/responses":
		fail(http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
		return
	}
	var req struct {
		Model              string          `json:"model"`
		Input              json.RawMessage `json:"input"`
		Stream             bool            `json:"stream"`
		PreviousResponseID string          `json:"previous_response_id"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Model == "" {
		fail(http.StatusBadRequest, fmt.Sprintf("the body is not a request: %v", err))
		return
	}
	items, err := responses.Items(req.Input)
	if err == nil && req.PreviousResponseID == "" {
		// (A continued response's outputs answer calls stored upstream.)
		err = responses.Validate(items, true)
	}
	if err != nil && !errors.Is(err, responses.ErrUnsupported) {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	usage := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`, len(body)/4, len(body)/4+2)
	output := `[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"done","annotations":[]}]}]`
	resp := fmt.Sprintf(`{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":%q,"output":%s,"usage":%s}`, req.Model, output, usage)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, resp)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	created := fmt.Sprintf(`{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":%q,"output":[],"usage":null}`, req.Model)
	for i, ev := range [][2]string{
		{"response.created", `{"type":"response.created","sequence_number":0,"response":` + created + `}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"done"}`},
		{"response.completed", `{"type":"response.completed","sequence_number":2,"response":` + resp + `}`},
	} {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev[0], ev[1])
		if i < 2 {
			w.(http.Flusher).Flush()
		}
	}
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// responsesDaemon starts a daemon whose OpenAI upstream is a
// responsesUpstream; extra is appended to its config's proxy block. Its
// log is in td's logs.
func responsesDaemon(t *testing.T, extra string) (*testDaemon, *responsesUpstream) {
	t.Helper()
	up := newResponsesUpstream(t)
	td := setup(t, "", pluginSliding)
	td.log = &lockedBuffer{}
	td.opts.Logger = hclog.New(&hclog.LoggerOptions{Output: td.log, Level: hclog.Info})
	tokenFile := filepath.Join(td.dir, "token")
	os.WriteFile(tokenFile, []byte(proxyToken+"\n"), 0o600)
	cfg := fmt.Sprintf(`policy: sliding
policies: {sliding: {window_size: 4, step: 1}}
tcp: {listen: '127.0.0.1:0', token_file: %s}
proxy:
  openai: {upstream: %s/v1}
%s`, tokenFile, up.URL, extra)
	os.WriteFile(td.config, []byte(cfg), 0o600)
	return td.start(t), up
}

// codexSession is a Responses input as Codex sends one: a provider's
// compaction item, the task, then turns of reasoning (encrypted), a
// function call (parallel in every third turn), its output, and the
// assistant's message; the last item is the user's.
func codexSession(turns, outputChars int) []json.RawMessage {
	mk := func(format string, args ...any) json.RawMessage { return json.RawMessage(fmt.Sprintf(format, args...)) }
	items := []json.RawMessage{
		mk(`{"type":"compaction","id":"cmp_0","encrypted_content":"gAAAA-earlier-turns"}`),
		mk(`{"type":"message","role":"user","content":[{"type":"input_text","text":"Fix the failing test in pkg/store; run go test after each change."}]}`),
	}
	for i := range turns {
		items = append(items, mk(`{"type":"reasoning","id":"rs_%d","summary":[],"encrypted_content":"gAAAA-%d"}`, i, i),
			mk(`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"shell","arguments":"{\"cmd\":\"cat file_%d.go\"}"}`, i, i, i))
		if i%3 == 2 {
			items = append(items, mk(`{"type":"function_call","id":"fc_%db","call_id":"call_%db","name":"shell","arguments":"{\"cmd\":\"ls\"}"}`, i, i))
		}
		items = append(items, mk(`{"type":"function_call_output","call_id":"call_%d","output":%q}`, i, strings.Repeat(fmt.Sprintf("line %d of file_%d.go\n", i, i), outputChars/20)))
		if i%3 == 2 {
			items = append(items, mk(`{"type":"function_call_output","call_id":"call_%db","output":"a.go b.go"}`, i))
		}
		items = append(items, mk(`{"type":"message","role":"assistant","id":"msg_%d","content":[{"type":"output_text","text":"Read file_%d.go.","annotations":[]}]}`, i, i))
	}
	return append(items, mk(`{"role":"user","content":"go on"}`))
}

func responsesBody(items []json.RawMessage, extra string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-4o","instructions":"You are a coding agent.","input":[`)
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString("]" + extra + "}")
	return b.Bytes()
}

func TestProxyResponsesPassesThrough(t *testing.T) {
	t.Parallel()
	td, up := responsesDaemon(t, "")
	body := responsesBody(codexSession(2, 100), `,"store":false,"prompt_cache_key":"pk-1","include":["reasoning.encrypted_content"]`)
	resp, got := td.post(t, proxy.RouteResponses, body, nil)
	if resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderUpstream) != proxy.OpenAI || resp.Header.Get(proxy.HeaderWarning) != "" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	if !bytes.Equal(up.last(), body) {
		t.Fatalf("the upstream got\n%s\nnot the caller's bytes\n%s", up.last(), body)
	}
	st := td.status(t, resp.Header.Get(proxy.HeaderConversation))
	if st.LastUsage == nil || st.LastUsage.InputTokens != len(body)/4 || st.Provider != proxy.Responses {
		t.Fatalf("status %+v", st)
	}

	// Streamed: the events pass as they are, the usage comes from
	// response.completed.
	body = responsesBody(codexSession(3, 100), `,"stream":true`)
	resp, got = td.post(t, proxy.RouteResponses, body, nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	if evs := sseEvents(t, got); len(evs) != 3 || !strings.Contains(string(got), "event: response.completed\n") {
		t.Fatalf("events %q", evs)
	}
	st = td.status(t, resp.Header.Get(proxy.HeaderConversation))
	if st.LastUsage == nil || st.LastUsage.InputTokens != len(body)/4 {
		t.Fatalf("streamed usage not recorded: %+v", st)
	}
}

func TestProxyResponsesCompacts(t *testing.T) {
	t.Parallel()
	td, up := responsesDaemon(t, "  context_window: 2000\n")
	items := codexSession(12, 600)
	body := responsesBody(items, `,"store":false,"prompt_cache_key":"pk-1","stream":true`)
	resp, got := td.post(t, proxy.RouteResponses, body, nil)
	if resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	var sent struct {
		Instructions   string            `json:"instructions"`
		Input          []json.RawMessage `json:"input"`
		Store          *bool             `json:"store"`
		PromptCacheKey string            `json:"prompt_cache_key"`
		Stream         bool              `json:"stream"`
	}
	if err := json.Unmarshal(up.last(), &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Instructions != "You are a coding agent." || sent.Store == nil || *sent.Store || sent.PromptCacheKey != "pk-1" || !sent.Stream {
		t.Fatalf("the request's other fields changed: %s", up.last())
	}
	if len(sent.Input) >= len(items) {
		t.Fatalf("the upstream got %d of %d items", len(sent.Input), len(items))
	}
	// The provider's summary is kept; the tail is the caller's bytes; the
	// upstream checked the pairing (it answered 200).
	if !bytes.Equal(sent.Input[0], items[0]) || !bytes.Equal(sent.Input[len(sent.Input)-1], items[len(items)-1]) {
		t.Fatalf("input %s", sent.Input)
	}
	written := 0
	for _, it := range sent.Input {
		if !contains(items, it) {
			written++
		}
	}
	if written > 1 {
		t.Errorf("%d forwarded items are not the caller's, byte for byte", written)
	}
	// Each reasoning item that went is gone with the call it preceded, and
	// each one kept still precedes its call.
	for i, it := range sent.Input {
		if bytes.Contains(it, []byte(`"type":"reasoning"`)) && (i+1 >= len(sent.Input) || !bytes.Contains(sent.Input[i+1], []byte(`"type":"function_call"`))) {
			t.Errorf("reasoning item %d does not precede its call: %s", i, sent.Input[i:min(i+2, len(sent.Input))])
		}
	}
	st := td.status(t, resp.Header.Get(proxy.HeaderConversation))
	if st.Compactions != 1 || st.MessagesAfter != len(sent.Input) || st.Provider != proxy.Responses {
		t.Fatalf("status %+v", st)
	}

	// Manual compaction of the stored request answers in its format.
	code, mb, _ := td.raw(t, "POST", "/v1/compact", fmt.Sprintf(`{"conversation_id":%q}`, resp.Header.Get(proxy.HeaderConversation)))
	var manual struct {
		Messages []json.RawMessage `json:"messages"`
		Format   string            `json:"format"`
		System   string            `json:"system"`
	}
	if err := json.Unmarshal(mb, &manual); err != nil || code != 200 || manual.Format != proxy.Responses || manual.System != "You are a coding agent." {
		t.Fatalf("manual compaction: %d %s", code, mb)
	}
	mc, err := responses.ConvertItems(nil, manual.Messages)
	if err != nil {
		t.Fatal(err)
	}
	if err := responses.Validate(mc.Items, true); err != nil || len(manual.Messages) >= len(items) {
		t.Fatalf("manual compaction's %d items: %v", len(manual.Messages), err)
	}
}

// metric returns a series' value from /metrics (-1 when absent).
func (td *testDaemon) metric(t *testing.T, series string) float64 {
	t.Helper()
	text, err := td.c.Metrics(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

func TestProxyNeverSilent(t *testing.T) {
	t.Parallel()
	td, up := responsesDaemon(t, "")
	// previous_response_id: the history is the provider's.
	body := []byte(`{"model":"gpt-4o","previous_response_id":"resp_0","input":[{"type":"function_call_output","call_id":"call_9","output":"ok"}]}`)
	for range 2 {
		resp, got := td.post(t, proxy.RouteResponses, body, map[string]string{proxy.HeaderConversation: "c1"})
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get(proxy.HeaderWarning), "previous_response_id") || resp.Header.Get(proxy.HeaderCompacted) != "" {
			t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
		}
		if !bytes.Equal(up.last(), body) {
			t.Fatalf("forwarded %s", up.last())
		}
	}
	// An item type compactd does not convert.
	body = []byte(`{"model":"gpt-4o","input":[{"role":"user","content":"hi"},{"type":"computer_call","id":"cu_1"}]}`)
	resp, got := td.post(t, proxy.RouteResponses, body, nil)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get(proxy.HeaderWarning), `"computer_call"`) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	// A path compactd does not compact.
	resp, _ = td.post(t, "/v1/embeddings", []byte(`{"model":"text-embedding-3-small","input":"x"}`), nil)
	if w := resp.Header.Get(proxy.HeaderWarning); !strings.Contains(w, "does not compact /v1/embeddings") {
		t.Fatalf("forwarded path: %d warning %q", resp.StatusCode, w)
	}
	for series, want := range map[string]float64{
		`compactd_proxy_uncompacted_total{path="/v1/responses",reason="previous_response_id"}`: 2,
		`compactd_proxy_uncompacted_total{path="/v1/responses",reason="unsupported"}`:          1,
		`compactd_proxy_uncompacted_total{path="/v1/embeddings",reason="path"}`:                1,
	} {
		if got := td.metric(t, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// Logged once per conversation.
	if n := strings.Count(td.log.String(), "previous_response_id: the conversation"); n != 1 {
		t.Errorf("the previous_response_id warning was logged %d times, want once", n)
	}
}

func TestNotFoundHintsAndAnthropicShape(t *testing.T) {
	t.Parallel()
	td, _ := proxyDaemon(t, "", pluginSliding)
	// An Anthropic SDK without /v1 in its path: Anthropic's error shape,
	// saying what to change.
	code, body, _ := td.rawWith(t, "POST", "/messages", `{}`, map[string]string{"x-api-key": upstreamtest.AnthropicKey, "anthropic-version": "2023-06-01"})
	var ae struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(body, &ae); err != nil || code != 404 || ae.Type != "error" || ae.Error.Type != "not_found_error" ||
		!strings.Contains(ae.Error.Message, "did you mean /v1/messages?") {
		t.Fatalf("%d %s", code, body)
	}
	// An OpenAI SDK whose base URL lacks /v1.
	code, body, _ = td.rawWith(t, "POST", "/responses", `{}`, map[string]string{"Authorization": "Bearer " + upstreamtest.OpenAIKey})
	if c, msg := errorCode(t, body); code != 404 || c != CodeNotFound || !strings.Contains(msg, "did you mean /v1/responses? set the base URL to http://compactd/v1") {
		t.Fatalf("%d %s", code, body)
	}
	// compactd's own API too; a path that exists nowhere gets no hint.
	if _, body, _ = td.rawWith(t, "GET", "/status", "", nil); !strings.Contains(string(body), "did you mean /v1/status?") {
		t.Fatalf("%s", body)
	}
	if _, body, _ = td.rawWith(t, "GET", "/nothing", "", nil); strings.Contains(string(body), "did you mean") {
		t.Fatalf("%s", body)
	}
	// A doubled /v1 is forwarded with a warning that says so.
	resp, _ := td.post(t, "/v1/v1/chat/completions", openAIBody(chatMessages(1), ""), nil)
	if w := resp.Header.Get(proxy.HeaderWarning); !strings.Contains(w, "did you mean /v1/chat/completions?") {
		t.Fatalf("doubled /v1: warning %q", w)
	}
}

func TestCompactResponsesFormat(t *testing.T) {
	t.Parallel()
	td := setup(t, "", pluginSliding).start(t)
	items := codexSession(6, 200)
	req := map[string]any{"format": "responses", "policy": "sliding", "config": map[string]any{"window_size": 4, "step": 1},
		"system": "You are a coding agent.", "messages": items}
	b, _ := json.Marshal(req)
	code, body, _ := td.raw(t, "POST", "/v1/compact", string(b))
	var out struct {
		Messages  []json.RawMessage `json:"messages"`
		Compacted bool              `json:"compacted"`
		Format    string            `json:"format"`
		System    string            `json:"system"`
	}
	if err := json.Unmarshal(body, &out); err != nil || code != 200 || !out.Compacted || out.Format != "responses" || out.System != "You are a coding agent." {
		t.Fatalf("%d %s", code, body)
	}
	got, err := responses.ConvertItems(nil, out.Messages)
	if err != nil {
		t.Fatal(err)
	}
	if err := responses.Validate(got.Items, true); err != nil {
		t.Fatalf("the compacted input is not valid: %v", err)
	}
	if len(out.Messages) >= len(items) || !bytes.Equal(out.Messages[0], items[0]) || !bytes.Equal(out.Messages[len(out.Messages)-1], items[len(items)-1]) {
		t.Fatalf("messages %s", out.Messages)
	}
	// An item type compactd does not convert is refused, clearly.
	b, _ = json.Marshal(map[string]any{"format": "responses", "policy": "sliding", "messages": []json.RawMessage{json.RawMessage(`{"type":"computer_call","id":"x"}`)}})
	code, body, _ = td.raw(t, "POST", "/v1/compact", string(b))
	if c, msg := errorCode(t, body); code != 400 || c != CodeUnsupportedFormat || !strings.Contains(msg, "computer_call") {
		t.Fatalf("%d %s", code, body)
	}
}

// TestProxyResponsesOwnAnswers: compactd's own answers on /v1/responses
// come in OpenAI's error shape; the upstream's errors pass through.
func TestProxyResponsesOwnAnswers(t *testing.T) {
	t.Parallel()
	td, _ := responsesDaemon(t, "  timeout: 1s\n")
	body := responsesBody(codexSession(1, 50), "")
	code := func(b []byte) string {
		var e struct {
			Error struct{ Code, Type, Message string } `json:"error"`
		}
		json.Unmarshal(b, &e)
		return e.Error.Code
	}
	// 400: a conversation header compactd cannot file.
	resp, got := td.post(t, proxy.RouteResponses, body, map[string]string{proxy.HeaderConversation: strings.Repeat("c", 257)})
	if resp.StatusCode != 400 || code(got) != "bad_request" {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	// 504: slower than proxy.timeout.
	resp, got = td.post(t, proxy.RouteResponses, body, map[string]string{"X-Upstream-Delay": "5s"})
	if resp.StatusCode != 504 || code(got) != "upstream_timeout" || resp.Header.Get(proxy.HeaderUpstream) != "" {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	// The upstream's own 400 (an output without its call), passed on.
	bad := []byte(`{"model":"gpt-4o","input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}`)
	resp, got = td.post(t, proxy.RouteResponses, bad, nil)
	if resp.StatusCode != 400 || resp.Header.Get(proxy.HeaderUpstream) != proxy.OpenAI || !strings.Contains(string(got), `no earlier call has the call_id \"nope\"`) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	// 401 on the TCP listener without compactd's token.
	req, _ := http.NewRequest("POST", "http://"+td.TCPAddr()+proxy.RouteResponses, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+upstreamtest.OpenAIKey)
	r401, err := tcpHTTP(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b401, _ := io.ReadAll(r401.Body)
	r401.Body.Close()
	if r401.StatusCode != 401 || code(b401) != "unauthorized" {
		t.Fatalf("%d %s", r401.StatusCode, b401)
	}

	// 502: nobody listening; 404: the OpenAI proxy is off.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	td2 := setup(t, fmt.Sprintf("proxy: {openai: {upstream: 'http://%s/v1'}}\n", dead), pluginSliding).start(t)
	if resp, got = td2.post(t, proxy.RouteResponses, body, nil); resp.StatusCode != 502 || code(got) != "upstream_unreachable" {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	td3 := setup(t, "", pluginSliding).start(t)
	if resp, got = td3.post(t, proxy.RouteResponses, body, nil); resp.StatusCode != 404 || code(got) != "proxy_off" {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
}

// TestProxyResponsesStringInput: a string input is one user message; its
// stored request compacts to that message as an item.
func TestProxyResponsesStringInput(t *testing.T) {
	t.Parallel()
	td, up := responsesDaemon(t, "")
	body := []byte(`{"model":"gpt-4o","instructions":"Be brief.","input":"What is 2+2?","store":false}`)
	resp, got := td.post(t, proxy.RouteResponses, body, map[string]string{proxy.HeaderConversation: "str-1"})
	if resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderWarning) != "" || !bytes.Equal(up.last(), body) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	code, mb, _ := td.raw(t, "POST", "/v1/compact", `{"conversation_id":"str-1"}`)
	var manual struct {
		Messages []json.RawMessage `json:"messages"`
		Format   string            `json:"format"`
	}
	if err := json.Unmarshal(mb, &manual); err != nil || code != 200 || manual.Format != proxy.Responses ||
		len(manual.Messages) != 1 || string(manual.Messages[0]) != `{"role":"user","content":"What is 2+2?"}` {
		t.Fatalf("%d %s", code, mb)
	}
}
