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

// openAI speaks the Chat Completions API: POST {base_url}/chat/completions
// with "Authorization: Bearer KEY".
type openAI struct{}

type openAIRequest struct {
	Model       string           `json:"model"`
	Messages    []abi.LLMMessage `json:"messages"`
	MaxTokens   int              `json:"max_tokens,omitempty"`
	Temperature float64          `json:"temperature"`
	Stop        []string         `json:"stop,omitempty"`
}

type openAIResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	// Usage counts outside tokenusage's rule are ignored (see parse).
	Usage *struct {
		PromptTokens     tokenusage.Count `json:"prompt_tokens"`
		CompletionTokens tokenusage.Count `json:"completion_tokens"`
	} `json:"usage"`
	// Some OpenAI-compatible gateways (OpenRouter) answer 200 with an
	// error object.
	Error *openAIError `json:"error"`
}

// openAIError is the "error" object of an error body:
// {"error": {"message", "type", "param", "code"}}. code is a string for
// OpenAI and a number for some compatible servers.
type openAIError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

func (openAI) kind() string { return KindOpenAI }

func (openAI) newRequest(ctx context.Context, baseURL, key, model string, req abi.LLMRequest) (*http.Request, error) {
	body, err := json.Marshal(openAIRequest{
		Model:       model,
		Messages:    req.Messages,
		MaxTokens:   req.MaxTokens,
		Temperature: req.Temperature,
		Stop:        req.Stop,
	})
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	if key != "" {
		hr.Header.Set("Authorization", "Bearer "+key)
	}
	return hr, nil
}

func (openAI) parse(body []byte) (text, model string, usage *abi.LLMUsage, err *Error) {
	var r openAIResponse
	if e := json.Unmarshal(body, &r); e != nil {
		return "", "", nil, &Error{Kind: ErrBadResponse, Message: e.Error()}
	}
	if r.Error != nil && len(r.Choices) == 0 {
		return "", "", nil, &Error{Kind: ErrStatus, Type: r.Error.typ(), Message: truncate(r.Error.Message, maxErrorMessage)}
	}
	if len(r.Choices) == 0 {
		return "", "", nil, &Error{Kind: ErrEmptyCompletion, Message: "the response has no choices"}
	}
	c := r.Choices[0]
	if c.Message.Content == nil || strings.TrimSpace(*c.Message.Content) == "" {
		msg := "the first choice has no content (finish_reason " + quoteOrNone(c.FinishReason) + ")"
		if c.Message.Refusal != nil && *c.Message.Refusal != "" {
			msg = "the model refused: " + truncate(*c.Message.Refusal, maxErrorMessage)
		}
		return "", "", nil, &Error{Kind: ErrEmptyCompletion, Message: msg}
	}
	// Without both counts valid there is no usage: the call is
	// estimated, so a lying count can neither refund a budget nor
	// overflow it.
	if u := r.Usage; u != nil && u.PromptTokens.Set && u.CompletionTokens.Set {
		usage = &abi.LLMUsage{InputTokens: u.PromptTokens.N, OutputTokens: u.CompletionTokens.N}
	}
	return *c.Message.Content, r.Model, usage, nil
}

func (openAI) parseError(body []byte) (typ, msg string) {
	var r struct {
		Error *openAIError `json:"error"`
	}
	if json.Unmarshal(body, &r) != nil || r.Error == nil {
		return "", truncate(string(body), maxErrorMessage)
	}
	return r.Error.typ(), truncate(r.Error.Message, maxErrorMessage)
}

// typ returns the error's code if it has one (more specific, e.g.
// "invalid_api_key"), else its type.
func (e *openAIError) typ() string {
	var code string
	if json.Unmarshal(e.Code, &code) == nil && code != "" {
		return code
	}
	return e.Type
}

func quoteOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return `"` + s + `"`
}
