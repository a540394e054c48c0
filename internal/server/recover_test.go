package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/provider"
	"github.com/compactd/compactd/internal/proxy"
)

// TestProxyRecoversFromContextOverflow: the local provider refuses
// prompts past 150 tokens with each API's real context-length error; the
// proxy compacts (sliding, ignoring the trigger: the conversation is far
// below the threshold), retries once, and the agent gets the retry's
// answer marked X-Compactd-Recovered, streamed too. The recovery is in
// the conversation's status and /metrics, and OpenAI's stated limit
// becomes the window of later threshold decisions.
func TestProxyRecoversFromContextOverflow(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	msgs := chatMessages(21) // 44 messages, about 300 tokens by the provider's count
	anth, _ := anthropicBody(t, msgs, "")
	resp := responsesBody(msgs[1:], "")
	for _, c := range []struct {
		name, route string
		body        []byte
		stream      bool
	}{
		{"chat", proxy.RouteOpenAI, openAIBody(msgs, ""), false},
		{"chat-stream", proxy.RouteOpenAI, openAIBody(msgs, `,"stream":true`), true},
		{"messages", proxy.RouteAnthropic, anth, false},
		{"messages-stream", proxy.RouteAnthropic, bytes.Replace(anth, []byte(`"max_tokens":1024`), []byte(`"max_tokens":1024,"stream":true`), 1), true},
		{"responses", proxy.RouteResponses, resp, false},
		{"responses-stream", proxy.RouteResponses, responsesBody(msgs[1:], `,"stream":true`), true},
	} {
		id := "overflow-" + c.name
		h := map[string]string{proxy.HeaderConversation: id, provider.HeaderContextLimit: "150"}
		// A model of its own per case: a limit learned in one is not the next one's.
		body := bytes.Replace(c.body, []byte(`"model":"`), []byte(`"model":"`+c.name+`-`), 1)
		r, got := td.post(t, c.route, body, h)
		if r.StatusCode != http.StatusOK || r.Header.Get(proxy.HeaderRecovered) != proxy.RecoveredOverflow || r.Header.Get(proxy.HeaderCompacted) != "true" {
			t.Fatalf("%s: want the retry's answer marked recovered: %d %v %s", c.name, r.StatusCode, r.Header, got)
		}
		if c.stream != strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%s: content type %q", c.name, r.Header.Get("Content-Type"))
		}
		if len(up.Last().Body) >= len(body) {
			t.Fatalf("%s: the retry sent %d bytes of %d", c.name, len(up.Last().Body), len(body))
		}
		st := td.status(t, id)
		if st.Recoveries != 1 || st.LastUsage == nil || st.NeedsCompaction {
			t.Fatalf("%s: status after the recovery: %+v", c.name, st)
		}
		t.Logf("%s: refused at %d bytes (limit 150 tokens), retried with %d bytes; status: %d→%d messages, %d→%d tokens, provider's usage %d input tokens, recoveries %d",
			c.name, len(body), len(up.Last().Body), st.Messages, st.MessagesAfter, st.Tokens, st.TokensAfter, st.LastUsage.InputTokens, st.Recoveries)
	}
	// OpenAI's error stated 150: the next chat request of that model is
	// compacted by the pre-flight count against the learned window.
	learned := bytes.Replace(openAIBody(msgs, ""), []byte(`"model":"`), []byte(`"model":"chat-`), 1)
	r, got := td.post(t, proxy.RouteOpenAI, learned, map[string]string{proxy.HeaderConversation: "after-learning"})
	if r.StatusCode != http.StatusOK || r.Header.Get(proxy.HeaderCompacted) != "true" || r.Header.Get(proxy.HeaderRecovered) != "" {
		t.Fatalf("after learning the limit: want a pre-flight compaction: %d %v %s", r.StatusCode, r.Header, got)
	}
	if st := td.status(t, "after-learning"); st.ContextWindow != 150 {
		t.Fatalf("learned window: %+v", st)
	}
	_, metrics := td.do(t, http.MethodGet, "/metrics", nil, nil)
	for _, want := range []string{
		`compactd_proxy_overflow_recoveries_total{provider="openai",outcome="recovered"} 4`,
		`compactd_proxy_overflow_recoveries_total{provider="anthropic",outcome="recovered"} 2`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("metrics lack %s:\n%s", want, metrics)
		}
	}
}

