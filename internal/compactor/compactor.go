// Package compactor is compactd's compaction path, shared by the one-shot
// CLI, the daemon and `compactd eval`: it validates a conversation, counts
// its tokens, resolves each policy's config, runs the policy (or a pipeline
// of policies) through the host, keeps per-conversation plugin state, and
// reports what happened. A plugin failure never loses the caller's
// messages: the stage is skipped and the failure becomes a warning.
package compactor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"slices"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/models"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/tracing"
	"github.com/compactd/compactd/policyconfig"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Errors for requests that cannot be served. They wrap more detail; test
// with errors.Is. A failing plugin is not one of them: it is a warning.
var (
	ErrBadRequest = errors.New("bad compaction request")
)

// PolicySource resolves a policy name to the plugin currently serving it.
type PolicySource interface {
	// Acquire returns the plugin for name and a release function the
	// caller must call when its call is over. It fails with an error
	// wrapping registry.ErrUnknownPolicy when no plugin has that name
	// (*registry.Registry is the daemon's source: while the daemon
	// starts, it waits, until ctx ends, for a plugin still loading).
	Acquire(ctx context.Context, name string) (*host.Plugin, func(), error)
}

// ConfigSource gives the config layers under a request's overrides, lowest
// precedence first (e.g. environment defaults, then the config file).
type ConfigSource interface {
	Layers(policy string) []policyconfig.Layer
}

// StateStore keeps the opaque state each policy returns, per conversation.
type StateStore interface {
	LoadState(ctx context.Context, conversationID, policy string) (json.RawMessage, error)
	SaveState(ctx context.Context, conversationID, policy string, state json.RawMessage) error
}

// VersionedStateStore is a StateStore that can compare-and-set (the
// shared store): a stage saves its state only if no other replica wrote
// the conversation's state for that policy since the stage loaded it. The
// loser keeps its answer (computed from the request) and leaves the
// winner's state in place, so concurrent compactions of one conversation
// never corrupt or lose it.
type VersionedStateStore interface {
	StateStore
	LoadStateVersion(ctx context.Context, conversationID, policy string) (json.RawMessage, string, error)
	SaveStateIf(ctx context.Context, conversationID, policy string, state json.RawMessage, version string) error
}

// Options configure a Compactor.
type Options struct {
	Policies PolicySource
	Tokens   *tokens.Counter
	// Config may be nil: only plugin defaults and request overrides apply.
	Config ConfigSource
	// State may be nil: stateful policies then see no state.
	State StateStore
	// LLM answers plugins' llm_complete calls; nil means no provider.
	// NewLLM, if set, is called once per request instead, so a per-request
	// budget can wrap the daemon's provider.
	LLM    host.Completer
	NewLLM func() host.Completer
	Logger hclog.Logger
}

// Compactor runs compaction requests. It is safe for concurrent use.
type Compactor struct {
	opts   Options
	logger hclog.Logger
	ids    *idCache
}

// New returns a Compactor.
func New(opts Options) *Compactor {
	c := &Compactor{opts: opts, logger: opts.Logger, ids: newIDCache()}
	if c.logger == nil {
		c.logger = hclog.NewNullLogger()
	}
	if c.opts.Tokens == nil {
		c.opts.Tokens = tokens.New(tokens.Options{})
	}
	return c
}

// CheckPolicy reports whether a plugin serves the policy name: nil, or
// the policy source's error (wrapping registry.ErrUnknownPolicy when no
// plugin has that name). Like a compaction, it waits while the daemon is
// still loading a plugin that may serve it, until ctx ends.
func (c *Compactor) CheckPolicy(ctx context.Context, name string) error {
	if c.opts.Policies == nil {
		return fmt.Errorf("no policy source: %q cannot be served", name)
	}
	_, release, err := c.opts.Policies.Acquire(ctx, name)
	if err != nil {
		return err
	}
	release()
	return nil
}

