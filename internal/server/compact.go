package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/convlabel"
	"github.com/compactd/compactd/internal/models"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/tracing"
	"github.com/compactd/compactd/internal/wire"
	"github.com/compactd/compactd/internal/wire/formats"
	"github.com/compactd/compactd/internal/wire/openaichat"
	"github.com/compactd/compactd/jsonscan"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Limits of a compaction request (docs/api.md, "POST /v1/compact").
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
	Compacted      bool     `json:"compacted"`
	Summary        string   `json:"summary"`
	ConversationID string   `json:"conversation_id"`
	Warnings       []string `json:"warnings"`
	// CacheBreakpoints are the messages marked with cache_control, when
	// the request asked for them.
	CacheBreakpoints []int           `json:"cache_breakpoints,omitempty"`
	Stats            compactor.Stats `json:"stats"`
	// Format and System are set for Anthropic- and Responses-format
	// conversations (and for a proxied conversation's stored request).
	Format string          `json:"format,omitempty"`
	System json.RawMessage `json:"system,omitempty"`
}

// handleCompact serves POST /v1/compact.
func (s *Server) handleCompact(w http.ResponseWriter, r *http.Request) (err error) {
	rec := requestlog.Record{Kind: requestlog.KindCompact, Time: time.Now()}
	if t := s.opts.Tracer; t != nil {
		ctx, span := t.StartServer(r.Context(), r, "compactd compact")
		r = r.WithContext(ctx)
		defer func() { endCompactSpan(span, &rec, err) }()
	}
	defer func() { s.logCompact(&rec, err) }()
	s.warnIfStoreDown(w)
	cfg := s.opts.Config.Current()
	ctx, cancel := context.WithTimeout(r.Context(), cfg.Limits.RequestTimeout.D())
	defer cancel()
	data, err := readBody(w, r, cfg.Limits.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return toAPIError(err)
		}
		return apiErrorf(http.StatusBadRequest, CodeBadRequest, "reading the body: %v", err)
	}
	req, conv, err := decodeCompactRequest(data, s.memory)
	if err != nil {
		return err
	}
	rec.ConversationID, rec.Format, rec.Model = req.ConversationID, req.Format, req.Model
	if conv == nil && req.Messages == nil {
		return s.compactStored(ctx, w, req, cfg, &rec)
	}
	wc, err := requestConversation(req, conv)
	if err != nil {
		return err
	}
	conv = wc.Chat()
	if n := conv.Len(); n > cfg.Limits.MaxMessages {
		return apiErrorf(http.StatusRequestEntityTooLarge, CodeTooManyMessages, "%d messages; the limit is %d (limits.max_messages)", n, cfg.Limits.MaxMessages)
	}
	pipeline, err := choosePipeline(req, cfg.DefaultPipeline())
	if err != nil {
		return err
	}
	// With "policy" (or a default policy, the implicit one included)
	// config holds its keys; with "pipeline" (or a default pipeline) one
	// object per policy name.
	keyed := len(req.Pipeline) > 0 || req.Policy == "" && cfg.Policy == "" && len(cfg.Pipeline) > 0
	overrides, err := splitOverrides(req.Config, pipeline, keyed)
	if err != nil {
		return err
	}
	resp, err := s.opts.Compactor.Compact(ctx, compactor.Request{
		Conversation: conv, Pipeline: pipeline, Overrides: overrides, Model: req.Model,
		ConversationID: req.ConversationID, ContextWindow: req.ContextWindow, TargetTokens: req.TargetTokens,
		Decision: manualDecision(req),
	})
	if err != nil {
		return err
	}
	chat.Remember(conv, resp.Stats.Encoding)
	s.record(req, pipeline, conv, resp)
	fillCompactRecord(&rec, resp, pipeline, req.ContextWindow)

	// The result in the request's format: the cache breakpoints written
	// when asked for (the request's tools are not sent to /v1/compact:
	// their markers, if any, are the caller's to count).
	var marks []int
	if req.CacheBreakpoints {
		marks = resp.CacheBreakpoints
	}
	var warnings []string
	msgs, marks, err := wc.Back(resp.Conversation, resp.Origin, marks, 0)
	if errors.Is(err, wire.ErrBreakpoints) {
		warnings = append(warnings, "cache breakpoints not applied: "+strings.TrimPrefix(err.Error(), wire.ErrBreakpoints.Error()+": "))
		msgs, marks, err = wc.Back(resp.Conversation, resp.Origin, nil, 0)
	}
	if err != nil {
		return err
	}
	format, system := "", json.RawMessage(nil)
	if converted(req.Format) {
		format, system = req.Format, req.System
	}
	s.warnIfStoreDown(w) // an outage this request found
	return writeCompacted(w, &s.answers, msgs, resp, format, system, marks, warnings)
}

