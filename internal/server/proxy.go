package server

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/anthropic"
	"github.com/compactd/compactd/internal/wire/formats"
	"github.com/compactd/compactd/internal/wire/openaichat"
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
	// One route per registered wire format (internal/wire/formats).
	for _, f := range proxy.Formats() {
		s.route(f.Route(), "proxy_"+f.Name(), map[string]handlerFunc{http.MethodPost: serve(s.opts.Proxy.ServeFormat(f))})
	}
	s.route(proxyForwardPattern, "proxy_forward", map[string]handlerFunc{"*": func(w http.ResponseWriter, r *http.Request) error {
		if !s.opts.Proxy.Forwards(r) {
			return s.notFound(w, r)
		}
		s.opts.Proxy.ServeForward(w, r)
		return nil
	}})
}

// Formats of /v1/compact's "format" are the registered wire formats
// (internal/wire/formats): OpenAI chat messages (the default), an
// Anthropic Messages conversation (top-level "system", content blocks),
// or an OpenAI Responses one ("messages" are its input items, "system"
// its instructions), converted at the edge so policies see the same ABI.
const (
	FormatOpenAI    = openaichat.Name
	FormatAnthropic = anthropic.Name
	FormatResponses = responses.Name
)

// requestConversation returns a /v1/compact request's conversation in its
// wire format: conv, read with the request (OpenAI chat messages, the
// chat form itself), or the request's messages converted by the format.
func requestConversation(req *client.CompactRequest, conv *chat.Conversation) (wire.Conversation, error) {
	if conv != nil {
		return openaichat.FromChat(conv), nil
	}
	f, ok := formats.Lookup(req.Format)
	if !ok {
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "format %q: want one of %s", req.Format, strings.Join(formats.Names(), ", "))
	}
	return f.Convert(req.System, req.Messages)
}

// compactStored serves POST /v1/compact with a conversation_id and no
// messages: the proxy's stored last request of that conversation is
// compacted (policy, pipeline and config apply; the model is the stored
// request's, and without policy or pipeline its route's pipeline runs).
func (s *Server) compactStored(ctx context.Context, w http.ResponseWriter, req *client.CompactRequest, cfg *config.Config, rec *requestlog.Record) error {
	if s.opts.Proxy == nil {
		return apiErrorf(http.StatusBadRequest, CodeBadRequest, "\"messages\" is required (an array of chat messages)")
	}
	// The default is what the conversation's requests run: the route of
	// the stored request's model, or its X-Compactd-Policy.
	rt, ok := s.opts.Proxy.StoredRoute(cfg, req.ConversationID)
	if !ok {
		rt = cfg.ProxyRoute("")
	}
	pipeline, err := choosePipeline(req, rt.Pipeline)
	if err != nil {
		return err
	}
	keyed := len(req.Pipeline) > 0 || req.Policy == "" && !rt.Single
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
	rec.Format = st.Provider
	fillCompactRecord(rec, st.Response, pipeline, 0)
	s.warnIfStoreDown(w) // an outage this request found
	return writeCompacted(w, &s.answers, st.Messages, st.Response, st.Provider, st.System, nil, nil)
}
