package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/models"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/store"
)

// Limits of a compaction request (README.md, "POST /v1/compact").
const (
	// maxConversationID caps a caller's conversation_id, in bytes.
	maxConversationID = 256
	// maxModelName caps the model's name, in bytes.
	maxModelName = 256
	// maxPipeline caps the policies one request may run.
	maxPipeline = config.MaxPipeline
)

// compactTail is the response after its messages, which are written as
// the caller's bytes rather than re-encoded.
type compactTail struct {
	Compacted      bool            `json:"compacted"`
	Summary        string          `json:"summary"`
	ConversationID string          `json:"conversation_id"`
	Warnings       []string        `json:"warnings"`
	Stats          compactor.Stats `json:"stats"`
	// Format and System are set for Anthropic-format conversations (and
	// for a proxied conversation's stored request).
	Format string          `json:"format,omitempty"`
	System json.RawMessage `json:"system,omitempty"`
}

// handleCompact serves POST /v1/compact.
func (s *Server) handleCompact(w http.ResponseWriter, r *http.Request) error {
	cfg := s.opts.Config.Current()
	ctx, cancel := context.WithTimeout(r.Context(), cfg.Limits.RequestTimeout.D())
	defer cancel()
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cfg.Limits.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return toAPIError(err)
		}
		return apiErrorf(http.StatusBadRequest, CodeBadRequest, "reading the body: %v", err)
	}
	req, err := decodeCompactRequest(data)
	if err != nil {
		return err
	}
	if req.Messages == nil {
		return s.compactStored(ctx, w, req, cfg)
	}
	if n := len(req.Messages); n > cfg.Limits.MaxMessages {
		return apiErrorf(http.StatusRequestEntityTooLarge, CodeTooManyMessages, "%d messages; the limit is %d (limits.max_messages)", n, cfg.Limits.MaxMessages)
	}
	pipeline, err := choosePipeline(req, cfg.DefaultPipeline())
	if err != nil {
		return err
	}
	// With "policy" (or a default policy) config holds its keys; with
	// "pipeline" (or a default pipeline) one object per policy name.
	keyed := len(req.Pipeline) > 0 || req.Policy == "" && cfg.Policy == ""
	overrides, err := splitOverrides(req.Config, pipeline, keyed)
	if err != nil {
		return err
	}
	conv, back, err := requestConversation(req)
	if err != nil {
		return err
	}
	resp, err := s.opts.Compactor.Compact(ctx, compactor.Request{
		Conversation: conv, Pipeline: pipeline, Overrides: overrides, Model: req.Model,
		ConversationID: req.ConversationID, ContextWindow: req.ContextWindow, TargetTokens: req.TargetTokens,
	})
	if err != nil {
		return err
	}
	s.record(req, pipeline, conv, resp)

	msgs := resp.Conversation.MessagesJSON()
	format, system := "", json.RawMessage(nil)
	if back != nil {
		if msgs, err = back(resp); err != nil {
			return err
		}
		format, system = FormatAnthropic, req.System
	}
	return writeCompacted(w, msgs, resp, format, system)
}

// writeCompacted writes a compaction's answer: the messages (a JSON array
// of the caller's bytes, not re-encoded), then the rest.
func writeCompacted(w http.ResponseWriter, msgs []byte, resp *compactor.Response, format string, system json.RawMessage) error {
	tail := compactTail{Compacted: resp.Compacted, Summary: resp.Summary, ConversationID: resp.ConversationID,
		Warnings: resp.Warnings, Stats: resp.Stats, Format: format, System: system}
	if tail.Warnings == nil {
		tail.Warnings = []string{}
	}
	tb, err := json.Marshal(tail)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Grow(len(msgs) + len(tb) + 16)
	buf.WriteString(`{"messages":`)
	buf.Write(msgs)
	buf.WriteByte(',')
	buf.Write(tb[1:])
	buf.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
	return nil
}

// observeCompaction counts a compaction in the metrics; it reports
// whether a stage failed.
func (s *Server) observeCompaction(resp *compactor.Response) (failed bool) {
	for _, st := range resp.Stats.Stages {
		outcome := "unchanged"
		switch {
		case st.Error != "":
			outcome, failed = "failed", true
		case st.Skipped != "":
			outcome = "skipped"
		case st.Compacted:
			outcome = "compacted"
		}
		s.metrics.compactions.add(1, st.Policy, outcome)
		s.metrics.stageLatency.observe(st.Duration.Seconds(), st.Policy)
		if saved := st.TokensBefore - st.TokensAfter; saved > 0 {
			s.metrics.tokensSaved.add(uint64(saved), st.Policy)
		}
	}
	s.metrics.tokensIn.Add(uint64(resp.Stats.TokensBefore))
	s.metrics.tokensOut.Add(uint64(resp.Stats.TokensAfter))
	return failed
}

