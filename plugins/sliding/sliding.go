package main

import (
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/cachemark"
	"github.com/compactd/compactd/plugins/internal/steps"
)

// version is the plugin's version; bump it when behaviour changes.
const version = "1.3.0"

// config is the policy's config; its zero value is not the default (see
// defaults).
type config struct {
	WindowSize           int     `json:"window_size"`
	Step                 int     `json:"step"`
	IncludeSummaryMarker bool    `json:"include_summary_marker"`
	KeepTask             bool    `json:"keep_task"`
	KeepFirstUser        bool    `json:"keep_first_user"`
	SummaryRole          string  `json:"summary_role"`
	MaxTokens            int     `json:"max_tokens"`
	LowWater             float64 `json:"low_water"`
	StartOn              string  `json:"start_on"`
}

var defaults = config{
	// A cut rewrites the prompt cache after the pinned prefix, so the
	// window moves in large steps: on the data set's short sessions
	// (SWE-agent, tau-bench) 5+5 cost more than sending everything under
	// Anthropic's cache; 4+16 costs less on every file (docs/benchmarks.md).
	WindowSize:           4,
	Step:                 16,
	IncludeSummaryMarker: true,
	KeepTask:             true,
	KeepFirstUser:        true,
	SummaryRole:          abi.RoleAssistant,
	MaxTokens:            0,
	LowWater:             0.6,
	StartOn:              "",
}

const schema = `{
  "type": "object",
  "properties": {
    "window_size": {"type": "integer", "minimum": 1,
      "description": "entries (non-system messages) kept in count mode"},
    "step": {"type": "integer", "minimum": 1,
      "description": "hysteresis: the window is cut back to window_size once it holds window_size+step entries, so the kept prefix changes once every step turns (1 = slide every turn)"},
    "include_summary_marker": {"type": "boolean",
      "description": "insert a message \"[K earlier entries discarded]\" where entries were dropped"},
    "keep_task": {"type": "boolean",
      "description": "always keep the task (the first user message) verbatim; false: the seed's window, which drops it with the rest"},
    "keep_first_user": {"type": "boolean",
      "description": "the older name of keep_task: false also drops the task"},
    "summary_role": ` + steps.SummaryRoleSchema + `,
    "max_tokens": {"type": "integer", "minimum": 0,
      "description": "token-budget mode when > 0: keep the newest messages that fit in max_tokens (system messages included)"},
    "low_water": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
      "description": "token mode: once over max_tokens, cut back to low_water*max_tokens (1 = trim to the budget every turn)"},
    "start_on": {"enum": ["", "user"],
      "description": "\"user\": the kept window starts at a user message (if it holds one)"}
  },
  "additionalProperties": false
}`

func policy() pdk.Policy {
	return pdk.Policy{
		Name:         "sliding",
		Version:      version,
		Description:  "Keeps the system messages and a window of the newest entries (by count or by tokens), moving the window in steps so the prompt-cache prefix stays stable between cuts.",
		ConfigSchema: schema,
		Defaults:     defaults,
		Compact:      compact,
		// Sliding reads roles, tool calls and token counts, never a
		// content: the host sends none.
		View: abi.ViewHeaders,
	}
}

// markerAllowance is the token budget reserved for the marker message in
// token mode ("[12345 earlier entries discarded]" plus message overhead).
const markerAllowance = 16

