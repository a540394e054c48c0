// Package conform checks that a plugin keeps compactd's contract (abi
// README): it runs the plugin on conversations of every shape an agent
// sends, and optionally on real data, and reports what broke. `compactd
// conform` and the registry's smoke test use it; it works for a plugin in
// any language because it only talks to the plugin through the host.
package conform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/tokens"
)

// Finding is one check and its outcome.
type Finding struct {
	Check string
	Err   error // nil when the check passed
}

// Report is the outcome of a conformance run.
type Report struct {
	Plugin   string
	Findings []Finding
}

// OK reports whether every check passed.
func (r *Report) OK() bool {
	for _, f := range r.Findings {
		if f.Err != nil {
			return false
		}
	}
	return true
}

// Failures returns the failed findings.
func (r *Report) Failures() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Err != nil {
			out = append(out, f)
		}
	}
	return out
}

func (r *Report) add(check string, err error) { r.Findings = append(r.Findings, Finding{check, err}) }

// Samples returns the built-in sample conversations, parsed, validated and
// with tokens counted by tok.
func Samples(tok *tokens.Tokenizer) ([]*chat.Conversation, []string, error) {
	var convs []*chat.Conversation
	var names []string
	for _, s := range samples {
		c, err := chat.Parse([]byte(s.json))
		if err != nil {
			return nil, nil, fmt.Errorf("sample %q: %w", s.name, err)
		}
		if err := c.Validate(); err != nil {
			return nil, nil, fmt.Errorf("sample %q: %w", s.name, err)
		}
		tok.CountMessages(c.Messages)
		convs = append(convs, c)
		names = append(names, s.name)
	}
	return convs, names, nil
}

// Smoke runs the plugin once on the richest sample with its default config:
// the registry's check that a new version can serve before it replaces the
// old one.
func Smoke(ctx context.Context, p *host.Plugin, tok *tokens.Tokenizer) error {
	convs, _, err := Samples(tok)
	if err != nil {
		return err
	}
	cfg, err := p.Schema().Resolve()
	if err != nil {
		return err
	}
	_, err = p.Compact(ctx, &host.Request{Conversation: convs[3], Config: cfg, Env: host.CallEnv{CountTokens: tok.Count}})
	return err
}

// SmokeTest is Smoke with tok, in the form registry.Options.Smoke takes.
func SmokeTest(tok *tokens.Tokenizer) func(context.Context, *host.Plugin) error {
	return func(ctx context.Context, p *host.Plugin) error { return Smoke(ctx, p, tok) }
}

// Run checks p on the samples and on extra conversations (e.g. real data
// prefixes): every call succeeds with the default config, its result
// passes the host's checks (which Compact enforces), the input is left
// untouched, a second identical call returns identical bytes, and cache
// breakpoints, if the result marks any, apply cleanly.
func Run(ctx context.Context, p *host.Plugin, tok *tokens.Tokenizer, extra []*chat.Conversation) *Report {
	r := &Report{Plugin: p.Name() + "@" + p.Version()}
	d := p.Description()
	r.add("describe: name, version and ABI", nil)
	if d.Description == "" {
		r.add("describe: has a description", fmt.Errorf("description is empty"))
	}
	cfg, err := p.Schema().Resolve()
	r.add("defaults validate against config_schema", err)
	if err != nil {
		return r
	}
	convs, names, err := Samples(tok)
	if err != nil {
		r.add("samples", err)
		return r
	}
	for i, c := range extra {
		convs = append(convs, c)
		names = append(names, fmt.Sprintf("extra conversation %d (%d messages)", i, c.Len()))
	}
	env := host.CallEnv{CountTokens: tok.Count}
	for i, c := range convs {
		before := c.Encode()
		req := &host.Request{Conversation: c, Config: cfg, Env: env}
		first, err := p.Compact(ctx, req)
		if err != nil {
			r.add("compact: "+names[i], err)
			continue
		}
		if !bytes.Equal(before, c.Encode()) {
			r.add("compact: "+names[i], fmt.Errorf("the input conversation was modified"))
			continue
		}
		second, err := p.Compact(ctx, req)
		if err != nil {
			r.add("compact: "+names[i]+" (second call)", err)
			continue
		}
		if !bytes.Equal(first.Conversation.Encode(), second.Conversation.Encode()) {
			r.add("deterministic: "+names[i], fmt.Errorf("two identical calls returned different conversations"))
			continue
		}
		if marks := first.Result.CacheBreakpoints; len(marks) > 0 {
			r.add("cache breakpoints: "+names[i], checkMarks(first.Conversation, marks))
		}
		if p.HasShouldCompact() {
			should, err := p.ShouldCompact(ctx, req)
			if err == nil && !should.Compact && first.Compacted {
				err = fmt.Errorf("should_compact said no (%s) but compact compacted", should.Reason)
			}
			r.add("should_compact agrees: "+names[i], err)
		}
		r.add("compact: "+names[i], nil)
	}
	r.add("the host's decision is obeyed", checkDecision(ctx, p, tok, cfg, env))
	return r
}

