package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/anthropic"
)

const pluginLedger = "plugins/ledger"

// sweConversation returns the longest mini-swe-agent fixture
// conversation's messages, the task's content turned into content parts.
func sweConversation(t *testing.T) []json.RawMessage {
	t.Helper()
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	best := convs[0].Chat
	for _, c := range convs {
		if c.Chat.Len() > best.Len() {
			best = c.Chat
		}
	}
	raw := append([]json.RawMessage(nil), best.Raw...)
	// The task as content parts: a breakpoint goes on its last part.
	task, _ := json.Marshal(map[string]any{"role": "user", "content": []map[string]string{
		{"type": "text", "text": best.Messages[1].Text()}, {"type": "text", "text": "(second part)"}}})
	raw[1] = task
	return raw
}

// TestCacheBreakpoints: with "cache_breakpoints": true the answer carries
// the default policy's (ledger's) breakpoints as Anthropic cache_control
// on the marked messages — on the last content part of one whose content
// is an array — and lists them; every other message is byte for byte what
// the policy returns without the flag, which adds no cache_control at all.
func TestCacheBreakpoints(t *testing.T) {
	t.Parallel()
	td := setup(t, "", pluginLedger).start(t)
	// A long conversation: on the interpreter that serves a new plugin
	// first, ledger can run past its call limit under -race.
	waitCompiled(t, td.c)
	msgs := sweConversation(t)
	post := func(flag bool) (*client.CompactResponse, []byte) {
		resp, err := td.c.Compact(bg, &client.CompactRequest{Messages: msgs, CacheBreakpoints: flag})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(resp)
		return resp, b
	}
	plain, plainBody := post(false)
	if !plain.Compacted || plain.Stats.Stages[0].Policy != "ledger" {
		t.Fatalf("the default policy did not compact: %+v", plain.Stats)
	}
	if bytes.Contains(plainBody, []byte("cache_control")) || plain.CacheBreakpoints != nil {
		t.Fatal("breakpoints without the flag")
	}
	marked, _ := post(true)
	// ledger marks the task, the end of its stable messages and its newest
	// (fewer where they fall on one message): one to three, within
	// Anthropic's four markers.
	if n := len(marked.CacheBreakpoints); n < 1 || n > 3 || len(marked.Messages) != len(plain.Messages) {
		t.Fatalf("breakpoints %v on %d messages", marked.CacheBreakpoints, len(marked.Messages))
	}
	for i := range plain.Messages {
		isMark := false
		for _, m := range marked.CacheBreakpoints {
			isMark = isMark || m == i
		}
		want := plain.Messages[i]
		if isMark {
			b, err := chat.MarkCacheBreakpoint(want)
			if err != nil {
				t.Fatal(err)
			}
			want = b
		}
		if !bytes.Equal(marked.Messages[i], want) {
			t.Fatalf("message %d:\n got %s\nwant %s", i, marked.Messages[i], want)
		}
	}
	// The task (content parts), when it is among them, is marked on its
	// last part; the newest breakpoint is one of ledger's messages, which
	// come after the task and before the newest turn.
	task := -1
	for i, m := range plain.Messages {
		if bytes.HasPrefix(m, []byte(`{"role":"user"`)) {
			task = i
			break
		}
	}
	for _, bp := range marked.CacheBreakpoints {
		if bp != task {
			continue
		}
		got := string(marked.Messages[bp])
		if !strings.Contains(got, `{"text":"(second part)","type":"text","cache_control":{"type":"ephemeral"}}]`) || strings.Count(got, "cache_control") != 1 {
			t.Fatalf("task %s", got[len(got)-120:])
		}
	}
	if newest := marked.CacheBreakpoints[len(marked.CacheBreakpoints)-1]; newest <= task || newest >= len(marked.Messages)-1 {
		t.Fatalf("the newest breakpoint %d is not a ledger message (task %d, %d messages)", newest, task, len(marked.Messages))
	}
	// A flag of the wrong type is a clear error.
	status, b, _ := td.raw(t, "POST", "/v1/compact", `{"cache_breakpoints":"yes","messages":[{"role":"user","content":"hi"}]}`)
	if code, _ := errorCode(t, b); status != 400 || code != CodeInvalidJSON {
		t.Fatalf("status %d code %s", status, code)
	}
}

