package llm

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/compactd/compactd/abi"
)

// Errors a completion or New fails with. A failed completion is an *Error
// wrapping one of them: test with errors.Is.
var (
	ErrInvalidConfig   = errors.New("invalid llm config")
	ErrNoAPIKey        = errors.New("API key not set")
	ErrNoModel         = errors.New("no model")
	ErrInvalidRequest  = errors.New("invalid completion request")
	ErrBudgetExceeded  = errors.New("per-request LLM budget exceeded")
	ErrRateLimited     = errors.New("rate limited")
	ErrTimeout         = errors.New("timed out")
	ErrUnavailable     = errors.New("provider unavailable")
	ErrStatus          = errors.New("provider returned an error")
	ErrBadResponse     = errors.New("malformed provider response")
	ErrEmptyCompletion = errors.New("empty completion")
)

// Error is a failed completion. It converts to an *abi.Error with
// errors.As, so the host's llm_complete answers the plugin with the right
// code: budget_exceeded for ErrBudgetExceeded, invalid_request for
// ErrInvalidRequest, provider_error for everything else.
type Error struct {
	// Kind is one of the sentinel errors above.
	Kind error
	// Provider is "openai" or "anthropic".
	Provider string
	// Status is the last HTTP status (0 when no response arrived).
	Status int
	// Type is the provider's error type or code, e.g. "rate_limit_error".
	Type string
	// Message is the provider's message or our own account.
	Message string
	// Attempts counts the HTTP attempts made (0 when none was).
	Attempts int
	// RetryAfter is what the provider last asked to wait, if anything.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("llm")
	if e.Provider != "" {
		b.WriteString(" (" + e.Provider + ")")
	}
	b.WriteString(": ")
	b.WriteString(e.Kind.Error())
	if e.Status != 0 {
		b.WriteString(": HTTP " + strconv.Itoa(e.Status))
	}
	if e.Type != "" {
		b.WriteString(" " + e.Type)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Attempts > 1 {
		b.WriteString(" (after " + strconv.Itoa(e.Attempts) + " attempts)")
	}
	return b.String()
}

// Unwrap returns Kind.
func (e *Error) Unwrap() error { return e.Kind }

// Code returns the llm_complete error code for e.
func (e *Error) Code() string {
	switch {
	case errors.Is(e.Kind, ErrBudgetExceeded):
		return abi.CodeBudgetExceeded
	case errors.Is(e.Kind, ErrInvalidRequest):
		return abi.CodeInvalidRequest
	}
	return abi.CodeProviderError
}

// As converts e to an *abi.Error, so callers that only know the ABI (the
// host's llm_complete) see the right code.
func (e *Error) As(target any) bool {
	if t, ok := target.(**abi.Error); ok {
		*t = &abi.Error{Code: e.Code(), Message: e.Error()}
		return true
	}
	return false
}

// maxErrorMessage bounds the provider text copied into an error.
const maxErrorMessage = 500

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}