// decisionSample is a conversation every policy can shrink: a system
// prompt, the task, then turns of a question, a tool call, a large tool
// result and an answer.
func decisionSample(tok *tokens.Tokenizer) (*chat.Conversation, error) {
	type call struct {
		ID       string            `json:"id"`
		Type     string            `json:"type"`
		Function map[string]string `json:"function"`
	}
	type message struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCalls  []call `json:"tool_calls,omitempty"`
		ToolCallID string `json:"tool_call_id,omitempty"`
	}
	msgs := []message{{Role: "system", Content: "You are a coding agent."},
		{Role: "user", Content: "Find why the nightly build of service-7 fails and fix it."}}
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("call_%d", i)
		var log strings.Builder
		for k := 0; log.Len() < 6000; k++ {
			fmt.Fprintf(&log, "step %d log line %d: compiling pkg/step%d/file%d.go ok\n", i, k, i, k)
		}
		msgs = append(msgs,
			message{Role: "user", Content: fmt.Sprintf("Check step %d of the build.", i)},
			message{Role: "assistant", Content: fmt.Sprintf("Running step %d.", i), ToolCalls: []call{{ID: id, Type: "function",
				Function: map[string]string{"name": "bash", "arguments": fmt.Sprintf(`{"cmd":"make step%d"}`, i)}}}},
			message{Role: "tool", ToolCallID: id, Content: log.String()},
			message{Role: "assistant", Content: fmt.Sprintf("Step %d builds.", i)})
	}
	b, err := json.Marshal(msgs)
	if err != nil {
		return nil, err
	}
	c, err := chat.Parse(b)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tok.CountMessages(c.Messages)
	return c, nil
}

// checkDecision: told that the host decided to compact (context.compact,
// ABI 1.1) with a target of a third of the conversation, the policy with
// its default config compacts a conversation it can shrink, to fewer
// tokens, and does so the same way twice.
func checkDecision(ctx context.Context, p *host.Plugin, tok *tokens.Tokenizer, cfg json.RawMessage, env host.CallEnv) error {
	c, err := decisionSample(tok)
	if err != nil {
		return err
	}
	before := c.TotalTokens()
	req := &host.Request{Conversation: c, Config: cfg, Env: env,
		Context: abi.Context{Model: "gpt-4o", ConversationID: "conform-decision",
			Compact: &abi.Decision{Reason: abi.ReasonManual, TargetTokens: before / 3}}}
	first, err := p.Compact(ctx, req)
	if err != nil {
		return err
	}
	if !first.Compacted || first.Conversation.TotalTokens() >= before {
		return fmt.Errorf("with the host's decision (target %d of %d tokens) the policy kept the conversation (%d tokens): %s",
			before/3, before, first.Conversation.TotalTokens(), first.Result.Summary)
	}
	second, err := p.Compact(ctx, req)
	if err != nil {
		return err
	}
	if !bytes.Equal(first.Conversation.Encode(), second.Conversation.Encode()) {
		return fmt.Errorf("two identical calls with the host's decision returned different conversations")
	}
	return nil
}

// checkMarks checks a result's cache breakpoints as a caller that asked
// for them gets them: at most abi.MaxCacheBreakpoints messages in range
// (the host checked that), each still a JSON message with the same role
// and text once its cache_control is added.
func checkMarks(out *chat.Conversation, marks []int) error {
	marked, err := out.WithCacheBreakpoints(marks)
	if err != nil {
		return err
	}
	for _, i := range marks {
		var m abi.Message
		if err := json.Unmarshal(marked.Raw[i], &m); err != nil {
			return fmt.Errorf("message %d with its breakpoint: %v", i, err)
		}
		if m.Role != out.Messages[i].Role || m.Text() != out.Messages[i].Text() {
			return fmt.Errorf("message %d changed beyond its cache_control", i)
		}
	}
	return nil
}
