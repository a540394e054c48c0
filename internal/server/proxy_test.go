package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wire/anthropic"
)

const proxyToken = "proxy-test-token"

// proxyDaemon starts a daemon proxying to a local upstream, with the TCP
// listener on; extra is appended to its config's proxy block.
func proxyDaemon(t *testing.T, extra string, plugins ...string) (*testDaemon, *upstreamtest.Server) {
	t.Helper()
	td, up := proxySetup(t, extra, plugins...)
	return td.start(t), up
}

// proxySetup is proxyDaemon without the start (to set td.opts first).
func proxySetup(t *testing.T, extra string, plugins ...string) (*testDaemon, *upstreamtest.Server) {
	t.Helper()
	up := upstreamtest.New()
	t.Cleanup(up.Close)
	td := setup(t, "", plugins...)
	tokenFile := filepath.Join(td.dir, "token")
	os.WriteFile(tokenFile, []byte(proxyToken+"\n"), 0o600)
	cfg := fmt.Sprintf(`policy: sliding
policies: {sliding: {window_size: 4, step: 1}, gohostile: {mode: panic}}
tcp: {listen: '127.0.0.1:0', token_file: %s}
proxy:
  openai: {upstream: %s}
  anthropic: {upstream: %s}
%s`, tokenFile, up.OpenAIBase(), up.AnthropicBase(), extra)
	os.WriteFile(td.config, []byte(cfg), 0o600)
	return td, up
}

// post sends a proxied request over the Unix socket, with the provider
// key the upstream expects.
func (td *testDaemon) post(t *testing.T, path string, body []byte, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + upstreamtest.OpenAIKey}
	if strings.HasPrefix(path, proxy.RouteAnthropic) {
		h = map[string]string{"Content-Type": "application/json", "x-api-key": upstreamtest.AnthropicKey, "anthropic-version": "2023-06-01"}
	}
	for k, v := range header {
		h[k] = v
	}
	return td.do(t, http.MethodPost, path, body, h)
}

