package main

import (
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/cachemark"
	"github.com/compactd/compactd/plugins/internal/decision"
	"github.com/compactd/compactd/plugins/internal/steps"
)

// version is the plugin's version; bump it when behaviour changes.
const version = "1.3.0"

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
	Temperature         float64 `json:"temperature"`
	SummaryRole         string  `json:"summary_role"`

	// rlm-code's llm policy keys (README.md, "rlm-code's keys"): absent
	// (zero) unless set, and then they win over ours.
	SummaryMaxTokens        int  `json:"summary_max_tokens,omitempty"`
	PreserveLastN           int  `json:"preserve_last_n,omitempty"`
	MaxEntriesBeforeCompact int  `json:"max_entries_before_compact,omitempty"`
	MinEntriesToCompact     int  `json:"min_entries_to_compact,omitempty"`
	IncludeKeyFindings      bool `json:"include_key_findings,omitempty"`
}

// maxTokens is the summary's length cap: summary_max_tokens when set,
// else max_tokens.
func (c config) maxTokens() int {
	if c.SummaryMaxTokens > 0 {
		return c.SummaryMaxTokens
	}
	return c.MaxTokens
}

// keyFindings: the prompt also asks to highlight key findings (rlm-code's
// include_key_findings).
func (c config) keyFindings() bool { return c.IncludeKeyFindings }

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
	Temperature:         0.3,
	SummaryRole:         abi.RoleAssistant,
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
      "description": "true: completed steps of the agent's current tool loop (after the latest user message) may be summarized once they are older than the retention window; false: summaries never reach past the latest user message"},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2,
      "description": "the summarizer's sampling temperature (the llms extension uses 0.3)"},
    "summary_role": ` + steps.SummaryRoleSchema + `,
    "summary_max_tokens": {"type": "integer", "minimum": 16,
      "description": "rlm-code's name for max_tokens; wins when set"},
    "preserve_last_n": {"type": "integer", "minimum": 1,
      "description": "rlm-code: the newest n entries (turn units) are never summarized; when set it replaces retention_window"},
    "max_entries_before_compact": {"type": "integer", "minimum": 1,
      "description": "rlm-code: summarize when the conversation after the system messages and the task holds at least this many entries (turn units; a summary and each message kept verbatim before it count as one)"},
    "min_entries_to_compact": {"type": "integer", "minimum": 1,
      "description": "rlm-code: never summarize a conversation of fewer entries than this, whatever the other triggers say"},
    "include_key_findings": {"type": "boolean",
      "description": "rlm-code: the built-in prompt also asks the summarizer to highlight key findings and successful approaches"}
  },
  "additionalProperties": false
}`

func policy() pdk.Policy {
	return pdk.Policy{
		Name:          "llm",
		Version:       version,
		Description:   "Summarizes older assistant turns and tool results with an LLM (user messages kept verbatim in their places, tool units never split), each run of them replaced by its summary where it was and extended in batches so the prompt-cache prefix stays stable; falls back to a deterministic summary when the LLM fails.",
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
	if cfg.MaxTokens < 16 || cfg.RetentionWindow < 0 || cfg.MinBatch < 1 || cfg.SummaryMaxTokens < 0 || cfg.SummaryMaxTokens > 0 && cfg.SummaryMaxTokens < 16 ||
		cfg.PreserveLastN < 0 || cfg.MaxEntriesBeforeCompact < 0 || cfg.MinEntriesToCompact < 0 || cfg.Temperature < 0 || cfg.Temperature > 2 {
		return cfg, &abi.Error{Code: abi.CodeInvalidConfig, Message: "max_tokens and summary_max_tokens must be at least 16, retention_window, preserve_last_n and the entry thresholds not negative, min_batch at least 1, temperature in [0, 2]"}
	}
	if cfg.SummaryRole != abi.RoleAssistant && cfg.SummaryRole != abi.RoleUser {
		return cfg, &abi.Error{Code: abi.CodeInvalidConfig, Message: "summary_role must be assistant or user"}
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
	sched, forced := plan(req, cfg)
	pinned := convo.Pinned(msgs, true)
	if len(sched) == 0 {
		return cachemark.Unchanged(len(msgs), "no trigger fired with a span to summarize", pinned), nil
	}
	model := cfg.Model
	if model == "" {
		model = req.Context.Model
	}
	lead := convo.LeadingSystem(msgs)
	sum := summarize(h, msgs, lead, sched, cfg, model, req.Context.State)
	if len(forced) > 0 {
		// The forced steps are remembered with the summaries (or, when
		// no new state was made, with the last one).
		if len(sum.state) == 0 {
			sum.state = req.Context.State
		}
		sum.state = decision.WithForced(sum.state, forced)
	}
	if len(sum.runs) == 0 {
		res := cachemark.Unchanged(len(msgs), "no summary could be made; conversation kept as it is", pinned)
		res.Warnings = sum.warnings
		res.State = sum.state
		return res, nil
	}

	// Output: the system messages, then the summarized region in order —
	// its messages kept verbatim (user, system and developer messages) in
	// their places, and each run of summarized messages between them
	// replaced by its summary where it was — then everything after the
	// region.
	end := sched[len(sched)-1].end
	items := make([]abi.Item, 0, len(msgs)-end+lead+8)
	for i := 0; i < lead; i++ {
		items = append(items, abi.Ref(i))
	}
	kept, r := 0, 0
	for i := lead; i < end; i++ {
		switch {
		case preserved(&msgs[i]):
			items = append(items, abi.Ref(i))
			kept++
		case r < len(sum.runs) && sum.runs[r].Start == i:
			text := formatSummary(sum.runs[r].Count, sum.runs[r].Summary)
			items = append(items, abi.New(abi.Message{Role: steps.SummaryRole(cfg.SummaryRole, msgs, items), Content: abi.TextContent(text)}))
			r++
		}
	}
	// Marks: the stable prefix (the leading refs up to the task, kept
	// verbatim before the first summary) and the end of the summarized
	// region, which changes only when it is extended.
	stable := 0
	for stable < len(items) && items[stable].IsRef() && items[stable].Ref == stable && stable < pinned {
		stable++
	}
	regionEnd := len(items)
	for i := end; i < len(msgs); i++ {
		items = append(items, abi.Ref(i))
	}
	how := fmt.Sprintf("%d LLM call(s)", sum.calls)
	if sum.fallback {
		how = "the deterministic fallback"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "summarized %d messages into %d summar%s in their places (%s)", end-lead-kept, len(sum.runs), plural(len(sum.runs), "y", "ies"), how)
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
		CacheBreakpoints:  cachemark.Marks(stable, regionEnd),
	}, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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
