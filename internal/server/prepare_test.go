package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/provider"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/tokens"
)

// gatedSummarizer is the local provider answering the llm policy's
// summarizer calls, with a gate: while held, calls wait until it opens;
// while refusing, calls get a 503 and are counted.
type gatedSummarizer struct {
	next     http.Handler
	mu       sync.Mutex
	open     chan struct{}
	refusing bool
	arrived  atomic.Int64
	refused  atomic.Int64
}

func (g *gatedSummarizer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.arrived.Add(1)
	g.mu.Lock()
	open, refusing := g.open, g.refusing
	g.mu.Unlock()
	if refusing {
		g.refused.Add(1)
		http.Error(w, `{"error":{"message":"the summarizer is off in this test","type":"server_error"}}`, http.StatusServiceUnavailable)
		return
	}
	select {
	case <-open:
	case <-r.Context().Done():
		return
	}
	g.next.ServeHTTP(w, r)
}

func (g *gatedSummarizer) set(open chan struct{}, refusing bool) {
	g.mu.Lock()
	g.open, g.refusing = open, refusing
	g.mu.Unlock()
}

// prepareConversation is a recorded agent session cut where no tool call
// is pending: the whole (full) and a prefix of it holding about three
// quarters of its tokens, with their counts.
func prepareConversation(t testing.TB) (full []json.RawMessage, k, prefixTokens, fullTokens int) {
	t.Helper()
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	msgs := convs[0].Chat.Messages
	full = convs[0].Chat.Raw
	for n := len(full); n > 0; n-- {
		if m := msgs[n-1]; m.Role == "user" || m.Role == "tool" {
			full, msgs = full[:n], msgs[:n]
			break
		}
	}
	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	count := func(n int) int {
		c, err := chat.FromRaw(full[:n])
		if err != nil {
			t.Fatal(err)
		}
		return tok.CountMessages(c.Messages) + tokens.ReplyPrimingTokens
	}
	fullTokens = count(len(full))
	for k = len(full) - 1; k > 2; k-- {
		if r := msgs[k-1].Role; (r == "user" || r == "tool") && count(k) <= fullTokens*3/4 {
			break
		}
	}
	return full, k, count(k), fullTokens
}

