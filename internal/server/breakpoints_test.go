package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/chat"
	"github.com/compactd/compactd/internal/dataset"
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
	td := setup(t, "", pluginLedger).start(t)
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
	if len(marked.CacheBreakpoints) != 2 || len(marked.Messages) != len(plain.Messages) {
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
	// The task (content parts) is marked on its last part; the newest
	// ledger chunk on the message.
	task := string(marked.Messages[marked.CacheBreakpoints[0]])
	if !strings.Contains(task, `{"text":"(second part)","type":"text","cache_control":{"type":"ephemeral"}}]`) || strings.Count(task, "cache_control") != 1 {
		t.Fatalf("task %s", task[len(task)-120:])
	}
	chunk := string(marked.Messages[marked.CacheBreakpoints[1]])
	if !strings.HasPrefix(chunk, `{"role":"assistant","content":"[compactd ledger`) || !strings.HasSuffix(chunk, `,"cache_control":{"type":"ephemeral"}}`) {
		t.Fatalf("chunk %s", chunk)
	}
	// A flag of the wrong type is a clear error.
	status, b, _ := td.raw(t, "POST", "/v1/compact", `{"cache_breakpoints":"yes","messages":[{"role":"user","content":"hi"}]}`)
	if code, _ := errorCode(t, b); status != 400 || code != CodeInvalidJSON {
		t.Fatalf("status %d code %s", status, code)
	}
}