// Request is one compaction request.
type Request struct {
	// Conversation is the caller's conversation (validated here).
	Conversation *chat.Conversation
	// Pipeline names the policies to run in order (one for a single
	// policy).
	Pipeline []string
	// Overrides are request-level config per policy name.
	Overrides map[string]map[string]any
	// Model is the agent's model ("" if unknown).
	Model string
	// ConversationID identifies the conversation; "" derives one (see
	// ConversationID).
	ConversationID string
	// ContextWindow overrides the model's known context window.
	ContextWindow int
	// TargetTokens, if > 0, stops a pipeline early once the conversation
	// fits: a stage is skipped when the tokens are already at most this.
	TargetTokens int
	// SummarizerModel, if set, is the model LLM calls go to when a policy
	// names none or names the agent's own Model (the llm policy does when
	// its `model` is unset). The proxy sets it to the daemon's llm.model,
	// so the model an agent's request names never redirects the
	// summarizer; a model a policy's config names still wins.
	SummarizerModel string
	// Decision, when set, is the host's decision to compact: each policy
	// is told so in its context (abi.Context.Compact) and compacts to fit
	// Decision.TargetTokens regardless of its own thresholds. Its target
	// is the policies' aim; only TargetTokens skips stages.
	Decision *abi.Decision
}

// Stage reports one policy's run.
type Stage struct {
	Policy            string        `json:"policy"`
	Version           string        `json:"version,omitempty"`
	Path              string        `json:"path,omitempty"`
	Compacted         bool          `json:"compacted"`
	Skipped           string        `json:"skipped,omitempty"`
	Error             string        `json:"error,omitempty"`
	Summary           string        `json:"summary,omitempty"`
	EntriesSummarized int           `json:"entries_summarized,omitempty"`
	Dropped           []int         `json:"dropped,omitempty"`
	Rewritten         []int         `json:"rewritten,omitempty"`
	TokensBefore      int           `json:"tokens_before"`
	TokensAfter       int           `json:"tokens_after"`
	MessagesBefore    int           `json:"messages_before"`
	MessagesAfter     int           `json:"messages_after"`
	Duration          time.Duration `json:"duration_ns"`
}

// Stats sums up a request.
type Stats struct {
	TokensBefore   int           `json:"tokens_before"`
	TokensAfter    int           `json:"tokens_after"`
	MessagesBefore int           `json:"messages_before"`
	MessagesAfter  int           `json:"messages_after"`
	Encoding       string        `json:"encoding"`
	Duration       time.Duration `json:"duration_ns"`
	Stages         []Stage       `json:"stages"`
}

// Response is the result of a request. Conversation is always valid: the
// compacted conversation, or the input itself when nothing changed or every
// stage failed.
type Response struct {
	Conversation   *chat.Conversation
	ConversationID string
	Compacted      bool
	Summary        string
	Warnings       []string
	Stats          Stats
	// Origin maps each output message to the input message it is (by
	// index), or -1 for a message a policy wrote.
	Origin []int
	// Rewritten lists the input messages a policy reported it replaced by
	// a new message in place (masked, shortened), in increasing order.
	Rewritten []int
	// CacheBreakpoints are the messages of Conversation the policies
	// marked as prompt-cache breakpoints (indices, ascending, at most
	// abi.MaxCacheBreakpoints). Conversation's bytes do not carry them:
	// the caller applies them when its request asked for breakpoints
	// (chat.Conversation.WithCacheBreakpoints). In a pipeline, a mark
	// follows its message through later stages that keep it; when there
	// are more than allowed, a later stage's own marks win, then the
	// newest messages'.
	CacheBreakpoints []int
}

