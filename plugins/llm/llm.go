package main

import (
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/pdk"
)

// version is the plugin's version; bump it when behaviour changes.
const version = "1.0.0"

// config is the policy's config; its zero value is not the default (see
// defaults).
type config struct {
	MaxTokens           int     `json:"max_tokens"`
	TokenThreshold      int     `json:"token_threshold"`
	MessageThreshold    int     `json:"message_threshold"`
	TurnThreshold       int     `json:"turn_threshold"`
	RetentionWindow     int     `json:"retention_window"`
	Model               string  `json:"model"`
	Prompt              string  `json:"prompt"`
	SummaryTag          string  `json:"summary_tag"`
	UsageRatioThreshold float64 `json:"usage_ratio_threshold"`
	MinBatch            int     `json:"min_batch"`
	SummarizeToolLoop   bool    `json:"summarize_tool_loop"`
}

var defaults = config{
	MaxTokens:           2000,
	TokenThreshold:      60000,
	MessageThreshold:    0,
	TurnThreshold:       0,
	RetentionWindow:     6,
	Model:               "",
	Prompt:              "",
	SummaryTag:          "summary",
	UsageRatioThreshold: 0.8,
	MinBatch:            6,
	SummarizeToolLoop:   true,
}

const schema = `{
  "type": "object",
  "properties": {
    "max_tokens": {"type": "integer", "minimum": 16,
      "description": "the summary's length cap in tokens (the completion's max_tokens)"},
    "token_threshold": {"type": ["integer", "null"], "minimum": 0,
      "description": "summarize when the conversation holds at least this many tokens (0 or null: off)"},
    "message_threshold": {"type": ["integer", "null"], "minimum": 0,
      "description": "summarize when the messages still compactible (system, summary and everything after it) number at least this (0 or null: off)"},
    "turn_threshold": {"type": ["integer", "null"], "minimum": 0,
      "description": "summarize when at least this many user messages follow the latest summary (0 or null: off)"},
    "retention_window": {"type": "integer", "minimum": 0,
      "description": "the newest messages never summarized (widened to a whole tool-call unit)"},
    "model": {"type": "string",
      "description": "the summarizer model; empty: the agent's model from the request context (else the daemon's llm.model)"},
    "prompt": {"type": "string",
      "description": "custom summarizer instructions; may use {{conversation}}, {{previous_summary}}, {{max_tokens}} and {{summary_tag}}; empty: the built-in prompt"},
    "summary_tag": {"type": "string", "pattern": "^[A-Za-z0-9_-]*$",
      "description": "extract the text inside <tag>...</tag> from the answer (the whole answer when the tag is absent); empty: use the whole answer"},
    "usage_ratio_threshold": {"type": ["number", "null"], "minimum": 0, "maximum": 1,
      "description": "summarize when the conversation fills at least this fraction of the model's context window (0 or null: off; needs a known context window)"},
    "min_batch": {"type": "integer", "minimum": 1,
      "description": "hysteresis: a summary is made or extended only when at least this many messages would be folded into it"},
    "summarize_tool_loop": {"type": "boolean",
      "description": "true: completed steps of the agent's current tool loop (after the latest user message) may be summarized once they are older than the retention window; false: summaries never reach past the latest user message"}
  },
  "additionalProperties": false
}`

func policy() pdk.Policy {
	return pdk.Policy{
		Name:          "llm",
		Version:       version,
		Description:   "Summarizes older assistant turns and tool results with an LLM (user messages kept verbatim, tool units never split), extending one rolling summary in batches so the prompt-cache prefix stays stable; falls back to a deterministic summary when the LLM fails.",
		ConfigSchema:  schema,
		Defaults:      defaults,
		Compact:       compact,
		ShouldCompact: shouldCompact,
	}
}

func decodeConfig(req *abi.CompactRequest) (config, error) {
	cfg := defaults
	if err := req.DecodeConfig(&cfg); err != nil {
		return cfg, err
	}
	// The host validated the config against the schema; these guard
	// against a host that did not (a plugin must not loop or panic).
	if cfg.MaxTokens < 16 || cfg.RetentionWindow < 0 || cfg.MinBatch < 1 {
		return cfg, &abi.Error{Code: abi.CodeInvalidConfig, Message: "max_tokens must be at least 16, retention_window at least 0 and min_batch at least 1"}
	}
	return cfg, nil
}

func shouldCompact(_ pdk.Host, req *abi.CompactRequest) (abi.ShouldCompactResult, error) {
	cfg, err := decodeConfig(req)
	if err != nil {
		return abi.ShouldCompactResult{}, err
	}
	sched := schedule(req.Messages, cfg, req.Context.ContextWindow)
	if len(sched) == 0 {
		return abi.ShouldCompactResult{Reason: "no trigger fired with a span to summarize"}, nil
	}
	return abi.ShouldCompactResult{Compact: true, Reason: fmt.Sprintf("%d summary step(s) due", len(sched))}, nil
}

func compact(h pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	cfg, err := decodeConfig(req)
	if err != nil {
		return nil, err
	}
	msgs := req.Messages
	sched := schedule(msgs, cfg, req.Context.ContextWindow)
	if len(sched) == 0 {
		return abi.Unchanged(len(msgs), "no trigger fired with a span to summarize"), nil
	}
	model := cfg.Model
	if model == "" {
		model = req.Context.Model
	}
	lead := convo.LeadingSystem(msgs)
	sum := summarize(h, msgs, lead, sched, cfg, model, req.Context.State)
	if sum.text == "" {
		res := abi.Unchanged(len(msgs), "no summary could be made; conversation kept as it is")
		res.Warnings = sum.warnings
		return res, nil
	}

	// Output: the system messages, the messages of the summarized region
	// that are kept verbatim (user, system and developer messages), the
	// summary as one user message, then everything after the region.
	end := sched[len(sched)-1].end
	items := make([]abi.Item, 0, len(msgs)-end+lead+8)
	for i := 0; i < lead; i++ {
		items = append(items, abi.Ref(i))
	}
	kept := 0
	for i := lead; i < end; i++ {
		if preserved(&msgs[i]) {
			items = append(items, abi.Ref(i))
			kept++
		}
	}
	items = append(items, abi.New(abi.Message{Role: abi.RoleUser, Content: abi.TextContent(formatSummary(sum.count, sum.text))}))
	for i := end; i < len(msgs); i++ {
		items = append(items, abi.Ref(i))
	}
	how := fmt.Sprintf("%d LLM call(s)", sum.calls)
	if sum.fallback {
		how = "the deterministic fallback"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "summarized %d messages into one summary (%s)", end-lead-kept, how)
	if kept > 0 {
		fmt.Fprintf(&b, "; kept %d user/system messages of that span verbatim", kept)
	}
	return &abi.CompactResult{
		Messages:          items,
		Compacted:         true,
		Summary:           b.String(),
		EntriesSummarized: end - lead - kept,
		State:             sum.state,
		Warnings:          sum.warnings,
	}, nil
}

// preserved reports whether a message of the summarized region is kept
// verbatim: user messages (but not earlier summaries, which are folded
// into the new one) and system or developer messages.
func preserved(m *abi.Message) bool {
	switch {
	case m.IsSystem():
		return true
	case m.Role == abi.RoleUser:
		return !isSummary(m)
	}
	return false
}
