package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/dataset"
)

// fakeOpenAI speaks the Chat Completions wire format and records the
// models it was asked for.
type fakeOpenAI struct {
	mu     sync.Mutex
	models []string
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Model string `json:"model"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req)
	f.mu.Lock()
	f.models = append(f.models, req.Model)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","model":"`+req.Model+`",
	  "choices":[{"index":0,"message":{"role":"assistant","content":"<summary>The agent is fixing a bug in the repository.</summary>"},"finish_reason":"stop"}],
	  "usage":{"prompt_tokens":1200,"completion_tokens":12,"total_tokens":1212}}`)
}

func (f *fakeOpenAI) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.models...)
}

// TestLLMProviderFromConfig: the daemon builds its provider from the
// config file's llm: block, the llm policy's summarizer model (compact:
// block) reaches the wire, the summary cache answers a repeat, and the
// cache lives in the store, so it survives a restart.
func TestLLMProviderFromConfig(t *testing.T) {
	t.Parallel()
	provider := &fakeOpenAI{}
	srv := httptest.NewServer(provider)
	defer srv.Close()
	cfg := "llm:\n  provider: openai\n  base_url: " + srv.URL + "\n  model: default-model\n" +
		"compact:\n  token_threshold: 2000\n  retention_window: 4\n  model: summarizer-model\n"
	td := setup(t, cfg, "plugins/llm")
	td.start(t)

	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	req := &client.CompactRequest{Policy: "llm", Model: "deepseek-chat", ConversationID: "first", Messages: convs[0].Chat.Raw}
	resp, err := td.c.Compact(bg, req)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Compacted || len(resp.Warnings) > 0 || !strings.Contains(string(mustJSON(t, resp.Messages)), "fixing a bug") {
		t.Fatalf("compacted=%v warnings=%q", resp.Compacted, resp.Warnings)
	}
	calls := provider.calls()
	if len(calls) == 0 {
		t.Fatal("the provider was not called")
	}
	for _, m := range calls {
		if m != "summarizer-model" {
			t.Fatalf("the provider was asked for model %q, want the policy's summarizer-model", m)
		}
	}

	// The same history under another id (no plugin state): the cache answers.
	req.ConversationID = "second"
	if _, err := td.c.Compact(bg, req); err != nil {
		t.Fatal(err)
	}
	if got := len(provider.calls()); got != len(calls) {
		t.Fatalf("a repeated summarization reached the provider (%d calls, then %d)", len(calls), got)
	}
	_, body, _ := td.raw(t, http.MethodGet, "/metrics", "")
	for _, want := range []string{"compactd_llm_calls_total " + itoa(len(calls)), "compactd_llm_cache_hits_total", "compactd_llm_input_tokens_total"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// After a restart the cache is still there.
	if err := td.Shutdown(bg); err != nil {
		t.Fatal(err)
	}
	td.start(t)
	req.ConversationID = "third"
	if _, err := td.c.Compact(bg, req); err != nil {
		t.Fatal(err)
	}
	if got := len(provider.calls()); got != len(calls) {
		t.Fatalf("after a restart the provider was called again (%d calls, then %d)", len(calls), got)
	}
}

func TestLLMConfigErrorsStopTheStart(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, cfg, want string }{
		{"unknown provider", "llm:\n  provider: carrier-pigeon\n", "provider"},
		{"typo", "llm:\n  provider: openai\n  tmeout: 5s\n", "tmeout"},
		{"missing named key", "llm:\n  provider: openai\n  api_key_env: COMPACTD_TEST_NO_SUCH_KEY\n", "COMPACTD_TEST_NO_SUCH_KEY"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			td := setup(t, tt.cfg, pluginLastn)
			if _, err := Start(bg, td.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}