// Compact runs req. It returns an error only for a request that cannot be
// served (malformed or invalid conversation, unknown policy, invalid
// config); plugin failures are warnings in the response.
func (c *Compactor) Compact(ctx context.Context, req Request) (*Response, error) {
	start := time.Now()
	conv := req.Conversation
	if conv == nil {
		return nil, fmt.Errorf("%w: no conversation", ErrBadRequest)
	}
	if err := conv.Validate(); err != nil {
		return nil, err
	}
	if len(req.Pipeline) == 0 {
		return nil, fmt.Errorf("%w: no policy named", ErrBadRequest)
	}
	for name := range req.Overrides {
		if !contains(req.Pipeline, name) {
			return nil, fmt.Errorf("%w: config for %q, which is not in the pipeline %v", ErrBadRequest, name, req.Pipeline)
		}
	}
	tok := c.opts.Tokens.ForModel(req.Model)
	// Messages a Memory remembered come counted: count the rest.
	known := conv.Counted(tok.Name())
	before := tok.CountMessages(conv.Messages[known:])
	for i := 0; i < known; i++ {
		before += conv.Messages[i].Tokens
	}
	conv.SetCounted(tok.Name())
	id := req.ConversationID
	if id == "" {
		id = c.ids.id(conv)
	}
	window := req.ContextWindow
	if window <= 0 {
		window = models.ContextWindow(req.Model)
	}

	// Resolve every stage's plugin and config before running any, so a
	// bad request fails as a whole.
	type stagePlan struct {
		plugin  *host.Plugin
		release func()
		config  json.RawMessage
	}
	plans := make([]stagePlan, 0, len(req.Pipeline))
	defer func() {
		for _, p := range plans {
			p.release()
		}
	}()
	for _, name := range req.Pipeline {
		p, release, err := c.opts.Policies.Acquire(ctx, name)
		if err != nil {
			return nil, err
		}
		plans = append(plans, stagePlan{plugin: p, release: release})
		var layers []policyconfig.Layer
		if c.opts.Config != nil {
			layers = c.opts.Config.Layers(name)
		}
		if o := req.Overrides[name]; len(o) > 0 {
			layers = append(layers, policyconfig.Layer{Source: "request", Values: o})
		}
		cfg, err := p.Schema().Resolve(layers...)
		if err != nil {
			return nil, err
		}
		plans[len(plans)-1].config = cfg
	}

	llm := c.opts.LLM
	if c.opts.NewLLM != nil {
		llm = c.opts.NewLLM()
	}
	if llm != nil && req.SummarizerModel != "" {
		llm = pinnedModel{Completer: llm, agent: req.Model, model: req.SummarizerModel}
	}
	env := host.CallEnv{CountTokens: tok.Count, LLM: llm}
	resp := &Response{ConversationID: id, Conversation: conv, Origin: make([]int, conv.Len())}
	resp.Stats = Stats{TokensBefore: before, MessagesBefore: conv.Len(), Encoding: tok.Name()}
	for i := range resp.Origin {
		resp.Origin[i] = i
	}
	rewritten := map[int]bool{}
	cur := conv
	var marks []int
	for _, plan := range plans {
		p := plan.plugin
		st := Stage{Policy: p.Name(), Version: p.Version(), Path: p.Path(), TokensBefore: cur.TotalTokens(), MessagesBefore: cur.Len()}
		st.TokensAfter, st.MessagesAfter = st.TokensBefore, st.MessagesBefore
		if req.TargetTokens > 0 && st.TokensBefore <= req.TargetTokens {
			st.Skipped = fmt.Sprintf("fits the target of %d tokens", req.TargetTokens)
			resp.Stats.Stages = append(resp.Stats.Stages, st)
			continue
		}
		stageStart := time.Now()
		sctx, span := tracing.Child(ctx, "compactd.stage "+p.Name(), attribute.String("compactd.policy", p.Name()),
			attribute.String("compactd.policy.version", p.Version()), attribute.Int("compactd.tokens_before", st.TokensBefore))
		run := c.runStage(sctx, p, cur, plan.config, abi.Context{
			Model: req.Model, Encoding: tok.Encoding(), ContextWindow: window, ConversationID: id,
			Compact: req.Decision,
		}, env, &st)
		st.Duration = time.Since(stageStart)
		resp.Warnings = append(resp.Warnings, run.warnings...)
		if run.ok {
			marks = mergeMarks(run.marks, marks, run.refs)
		}
		if out := run.out; out != nil {
			// Kept messages carry their input's counts (host.Response):
			// only the policy's new messages are counted.
			for _, i := range run.newMessages {
				out.Messages[i].Tokens = tok.CountMessage(&out.Messages[i])
			}
			for _, r := range st.Rewritten {
				if r >= 0 && r < len(resp.Origin) && resp.Origin[r] >= 0 {
					rewritten[resp.Origin[r]] = true
				}
			}
			resp.Origin = composeOrigin(resp.Origin, st.Dropped, run.newMessages, out.Len())
			cur = out
			st.TokensAfter, st.MessagesAfter = cur.TotalTokens(), cur.Len()
		}
		endStageSpan(span, &st)
		resp.Stats.Stages = append(resp.Stats.Stages, st)
	}
	resp.Conversation = cur
	resp.CacheBreakpoints = marks
	for i := range rewritten {
		resp.Rewritten = append(resp.Rewritten, i)
	}
	sort.Ints(resp.Rewritten)
	resp.Stats.TokensAfter, resp.Stats.MessagesAfter = cur.TotalTokens(), cur.Len()
	resp.Stats.Duration = time.Since(start)
	for _, st := range resp.Stats.Stages {
		if st.Compacted {
			resp.Compacted = true
			if resp.Summary != "" {
				resp.Summary += "; "
			}
			resp.Summary += st.Policy + ": " + st.Summary
		}
	}
	return resp, nil
}

