package abi

// LLMRequest is the input of the llm_complete host function: a chat
// completion the host sends through its configured provider.
type LLMRequest struct {
	// Model names the summarizer model. Empty means the provider's default.
	Model string `json:"model,omitempty"`
	// Messages are plain chat messages (role and text content).
	Messages []LLMMessage `json:"messages"`
	// MaxTokens caps the completion's length.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Temperature defaults to 0 for reproducible summaries.
	Temperature float64 `json:"temperature,omitempty"`
	// Stop sequences, if any.
	Stop []string `json:"stop,omitempty"`
}

// LLMMessage is a message of an LLMRequest.
type LLMMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// LLMResponse is the output of llm_complete. Exactly one of Text and Error
// is meaningful: when Error is set the call failed and Text is empty.
type LLMResponse struct {
	Text   string   `json:"text,omitempty"`
	Model  string   `json:"model,omitempty"`
	Usage  LLMUsage `json:"usage"`
	Cached bool     `json:"cached,omitempty"`
	Error  *Error   `json:"error,omitempty"`
}

// LLMUsage reports the tokens a completion consumed.
type LLMUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Error codes llm_complete may return.
const (
	CodeNoProvider     = "no_provider"
	CodeBudgetExceeded = "budget_exceeded"
	CodeProviderError  = "provider_error"
)