// TestProxyOverflowRetryFailsOnce: an upstream that refuses the retry too
// (a 413 for any body over 10 bytes) gets exactly two requests, and the
// agent gets the second error as the upstream gave it, in every wire
// format; an error that is
// not about length is passed on without a retry; with
// proxy.recover_overflow off nothing is retried.
func TestProxyOverflowRetryFailsOnce(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	msgs := chatMessages(21)
	anth, _ := anthropicBody(t, msgs, "")
	for _, c := range []struct {
		name, route, provider string
		body                  []byte
	}{
		{"chat", proxy.RouteOpenAI, "openai", openAIBody(msgs, "")},
		{"messages", proxy.RouteAnthropic, "anthropic", anth},
		{"responses", proxy.RouteResponses, "openai", responsesBody(msgs[1:], "")},
	} {
		up.Reset()
		id := "too-large-" + c.name
		r, got := td.post(t, c.route, c.body, map[string]string{proxy.HeaderConversation: id, provider.HeaderMaxBytes: "10"})
		if r.StatusCode != http.StatusRequestEntityTooLarge || r.Header.Get(proxy.HeaderRecovered) != "" || r.Header.Get(proxy.HeaderUpstream) != c.provider {
			t.Fatalf("%s: want the retry's 413 passed on: %d %v %s", c.name, r.StatusCode, r.Header, got)
		}
		rec := up.Received()
		if len(rec) != 2 || len(rec[1].Body) >= len(rec[0].Body) {
			t.Fatalf("%s: the upstream got %d requests, want the request and one compacted retry: %v %s", c.name, len(rec), r.Header, got)
		}
		var e struct {
			Error struct{ Type, Message string }
		}
		if json.Unmarshal(got, &e) != nil || e.Error.Type != "request_too_large" || !strings.Contains(e.Error.Message, "(10)") {
			t.Fatalf("%s: the second error must come unchanged: %s", c.name, got)
		}
		if st := td.status(t, id); st.Recoveries != 1 {
			t.Fatalf("%s: status: %+v", c.name, st)
		}
	}

	up.Reset()
	r, got := td.post(t, proxy.RouteOpenAI, openAIBody(msgs, ""), map[string]string{proxy.HeaderConversation: "other-400", "X-Upstream-Status": "400"})
	if r.StatusCode != http.StatusBadRequest || len(up.Received()) != 1 {
		t.Fatalf("a 400 that is not about length: %d, %d upstream requests: %s", r.StatusCode, len(up.Received()), got)
	}
	_, metrics := td.do(t, http.MethodGet, "/metrics", nil, nil)
	for _, want := range []string{`compactd_proxy_overflow_recoveries_total{provider="openai",outcome="retry_failed"} 2`,
		`compactd_proxy_overflow_recoveries_total{provider="anthropic",outcome="retry_failed"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("metrics lack %s:\n%s", want, metrics)
		}
	}

	off, up2 := proxyDaemon(t, "  recover_overflow: false\n", pluginSliding)
	r, got = off.post(t, proxy.RouteOpenAI, openAIBody(msgs, ""), map[string]string{provider.HeaderContextLimit: "150"})
	if r.StatusCode != http.StatusBadRequest || len(up2.Received()) != 1 || !strings.Contains(string(got), "context_length_exceeded") {
		t.Fatalf("recovery off: %d, %d upstream requests: %s", r.StatusCode, len(up2.Received()), got)
	}
}
