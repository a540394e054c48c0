package proxy

import (
	"net/http"
	"strings"

	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/anthropic"
	"github.com/compactd/compactd/internal/wire/formats"
	"github.com/compactd/compactd/internal/wire/openaichat"
	"github.com/compactd/compactd/internal/wire/responses"
)

// Format names, as the status reports a proxied conversation's provider.
// OpenAI and Anthropic are also the upstream providers' names.
const (
	OpenAI    = openaichat.Name
	Anthropic = anthropic.Name
	// Responses is the OpenAI Responses API's format; its upstream is
	// OpenAI's.
	Responses = responses.Name
)

// The proxy serves every registered wire format (internal/wire/formats)
// on its route; everything that differs between them is a method of the
// format (internal/wire). What is the proxy's own is which configured
// upstream serves a provider.

// upstreamOf returns the configured base URL of the upstream that serves
// f ("" when not proxied), and the environment variable that sets it.
func upstreamOf(p *config.Proxy, f wire.Format) (base, env string) {
	switch f.Provider() {
	case wire.ProviderAnthropic:
		return p.Anthropic.Upstream, config.EnvAnthropicUpstream
	default:
		return p.OpenAI.Upstream, config.EnvOpenAIUpstream
	}
}

// formatFor tells what a request outside the formats' routes is for (a
// forwarded path, compactd's own error): Anthropic's format when it
// carries the headers every Anthropic client sends or is under
// /v1/messages, else OpenAI's.
func formatFor(r *http.Request) wire.Format {
	if anthropic.FromClient(r.Header) || strings.HasPrefix(r.URL.Path, RouteAnthropic) {
		return anthropic.Format{}
	}
	return openaichat.Format{}
}

// storeUsage is a wire format's usage as the store records it.
func storeUsage(u wire.Usage) store.Usage {
	return store.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens}
}

// Formats returns the wire formats the proxy serves, each on its Route
// (POST), with ServeFormat.
func Formats() []wire.Format { return formats.All() }
