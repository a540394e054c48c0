package provider

import (
	"fmt"
	"net/http"
	"strconv"
)

// Headers that make the provider refuse a request as too large, as the
// real APIs do (compactd's proxy passes them through; its overflow
// recovery is tested against them).
const (
	// HeaderContextLimit: a prompt of more than this many tokens (the
	// provider's count, the one its usage reports) gets the API's
	// context-length error. Options.ContextLimit sets it for every request.
	HeaderContextLimit = "X-Upstream-Context-Limit"
	// HeaderMaxBytes: a body of more than this many bytes gets a 413
	// request_too_large.
	HeaderMaxBytes = "X-Upstream-Max-Bytes"
)

// overflow returns the API's context-length error for a prompt of
// prompt tokens past the request's limit, or nil. The shapes are the real
// APIs': OpenAI's Chat Completions states the limit and the count (code
// context_length_exceeded, param messages), the Responses API does not
// (same code, param input), Anthropic's states both in its message.
func (p *Provider) overflow(r *http.Request, api string, prompt int) *apiError {
	limit := p.opts.ContextLimit
	if n, err := strconv.Atoi(r.Header.Get(HeaderContextLimit)); err == nil && n > 0 {
		limit = n
	}
	if limit <= 0 || prompt <= limit {
		return nil
	}
	switch api {
	case APIMessages:
		return invalid("prompt is too long: %d tokens > %d maximum", prompt, limit)
	case APIResponses:
		return invalid("Your input exceeds the context window of this model. Please adjust your input and try again.").withParam("input", "context_length_exceeded")
	}
	return invalid("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", limit, prompt).
		withParam("messages", "context_length_exceeded")
}

// tooLarge returns a 413 request_too_large for a body past the request's
// HeaderMaxBytes, or nil.
func tooLarge(r *http.Request, body []byte) *apiError {
	n, err := strconv.Atoi(r.Header.Get(HeaderMaxBytes))
	if err != nil || n <= 0 || len(body) <= n {
		return nil
	}
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: "request_too_large", message: fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", n)}
}
