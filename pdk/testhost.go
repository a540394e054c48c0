package pdk

import (
	"context"
	"fmt"
	"sync"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
)

// TestHost is a Host for native tests of a policy. Its zero value counts a
// token per four bytes (rounded up), has no LLM provider and keeps logs.
// It is safe for concurrent use.
type TestHost struct {
	// Tokens, if set, replaces the default token count.
	Tokens func(text string) int
	// LLM, if set, answers Complete; otherwise Complete fails with
	// no_provider, as a host without a provider does.
	LLM func(req abi.LLMRequest) (abi.LLMResponse, error)
	// Messages, if set, serve the contents a header view leaves out
	// (abi.ContentSource), as the host serves the request's messages.
	Messages []abi.Message

	mu   sync.Mutex
	logs []string
}

var (
	_ Host              = (*TestHost)(nil)
	_ abi.ContentSource = (*TestHost)(nil)
)

// Content implements abi.ContentSource from h.Messages.
func (h *TestHost) Content(index int) ([]byte, bool) {
	if index < 0 || index >= len(h.Messages) {
		return nil, false
	}
	c := h.Messages[index].Content
	if c.IsString() {
		return []byte(c.Text()), true
	}
	return c.Raw(), true
}

// CountTokens implements Host.
func (h *TestHost) CountTokens(text string) int {
	if h.Tokens != nil {
		return h.Tokens(text)
	}
	return (len(text) + 3) / 4
}

// Complete implements Host.
func (h *TestHost) Complete(req abi.LLMRequest) (abi.LLMResponse, error) {
	if h.LLM == nil {
		return abi.LLMResponse{}, &abi.Error{Code: abi.CodeNoProvider, Message: "no LLM provider configured"}
	}
	return h.LLM(req)
}

// ExtractIdentifiers implements Host as the host does: the texts go
// through extract_identifiers' wire format, request and answer.
func (h *TestHost) ExtractIdentifiers(texts []idents.Input) ([][]idents.Item, error) {
	ans, err := idents.Answer(context.Background(), nil, idents.AppendRequest(nil, texts))
	if err != nil {
		return nil, err
	}
	return idents.DecodeAnswer(ans, texts, nil)
}

// MessageFacts implements Host as the host does: the facts go through
// extract_message_facts_into's answer format.
func (h *TestHost) MessageFacts(msgs []abi.Message, first int, opts facts.Options) (*facts.Set, error) {
	set, err := facts.Collect(msgs, opts, h.ExtractIdentifiers)
	if err != nil {
		return nil, err
	}
	return facts.DecodeAnswer(facts.AppendAnswer(nil, set))
}

// Log implements Host.
func (h *TestHost) Log(level Level, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logs = append(h.logs, fmt.Sprintf("%d %s", level, msg))
}

// Logs returns the messages logged so far, each prefixed with its level.
func (h *TestHost) Logs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.logs...)
}
