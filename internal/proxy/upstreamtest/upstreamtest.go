// Package upstreamtest starts the local provider (internal/provider) on a
// loopback port for tests and benchmarks: OpenAI's Chat Completions and
// Responses and Anthropic's Messages, JSON and SSE, checked as the real
// APIs check them, with a scripted tool-using model. It records what it
// received and counts what it refused (Stats).
//
// Tests steer it with request headers, which the proxy passes through:
// X-Upstream-Status: 503 answers that status with an error body,
// X-Upstream-Delay: 2s waits before answering, X-Upstream-Cut: 3 ends a
// stream after 3 events without finishing it.
package upstreamtest

import (
	"net/http/httptest"

	"github.com/compactd/compactd/internal/provider"
)

// Keys the upstream accepts.
const (
	OpenAIKey    = "sk-test-openai"
	AnthropicKey = "sk-ant-test"
)

// Received is one request the upstream got.
type Received = provider.Received

// Server is a running upstream. Its OpenAI base URL is URL+"/v1"; its
// Anthropic base URL is URL.
type Server struct {
	*httptest.Server
	*provider.Provider
}

// New starts an upstream on a loopback port that never calls tools in
// parallel; Close stops it.
func New() *Server { return NewWith(provider.Options{}) }

// NewWith starts an upstream with options; its keys are OpenAIKey and
// AnthropicKey unless opts names others, and it records what it gets.
func NewWith(opts provider.Options) *Server {
	if opts.OpenAIKey == "" {
		opts.OpenAIKey = OpenAIKey
	}
	if opts.AnthropicKey == "" {
		opts.AnthropicKey = AnthropicKey
	}
	opts.Record = true
	p := provider.New(opts)
	return &Server{Server: httptest.NewServer(p), Provider: p}
}

// OpenAIBase is the base URL an OpenAI SDK (or the proxy) takes.
func (s *Server) OpenAIBase() string { return s.URL + "/v1" }

// AnthropicBase is the base URL an Anthropic SDK (or the proxy) takes.
func (s *Server) AnthropicBase() string { return s.URL }

// Last returns the last request received (zero if none).
func (s *Server) Last() Received {
	r := s.Received()
	if len(r) == 0 {
		return Received{}
	}
	return r[len(r)-1]
}