// TestProxyUsesThePreparedCompaction: a conversation past
// proxy.prepare_threshold is forwarded untouched while its compaction is
// prepared in the background (once, however many requests arrive); the
// request that reaches the trigger is sent as the prepared compaction
// plus its new messages without calling the summarizer, byte for byte
// what a daemon without preparation sends for the same prefix, plus the
// same messages.
func TestProxyUsesThePreparedCompaction(t *testing.T) {
	t.Parallel()
	full, k, prefixTokens, fullTokens := prepareConversation(t)
	window := fullTokens * 10 / 8 // the full conversation reaches 0.8
	if prefixTokens < window/2 || prefixTokens >= window*8/10 {
		t.Fatalf("fixture: the prefix's %d tokens are not between 0.5 and 0.8 of %d", prefixTokens, window)
	}
	gate := &gatedSummarizer{next: provider.New(provider.Options{OpenAIKey: upstreamtest.OpenAIKey})}
	open := make(chan struct{})
	close(open)
	gate.set(open, false)
	sum := httptest.NewServer(gate)
	defer sum.Close()
	up := upstreamtest.New()
	defer up.Close()
	daemon := func(proxyExtra string) *testDaemon {
		cfg := fmt.Sprintf("policy: llm\ncompact: {token_threshold: 1000, retention_window: 4}\n"+llmCallLimit+
			"llm: {provider: openai, base_url: '%s/v1', model: summarizer-1, api_key_env: COMPACTD_TEST_SUMMARIZER_KEY}\n"+
			"proxy: {openai: {upstream: '%s'}, context_window: %d%s}\n", sum.URL, up.OpenAIBase(), window, proxyExtra)
		td := setup(t, cfg, "plugins/llm")
		td.log = &lockedBuffer{} // kept for a failure's message
		td.opts.Getenv = func(k string) string {
			if k == "COMPACTD_TEST_SUMMARIZER_KEY" {
				return upstreamtest.OpenAIKey
			}
			return ""
		}
		return td.start(t)
	}
	id := map[string]string{proxy.HeaderConversation: "prepared"}
	sentMessages := func() []json.RawMessage {
		var sent struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(up.Last().Body, &sent); err != nil {
			t.Fatal(err)
		}
		return sent.Messages
	}

	// The reference: a daemon without preparation compacting the prefix
	// synchronously (its threshold lowered to 0.5 so the prefix reaches
	// it: the same window, reason-independent target 0.5 × window).
	ref := daemon(", threshold: 0.5")
	resp, got := ref.post(t, proxy.RouteOpenAI, openAIBody(full[:k], ""), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("reference: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	want := append(sentMessages(), full[k:]...)

	td := daemon(", prepare_threshold: 0.5")
	hold := make(chan struct{})
	gate.set(hold, false)
	before := gate.arrived.Load()
	// Four concurrent requests of the prefix: each goes upstream
	// untouched, one preparation starts.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(full[:k], ""), id)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
				t.Errorf("below the trigger: %d %v %s", resp.StatusCode, resp.Header, got)
			}
		}()
	}
	wg.Wait()
	if n := len(sentMessages()); n != k {
		t.Fatalf("the upstream got %d messages below the trigger, want all %d", n, k)
	}
	waitFor(t, "the preparation to call the summarizer", 2*time.Minute, func() bool { return gate.arrived.Load() > before })
	px := td.server.opts.Proxy
	if st := px.PrepareStats(); st.Started != 1 || st.InFlight != 1 {
		t.Fatalf("four requests of one conversation: %+v, want one preparation", st)
	}
	close(hold)
	waitFor(t, "the preparation", 2*time.Minute, func() bool { return px.PrepareStats().InFlight == 0 })
	if st := px.PrepareStats(); st.Held != 1 {
		t.Fatalf("the preparation ended without a held result: %+v\n%s", st, td.log.String())
	}

	// From now on the summarizer refuses: the trigger must not call it.
	gate.set(nil, true)
	resp, got = td.post(t, proxy.RouteOpenAI, openAIBody(full, ""), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("at the trigger: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	// Used: sent from the prepared compaction, no policy ran on the
	// request path. Its prefix plus new messages still pass
	// prepare_threshold, so the next preparation starts in the background
	// (meeting the refusing summarizer).
	if st := px.PrepareStats(); st.Used != 1 || st.Started != 2 {
		t.Fatalf("the request at the trigger was not sent from the prepared compaction: %+v", st)
	}
	waitFor(t, "the next preparation", 2*time.Minute, func() bool { return px.PrepareStats().InFlight == 0 })
	sent := sentMessages()
	if len(sent) != len(want) {
		t.Fatalf("sent %d messages, want %d (the reference's compacted prefix and %d new ones)", len(sent), len(want), len(full)-k)
	}
	for i := range want {
		if string(sent[i]) != string(want[i]) {
			t.Fatalf("message %d differs from the synchronous compaction's:\n got %s\nwant %s", i, sent[i], want[i])
		}
	}
	_, metrics, _ := td.raw(t, http.MethodGet, "/metrics", "")
	for _, line := range []string{`compactd_proxy_prepare_total{outcome="started"} 2`, `compactd_proxy_prepare_total{outcome="used"} 1`, "compactd_proxy_prepare_held 1"} {
		if !strings.Contains(string(metrics), line) {
			t.Errorf("/metrics lacks %q:\n%s", line, grepLines(string(metrics), "prepare"))
		}
	}

	// A history that no longer starts with the prepared prefix discards
	// it, and is compacted synchronously (the summarizer, refusing now,
	// makes that a warning).
	discarded := px.PrepareStats().Discarded
	other := append([]json.RawMessage{full[0], json.RawMessage(`{"role":"user","content":"a different task"}`)}, full[2:]...)
	resp, _ = td.post(t, proxy.RouteOpenAI, openAIBody(other, ""), id)
	if st := px.PrepareStats(); st.Discarded != discarded+1 || st.Used != 1 {
		t.Fatalf("a changed prefix: %+v (%v)", st, resp.Header)
	}
}