// pinnedModel sends LLM calls for no model or for the agent's model to
// the configured summarizer model (Request.SummarizerModel).
type pinnedModel struct {
	host.Completer
	agent, model string
}

func (p pinnedModel) Complete(ctx context.Context, req abi.LLMRequest) (abi.LLMResponse, error) {
	if req.Model == "" || req.Model == p.agent {
		req.Model = p.model
	}
	return p.Completer.Complete(ctx, req)
}

// composeOrigin maps a stage's output back to the request's input: origin
// maps the stage's input to the request's, dropped lists the stage's input
// indices it did not keep and newMessages its output indices that are new.
// Kept messages keep their order (refs are strictly increasing), so the
// k-th kept output is the k-th input not dropped.
func composeOrigin(origin, dropped, newMessages []int, outLen int) []int {
	isDropped := make(map[int]bool, len(dropped))
	for _, d := range dropped {
		isDropped[d] = true
	}
	isNew := make(map[int]bool, len(newMessages))
	for _, n := range newMessages {
		isNew[n] = true
	}
	out := make([]int, outLen)
	in := 0
	for j := range out {
		if isNew[j] {
			out[j] = -1
			continue
		}
		for in < len(origin) && isDropped[in] {
			in++
		}
		if in >= len(origin) {
			out[j] = -1 // not reachable for a checked result
			continue
		}
		out[j] = origin[in]
		in++
	}
	return out
}

// stageRun is what one stage did.
type stageRun struct {
	// out is the new conversation, nil when the stage changed nothing or
	// failed; newMessages are the output indices of the messages the
	// policy wrote.
	out         *chat.Conversation
	newMessages []int
	// ok: the stage ran and its result was checked (refs and marks are
	// meaningful; refs nil means every message kept in place).
	ok       bool
	refs     []int
	marks    []int
	warnings []string
}