func compact(_ pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	cfg := defaults
	if err := req.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	msgs := req.Messages
	lead := convo.LeadingSystem(msgs)
	// pinned is the kept prefix: the system messages, and the task
	// unless keep_task (or its older name keep_first_user) is off.
	pinned := convo.Pinned(msgs, cfg.KeepTask && cfg.KeepFirstUser)
	var cut int
	if cfg.MaxTokens > 0 {
		cut = tokenCut(msgs, pinned, cfg)
	} else {
		cut = countCut(msgs, pinned, cfg)
	}
	if d := req.Context.Compact; d != nil && d.TargetTokens > 0 && (cfg.MaxTokens == 0 || d.TargetTokens < cfg.MaxTokens) {
		// The host decided to compact to a budget: the window also fits
		// it, as in token mode.
		budget := cfg
		budget.MaxTokens = d.TargetTokens
		cut = max(cut, tokenCut(msgs, pinned, budget))
	}
	if cfg.StartOn == "user" {
		cut = startOnUser(msgs, cut)
	}
	dropped := cut - pinned
	if dropped <= 0 {
		return cachemark.Unchanged(len(msgs), fmt.Sprintf("kept all %d entries", len(msgs)-lead), pinned), nil
	}
	items := make([]abi.Item, 0, pinned+1+len(msgs)-cut)
	for i := 0; i < pinned; i++ {
		items = append(items, abi.Ref(i))
	}
	stable := len(items)
	if cfg.IncludeSummaryMarker {
		items = append(items, abi.New(abi.Message{
			Role:    steps.SummaryRole(cfg.SummaryRole, msgs, items),
			Content: abi.TextContent(marker(dropped)),
		}))
	}
	for i := cut; i < len(msgs); i++ {
		items = append(items, abi.Ref(i))
	}
	return &abi.CompactResult{
		Messages:          items,
		Compacted:         true,
		Summary:           fmt.Sprintf("discarded %d earlier entries, kept the last %d", dropped, len(msgs)-cut),
		EntriesSummarized: dropped,
		// The pinned prefix never changes; the marker changes only at a
		// cut, and marking it too lets a cut's request read the pinned
		// prefix while the window after it is written once.
		CacheBreakpoints: cachemark.Marks(stable, len(items)-(len(msgs)-cut)),
	}, nil
}

func marker(dropped int) string {
	return fmt.Sprintf("[%d earlier entries discarded]", dropped)
}

// countCut returns the index of the first kept entry after the pinned
// prefix in count mode. It
// replays the conversation's growth message by message: whenever the
// window holds window_size+step entries it is cut back to window_size
// (widened to the start of a tool-call unit). Replaying makes the result a
// pure function of the messages that equals what a stateful window would
// have done turn by turn, so the cut moves only once every step messages.
func countCut(msgs []abi.Message, pinned int, cfg config) int {
	cut := pinned
	for n := pinned + 1; n <= len(msgs); n++ {
		if n-cut < cfg.WindowSize+cfg.Step {
			continue
		}
		next := convo.UnitStartAtOrBefore(msgs, n-cfg.WindowSize)
		cut = max(cut, next)
	}
	return cut
}

// tokenCut returns the index of the first kept entry in token mode: the
// same replay, with a token budget. When the system messages plus the
// window exceed max_tokens, whole units are dropped from the front until
// they fit in low_water*max_tokens. The final unit is always kept, even if
// it alone is over budget.
func tokenCut(msgs []abi.Message, pinned int, cfg config) int {
	fixed := markerAllowance
	for i := 0; i < pinned; i++ {
		fixed += msgs[i].Tokens
	}
	target := int(cfg.LowWater * float64(cfg.MaxTokens))
	cut, kept := pinned, 0
	for n := pinned + 1; n <= len(msgs); n++ {
		kept += msgs[n-1].Tokens
		if fixed+kept <= cfg.MaxTokens {
			continue
		}
		last := convo.UnitStartAtOrBefore(msgs, n-1) // the newest unit stays
		for cut < last && fixed+kept > target {
			end := convo.UnitStartAtOrAfter(msgs, cut+1)
			for ; cut < end; cut++ {
				kept -= msgs[cut].Tokens
			}
		}
	}
	return cut
}

// startOnUser moves cut forward to the first user message at or after it,
// if there is one.
func startOnUser(msgs []abi.Message, cut int) int {
	for i := cut; i < len(msgs); i++ {
		if msgs[i].Role == abi.RoleUser {
			return i
		}
	}
	return cut
}
