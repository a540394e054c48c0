package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/compactd/compactd/abi"
	tokenusage "github.com/compactd/compactd/internal/usage"
)

// AnthropicVersion is the anthropic-version header every request carries.
const AnthropicVersion = "2023-06-01"

// anthropic speaks the Messages API: POST {base_url}/v1/messages with
// x-api-key and anthropic-version headers. System (and developer)
// messages go to the top-level "system" field; the rest alternate user and
// assistant turns.
type anthropic struct{}

type anthropicRequest struct {
	Model         string             `json:"model"`
	System        string             `json:"system,omitempty"`
	Messages      []anthropicMessage `json:"messages"`
	MaxTokens     int                `json:"max_tokens"`
	Temperature   float64            `json:"temperature"`
	StopSequences []string           `json:"stop_sequences,omitempty"`
}

type anthropicMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type anthropicResponse struct {
	Type    string `json:"type"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason string `json:"stop_reason"`
	// Usage counts outside tokenusage's rule are ignored (see parse).
	Usage *struct {
		InputTokens              tokenusage.Count `json:"input_tokens"`
		OutputTokens             tokenusage.Count `json:"output_tokens"`
		CacheCreationInputTokens tokenusage.Count `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     tokenusage.Count `json:"cache_read_input_tokens"`
	} `json:"usage"`
	Error *anthropicError `json:"error"`
}

// anthropicError is the "error" object of an error body:
// {"type": "error", "error": {"type": "rate_limit_error", "message": "…"}}.
type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (anthropic) kind() string { return KindAnthropic }

// toAnthropic converts chat messages: system and developer messages are
// joined into the system prompt; other roles become user or assistant
// turns, and consecutive turns of one role are joined (the API wants
// them alternating). A request of system messages only sends its text as
// the one user turn.
func toAnthropic(msgs []abi.LLMMessage) (system string, out []anthropicMessage) {
	var sys []string
	for _, m := range msgs {
		role := m.Role
		switch role {
		case abi.RoleSystem, abi.RoleDeveloper:
			sys = append(sys, m.Content)
			continue
		case abi.RoleAssistant:
		default:
			role = abi.RoleUser
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content += "\n\n" + m.Content
			continue
		}
		out = append(out, anthropicMessage{Role: role, Content: m.Content})
	}
	system = strings.Join(sys, "\n\n")
	if len(out) == 0 {
		return "", []anthropicMessage{{Role: abi.RoleUser, Content: system}}
	}
	return system, out
}

func (anthropic) newRequest(ctx context.Context, baseURL, key, model string, req abi.LLMRequest) (*http.Request, error) {
	system, msgs := toAnthropic(req.Messages)
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	body, err := json.Marshal(anthropicRequest{
		Model:         model,
		System:        system,
		Messages:      msgs,
		MaxTokens:     maxTokens,
		Temperature:   req.Temperature,
		StopSequences: req.Stop,
	})
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("anthropic-version", AnthropicVersion)
	if key != "" {
		hr.Header.Set("x-api-key", key)
	}
	return hr, nil
}

func (anthropic) parse(body []byte) (text, model string, usage *abi.LLMUsage, err *Error) {
	var r anthropicResponse
	if e := json.Unmarshal(body, &r); e != nil {
		return "", "", nil, &Error{Kind: ErrBadResponse, Message: e.Error()}
	}
	if r.Type == "error" || r.Error != nil && len(r.Content) == 0 {
		typ, msg := "", ""
		if r.Error != nil {
			typ, msg = r.Error.Type, truncate(r.Error.Message, maxErrorMessage)
		}
		return "", "", nil, &Error{Kind: ErrStatus, Type: typ, Message: msg}
	}
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", "", nil, &Error{Kind: ErrEmptyCompletion, Message: "the response has no text content (stop_reason " + quoteOrNone(r.StopReason) + ")"}
	}
	// Without valid input and output counts there is no usage: the call
	// is estimated (a refused cache count counts as none).
	if u := r.Usage; u != nil && u.InputTokens.Set && u.OutputTokens.Set {
		usage = &abi.LLMUsage{InputTokens: tokenusage.Sum(u.InputTokens.N, u.CacheCreationInputTokens.N, u.CacheReadInputTokens.N), OutputTokens: u.OutputTokens.N}
	}
	return b.String(), r.Model, usage, nil
}

func (anthropic) parseError(body []byte) (typ, msg string) {
	var r struct {
		Error *anthropicError `json:"error"`
	}
	if json.Unmarshal(body, &r) != nil || r.Error == nil {
		return "", truncate(string(body), maxErrorMessage)
	}
	return r.Error.Type, truncate(r.Error.Message, maxErrorMessage)
}
