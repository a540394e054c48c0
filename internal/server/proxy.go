package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/anthropic"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/wire/responses"
)

// proxyForwardPattern routes the paths under /v1/ that no endpoint of
// compactd's serves: the proxy forwards them, when it has an upstream for
// them.
const proxyForwardPattern = "/v1/"

// routeProxy registers the provider-compatible routes (internal/proxy),
// and under /v1/ the paths compactd does not serve, which the proxy
// forwards when it has an upstream for them (else they are not found).
func (s *Server) routeProxy() {
	if s.opts.Proxy == nil {
		return
	}
	serve := func(h http.HandlerFunc) handlerFunc {
		return func(w http.ResponseWriter, r *http.Request) error {
			h(w, r)
			return nil
		}
	}
	s.route(proxy.RouteOpenAI, "proxy_openai", map[string]handlerFunc{http.MethodPost: serve(s.opts.Proxy.ServeOpenAI)})
	s.route(proxy.RouteAnthropic, "proxy_anthropic", map[string]handlerFunc{http.MethodPost: serve(s.opts.Proxy.ServeAnthropic)})
	s.route(proxy.RouteResponses, "proxy_responses", map[string]handlerFunc{http.MethodPost: serve(s.opts.Proxy.ServeResponses)})
	s.route(proxyForwardPattern, "proxy_forward", map[string]handlerFunc{"*": func(w http.ResponseWriter, r *http.Request) error {
		if !s.opts.Proxy.Forwards(r) {
			return s.notFound(w, r)
		}
		s.opts.Proxy.ServeForward(w, r)
		return nil
	}})
}

// Formats of /v1/compact's "format": OpenAI chat messages (the default),
// an Anthropic Messages conversation (top-level "system", content
// blocks), or an OpenAI Responses one ("messages" are its input items,
// "system" its instructions), converted at the edge so policies see the
// same ABI.
const (
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
	FormatResponses = responses.Name
)

// requestConversation returns a /v1/compact request's conversation: conv,
// read with the request (OpenAI messages), or for the Anthropic and
// Responses formats its messages converted, with the function that writes
// a result back in that format.
func requestConversation(req *client.CompactRequest, conv *chat.Conversation) (*chat.Conversation, func(*compactor.Response) ([]json.RawMessage, []int, error), error) {
	switch req.Format {
	case FormatResponses:
		rc, err := responses.ConvertItems(req.System, req.Messages)
		if err != nil {
			return nil, nil, err
		}
		return rc.Chat, func(resp *compactor.Response) ([]json.RawMessage, []int, error) {
			// OpenAI caches prefixes without markers: there are no
			// breakpoints to write.
			items, err := rc.Back(resp.Conversation, resp.Origin)
			return items, nil, err
		}, nil
	case FormatAnthropic:
	default:
		return conv, nil, nil
	}
	ac, err := anthropic.Convert(req.System, req.Messages)
	if err != nil {
		return nil, nil, err
	}
	return ac.Chat, func(resp *compactor.Response) ([]json.RawMessage, []int, error) {
		if !req.CacheBreakpoints {
			msgs, err := ac.Back(resp.Conversation, resp.Origin)
			return msgs, nil, err
		}
		// The request's tools are not sent to /v1/compact: their markers,
		// if any, are the caller's to count.
		return ac.BackWithBreakpoints(resp.Conversation, resp.Origin, resp.CacheBreakpoints, 0)
	}, nil
}

// compactStored serves POST /v1/compact with a conversation_id and no
// messages: the proxy's stored last request of that conversation is
// compacted (policy, pipeline and config apply; the model is the stored
// request's).
func (s *Server) compactStored(ctx context.Context, w http.ResponseWriter, req *client.CompactRequest, cfg *config.Config) error {
	if s.opts.Proxy == nil {
		return apiErrorf(http.StatusBadRequest, CodeBadRequest, "\"messages\" is required (an array of chat messages)")
	}
	pipeline, err := choosePipeline(req, cfg.ProxyPipeline())
	if err != nil {
		return err
	}
	defaultIsPolicy := cfg.Proxy.Policy != "" || len(cfg.Proxy.Pipeline) == 0 && cfg.Policy != ""
	keyed := len(req.Pipeline) > 0 || req.Policy == "" && !defaultIsPolicy
	overrides, err := splitOverrides(req.Config, pipeline, keyed)
	if err != nil {
		return err
	}
	st, err := s.opts.Proxy.CompactStored(ctx, req.ConversationID, pipeline, overrides)
	if errors.Is(err, proxy.ErrNotStored) {
		return apiErrorf(http.StatusNotFound, CodeNotFound, "%v", err)
	}
	if err != nil {
		return err
	}
	s.warnIfStoreDown(w) // an outage this request found
	return writeCompacted(w, st.Messages, st.Response, st.Provider, st.System, nil, nil)
}