// writeCompacted writes a compaction's answer: the messages (the caller's
// bytes, not re-encoded), then the rest.
func writeCompacted(w http.ResponseWriter, bufs *answerBuffers, msgs []json.RawMessage, resp *compactor.Response, format string, system json.RawMessage, marks []int, warnings []string) error {
	tail := compactTail{Compacted: resp.Compacted, Summary: resp.Summary, ConversationID: resp.ConversationID,
		Warnings: append(resp.Warnings, warnings...), Stats: resp.Stats, Format: format, System: system,
		CacheBreakpoints: marks}
	if tail.Warnings == nil {
		tail.Warnings = []string{}
	}
	tb, err := json.Marshal(tail)
	if err != nil {
		return err
	}
	// The messages are the caller's bytes, not re-encoded:
	// {"messages":[m0,m1,...],<tail>}, assembled in one buffer of the
	// answer's size and written at once (a write per message cost a
	// system call per message past the connection's 4 KB buffer).
	size := len(`{"messages":[],`) + len(tb) - 1 + 1 // tail without its '{', then '\n'
	for i, m := range msgs {
		size += len(m)
		if i > 0 {
			size++
		}
	}
	buf := bufs.get(size)
	defer bufs.put(buf)
	body := append((*buf)[:0], `{"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, m...)
	}
	body = append(body, "],"...)
	body = append(body, tb[1:]...)
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body) // copied or sent before it returns: the buffer goes back after
	*buf = body
	return nil
}

// maxPooledAnswer is the largest answer buffer answerBuffers keeps: a
// rare huge answer does not pin its buffer.
const maxPooledAnswer = 1 << 20

// answerBuffers pools the buffers compaction answers are assembled in.
// An answer is about as large as its request (tens of kilobytes for a
// long session), and making a new one for each was an allocation, and
// its clearing, of that size per request. Its zero value is ready; it is
// safe for concurrent use.
type answerBuffers struct {
	pool sync.Pool // of *[]byte
}

// get returns a buffer with room for size bytes.
func (b *answerBuffers) get(size int) *[]byte {
	if p, ok := b.pool.Get().(*[]byte); ok {
		if cap(*p) < size {
			*p = make([]byte, 0, size)
		}
		return p
	}
	buf := make([]byte, 0, size)
	return &buf
}

// put gives a buffer back; nothing may use it afterwards.
func (b *answerBuffers) put(p *[]byte) {
	if cap(*p) > maxPooledAnswer {
		return
	}
	*p = (*p)[:0]
	b.pool.Put(p)
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

// readBody reads a request body of at most limit bytes into a buffer of
// its exact size when the request says it (io.ReadAll grows its buffer
// by copying, which cost as much as parsing the body).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	n := r.ContentLength
	if n < 0 || n > limit {
		return io.ReadAll(body)
	}
	buf := make([]byte, n, n+1)
	if _, err := io.ReadFull(body, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("the body ends before its Content-Length of %d bytes", n)
		}
		return nil, err
	}
	return buf, nil
}

// requestFields are the fields of a compaction request, for the error
// about an unknown one.
const requestFields = "policy, pipeline, config, model, conversation_id, context_window, target_tokens, cache_breakpoints, format, system, messages, title, tags, user"

// decodeCompactRequest reads the body in one pass (chat's scanner): the
// request's fields, and its messages as a conversation that views the
// body's bytes, taken from mem where they repeat a remembered request.
// It checks the body's shape; the conversation's structure is checked by
// the compactor.
func decodeCompactRequest(data []byte, mem *chat.Memory) (*client.CompactRequest, *chat.Conversation, error) {
	if !utf8.Valid(data) {
		// RFC 8259: JSON text exchanged between systems is UTF-8. The
		// caller would otherwise get back text it did not send, or bytes
		// no provider accepts.
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "the body is not UTF-8 (byte %d): JSON text is UTF-8 (RFC 8259)", invalidUTF8At(data))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "empty body: want a JSON object with \"messages\"")
	}
	s := jsonscan.New(data)
	var req client.CompactRequest
	var conv *chat.Conversation
	var convErr error // chat's error, for messages that may be Anthropic's
	seenMessages, msgStart := false, 0
	if k := s.Peek(); k != jsonscan.Object {
		if _, _, _, err := s.Skip(); err != nil {
			return nil, nil, jsonError(data, err)
		}
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "the body is %s; want a JSON object with \"messages\"", k)
	}
	s.BeginObject()
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil {
			return nil, nil, jsonError(data, err)
		}
		if !more {
			break
		}
		name := jsonscan.Key(key, esc)
		switch string(name) {
		case "policy":
			req.Policy, err = s.ReadString("policy")
		case "model":
			req.Model, err = s.ReadString("model")
		case "conversation_id":
			req.ConversationID, err = s.ReadString("conversation_id")
		case "context_window":
			req.ContextWindow, err = s.ReadInt("context_window")
		case "target_tokens":
			req.TargetTokens, err = s.ReadInt("target_tokens")
		case "force":
			req.Force, err = s.ReadBool("force")
		case "pipeline":
			req.Pipeline, err = s.ReadStrings("pipeline")
		case "config":
			err = configField(s, &req.Config)
		case "cache_breakpoints":
			req.CacheBreakpoints, err = s.ReadBool("cache_breakpoints")
		case "format":
			req.Format, err = s.ReadString("format", formats.Names()...)
		case "title":
			req.Title, err = s.ReadString("title")
		case "tags":
			req.Tags, err = s.ReadStrings("tags")
		case "user":
			req.User, err = s.ReadString("user")
		case "system":
			// Anthropic's system prompt (a string or text blocks), which
			// internal/wire/anthropic converts, or the Responses API's
			// instructions.
			var start, end int
			if _, start, end, err = s.Skip(); err == nil {
				req.System = data[start:end]
			}
		case "messages":
			if seenMessages {
				return nil, nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "\"messages\" appears twice")
			}
			seenMessages = true
			var null bool
			if null, err = s.Null(); err != nil || null {
				break
			}
			msgStart = s.Pos()
			if converted(req.Format) {
				req.Messages, err = rawElements(s)
				break
			}
			// OpenAI messages (the default), read as a conversation in
			// this pass. A "format" that comes after them may still make
			// them Anthropic messages: then what chat could not read is
			// kept as raw messages for the converter, and its error
			// reported only if the format stays OpenAI's.
			if conv, err = mem.ScanMessages(s); err != nil && (errors.Is(err, chat.ErrMalformed) || errors.Is(err, chat.ErrUnsupportedFormat)) && !errors.As(err, new(*jsonscan.Error)) {
				convErr = err
				s.Seek(msgStart)
				req.Messages, err = rawElements(s)
			}
		default:
			return nil, nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "unknown field %q (fields: %s)", name, requestFields)
		}
		if err != nil {
			return nil, nil, jsonError(data, err)
		}
	}
	if err := s.End(); err != nil {
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "data after the JSON object")
	}
	switch {
	case !converted(req.Format) && convErr != nil:
		return nil, nil, jsonError(data, convErr)
	case converted(req.Format) && conv != nil:
		// Read as OpenAI messages before "format" came: the converter
		// takes them as raw messages.
		s.Seek(msgStart)
		var err error
		if req.Messages, err = rawElements(s); err != nil {
			return nil, nil, jsonError(data, err)
		}
		conv = nil
	}
	switch {
	case conv == nil && req.Messages == nil && req.ConversationID == "":
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "\"messages\" is required (an array of chat messages), or a \"conversation_id\" alone to compact a proxied conversation's last request")
	case req.Policy != "" && len(req.Pipeline) > 0:
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "give \"policy\" or \"pipeline\", not both")
	case len(req.ConversationID) > maxConversationID:
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "conversation_id is %d bytes; the limit is %d", len(req.ConversationID), maxConversationID)
	case !utf8.ValidString(req.ConversationID) || strings.ContainsRune(req.ConversationID, 0):
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "conversation_id must be UTF-8 text without NUL")
	case !known(req.Format):
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "format %q: want one of %s (%s is the default)", req.Format, strings.Join(formats.Names(), ", "), formats.Default)
	case req.System != nil && !converted(req.Format):
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "\"system\" is Anthropic's top-level system prompt or the Responses API's instructions: send it with \"format\": \"anthropic\" or \"responses\" (OpenAI messages carry system messages in \"messages\")")
	case len(req.Model) > maxModelName:
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "model is %d bytes; the limit is %d", len(req.Model), maxModelName)
	case len(req.Pipeline) > maxPipeline:
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "pipeline has %d policies; the limit is %d", len(req.Pipeline), maxPipeline)
	}
	labels, err := convlabel.Parse(req.Title, "", req.User, func(l string) string { return l })
	if err == nil {
		labels.Tags, err = convlabel.ParseTags(req.Tags, "tags")
	}
	if err != nil {
		return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "%v", err)
	}
	req.Title, req.Tags, req.User = labels.Title, labels.Tags, labels.User
	for _, f := range []struct {
		name string
		v    int
	}{{"context_window", req.ContextWindow}, {"target_tokens", req.TargetTokens}} {
		if f.v < 0 || f.v > abi.MaxTokenCount {
			return nil, nil, apiErrorf(http.StatusBadRequest, CodeBadRequest, "%s is %d; the range is 0 to %d tokens", f.name, f.v, abi.MaxTokenCount)
		}
	}
	return &req, conv, nil
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

// converted reports whether a format's messages are converted at the
// edge (read as raw messages, not as OpenAI chat messages, which are the
// chat form itself and read in the request's pass, through chat.Memory).
func converted(format string) bool { return format != "" && format != openaichat.Name }

// known reports whether format is a registered wire format ("" is the
// default).
func known(format string) bool {
	_, ok := formats.Lookup(format)
	return ok
}

// rawElements reads the messages array as raw elements (views of the
// body), for the Anthropic converter.
func rawElements(s *jsonscan.Scanner) ([]json.RawMessage, error) {
	if s.Peek() != jsonscan.Array {
		return nil, s.WrongType("messages", "an array")
	}
	s.BeginArray()
	out := make([]json.RawMessage, 0, 16)
	for first := true; ; first = false {
		more, err := s.NextElement(first)
		if err != nil || !more {
			return out, err
		}
		_, start, end, err := s.Skip()
		if err != nil {
			return nil, err
		}
		out = append(out, s.Data()[start:end])
	}
}

// jsonError turns an error from reading the body into its answer: a
// syntax error (with its byte offset), a field of the wrong type, or a
// malformed message (left to toAPIError: invalid_conversation).
func jsonError(data []byte, err error) error {
	var se *jsonscan.Error
	var te *jsonscan.TypeError
	switch {
	case errors.Is(err, chat.ErrMalformed) && !errors.As(err, &se):
		return err
	case errors.As(err, &se) && se.Offset >= len(data):
		return apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "the JSON ends early")
	case errors.As(err, &se):
		return apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "not valid JSON at byte %d: %s", se.Offset, se.Msg)
	case errors.As(err, &te):
		return apiErrorf(http.StatusBadRequest, CodeInvalidJSON, "field %q: want %s, got %s", te.Field, te.Want, te.Got)
	}
	return err
}

// configField reads config, an object of policy settings (or of one
// object per policy), with encoding/json: it is small, and policyconfig
// takes it as Go values.
func configField(s *jsonscan.Scanner, dst *map[string]any) error {
	switch s.Peek() {
	case jsonscan.Null:
		_, err := s.Null()
		return err
	case jsonscan.Object:
	default:
		return s.WrongType("config", "an object")
	}
	_, start, end, err := s.Skip()
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(s.Data()[start:end]))
	dec.UseNumber()
	return dec.Decode(dst)
}

// manualDecision is the caller's decision to compact (force), handed to
// the policies as the host's (reason manual); nil when the caller leaves
// it to the policies.
func manualDecision(req *client.CompactRequest) *abi.Decision {
	if !req.Force {
		return nil
	}
	return &abi.Decision{Reason: abi.ReasonManual, TargetTokens: req.TargetTokens}
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
		Title: req.Title, Tags: req.Tags, User: req.User, DerivedTitle: s.derivedTitle(req, resp.ConversationID, in),
	})
	s.recordDetail(in, resp, req.Model, pipeline, wireCount{})
}

// observeProxied counts a compaction the proxy ran in the metrics and
// keeps its record for the status page, as record does for /v1/compact
// (the proxy has recorded the conversation's status).
func (s *Server) observeProxied(c proxy.Compaction) {
	s.observeCompaction(c.Response)
	s.recordDetail(c.Input, c.Response, c.Model, c.Pipeline, wireCount{format: c.Format, before: c.MessagesBefore, after: c.MessagesAfter})
}

// wireCount is a proxied request's message count in its wire format,
// before and after (zero for /v1/compact, which counts chat messages).
type wireCount struct {
	format        string
	before, after int
}

// recordDetail keeps a compaction's last-compaction record (for the
// status page and GET /v1/status?conversation_id=ID), when it compacted.
func (s *Server) recordDetail(in *chat.Conversation, resp *compactor.Response, model string, pipeline []string, wc wireCount) {
	if !resp.Compacted {
		return
	}
	// Described when the store writes it or the page reads it (once a
	// second at most), not on every request: describing took a quarter
	// of a compaction's time.
	at := time.Now()
	err := s.opts.Store.SetLastCompactionFunc(resp.ConversationID, func() ([]byte, error) {
		d := compactionDetail(in, resp, model, pipeline, at)
		d.WireFormat, d.WireMessagesBefore, d.WireMessagesAfter = wc.format, wc.before, wc.after
		return json.Marshal(d)
	})
	if err != nil {
		s.logger.Warn("recording the compaction for the status page", "conversation", resp.ConversationID, "error", err)
	}
}

// derivedTitle is a /v1/compact conversation's title from its task
// (convlabel.Title), when the request gives none and state.titles allows
// it. The store keeps it only for a conversation without a title, so the
// first one derived is the one that counts: it is derived once per
// conversation (s.titles), not read again from every request's task.
func (s *Server) derivedTitle(req *client.CompactRequest, conversationID string, in *chat.Conversation) string {
	if req.Title != "" || !s.opts.Config.Current().State.DeriveTitles() {
		return ""
	}
	return s.titles.get(conversationID, func() string { return convlabel.Title(in.Messages) })
}

// maxTitles bounds the conversations titleCache remembers; past it the
// cache starts over (a title is then derived once more).
const maxTitles = 4096

// titleCache remembers the title derived for each recent conversation.
// The zero value is ready to use; it is safe for concurrent use.
type titleCache struct {
	mu     sync.Mutex
	titles map[string]string
}

// get returns conversation id's title, deriving it the first time.
func (c *titleCache) get(id string, derive func() string) string {
	if id == "" {
		return derive()
	}
	c.mu.Lock()
	t, ok := c.titles[id]
	c.mu.Unlock()
	if ok {
		return t
	}
	t = derive()
	c.mu.Lock()
	if c.titles == nil || len(c.titles) >= maxTitles {
		c.titles = make(map[string]string)
	}
	c.titles[id] = t
	c.mu.Unlock()
	return t
}

// endCompactSpan ends a /v1/compact request's span with its record's
// figures (no content).
func endCompactSpan(span trace.Span, rec *requestlog.Record, err error) {
	span.SetAttributes(attribute.String("compactd.conversation.id", rec.ConversationID), attribute.String("compactd.format", rec.Format),
		attribute.String("gen_ai.request.model", rec.Model), attribute.Bool("compactd.compacted", rec.Compacted),
		attribute.Int("compactd.tokens_before", rec.TokensBefore), attribute.Int("compactd.tokens_after", rec.TokensAfter),
		attribute.Int("http.response.status_code", rec.Status))
	if len(rec.Pipeline) > 0 {
		span.SetAttributes(attribute.StringSlice("compactd.pipeline", rec.Pipeline))
	}
	tracing.Fail(span, err)
	span.End()
}