// mergeMarks combines a stage's cache breakpoints with the earlier
// stages' (prev, indices into the stage's input, carried to the output
// through refs; nil refs keep indices as they are): the stage's own first,
// then the carried ones from the newest message back, at most
// abi.MaxCacheBreakpoints, ascending.
func mergeMarks(own, prev, refs []int) []int {
	out := slices.Clone(own)
	var carried []int
	for _, p := range prev {
		if refs == nil {
			carried = append(carried, p)
			continue
		}
		if i := slices.Index(refs, p); i >= 0 {
			carried = append(carried, i)
		}
	}
	slices.Sort(carried)
	for k := len(carried) - 1; k >= 0; k-- {
		if !slices.Contains(out, carried[k]) {
			out = append(out, carried[k])
		}
	}
	if len(out) > abi.MaxCacheBreakpoints {
		out = out[:abi.MaxCacheBreakpoints]
	}
	slices.Sort(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// runStage runs one policy and fills st.
func (c *Compactor) runStage(ctx context.Context, p *host.Plugin, in *chat.Conversation, cfg json.RawMessage, actx abi.Context, env host.CallEnv, st *Stage) stageRun {
	var warnings []string
	versioned, _ := c.opts.State.(VersionedStateStore)
	var version string
	if c.opts.State != nil {
		var state json.RawMessage
		var err error
		if versioned != nil {
			state, version, err = versioned.LoadStateVersion(ctx, actx.ConversationID, p.Name())
		} else {
			state, err = c.opts.State.LoadState(ctx, actx.ConversationID, p.Name())
		}
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: loading state: %v (running without it)", p.Name(), err))
		}
		actx.State = state
	}
	req := &host.Request{Conversation: in, Config: cfg, Context: actx, Env: env}
	// The host's decision overrules the policy's own judgement, so
	// should_compact is not asked then.
	if p.HasShouldCompact() && actx.Compact == nil {
		should, err := p.ShouldCompact(ctx, req)
		if err != nil {
			st.Error = err.Error()
			c.logger.Warn("should_compact failed; input kept", "policy", p.Name(), "error", err)
			return stageRun{warnings: append(warnings, err.Error()+" (input kept unchanged)")}
		}
		if !should.Compact {
			st.Skipped = "should_compact: " + should.Reason
			return stageRun{warnings: warnings}
		}
	}
	out, err := p.Compact(ctx, req)
	if err != nil {
		st.Error = err.Error()
		c.logger.Warn("compaction failed; input kept", "policy", p.Name(), "error", err)
		return stageRun{warnings: append(warnings, err.Error()+" (input kept unchanged)")}
	}
	res := out.Result
	for _, w := range res.Warnings {
		warnings = append(warnings, p.Name()+": "+w)
	}
	if c.opts.State != nil && len(res.State) > 0 && string(res.State) != "null" {
		var err error
		if versioned != nil {
			err = versioned.SaveStateIf(ctx, actx.ConversationID, p.Name(), res.State, version)
		} else {
			err = c.opts.State.SaveState(ctx, actx.ConversationID, p.Name(), res.State)
		}
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: saving state: %v", p.Name(), err))
		}
	}
	st.Compacted, st.Summary, st.EntriesSummarized = out.Compacted, res.Summary, res.EntriesSummarized
	st.Dropped, st.Rewritten = out.Dropped, res.Rewritten
	if !out.Compacted && actx.Compact != nil {
		warnings = append(warnings, fmt.Sprintf("%s kept the conversation although the host decided to compact it (%s): %s", p.Name(), actx.Compact.Reason, res.Summary))
	}
	run := stageRun{ok: true, marks: res.CacheBreakpoints, warnings: warnings}
	if !out.Compacted {
		return run
	}
	run.out, run.newMessages, run.refs = out.Conversation, out.NewMessages, out.Refs
	return run
}

