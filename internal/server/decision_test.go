package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/proxy"
)

// TestProxyHostDecisionOverrulesThePolicy is the trigger's repro: a
// 44-message conversation the provider's usage puts at 94% of the window
// (large tool definitions compactd does not count) while compactd's count
// of its messages is far below ledger's min_tokens. The host's decision
// reaches the policy (context.compact), so the next request goes upstream
// compacted; the turn after it keeps the same ledger prefix (the forced
// jump is remembered in the policy's state).
func TestProxyHostDecisionOverrulesThePolicy(t *testing.T) {
	t.Parallel()
	const window = 4000
	msgs := chatMessages(21) // system, 21 question/answer pairs, a question: 44 messages
	if len(msgs) != 44 {
		t.Fatalf("%d messages, want 44", len(msgs))
	}
	// The local provider counts a quarter of the tools' JSON bytes: about
	// 3,400 tokens, which with the messages' ~300 is 94% of the window.
	tools := `,"tools":[{"type":"function","function":{"name":"lookup","description":"` + strings.Repeat("a ", 6800) + `","parameters":{"type":"object"}}}]`
	td, up := proxyDaemon(t, fmt.Sprintf("  policy: ledger\n  context_window: %d\n", window), pluginLedger)
	id := map[string]string{proxy.HeaderConversation: "decided"}

	resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(msgs, tools), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
		t.Fatalf("first request: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	before := td.status(t, "decided")
	if !before.NeedsCompaction || before.UsageRatio < 0.9 || before.Tokens >= 3000 {
		t.Fatalf("after the first response: want the provider's usage >= 0.9 and compactd's count below ledger's min_tokens (3000): %+v", before)
	}

	sent := func() []json.RawMessage {
		var body struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(up.Last().Body, &body); err != nil {
			t.Fatal(err)
		}
		return body.Messages
	}
	next := append(append([]json.RawMessage(nil), msgs...),
		json.RawMessage(`{"role":"assistant","content":"noted"}`), json.RawMessage(`{"role":"user","content":"and now?"}`))
	resp, got = td.post(t, proxy.RouteOpenAI, openAIBody(next, tools), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("second request: want it compacted: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	second := sent()
	if len(second) >= len(next)/4 {
		t.Fatalf("upstream got %d of %d messages", len(second), len(next))
	}
	if string(second[0]) != string(next[0]) || string(second[1]) != string(next[1]) || string(second[len(second)-1]) != string(next[len(next)-1]) {
		t.Fatalf("the system prompt, the task and the newest turn must stay verbatim: %s", second)
	}

	// The next turn: the ledger made by the forced jump stays as it was
	// (the prompt cache keeps its prefix).
	third := append(append([]json.RawMessage(nil), next...),
		json.RawMessage(`{"role":"assistant","content":"done"}`), json.RawMessage(`{"role":"user","content":"thanks, one more?"}`))
	resp, got = td.post(t, proxy.RouteOpenAI, openAIBody(third, tools), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("third request: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	after := sent()
	for i := 0; i < 3; i++ {
		if string(after[i]) != string(second[i]) {
			t.Fatalf("message %d of the prefix changed between the compacted turns:\n%s\n%s", i, second[i], after[i])
		}
	}
	t.Logf("44 messages at %.0f%% of the window by the provider's usage, %d by compactd's count: sent %d, then %d", 100*before.UsageRatio, before.Tokens, len(second), len(after))
}