// decodeCompactRequest decodes and checks the body's shape and ranges.
func decodeCompactRequest(data []byte) (*client.CompactRequest, error) {
	if !utf8.Valid(data) {
		// RFC 8259: JSON text exchanged between systems is UTF-8. Go's
		// decoder would replace the bytes in decoded strings and keep them
		// in raw messages: the caller would get back text it did not send,
		// or bytes no provider accepts.
		return nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "the body is not UTF-8 (byte %d): JSON text is UTF-8 (RFC 8259)", invalidUTF8At(data))
	}
	var req client.CompactRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "empty body: want a JSON object with \"messages\"")
		}
		return nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "%s", jsonProblem(data, err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "data after the JSON object")
	}
	switch {
	case req.Messages == nil && req.ConversationID == "":
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "\"messages\" is required (an array of chat messages), or a \"conversation_id\" alone to compact a proxied conversation's last request")
	case req.Policy != "" && len(req.Pipeline) > 0:
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "give \"policy\" or \"pipeline\", not both")
	case len(req.ConversationID) > maxConversationID:
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "conversation_id is %d bytes; the limit is %d", len(req.ConversationID), maxConversationID)
	case !utf8.ValidString(req.ConversationID) || strings.ContainsRune(req.ConversationID, 0):
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "conversation_id must be UTF-8 text without NUL")
	case req.Format != "" && req.Format != FormatOpenAI && req.Format != FormatAnthropic:
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "format %q: want \"openai\" (the default) or \"anthropic\"", req.Format)
	case req.System != nil && req.Format != FormatAnthropic:
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "\"system\" is Anthropic's top-level system prompt: send it with \"format\": \"anthropic\" (OpenAI messages carry system messages in \"messages\")")
	case len(req.Model) > maxModelName:
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "model is %d bytes; the limit is %d", len(req.Model), maxModelName)
	case len(req.Pipeline) > maxPipeline:
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "pipeline has %d policies; the limit is %d", len(req.Pipeline), maxPipeline)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"context_window", req.ContextWindow}, {"target_tokens", req.TargetTokens}} {
		if f.v < 0 || f.v > abi.MaxTokenCount {
			return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "%s is %d; the range is 0 to %d tokens", f.name, f.v, abi.MaxTokenCount)
		}
	}
	return &req, nil
}

// invalidUTF8At returns the offset of the first byte of b that is not
// part of valid UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// jsonProblem describes a decoding error with its position.
func jsonProblem(data []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if strings.HasPrefix(msg, "unknown field") {
		msg += " (fields: policy, pipeline, config, model, conversation_id, context_window, target_tokens, format, system, messages)"
	}
	return msg
}

// choosePipeline returns the policies to run.
func choosePipeline(req *client.CompactRequest, def []string) ([]string, error) {
	var names []string
	switch {
	case req.Policy != "":
		names = []string{req.Policy}
	case len(req.Pipeline) > 0:
		names = req.Pipeline
	default:
		if len(def) == 0 {
			return nil, apiErrorf(http.StatusBadRequest, CodeNoPolicy, "name a \"policy\" or a \"pipeline\" (the config file sets no default)")
		}
		names = def
	}
	for _, n := range names {
		if !abi.ValidName(n) {
			return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "%q is not a policy name", n)
		}
	}
	return names, nil
}

// splitOverrides turns the request's config into per-policy overrides:
// the object holds one policy's keys, or (keyed) one object per policy.
func splitOverrides(cfg map[string]any, pipeline []string, keyed bool) (map[string]map[string]any, error) {
	if len(cfg) == 0 {
		return nil, nil
	}
	if !keyed {
		return map[string]map[string]any{pipeline[0]: cfg}, nil
	}
	out := make(map[string]map[string]any, len(cfg))
	for name, v := range cfg {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "config.%s: with a pipeline, config holds one object per policy name", name)
		}
		out[name] = obj
	}
	return out, nil
}

// record updates the conversation's status, its last-compaction record
// (for the status page) and the metrics.
func (s *Server) record(req *client.CompactRequest, pipeline []string, in *chat.Conversation, resp *compactor.Response) {
	failed := s.observeCompaction(resp)
	st := resp.Stats
	window := req.ContextWindow
	if window <= 0 {
		window = models.ContextWindow(req.Model)
	}
	s.opts.Store.Observe(store.Observation{
		ConversationID: resp.ConversationID, Model: req.Model, Pipeline: pipeline,
		MessagesBefore: st.MessagesBefore, TokensBefore: st.TokensBefore,
		MessagesAfter: st.MessagesAfter, TokensAfter: st.TokensAfter,
		ContextWindow: window, Compacted: resp.Compacted, Failed: failed,
	})
	s.recordDetail(in, resp, req.Model, pipeline)
}

// observeProxied counts a compaction the proxy ran in the metrics and
// keeps its record for the status page, as record does for /v1/compact
// (the proxy has recorded the conversation's status).
func (s *Server) observeProxied(c proxy.Compaction) {
	s.observeCompaction(c.Response)
	s.recordDetail(c.Input, c.Response, c.Model, c.Pipeline)
}

// recordDetail keeps a compaction's last-compaction record (for the
// status page and GET /v1/status?conversation_id=ID), when it compacted.
func (s *Server) recordDetail(in *chat.Conversation, resp *compactor.Response, model string, pipeline []string) {
	if !resp.Compacted {
		return
	}
	b, err := json.Marshal(compactionDetail(in, resp, model, pipeline, time.Now()))
	if err == nil {
		err = s.opts.Store.SetLastCompaction(resp.ConversationID, b)
	}
	if err != nil {
		s.logger.Warn("recording the compaction for the status page", "conversation", resp.ConversationID, "error", err)
	}
}