// ConversationID derives a stable id from the leading system messages and
// the first user message: the same conversation gets the same id in every
// process and after restarts, and a conversation's id does not change as it
// grows.
//
// It hashes the whole canonical content of those messages: role, name, and
// every content part (a string content counts as one text part, so the
// same text sent either way gets the same id; other parts as their JSON
// with keys sorted and cache_control left out, since agents move cache
// breakpoints from turn to turn). Every field is length-prefixed, so no
// two different conversations make the same bytes: images, files, several
// text parts or NUL bytes in a text all tell conversations apart.
func ConversationID(msgs []abi.Message) string {
	h := sha256.New()
	h.Write([]byte("compactd conversation id v2\n"))
	lead, user := idMessages(msgs)
	for i := 0; i < lead; i++ {
		writeCanonical(h, &msgs[i])
	}
	if user >= 0 {
		writeCanonical(h, &msgs[user])
	}
	return "h-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// idMessages returns what a conversation id is made of: the leading
// system messages, msgs[:lead], and the first user message after them,
// msgs[user] (-1 when there is none).
func idMessages(msgs []abi.Message) (lead, user int) {
	lead = convo.LeadingSystem(msgs)
	for i := lead; i < len(msgs); i++ {
		if msgs[i].Role == abi.RoleUser {
			return lead, i
		}
	}
	return lead, -1
}

// idCache remembers conversation ids by a hash of the bytes of the
// messages they are made from: every request of a conversation starts
// with the same ones, and hashing their canonical form (a system prompt
// of kilobytes through SHA-256, content parts decoded and encoded again)
// cost more than the rest of a short request's bookkeeping. The key is two
// seeded maphash sums of the messages' raw bytes: bytes that differ but
// mean the same (a moved cache_control) only miss the cache. It holds at
// most idCacheSize ids and starts over when full.
type idCache struct {
	seeds [2]maphash.Seed
	mu    sync.Mutex
	ids   map[[2]uint64]string
}

// idCacheSize bounds an idCache: a few hundred kilobytes.
const idCacheSize = 4096

func newIDCache() *idCache {
	return &idCache{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, ids: map[[2]uint64]string{}}
}

// id returns ConversationID(conv.Messages).
func (c *idCache) id(conv *chat.Conversation) string {
	msgs := conv.Messages
	if len(conv.Raw) != len(msgs) {
		return ConversationID(msgs)
	}
	lead, user := idMessages(msgs)
	var h [2]maphash.Hash
	for k := range h {
		h[k].SetSeed(c.seeds[k])
		add := func(raw []byte) {
			var n [8]byte
			binary.LittleEndian.PutUint64(n[:], uint64(len(raw)))
			h[k].Write(n[:])
			h[k].Write(raw)
		}
		for i := 0; i < lead; i++ {
			add(conv.Raw[i])
		}
		if user >= 0 {
			add(conv.Raw[user])
		}
	}
	key := [2]uint64{h[0].Sum64(), h[1].Sum64()}
	c.mu.Lock()
	id, ok := c.ids[key]
	c.mu.Unlock()
	if ok {
		return id
	}
	id = ConversationID(msgs)
	c.mu.Lock()
	if len(c.ids) >= idCacheSize {
		clear(c.ids)
	}
	c.ids[key] = id
	c.mu.Unlock()
	return id
}

// writeCanonical writes a message's role, name and content parts to h,
// each length-prefixed.
func writeCanonical(h hash.Hash, m *abi.Message) {
	field := func(kind byte, b []byte) {
		var n [9]byte
		n[0] = kind
		binary.LittleEndian.PutUint64(n[1:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field('r', stringBytes(m.Role))
	field('n', stringBytes(m.Name))
	c := m.Content
	switch {
	case c.IsNull():
		field('0', nil)
	case c.IsString():
		field('t', stringBytes(c.Text()))
	default:
		var parts []map[string]any
		dec := json.NewDecoder(bytes.NewReader(c.Raw()))
		dec.UseNumber()
		if err := dec.Decode(&parts); err != nil {
			field('x', c.Raw()) // not parts: its bytes, as they are
			return
		}
		for _, p := range parts {
			delete(p, "cache_control")
			if text, ok := p["text"].(string); ok && p["type"] == "text" && len(p) == 2 {
				field('t', []byte(text))
				continue
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(p) // decoded JSON always encodes; map keys sorted
			field('p', buf.Bytes())
		}
	}
	field('.', nil)
}

// stringBytes views s as bytes, for a hash that only reads them: the
// system prompt, hashed on every request, was copied for it first.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// endStageSpan ends a stage's span with what the stage did.
func endStageSpan(span trace.Span, st *Stage) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Bool("compactd.compacted", st.Compacted), attribute.Int("compactd.tokens_after", st.TokensAfter),
		attribute.Int("compactd.messages_before", st.MessagesBefore), attribute.Int("compactd.messages_after", st.MessagesAfter))
	if st.Error != "" {
		span.SetStatus(codes.Error, st.Error)
	}
	span.End()
}
