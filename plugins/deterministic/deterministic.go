package main

import (
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
	MaxEntries          int    `json:"max_entries"`
	PreserveLastN       int    `json:"preserve_last_n"`
	IncludeActionCounts bool   `json:"include_action_counts"`
	MaxOutputChars      int    `json:"max_output_chars"`
	Step                int    `json:"step"`
	KeepTask            bool   `json:"keep_task"`
	SummaryRole         string `json:"summary_role"`
}

var defaults = config{
	MaxEntries:          8,
	PreserveLastN:       2,
	IncludeActionCounts: true,
	MaxOutputChars:      200,
	Step:                12,
	KeepTask:            true,
	SummaryRole:         abi.RoleAssistant,
}

const schema = `{
  "type": "object",
  "properties": {
    "max_entries": {"type": "integer", "minimum": 1,
      "description": "summarize once the conversation holds more than this many entries (turn units after the system messages)"},
    "preserve_last_n": {"type": "integer", "minimum": 1,
      "description": "the newest entries kept in full"},
    "include_action_counts": {"type": "boolean",
      "description": "start the summary with \"Previous N steps: action(count), ...\""},
    "max_output_chars": {"type": "integer", "minimum": 1,
      "description": "each of the (up to 3) key outputs in the summary is cut to this many characters"},
    "step": {"type": "integer", "minimum": 1,
      "description": "hysteresis: once summarized, the summary is recomputed only when preserve_last_n+step entries follow it, so the prefix changes once every step entries (1 = every entry)"},
    "keep_task": {"type": "boolean",
      "description": "keep the task (the first user message) verbatim and count entries after it; false: the task is an entry like the others and may be summarized"},
    "summary_role": ` + steps.SummaryRoleSchema + `
  },
  "additionalProperties": false
}`

func policy() pdk.Policy {
	return pdk.Policy{
		Name:         "deterministic",
		Version:      version,
		Description:  "Replaces older entries with one rule-based summary (action counts and key outputs), no LLM; the summary moves in steps so the prompt-cache prefix stays stable between them.",
		ConfigSchema: schema,
		Defaults:     defaults,
		Compact:      compact,
	}
}

func compact(_ pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	cfg := defaults
	if err := req.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	msgs := req.Messages
	pinned := convo.Pinned(msgs, cfg.KeepTask)
	entries := steps.Entries(msgs, pinned, len(msgs))
	forced := decision.LoadForced(req.Context.State, len(entries))
	cut := summarizedForced(len(entries), cfg, forced)
	if decision.Due(req) && len(entries)-cfg.PreserveLastN > cut {
		// The host decided: a step now (the newest preserve_last_n
		// entries stay), remembered in the state for the next turns.
		forced = append(forced, len(entries))
		cut = summarizedForced(len(entries), cfg, forced)
	}
	state := decision.WithForced(nil, forced)
	if cut == 0 {
		res := cachemark.Unchanged(len(msgs), "nothing to summarize", pinned)
		res.State = state
		return res, nil
	}
	old := entries[:cut]
	summary := steps.DeterministicSummary(old, steps.SummaryOptions{
		OmitActionCounts: !cfg.IncludeActionCounts,
		MaxOutputChars:   cfg.MaxOutputChars,
	})
	// The summary takes the place of the summarized span, right after
	// the kept prefix (the system messages and the task); system messages
	// among the summarized entries stay, after it.
	keepFrom := entries[cut].Start
	items := make([]abi.Item, 0, pinned+1+len(msgs)-keepFrom)
	for i := 0; i < pinned; i++ {
		items = append(items, abi.Ref(i))
	}
	stable := len(items)
	items = append(items, abi.New(abi.Message{Role: steps.SummaryRole(cfg.SummaryRole, msgs, items), Content: abi.TextContent(summary)}))
	for i := pinned; i < keepFrom; i++ {
		if msgs[i].IsSystem() {
			items = append(items, abi.Ref(i))
		}
	}
	summaryEnd := len(items)
	for i := keepFrom; i < len(msgs); i++ {
		items = append(items, abi.Ref(i))
	}
	return &abi.CompactResult{
		// The pinned prefix never changes and the summary only at a step:
		// a step's request reads the pinned prefix and writes the rest.
		CacheBreakpoints:  cachemark.Marks(stable, summaryEnd),
		Messages:          items,
		Compacted:         true,
		Summary:           summary,
		EntriesSummarized: cut,
		State:             state,
	}, nil
}

// summarized returns how many of the n oldest entries are summarized. It
// replays the conversation's growth entry by entry, as a stateful
// compactor called on every turn would see it: the first summary comes
// when the entries exceed max_entries and covers all but the newest
// preserve_last_n; after that, the summary is recomputed (to cover all but
// the newest preserve_last_n again) only once preserve_last_n+step entries
// follow it. The result is a pure function of n, and equals what the
// stateful compactor would have done, so the summary (and the prompt
// prefix) stays byte-identical between recomputations.
func summarized(n int, cfg config) int {
	return summarizedForced(n, cfg, nil)
}

// summarizedForced is summarized with the steps the host's decision
// forced: after k entries for each k in forced, the summary covers all
// but the newest preserve_last_n, whatever max_entries and step say.
func summarizedForced(n int, cfg config, forced []int) int {
	cut := 0
	for k := 1; k <= n; k++ {
		switch {
		case decision.Contains(forced, k) && k-cfg.PreserveLastN > cut:
			cut = k - cfg.PreserveLastN
		case cut == 0 && k > cfg.MaxEntries:
			cut = max(0, k-cfg.PreserveLastN)
		case cut > 0 && k-cut >= cfg.PreserveLastN+cfg.Step:
			cut = k - cfg.PreserveLastN
		}
	}
	return cut
}