// do sends a request over the Unix socket.
func (td *testDaemon) do(t *testing.T, method, path string, body []byte, h map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://compactd"+path, bytes.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := td.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (td *testDaemon) status(t *testing.T, id string) client.Conversation {
	t.Helper()
	code, body, _ := td.raw(t, http.MethodGet, "/v1/status?conversation_id="+id, "")
	if code != http.StatusOK {
		t.Fatalf("status of %s: %d %s", id, code, body)
	}
	var c client.Conversation
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// openAIBody builds a Chat Completions request.
func openAIBody(msgs []json.RawMessage, extra string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-4o","messages":[`)
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString("]" + extra + "}")
	return b.Bytes()
}

func TestProxyOpenAIPassesThrough(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	msgs := chatMessages(2)
	// Fields compactd does not read (metadata, service_tier) pass through
	// byte for byte; the upstream refuses fields OpenAI does not know.
	body := openAIBody(msgs, `,"temperature":0.2,"metadata":{"keep":"[1, 2]"},"service_tier":"flex"`)
	resp, got := td.post(t, proxy.RouteOpenAI, body, map[string]string{"OpenAI-Organization": "org-1"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	last := up.Last()
	if !bytes.Equal(last.Body, body) || last.Path != "/v1/chat/completions" {
		t.Fatalf("upstream got %s %s, want the caller's body unchanged", last.Path, last.Body)
	}
	if last.Header.Get("Authorization") != "Bearer "+upstreamtest.OpenAIKey || last.Header.Get("OpenAI-Organization") != "org-1" {
		t.Errorf("headers not passed through: %v", last.Header)
	}
	var cc struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(got, &cc); err != nil || len(cc.Choices) != 1 || cc.Choices[0].Message.Content != "echo: last question" {
		t.Fatalf("answer %s", got)
	}
	id := resp.Header.Get(proxy.HeaderConversation)
	if !strings.HasPrefix(id, "h-") || resp.Header.Get(proxy.HeaderCompacted) != "" || resp.Header.Get(proxy.HeaderWarning) != "" ||
		resp.Header.Get(proxy.HeaderUpstream) != proxy.OpenAI {
		t.Fatalf("compactd headers %v", resp.Header)
	}
	st := td.status(t, id)
	if st.Provider != proxy.OpenAI || st.LastUsage == nil || st.LastUsage.InputTokens == 0 || st.Requests != 1 || st.Messages != len(msgs) ||
		st.NeedsCompaction || st.UsageRatio <= 0 || st.ContextWindow != 128000 {
		t.Fatalf("status %+v", st)
	}
	// The client's own id wins over the derived one.
	resp, _ = td.post(t, proxy.RouteOpenAI, body, map[string]string{proxy.HeaderConversation: "agent-7"})
	if resp.Header.Get(proxy.HeaderConversation) != "agent-7" || td.status(t, "agent-7").Requests != 1 {
		t.Fatalf("X-Compactd-Conversation not honoured: %v", resp.Header)
	}
}

// sseEvents splits a text/event-stream body into its events' data.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestProxyOpenAIStream(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	msgs := chatMessages(1)
	for _, tc := range []struct {
		name      string
		extra     string
		wantUsage bool
	}{
		{"client did not ask for usage", `,"stream":true`, false},
		{"client asked for usage", `,"stream":true,"stream_options":{"include_usage":true}`, true},
		{"client said no", `,"stream":true,"stream_options":{"include_usage":false}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "stream-" + strings.ReplaceAll(tc.name, " ", "-")
			resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(msgs, tc.extra), map[string]string{proxy.HeaderConversation: id})
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%d %v", resp.StatusCode, resp.Header)
			}
			var sent struct {
				StreamOptions struct {
					IncludeUsage bool `json:"include_usage"`
				} `json:"stream_options"`
			}
			json.Unmarshal(up.Last().Body, &sent)
			if !sent.StreamOptions.IncludeUsage {
				t.Fatalf("upstream got no include_usage: %s", up.Last().Body)
			}
			events := sseEvents(t, got)
			if events[len(events)-1] != "[DONE]" {
				t.Fatalf("stream does not end with [DONE]: %v", events)
			}
			var text strings.Builder
			usage := 0
			for _, e := range events[:len(events)-1] {
				var c struct {
					Choices []struct {
						Delta struct{ Content string } `json:"delta"`
					} `json:"choices"`
					Usage *json.RawMessage `json:"usage"`
				}
				if err := json.Unmarshal([]byte(e), &c); err != nil {
					t.Fatalf("event %q: %v", e, err)
				}
				if c.Usage != nil && string(*c.Usage) != "null" {
					usage++
				}
				for _, ch := range c.Choices {
					text.WriteString(ch.Delta.Content)
				}
			}
			if text.String() != "echo: last question" || (usage == 1) != tc.wantUsage || usage > 1 {
				t.Fatalf("text %q, %d usage chunks (want usage: %v)", text.String(), usage, tc.wantUsage)
			}
			if st := td.status(t, id); st.LastUsage == nil || st.LastUsage.OutputTokens == 0 {
				t.Fatalf("usage not recorded from the stream: %+v", st)
			}
		})
	}
}

// TestProxyStreamsEventByEvent checks that the proxy hands each event on
// as it arrives: with the upstream pausing between events, the client
// reads the first one before the upstream has sent the second.
func TestProxyStreamsEventByEvent(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"1","choices":[{"index":0,"delta":{"content":"first"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, `data: {"id":"1","choices":[{"index":0,"delta":{"content":" second"}}]}`+"\n\ndata: [DONE]\n\n")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: slow}
	go srv.Serve(ln)
	t.Cleanup(func() { close(releaseOnce(release)); srv.Close() })

	td := setup(t, "proxy: {openai: {upstream: 'http://"+ln.Addr().String()+"/v1', stream_usage: false}}\n", pluginSliding).start(t)
	req, _ := http.NewRequest(http.MethodPost, "http://compactd/v1/chat/completions", bytes.NewReader(openAIBody(chatMessages(1), `,"stream":true`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := td.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 200)
	n, err := resp.Body.Read(first)
	if err != nil || !bytes.Contains(first[:n], []byte(`"first"`)) {
		t.Fatalf("first read: %q, %v", first[:n], err)
	}
	close(releaseOnce(release))
	rest, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(rest, []byte(`" second"`)) || !bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")) {
		t.Fatalf("rest of the stream: %q", rest)
	}
}

// releaseOnce returns c the first time and a fresh channel after, so
// closing it twice is harmless.
func releaseOnce(c chan struct{}) chan struct{} {
	select {
	case <-c:
		return make(chan struct{})
	default:
		return c
	}
}

// tauMessages returns a fixture conversation and its token count.
func tauMessages(t *testing.T, chars int) ([]json.RawMessage, int) {
	t.Helper()
	raw := tauConversation(t, chars)
	c, err := chat.FromRaw(raw)
	if err != nil {
		t.Fatal(err)
	}
	return raw, tokens.New(tokens.Options{}).ForModel("gpt-4o").CountMessages(c.Messages)
}

func TestProxyCompactsWhenThePreflightCountPassesTheThreshold(t *testing.T) {
	t.Parallel()
	msgs, n := tauMessages(t, 12000)
	td, up := proxyDaemon(t, fmt.Sprintf("  context_window: %d\n", n), pluginSliding)
	body := openAIBody(msgs, "")
	resp, got := td.post(t, proxy.RouteOpenAI, body, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	var sent struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(up.Last().Body, &sent); err != nil || sent.Model != "gpt-4o" {
		t.Fatal(err)
	}
	if len(sent.Messages) >= len(msgs) || !bytes.Equal(sent.Messages[len(sent.Messages)-1], msgs[len(msgs)-1]) {
		t.Fatalf("upstream got %d of %d messages", len(sent.Messages), len(msgs))
	}
	written := 0 // sliding's marker of what it dropped
	for _, m := range sent.Messages {
		if !contains(msgs, m) {
			written++
		}
	}
	if written > 1 {
		t.Errorf("%d forwarded messages are not the caller's, byte for byte", written)
	}
	st := td.status(t, resp.Header.Get(proxy.HeaderConversation))
	if st.Compactions != 1 || st.MessagesAfter != len(sent.Messages) || st.TokensSaved <= 0 || st.NeedsCompaction {
		t.Fatalf("status %+v", st)
	}
	// The status page's record of the compaction, as for /v1/compact.
	d := st.LastCompaction
	if d == nil || d.MessagesBefore != len(msgs) || d.MessagesAfter != len(sent.Messages) || d.Model != "gpt-4o" ||
		len(d.Pipeline) != 1 || d.Pipeline[0] != "sliding" || len(d.Rows) == 0 {
		t.Fatalf("last compaction %+v", d)
	}
	kinds := map[string]bool{}
	for _, r := range d.Rows {
		kinds[r.Kind] = true
	}
	if !kinds[client.RowKept] || !kinds[client.RowSummarized] && !kinds[client.RowDropped] {
		t.Fatalf("rows %+v", d.Rows)
	}
}

// TestProxyDeferredTrigger: the provider's usage (here raised by large
// tool definitions compactd does not count) flags the conversation, and
// the next request is compacted.
func TestProxyDeferredTrigger(t *testing.T) {
	t.Parallel()
	msgs, n := tauMessages(t, 24000)
	tools := `,"tools":[{"type":"function","function":{"name":"lookup","description":"` + strings.Repeat("a ", n) + `","parameters":{"type":"object"}}}]`
	window := n * 8 / 5 // the messages alone are 62%: no pre-flight trigger; with the tools, 94%
	td, up := proxyDaemon(t, fmt.Sprintf("  context_window: %d\n", window), pluginSliding)
	id := map[string]string{proxy.HeaderConversation: "deferred"}
	resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(msgs, tools), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
		t.Fatalf("first request: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	before := td.status(t, "deferred")
	if !before.NeedsCompaction || before.UsageRatio < 0.8 || before.Compactions != 0 {
		t.Fatalf("after the first response: %+v", before)
	}
	// The agent appends the answer and a new question.
	next := append(append([]json.RawMessage(nil), msgs...),
		json.RawMessage(`{"role":"assistant","content":"noted"}`), json.RawMessage(`{"role":"user","content":"and now?"}`))
	resp, got = td.post(t, proxy.RouteOpenAI, openAIBody(next, tools), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("second request: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	var sent struct {
		Messages []json.RawMessage `json:"messages"`
	}
	json.Unmarshal(up.Last().Body, &sent)
	after := td.status(t, "deferred")
	if len(sent.Messages) >= len(next) || after.Compactions != 1 || after.MessagesAfter != len(sent.Messages) || after.Requests != 2 ||
		after.NeedsCompaction || after.UsageRatio >= 0.8 {
		t.Fatalf("upstream got %d of %d; status %+v", len(sent.Messages), len(next), after)
	}
	b1, _ := json.MarshalIndent(before, "", "  ")
	b2, _ := json.MarshalIndent(after, "", "  ")
	t.Logf("status after the first response:\n%s\nafter the compacted request:\n%s", b1, b2)
}

// anthropicBody builds a Messages request from chat messages.
func anthropicBody(t *testing.T, raw []json.RawMessage, extra string) ([]byte, []json.RawMessage) {
	t.Helper()
	c, err := chat.FromRaw(raw)
	if err != nil {
		t.Fatal(err)
	}
	sys, msgs, err := anthropic.FromChat(c.Messages)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":1024`)
	if sys != nil {
		b.WriteString(`,"system":`)
		b.Write(sys)
	}
	b.WriteString(`,"messages":[`)
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString("]" + extra + "}")
	return b.Bytes(), msgs
}

func TestProxyAnthropic(t *testing.T) {
	t.Parallel()
	raw, n := tauMessages(t, 12000)
	td, up := proxyDaemon(t, fmt.Sprintf("  context_window: %d\n", n*3), pluginSliding)
	body, msgs := anthropicBody(t, raw, "")

	// Below the threshold: byte for byte, JSON answer, usage recorded.
	resp, got := td.post(t, proxy.RouteAnthropic, body, map[string]string{"anthropic-beta": "x-1"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	if last := up.Last(); !bytes.Equal(last.Body, body) || last.Header.Get("anthropic-beta") != "x-1" {
		t.Fatalf("upstream got another body or lost a header")
	}
	id := resp.Header.Get(proxy.HeaderConversation)
	st := td.status(t, id)
	if st.Provider != proxy.Anthropic || st.LastUsage == nil || st.LastUsage.CacheReadTokens == 0 || st.Messages != len(msgs) {
		t.Fatalf("status %+v", st)
	}

	// Streamed, over the threshold: compacted, valid for the API (the
	// upstream checks tool_use/tool_result pairing), usage from the stream.
	td2, up2 := proxyDaemon(t, fmt.Sprintf("  context_window: %d\n", n), pluginSliding)
	body, msgs = anthropicBody(t, raw, `,"stream":true`)
	resp, got = td2.post(t, proxy.RouteAnthropic, body, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	events := sseEvents(t, got)
	if len(events) < 5 || !strings.Contains(events[0], `"message_start"`) || !strings.Contains(events[len(events)-1], `"message_stop"`) {
		t.Fatalf("events %v", events)
	}
	var sent struct {
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
	}
	json.Unmarshal(up2.Last().Body, &sent)
	if len(sent.Messages) >= len(msgs) || !bytes.Equal(sent.Messages[len(sent.Messages)-1], msgs[len(msgs)-1]) {
		t.Fatalf("upstream got %d of %d messages", len(sent.Messages), len(msgs))
	}
	st = td2.status(t, resp.Header.Get(proxy.HeaderConversation))
	if st.Compactions != 1 || st.LastUsage == nil || st.LastUsage.OutputTokens == 0 || st.MessagesAfter != len(sent.Messages) {
		t.Fatalf("status %+v", st)
	}
	// The record shows what policies saw: the chat form, system prompt first.
	if d := st.LastCompaction; d == nil || len(d.Rows) == 0 || d.Rows[0].Kind != client.RowKept || d.Rows[0].Before[0].Role != "system" {
		t.Fatalf("last compaction %+v", d)
	}
}

func TestProxyFailedCompactionForwardsUncompacted(t *testing.T) {
	t.Parallel()
	msgs, n := tauMessages(t, 6000)
	for _, tc := range []struct{ name, extra, warning string }{
		{"plugin traps", "  policy: gohostile\n", "gohostile"},
		{"unknown policy", "  policy: nosuch\n", "unknown policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td, up := proxyDaemon(t, fmt.Sprintf("  context_window: %d\n%s", n, tc.extra), pluginSliding, pluginGohostile)
			body := openAIBody(msgs, "")
			resp, got := td.post(t, proxy.RouteOpenAI, body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the agent's call failed: %d %s", resp.StatusCode, got)
			}
			w := strings.Join(resp.Header.Values(proxy.HeaderWarning), " | ")
			if resp.Header.Get(proxy.HeaderCompacted) != "" || !strings.Contains(w, tc.warning) {
				t.Fatalf("headers %v", resp.Header)
			}
			if !bytes.Equal(up.Last().Body, body) {
				t.Fatal("the request was not forwarded unchanged")
			}
		})
	}
}

func TestProxyUpstreamFailures(t *testing.T) {
	t.Parallel()
	td, _ := proxyDaemon(t, "  timeout: 1s\n", pluginSliding)
	body := openAIBody(chatMessages(1), "")

	// A 5xx (and its body) reaches the caller as the provider sent it.
	resp, got := td.post(t, proxy.RouteOpenAI, body, map[string]string{"X-Upstream-Status": "503"})
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(got), "told to answer 503") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	aBody, _ := anthropicBody(t, chatMessages(1), "")
	resp, got = td.post(t, proxy.RouteAnthropic, aBody, map[string]string{"X-Upstream-Status": "529"})
	if resp.StatusCode != 529 || !strings.Contains(string(got), `"type":"error"`) {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	if resp.Header.Get(proxy.HeaderUpstream) != proxy.Anthropic {
		t.Fatalf("the upstream's error is not marked as the upstream's: %v", resp.Header)
	}
	// Slower than proxy.timeout: 504 in the provider's format, compactd's
	// own (no upstream marker), long before the upstream would answer
	// (a bound a busy machine keeps).
	start := time.Now()
	resp, got = td.post(t, proxy.RouteOpenAI, body, map[string]string{"X-Upstream-Delay": "2m"})
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(got), `"code":"upstream_timeout"`) || time.Since(start) > time.Minute ||
		resp.Header.Get(proxy.HeaderUpstream) != "" {
		t.Fatalf("%d %v %s after %v", resp.StatusCode, resp.Header, got, time.Since(start))
	}
	resp, got = td.post(t, proxy.RouteAnthropic, aBody, map[string]string{"X-Upstream-Delay": "2m"})
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(got), "compactd (upstream_timeout)") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}

	// Nobody listening: 502 in each provider's format.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	td2 := setup(t, fmt.Sprintf("proxy: {openai: {upstream: 'http://%s/v1'}, anthropic: {upstream: 'http://%s'}}\n", dead, dead), pluginSliding).start(t)
	resp, got = td2.post(t, proxy.RouteOpenAI, body, nil)
	var oe struct {
		Error struct{ Code, Type, Message string } `json:"error"`
	}
	if resp.StatusCode != http.StatusBadGateway || json.Unmarshal(got, &oe) != nil || oe.Error.Code != "upstream_unreachable" || !strings.Contains(oe.Error.Message, "refused") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	resp, got = td2.post(t, proxy.RouteAnthropic, aBody, nil)
	var ae struct {
		Type  string
		Error struct{ Type, Message string } `json:"error"`
	}
	if resp.StatusCode != http.StatusBadGateway || json.Unmarshal(got, &ae) != nil || ae.Type != "error" || ae.Error.Type != "api_error" {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
}

func TestProxyTCPAuth(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	base := "http://" + td.TCPAddr()
	tcp := tcpHTTP(t)
	send := func(method, path string, body []byte, h map[string]string) (int, string) {
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := tcp.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	body := openAIBody(chatMessages(1), "")
	providerKey := "Bearer " + upstreamtest.OpenAIKey
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
		want               int
		contains           string
	}{
		{"proxy without token", "POST", proxy.RouteOpenAI, map[string]string{"Authorization": providerKey}, 401, proxy.HeaderToken},
		{"proxy with compactd's token as bearer", "POST", proxy.RouteOpenAI, map[string]string{"Authorization": "Bearer " + proxyToken}, 401, `"code":"unauthorized"`},
		{"proxy wrong token", "POST", proxy.RouteOpenAI, map[string]string{"Authorization": providerKey, proxy.HeaderToken: "nope"}, 401, "compactd"},
		{"proxy", "POST", proxy.RouteOpenAI, map[string]string{"Authorization": providerKey, proxy.HeaderToken: proxyToken}, 200, "echo: last question"},
		{"anthropic proxy without token", "POST", proxy.RouteAnthropic, map[string]string{"x-api-key": upstreamtest.AnthropicKey, "anthropic-version": "2023-06-01"}, 401, `"authentication_error"`},
		{"forwarded anthropic path without token", "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": upstreamtest.AnthropicKey, "anthropic-version": "2023-06-01"}, 401, `"authentication_error"`},
		{"forwarded path without token", "GET", "/v1/models", map[string]string{"Authorization": providerKey}, 401, proxy.HeaderToken},
		{"forwarded path", "GET", "/v1/models", map[string]string{"Authorization": providerKey, proxy.HeaderToken: proxyToken}, 200, `"gpt-4o"`},
		{"api with bearer", "GET", "/healthz", map[string]string{"Authorization": "Bearer " + proxyToken}, 200, `"ok"`},
		// compactd's own endpoints under /v1/ are not the proxy's, whatever
		// upstreams are configured.
		{"api under /v1/ with bearer", "GET", "/v1/status", map[string]string{"Authorization": "Bearer " + proxyToken}, 200, `"conversations"`},
		{"api under /v1/ with header", "GET", "/v1/policies", map[string]string{proxy.HeaderToken: proxyToken}, 200, `"sliding"`},
		{"api under /v1/ without", "GET", "/v1/status", nil, 401, `"code":"unauthorized"`},
		{"api with header", "GET", "/healthz", map[string]string{proxy.HeaderToken: proxyToken}, 200, `"ok"`},
		{"healthz without a token: the status alone", "GET", "/healthz", nil, 200, `{"status":"ok"}`},
		{"healthz with a wrong token: the status alone", "GET", "/healthz", map[string]string{"Authorization": "Bearer nope"}, 200, `{"status":"ok"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got := send(tc.method, tc.path, body, tc.header)
			if code != tc.want || !strings.Contains(got, tc.contains) {
				t.Fatalf("%d %s", code, got)
			}
		})
	}
	for _, r := range up.Received() {
		if r.Header.Get(proxy.HeaderToken) != "" || strings.Contains(fmt.Sprint(r.Header), proxyToken) {
			t.Fatalf("compactd's token reached the provider: %v", r.Header)
		}
	}
}

func TestProxyForwardsOtherPaths(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	code, body, h := td.rawWith(t, "GET", "/v1/models?limit=5", "", map[string]string{"Authorization": "Bearer " + upstreamtest.OpenAIKey})
	if code != 200 || !strings.Contains(string(body), `"gpt-4o"`) || up.Last().Path != "/v1/models" || h.Get(proxy.HeaderUpstream) != proxy.OpenAI {
		t.Fatalf("openai models: %d %v %s", code, h, body)
	}
	code, body, _ = td.rawWith(t, "GET", "/v1/models", "", map[string]string{"x-api-key": upstreamtest.AnthropicKey, "anthropic-version": "2023-06-01"})
	if code != 200 || !strings.Contains(string(body), `"claude-sonnet-4-5"`) {
		t.Fatalf("anthropic models: %d %s", code, body)
	}
	// compactd's own endpoints are never forwarded.
	if code, _, _ := td.rawWith(t, "GET", "/v1/status", "", nil); code != 200 {
		t.Fatalf("status: %d", code)
	}

	// Without an upstream for that provider: not found, as before.
	td2 := setup(t, "proxy: {anthropic: {upstream: '"+up.AnthropicBase()+"'}}\n", pluginSliding).start(t)
	code, body, _ = td2.rawWith(t, "GET", "/v1/models", "", nil)
	if c, _ := errorCode(t, body); code != 404 || c != CodeNotFound {
		t.Fatalf("%d %s", code, body)
	}
	resp, got := td2.post(t, proxy.RouteOpenAI, openAIBody(chatMessages(1), ""), nil)
	if resp.StatusCode != 404 || !strings.Contains(string(got), "proxy_off") || !strings.Contains(string(got), "COMPACTD_OPENAI_UPSTREAM") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	// And the other way round.
	td3 := setup(t, "proxy: {openai: {upstream: '"+up.OpenAIBase()+"'}}\n", pluginSliding).start(t)
	aBody, _ := anthropicBody(t, chatMessages(1), "")
	resp, got = td3.post(t, proxy.RouteAnthropic, aBody, nil)
	if resp.StatusCode != 404 || !strings.Contains(string(got), "compactd (proxy_off)") || !strings.Contains(string(got), "COMPACTD_ANTHROPIC_UPSTREAM") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
}

// rawWith is raw with request headers.
func (td *testDaemon) rawWith(t *testing.T, method, path, body string, h map[string]string) (int, []byte, http.Header) {
	t.Helper()
	resp, b := td.do(t, method, path, []byte(body), h)
	return resp.StatusCode, b, resp.Header
}

func TestProxyManualCompaction(t *testing.T) {
	t.Parallel()
	raw, _ := tauMessages(t, 12000)
	td, up := proxyDaemon(t, "", pluginSliding)
	for _, tc := range []struct {
		name, route string
		body        []byte
		n           int
	}{
		{"openai", proxy.RouteOpenAI, openAIBody(raw, ""), len(raw)},
		{"anthropic", proxy.RouteAnthropic, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, n := tc.body, tc.n
			if body == nil {
				var msgs []json.RawMessage
				body, msgs = anthropicBody(t, raw, "")
				n = len(msgs)
			}
			id := "manual-" + tc.name
			resp, _ := td.post(t, tc.route, body, map[string]string{proxy.HeaderConversation: id})
			if resp.Header.Get(proxy.HeaderCompacted) != "" {
				t.Fatal("compacted before being asked")
			}
			code, out, _ := td.raw(t, "POST", "/v1/compact", `{"conversation_id":"`+id+`"}`)
			var cr client.CompactResponse
			if code != 200 || json.Unmarshal(out, &cr) != nil || !cr.Compacted || cr.Format != tc.name || len(cr.Messages) >= n {
				t.Fatalf("%d %s", code, out)
			}
			if tc.name == "anthropic" && len(cr.System) == 0 {
				t.Fatal("no system in the Anthropic answer")
			}
			st := td.status(t, id)
			d := st.LastCompaction // in chat form, as the policies saw it
			if st.Compactions != 1 || !st.NeedsCompaction || d == nil || d.MessagesAfter >= d.MessagesBefore ||
				tc.name == "openai" && d.MessagesAfter != len(cr.Messages) {
				t.Fatalf("status %+v, last compaction %+v", st, d)
			}
			// The agent's next request, its whole history again, is compacted.
			resp, _ = td.post(t, tc.route, body, map[string]string{proxy.HeaderConversation: id})
			var sent struct {
				Messages []json.RawMessage `json:"messages"`
			}
			json.Unmarshal(up.Last().Body, &sent)
			if resp.Header.Get(proxy.HeaderCompacted) != "true" || len(sent.Messages) != len(cr.Messages) {
				t.Fatalf("next request: %v, upstream got %d messages, manual compaction gave %d", resp.Header, len(sent.Messages), len(cr.Messages))
			}
		})
	}
	code, out, _ := td.raw(t, "POST", "/v1/compact", `{"conversation_id":"never-proxied"}`)
	if c, _ := errorCode(t, out); code != 404 || c != CodeNotFound {
		t.Fatalf("%d %s", code, out)
	}
	// The proxy's last requests are held in the daemon's one memory, the
	// one /v1/compact reads conversations through.
	n, size := td.server.opts.Proxy.Stored()
	if st := td.server.opts.Memory.Stats(); st.Requests != 2 || n != 2 || st.RequestBytes != size || size == 0 {
		t.Fatalf("memory %+v, proxy stored %d (%d bytes)", st, n, size)
	}
}

func TestProxyBadRequestsAreForwarded(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	for _, body := range []string{`{"model":"gpt-4o","messages":"nope"}`, `not json`, `{"model":"gpt-4o","messages":[{"role":"tool","content":"x"}]}`} {
		resp, got := td.post(t, proxy.RouteOpenAI, []byte(body), nil)
		// The provider judges the request and answers the caller itself.
		if resp.StatusCode != http.StatusBadRequest || string(up.Last().Body) != body || !strings.Contains(string(got), "invalid_request_error") {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, got)
		}
	}
	// A malformed conversation header is compactd's to refuse.
	resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(chatMessages(1), ""), map[string]string{proxy.HeaderConversation: strings.Repeat("x", 300)})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), proxy.HeaderConversation) || resp.Header.Get(proxy.HeaderUpstream) != "" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	aBody, _ := anthropicBody(t, chatMessages(1), "")
	resp, got = td.post(t, proxy.RouteAnthropic, aBody, map[string]string{proxy.HeaderConversation: "tab\there"})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), "compactd (bad_request)") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
}

// TestCompactAnthropicFormat: /v1/compact takes an Anthropic conversation
// with "format": "anthropic" and answers in that format.
func TestCompactAnthropicFormat(t *testing.T) {
	t.Parallel()
	raw, _ := tauMessages(t, 12000)
	td, _ := proxyDaemon(t, "", pluginSliding)
	body, msgs := anthropicBody(t, raw, "")
	var req struct {
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
	}
	json.Unmarshal(body, &req)
	in, _ := json.Marshal(map[string]any{"format": "anthropic", "system": req.System, "messages": msgs, "model": "claude-sonnet-4-5"})
	code, out, _ := td.raw(t, "POST", "/v1/compact", string(in))
	var cr client.CompactResponse
	if code != 200 || json.Unmarshal(out, &cr) != nil || !cr.Compacted || cr.Format != "anthropic" || !bytes.Equal(cr.System, req.System) {
		t.Fatalf("%d %s", code, out)
	}
	if len(cr.Messages) >= len(msgs) || !bytes.Equal(cr.Messages[len(cr.Messages)-1], msgs[len(msgs)-1]) {
		t.Fatalf("%d of %d messages", len(cr.Messages), len(msgs))
	}
	// The provider accepts the result (tool_use/tool_result pairing intact).
	fwd, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "system": cr.System, "messages": cr.Messages})
	resp, got := td.post(t, proxy.RouteAnthropic, fwd, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("the upstream refused the compacted conversation: %s", got)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"format":"gemini","messages":[{"role":"user","content":"x"}]}`, "format"},
		{`{"system":"s","messages":[{"role":"user","content":"x"}]}`, "system"},
		{`{"format":"anthropic","messages":[{"role":"system","content":"x"}]}`, "role"},
	} {
		code, out, _ := td.raw(t, "POST", "/v1/compact", tc.body)
		c, msg := errorCode(t, out)
		if code != 400 || (c != CodeBadRequest && c != CodeInvalidConversation) || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %s", tc.body, code, out)
		}
	}
}

// TestProxySummarizerModel: a proxied compaction's LLM calls go to the
// configured summarizer model (llm.model), not the model the agent's
// request names — the original llms extension sent them to the latter.
func TestProxySummarizerModel(t *testing.T) {
	t.Parallel()
	provider := &fakeOpenAI{}
	srv := httptest.NewServer(provider)
	defer srv.Close()
	up := upstreamtest.New()
	defer up.Close()
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("policy: llm\ncompact: {token_threshold: 2000, retention_window: 4}\n"+llmCallLimit+
		"llm: {provider: openai, base_url: %s, model: summarizer-1}\nproxy: {openai: {upstream: '%s'}, trigger_tokens: 2000}\n", srv.URL, up.OpenAIBase())
	td := setup(t, cfg, "plugins/llm").start(t)
	// The recording ends with the agent's tool call; a request ends
	// before it, as OpenAI refuses a call without its result.
	raw := convs[0].Chat.Raw
	for n := len(raw); n > 0; n-- {
		if m := convs[0].Chat.Messages[n-1]; m.Role != "assistant" || len(m.ToolCalls) == 0 {
			raw = raw[:n]
			break
		}
	}
	resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(raw, ""), nil)
	if resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	calls := provider.calls()
	if len(calls) == 0 {
		t.Fatal("the summarizer was not called")
	}
	for _, m := range calls {
		if m != "summarizer-1" {
			t.Fatalf("the summarizer was asked for %q, want llm.model (summarizer-1), not the agent's gpt-4o", m)
		}
	}
}
