package proxy

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/models"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/wire/formats"
)

// Stored is the result of compacting a proxied conversation's stored last
// request (POST /v1/compact with only a conversation_id).
type Stored struct {
	// Provider is OpenAI, Anthropic or Responses: the format of Messages
	// and System (Anthropic's "system", the Responses API's
	// "instructions"; Messages are then its input items).
	Provider string
	Model    string
	// Messages is the conversation, compacted or as it was, in the
	// provider's format; System is Anthropic's top-level system (nil for
	// OpenAI, or when absent).
	Messages []json.RawMessage
	System   json.RawMessage
	Response *compactor.Response
}

// CompactStored compacts the last request the proxy forwarded for the
// conversation id, with pipeline and overrides, through the same path as
// a proxied request (the status and plugin state are updated). When it
// compacts, the conversation is flagged needs_compaction, so the agent's
// next request (which still carries its whole history) is compacted
// before it goes upstream. It fails with ErrNotStored when the proxy holds
// no request for id (never proxied, evicted by proxy.max_stored_bytes, or
// proxied before the daemon last started).
func (p *Proxy) CompactStored(ctx context.Context, id string, pipeline []string, overrides map[string]map[string]any) (*Stored, error) {
	e, ok := p.mem.LastRequest(id)
	if !ok || e.Body == nil {
		return nil, fmt.Errorf("%w %q (the proxy keeps the last request of conversations proxied since the daemon started, within proxy.max_stored_bytes)", ErrNotStored, id)
	}
	prov, ok := formats.Lookup(e.Format)
	if !ok {
		return nil, fmt.Errorf("%w: the stored request's format %q is unknown", ErrNotStored, e.Format)
	}
	req, err := parseRequest(e.Body, prov)
	if err != nil {
		return nil, fmt.Errorf("%w: the stored request cannot be read: %v", ErrNotStored, err)
	}
	wc, err := prov.Convert(req.system, req.messages)
	if err != nil {
		return nil, err
	}
	conv := wc.Chat()
	cfg := p.opts.Config.Current()
	resp, err := p.opts.Compactor.Compact(ctx, compactor.Request{
		Conversation: conv, Pipeline: pipeline, Overrides: overrides, Model: e.Model, ConversationID: id,
		ContextWindow: cfg.Proxy.ContextWindow, SummarizerModel: cfg.LLMModel(),
	})
	if err != nil {
		return nil, err
	}
	// The list as the format's elements (a Responses string input is
	// answered as the one user message item it is).
	out := &Stored{Provider: e.Format, Model: e.Model, Messages: wc.List(), System: req.system, Response: resp}
	failed := false
	for _, st := range resp.Stats.Stages {
		failed = failed || st.Error != ""
	}
	obs := store.Observation{
		ConversationID: id, Model: e.Model, Pipeline: pipeline, Provider: e.Format,
		MessagesBefore: len(out.Messages), TokensBefore: resp.Stats.TokensBefore,
		MessagesAfter: len(out.Messages), TokensAfter: resp.Stats.TokensBefore, Failed: failed,
	}
	if obs.ContextWindow = cfg.Proxy.ContextWindow; obs.ContextWindow <= 0 {
		obs.ContextWindow = models.ContextWindow(e.Model)
	}
	if resp.Compacted {
		list, err := req.back(prov, wc, resp)
		if err != nil {
			return nil, fmt.Errorf("writing the compacted conversation back: %w", err)
		}
		out.Messages = list
		obs.Compacted, obs.MessagesAfter, obs.TokensAfter = true, len(out.Messages), resp.Stats.TokensAfter
	}
	p.opts.Store.Observe(obs)
	p.observe(&Compaction{Input: conv, Response: resp, Model: e.Model, Pipeline: pipeline,
		Format: e.Format, MessagesBefore: obs.MessagesBefore, MessagesAfter: obs.MessagesAfter})
	if resp.Compacted {
		p.opts.Store.SetNeedsCompaction(id, true)
	}
	p.logger.Info("proxy: manual compaction", "conversation", id, "compacted", resp.Compacted,
		"messages", fmt.Sprintf("%d→%d", obs.MessagesBefore, obs.MessagesAfter), "summary", resp.Summary)
	return out, nil
}
