package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/idents"
	llmclient "github.com/compactd/compactd/internal/llm"
	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/pdk"
)

// stubProvider is a local OpenAI-compatible server whose summaries are a
// fixed ratio of what it reads: <summary> of ratio × the request's
// characters (capped at max_tokens × 4), reporting usage as characters/4.
type stubProvider struct {
	ratio float64
	calls atomic.Int64
	model atomic.Value // the last request's model
	srv   *httptest.Server
}

func newStubProvider(t testing.TB, ratio float64) *stubProvider {
	p := &stubProvider{ratio: ratio}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.calls.Add(1)
		var req struct {
			Model     string           `json:"model"`
			Messages  []abi.LLMMessage `json:"messages"`
			MaxTokens int              `json:"max_tokens"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, 400)
			return
		}
		p.model.Store(req.Model)
		in := 0
		for _, m := range req.Messages {
			in += len(m.Content)
		}
		n := min(max(int(float64(in)*p.ratio), 40), req.MaxTokens*4)
		text := fmt.Sprintf("summary of %d chars ", in) + strings.Repeat("x", max(n-30, 0))
		resp, _ := json.Marshal(map[string]any{
			"object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": "<summary>" + text + "</summary>"}}},
			"usage":   map[string]any{"prompt_tokens": in / 4, "completion_tokens": n / 4},
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// clientHost is a pdk.Host over a host.Completer, answering failures the
// way the host's llm_complete and the guest PDK do (an *abi.Error).
type clientHost struct {
	tok *tokens.Tokenizer
	llm host.Completer
}

func (h clientHost) CountTokens(s string) int { return h.tok.Count(s) }
func (h clientHost) Log(pdk.Level, string)    {}
func (h clientHost) ExtractIdentifiers(texts []idents.Input) ([][]idents.Item, error) {
	return (&pdk.TestHost{}).ExtractIdentifiers(texts)
}
func (h clientHost) MessageFacts(msgs []abi.Message, first int, opts facts.Options) (*facts.Set, error) {
	return (&pdk.TestHost{}).MessageFacts(msgs, first, opts)
}
func (h clientHost) Complete(req abi.LLMRequest) (abi.LLMResponse, error) {
	resp, err := h.llm.Complete(context.Background(), req)
	if err != nil {
		var ae *abi.Error
		if !errors.As(err, &ae) {
			ae = &abi.Error{Code: abi.CodeProviderError, Message: err.Error()}
		}
		return abi.LLMResponse{}, ae
	}
	return resp, nil
}

// replayFigures sums up a turn-by-turn replay.
type replayFigures struct {
	convs, turns, compacted, followups, unchanged int
	tokensIn, tokensOut                           int
	providerCalls, llmRequests                    []int // per conversation
	spentIn, spentOut                             int64
	warnings                                      int
}

func (f *replayFigures) String() string {
	mean := func(xs []int) float64 {
		s := 0
		for _, x := range xs {
			s += x
		}
		return float64(s) / float64(max(len(xs), 1))
	}
	median := func(xs []int) int {
		s := append([]int(nil), xs...)
		sort.Ints(s)
		if len(s) == 0 {
			return 0
		}
		return s[len(s)/2]
	}
	maxOf := func(xs []int) int {
		m := 0
		for _, x := range xs {
			m = max(m, x)
		}
		return m
	}
	return fmt.Sprintf("%d convs, %d turns (%d compacted, %d warnings) | provider calls/conv mean %.1f median %d max %d | llm_complete requests/conv mean %.1f | tokens sent/turn %.0f vs %.0f uncompressed (%.1f%% less) | prefix unchanged on %.1f%% of follow-up turns | summarizer spent %d in + %d out tokens",
		f.convs, f.turns, f.compacted, f.warnings,
		mean(f.providerCalls), median(f.providerCalls), maxOf(f.providerCalls), mean(f.llmRequests),
		float64(f.tokensOut)/float64(f.turns), float64(f.tokensIn)/float64(f.turns), 100*(1-float64(f.tokensOut)/float64(f.tokensIn)),
		100*float64(f.unchanged)/float64(max(f.followups, 1)), f.spentIn, f.spentOut)
}

// replay runs the policy on every turn prefix of convs in order (the
// history before each assistant message, as the agent sends it), through
// a real llm.Client to the stub provider, one budget per request as the
// daemon does. withState passes each result's state to the next request.
func replay(t testing.TB, convs []plugtest.Conversation, cfg map[string]any, cache, withState bool) replayFigures {
	t.Helper()
	stub := newStubProvider(t, 0.1)
	lcfg := llmclient.Config{Provider: llmclient.KindOpenAI, BaseURL: stub.srv.URL + "/v1", Model: "stub-summarizer", Budget: llmclient.Limits{MaxCalls: -1, MaxTokens: -1}}
	if !cache {
		lcfg.CacheMaxBytes = -1
	}
	client, err := llmclient.New(lcfg, llmclient.WithGetenv(func(string) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
	tok := tokens.New(tokens.Options{}).ForModel("gpt-4o")
	raw, _ := json.Marshal(cfg)
	var fig replayFigures
	for ci := range convs {
		c := &convs[ci]
		callsBefore, reqsBefore := stub.calls.Load(), client.Stats().Requests
		var state json.RawMessage
		var prev []abi.Message
		for k, n := range plugtest.TurnPrefixes(c.Messages) {
			msgs := c.Messages[:n:n]
			req := &abi.CompactRequest{ABI: abi.Version, Messages: msgs, Config: raw,
				Context: abi.Context{Model: "gpt-4o", ContextWindow: 128000, ConversationID: c.ID}}
			if withState {
				req.Context.State = state
			}
			for i := range msgs {
				req.Context.TotalTokens += msgs[i].Tokens
			}
			res, err := compact(clientHost{tok: tok, llm: client.Budgeted()}, req)
			if err != nil {
				t.Fatalf("%s prefix %d: %v", c.ID, n, err)
			}
			if err := convo.CheckResult(msgs, res.Messages); err != nil {
				t.Fatalf("%s prefix %d: %v", c.ID, n, err)
			}
			out, _ := convo.Resolve(msgs, res.Messages)
			after := 0
			for i := range out {
				if !res.Messages[i].IsRef() {
					out[i].Tokens = tok.CountMessage(&out[i])
				}
				after += out[i].Tokens
			}
			fig.turns++
			fig.tokensIn += req.Context.TotalTokens
			fig.tokensOut += after
			fig.warnings += len(res.Warnings)
			if res.Compacted {
				fig.compacted++
			}
			if k > 0 {
				fig.followups++
				if isPrefix(prev, out) {
					fig.unchanged++
				}
			}
			if len(res.State) > 0 {
				state = res.State
			}
			prev = out
		}
		fig.convs++
		fig.providerCalls = append(fig.providerCalls, int(stub.calls.Load()-callsBefore))
		fig.llmRequests = append(fig.llmRequests, int(client.Stats().Requests-reqsBefore))
	}
	st := client.Stats()
	fig.spentIn, fig.spentOut = st.InputTokens, st.OutputTokens
	return fig
}

var replayReport = flag.Bool("replay", false, "TestReplayMiniSWE: replay every mini-swe-agent conversation under every config and log the figures")

// TestReplayMiniSWE is the measurement: a turn-by-turn replay of
// the mini-swe-agent conversations through a real llm.Client and a local
// stub provider returning 10% summaries, with and without the summary
// cache and the per-conversation state. By default it replays a few
// conversations and checks the figures' properties; for the report (all
// 66 conversations, three configs, ~30 s):
//
//	go test ./plugins/llm -run TestReplayMiniSWE -v -args -replay
func TestReplayMiniSWE(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a data file")
	}
	// The report counts tokens exactly (gpt-4o's tokenizer); the default
	// check uses estimates, which is enough for its properties.
	load := plugtest.Load
	if *replayReport {
		load = plugtest.LoadFull
	}
	convs := load(t, *replayReport, "mini_swe_agent_deepseek_swebench.jsonl")
	configs := []struct {
		name string
		cfg  map[string]any
	}{
		{"defaults (token_threshold 60000)", map[string]any{}},
		{"token_threshold 16000", map[string]any{"token_threshold": 16000}},
		{"token_threshold 8000", map[string]any{"token_threshold": 8000}},
	}
	if !*replayReport {
		convs, configs = convs[:min(6, len(convs))], configs[2:]
		if raceEnabled {
			convs = convs[:2]
		}
	}
	for _, c := range configs {
		cfg, err := decodeConfig(plugtest.Request(nil, c.cfg, nil))
		if err != nil {
			t.Fatal(err)
		}
		steps := 0 // summary steps over every conversation
		for _, conv := range convs {
			steps += len(schedule(conv.Messages, cfg, 128000))
		}
		var outputs []int
		for _, mode := range []struct {
			name         string
			cache, state bool
		}{{"cache+state", true, true}, {"cache, no state", true, false}, {"state, no cache", false, true}, {"no cache, no state", false, false}} {
			fig := replay(t, convs, c.cfg, mode.cache, mode.state)
			t.Logf("%s, %s: %s", c.name, mode.name, &fig)
			total := 0
			for _, n := range fig.providerCalls {
				total += n
			}
			// With the cache or the state, the provider computes each span
			// once: no more calls than summary steps.
			if (mode.cache || mode.state) && total != steps {
				t.Errorf("%s, %s: %d provider calls for %d summary steps", c.name, mode.name, total, steps)
			}
			// The prefix changes only when the summary moves.
			if changed := fig.followups - fig.unchanged; changed > steps {
				t.Errorf("%s, %s: the prefix changed on %d turns for %d summary steps", c.name, mode.name, changed, steps)
			}
			outputs = append(outputs, fig.tokensOut)
		}
		for _, o := range outputs[1:] {
			if o != outputs[0] {
				t.Errorf("%s: the output depends on the cache or the state: %v tokens", c.name, outputs)
			}
		}
	}
}