// anthropicSWE is sweConversation in Anthropic's format: its system
// prompt as a block the agent marked, its messages converted.
func anthropicSWE(t *testing.T) (system json.RawMessage, msgs []json.RawMessage) {
	t.Helper()
	c, err := chat.FromRaw(sweConversation(t))
	if err != nil {
		t.Fatal(err)
	}
	sys, msgs, err := anthropic.FromChat(c.Messages)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	json.Unmarshal(sys, &text)
	system, _ = json.Marshal([]map[string]any{{"type": "text", "text": text, "cache_control": map[string]string{"type": "ephemeral"}}})
	return system, msgs
}

// TestCacheBreakpointsAnthropic: in Anthropic's format the breakpoints
// land on the content block where the policy's message ends, and the
// request never carries more than Anthropic's four markers.
func TestCacheBreakpointsAnthropic(t *testing.T) {
	t.Parallel()
	td := setup(t, "", pluginLedger).start(t)
	// A long conversation: on the interpreter that serves a new plugin
	// first, ledger can run past its call limit under -race.
	waitCompiled(t, td.c)
	system, msgs := anthropicSWE(t)
	resp, err := td.c.Compact(bg, &client.CompactRequest{Format: FormatAnthropic, System: system, Messages: msgs, CacheBreakpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.CacheBreakpoints); !resp.Compacted || n < 1 || n > 3 {
		t.Fatalf("compacted %v, breakpoints %v", resp.Compacted, resp.CacheBreakpoints)
	}
	total := wire.CountCacheControls(resp.System)
	for i, m := range resp.Messages {
		n := wire.CountCacheControls(m)
		total += n
		marked := false
		for _, b := range resp.CacheBreakpoints {
			marked = marked || b == i
		}
		// Several of ledger's chat messages can make one Anthropic
		// message: it then carries a marker on each of their blocks.
		if marked != (n >= 1) {
			t.Errorf("message %d: %d markers, listed %v", i, n, marked)
		}
	}
	if total < 1+len(resp.CacheBreakpoints) || total > anthropic.MaxCacheControls {
		t.Errorf("%d markers in the answer, want the system's, at least one per breakpoint and at most %d", total, anthropic.MaxCacheControls)
	}
	// The answer is a valid Anthropic conversation.
	if c, err := anthropic.Convert(resp.System, resp.Messages); err != nil || c.Chat.Validate() != nil {
		t.Fatalf("the answer does not convert: %v", err)
	}
	// Without the flag: no marker added.
	plain, err := td.c.Compact(bg, &client.CompactRequest{Format: FormatAnthropic, System: system, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range plain.Messages {
		n += wire.CountCacheControls(m)
	}
	if n != 0 || plain.CacheBreakpoints != nil {
		t.Errorf("%d markers (%v) without the flag", n, plain.CacheBreakpoints)
	}
}

// TestProxyAnthropicCacheBreakpoints: the proxy always marks the policy's
// breakpoints on /v1/messages, within the four markers a request may
// carry, counting the agent's own (on its tools, system prompt and
// messages): the upstream, which refuses a fifth as the API does, gets
// exactly four.
func TestProxyAnthropicCacheBreakpoints(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "  policy: ledger\n  trigger_tokens: 1\n", pluginSliding, pluginLedger)
	// A long conversation: on the interpreter that serves a new plugin
	// first, ledger can run past its call limit under -race.
	waitCompiled(t, td.c)
	system, msgs := anthropicSWE(t)
	// The agent marks its tools and its newest message too: three of its own.
	last := msgs[len(msgs)-1]
	var m struct {
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(last, &m); err != nil || len(m.Content) == 0 {
		t.Fatalf("last message %s: %v", last, err)
	}
	lb := m.Content[len(m.Content)-1]
	m.Content[len(m.Content)-1] = append(append(json.RawMessage(nil), lb[:len(lb)-1]...), []byte(`,"cache_control":{"type":"ephemeral"}}`)...)
	msgs[len(msgs)-1], _ = json.Marshal(m)
	body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": system, "messages": msgs,
		"tools": []map[string]any{{"name": "bash", "input_schema": map[string]any{"type": "object"}, "cache_control": map[string]string{"type": "ephemeral"}}}})
	resp, got := td.post(t, proxy.RouteAnthropic, body, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	sent := up.Last().Body
	if n := wire.CountCacheControls(sent); n != anthropic.MaxCacheControls {
		t.Fatalf("the upstream got %d markers, want %d", n, anthropic.MaxCacheControls)
	}
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	json.Unmarshal(sent, &req)
	if len(req.Messages) >= len(msgs) {
		t.Fatalf("not compacted: %d of %d messages", len(req.Messages), len(msgs))
	}
}
