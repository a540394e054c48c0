package eval

import (
	"context"
	"sort"
	"strings"
	"sync"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/tokens"
)

// LLMUsage counts the llm_complete calls of one compaction (or of many,
// summed), as the eval's meter saw them between the plugin and the
// provider.
type LLMUsage struct {
	// Calls is every llm_complete call a plugin made, failed ones included.
	Calls int `json:"calls"`
	// Failed calls got an error answer (no provider, budget, provider error).
	Failed int `json:"failed,omitempty"`
	// Cached calls were answered from the host's summary cache and cost
	// nothing.
	Cached int `json:"cached,omitempty"`
	// ByModel sums the provider-reported usage of the calls that were not
	// answered from the cache, by the model that answered.
	ByModel map[string]TokenPair `json:"by_model,omitempty"`
}

// TokenPair is input and output tokens.
type TokenPair struct {
	Input  int `json:"input"`
	Output int `json:"output"`
}

// Add adds o to u.
func (u *LLMUsage) Add(o LLMUsage) {
	u.Calls += o.Calls
	u.Failed += o.Failed
	u.Cached += o.Cached
	for m, tp := range o.ByModel {
		if u.ByModel == nil {
			u.ByModel = map[string]TokenPair{}
		}
		cur := u.ByModel[m]
		cur.Input += tp.Input
		cur.Output += tp.Output
		u.ByModel[m] = cur
	}
}

// Tokens returns the input and output tokens over every model.
func (u LLMUsage) Tokens() TokenPair {
	var t TokenPair
	for _, tp := range u.ByModel {
		t.Input += tp.Input
		t.Output += tp.Output
	}
	return t
}

// models returns the keys of ByModel, sorted.
func (u LLMUsage) models() []string {
	out := make([]string, 0, len(u.ByModel))
	for m := range u.ByModel {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// meter is the host.Completer eval hands the compactor: it forwards to
// the real one (or answers no_provider) and counts. One meter serves one
// replay, whose compactions run one at a time; take reads and resets it.
type meter struct {
	inner host.Completer

	mu    sync.Mutex
	usage LLMUsage
}

var _ host.Completer = (*meter)(nil)

func (m *meter) Complete(ctx context.Context, req abi.LLMRequest) (abi.LLMResponse, error) {
	var resp abi.LLMResponse
	var err error
	if m.inner == nil {
		err = &abi.Error{Code: abi.CodeNoProvider, Message: "no LLM provider (compactd eval --llm none)"}
	} else {
		resp, err = m.inner.Complete(ctx, req)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.usage.Calls++
	switch {
	case err != nil || resp.Error != nil:
		m.usage.Failed++
	case resp.Cached:
		m.usage.Cached++
	}
	if !resp.Cached && (resp.Usage.InputTokens > 0 || resp.Usage.OutputTokens > 0) {
		model := resp.Model
		if model == "" {
			model = req.Model
		}
		m.usage.Add(LLMUsage{ByModel: map[string]TokenPair{model: {resp.Usage.InputTokens, resp.Usage.OutputTokens}}})
	}
	return resp, err
}

// take returns the usage since the last take and resets it.
func (m *meter) take() LLMUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.usage
	m.usage = LLMUsage{}
	return u
}

// StubLLM is an offline stand-in for a provider: it answers every
// completion with the first Ratio of the request's last message (cut at a
// word, at most MaxTokens tokens when the request sets it) and reports
// usage counted with Count. It makes an LLM policy's calls, tokens and
// cost measurable without a network; its "summaries" say nothing about a
// real summarizer's quality, so retention under it is meaningless.
type StubLLM struct {
	Ratio float64
	// Count counts tokens (the eval's tokenizer).
	Count func(string) int
}

var _ host.Completer = StubLLM{}

// Complete implements host.Completer.
func (s StubLLM) Complete(_ context.Context, req abi.LLMRequest) (abi.LLMResponse, error) {
	in := tokens.ReplyPrimingTokens
	var last string
	for _, m := range req.Messages {
		in += tokens.TokensPerMessage + s.Count(m.Role) + s.Count(m.Content)
		last = m.Content
	}
	ratio := s.Ratio
	if ratio <= 0 || ratio > 1 {
		ratio = 0.1
	}
	text := last[:int(float64(len(last))*ratio)]
	if i := strings.LastIndexAny(text, " \n"); i > 0 {
		text = text[:i]
	}
	if n := s.Count(text); req.MaxTokens > 0 && n > req.MaxTokens {
		text = text[:len(text)*req.MaxTokens/n] // roughly MaxTokens
	}
	full := "<summary>" + strings.ToValidUTF8(text, "") + "</summary>"
	for _, st := range req.Stop {
		if i := strings.Index(full, st); st != "" && i >= 0 {
			full = full[:i]
		}
	}
	model := req.Model
	if model == "" {
		model = "stub"
	}
	return abi.LLMResponse{
		Text:  full,
		Model: model,
		Usage: abi.LLMUsage{InputTokens: in, OutputTokens: s.Count(full)},
	}, nil
}
