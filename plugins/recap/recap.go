package main

import (
	"encoding/json"
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
	Enabled                       bool `json:"enabled"`
	MinPreservedAssistantMessages int  `json:"min_preserved_assistant_messages"`
	BatchSize                     int  `json:"batch_size"`
	KeepTask                      bool `json:"keep_task"`
	GenerateMissing               bool `json:"generate_missing"`
	MissingChars                  int  `json:"missing_chars"`
}

var defaults = config{
	Enabled: true,
	// A batch rewrites everything after the compacted part (the
	// preserved tail included) and pays back only over the turns after
	// it: a short preserved tail and batches of 8 cost less than sending
	// everything on every file of the data set (3 + 4 cost up to 1.28×
	// under Anthropic's cache on tau-bench; docs/benchmarks.md).
	MinPreservedAssistantMessages: 1,
	BatchSize:                     8,
	KeepTask:                      true,
	GenerateMissing:               true,
	MissingChars:                  160,
}

const schema = `{
  "type": "object",
  "properties": {
    "enabled": {"type": "boolean",
      "description": "false leaves every conversation as it is (environment: LLM_COMPACTION_ENABLED)"},
    "min_preserved_assistant_messages": {"type": "integer", "minimum": 1,
      "description": "the newest N assistant messages, and everything after the oldest of them, stay in full (environment: LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES)"},
    "batch_size": {"type": "integer", "minimum": 1,
      "description": "older assistant messages are compacted in batches of this many, so the compacted prefix changes once per batch (environment: LLM_COMPACTION_BATCH_SIZE)"},
    "keep_task": {"type": "boolean",
      "description": "keep the task (the first user message) verbatim; false: the Playbooks design, which removes it with the other older user messages"},
    "generate_missing": {"type": "boolean",
      "description": "an older assistant message without a recap line gets a generated one (its text and its tool calls, cut to missing_chars each), replacing it and its tool results; false keeps such a message and its unit in full (the Playbooks design)"},
    "missing_chars": {"type": "integer", "minimum": 1,
      "description": "characters of the text and of each tool call's arguments a generated recap line quotes"}
  },
  "additionalProperties": false
}`

func policy() pdk.Policy {
	return pdk.Policy{
		Name:         "recap",
		Version:      version,
		Description:  "Playbooks-style batched recap: older assistant messages shrink to their \"recap -\" line (a generated one when they have none) and older user messages (but the task) are removed, a batch at a time, so the prompt-cache prefix changes once per batch; the task and the end of the compacted part are marked as cache breakpoints.",
		ConfigSchema: schema,
		Defaults:     defaults,
		Compact:      compact,
	}
}

// recapPrefix starts the line an assistant message is compacted to.
const recapPrefix = "recap -"

func compact(_ pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	cfg := defaults
	if err := req.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	msgs := req.Messages
	task := -1
	if cfg.KeepTask {
		task = convo.Task(msgs)
	}
	// The stable prefix: the leading system messages and, kept, the task.
	pinned := convo.LeadingSystem(msgs)
	if task >= 0 && task+1 < len(msgs) {
		pinned = max(pinned, task+1)
	}
	if !cfg.Enabled {
		return cachemark.Unchanged(len(msgs), "recap is disabled", pinned), nil
	}
	assistants := 0
	for i := range msgs {
		if msgs[i].Role == abi.RoleAssistant {
			assistants++
		}
	}
	// The host's decision compacts every assistant message but the
	// preserved ones, batch or not; the state remembers how many, so the
	// next turns keep them compacted.
	k := batched(assistants, cfg)
	var state json.RawMessage
	if f := decision.LoadForced(req.Context.State, assistants); len(f) > 0 {
		k = max(k, f[len(f)-1])
		state = req.Context.State
	}
	if over := assistants - cfg.MinPreservedAssistantMessages; decision.Due(req) && over > k {
		k = over
		state = decision.WithForced(nil, []int{k})
	}
	if k == 0 {
		return cachemark.Unchanged(len(msgs), fmt.Sprintf("%d assistant messages: fewer than %d+%d, nothing to compact", assistants, cfg.MinPreservedAssistantMessages, cfg.BatchSize), pinned), nil
	}
	// last is the newest compacted assistant message: the k-th one.
	last := -1
	for i, seen := 0, 0; seen < k; i++ {
		if msgs[i].Role == abi.RoleAssistant {
			seen++
			last = i
		}
	}
	items := make([]abi.Item, 0, len(msgs))
	var rewritten []int
	removed := 0
	// stable and compactedEnd are output lengths: the items before the
	// first message after the pinned prefix, and before the preserved
	// tail.
	stable, compactedEnd := 0, 0
	for i := 0; i < len(msgs); {
		m := &msgs[i]
		if i < pinned {
			stable = len(items) + 1
		}
		if i <= last {
			compactedEnd = len(items) + 1
		}
		switch {
		case i > last || m.IsSystem() || i == task:
			// The preserved tail, system messages anywhere, and the task.
		case m.Role == abi.RoleUser:
			removed++
			i++
			continue
		case m.Role == abi.RoleAssistant:
			line, ok := recapLine(m.Text())
			if !ok && cfg.GenerateMissing {
				line, ok = generatedLine(m, cfg.MissingChars), true
			}
			if !ok {
				break // no recap line: the message (and its unit) stays
			}
			// The recap line replaces the message; its tool calls and
			// their results go with it, as one unit.
			items = append(items, abi.New(abi.Message{Role: abi.RoleAssistant, Content: abi.TextContent(line), Name: m.Name}))
			rewritten = append(rewritten, i)
			i = convo.UnitStartAtOrAfter(msgs, i+1)
			continue
		}
		items = append(items, abi.Ref(i))
		i++
	}
	if len(rewritten) == 0 && removed == 0 {
		res := cachemark.Unchanged(len(msgs), fmt.Sprintf("the %d oldest assistant messages have no recap line and no user message precedes them", k), pinned)
		res.State = state
		return res, nil
	}
	return &abi.CompactResult{
		Messages:          items,
		Compacted:         true,
		Summary:           fmt.Sprintf("compacted the %d oldest of %d assistant messages (%d to their recap line), removed %d user messages", k, assistants, len(rewritten), removed),
		EntriesSummarized: len(rewritten) + removed,
		Rewritten:         rewritten,
		// The compacted part changes only when the next batch is
		// compacted, and then only after its old end: marking it lets
		// that request read what it shares with this one.
		CacheBreakpoints: cachemark.Marks(stable, compactedEnd),
		State:            state,
	}, nil
}

// generatedLine is the recap line of an assistant message that has none:
// "recap - " followed by its text and its tool calls (name and arguments),
// each on one line and cut to n characters.
func generatedLine(m *abi.Message, n int) string {
	var b strings.Builder
	b.WriteString(recapPrefix)
	if t := steps.Clip(m.Text(), n); t != "" {
		b.WriteByte(' ')
		b.WriteString(t)
	}
	for _, c := range m.ToolCalls {
		b.WriteString(" [called ")
		b.WriteString(c.Function.Name)
		if a := steps.Clip(c.Function.Arguments, n); a != "" {
			b.WriteByte(' ')
			b.WriteString(a)
		}
		b.WriteByte(']')
	}
	return b.String()
}

// batched returns how many of the oldest assistant messages are compacted:
// all but the newest min_preserved, rounded down to a multiple of
// batch_size. It is 0 below min_preserved + batch_size assistant messages.
func batched(assistants int, cfg config) int {
	over := assistants - cfg.MinPreservedAssistantMessages
	if over < cfg.BatchSize {
		return 0
	}
	return over / cfg.BatchSize * cfg.BatchSize
}

// recapLine returns the first line of text that starts with "recap -"
// once trimmed, trimmed.
func recapLine(text string) (string, bool) {
	for len(text) > 0 {
		line, rest, _ := strings.Cut(text, "\n")
		if line = strings.TrimSpace(line); strings.HasPrefix(line, recapPrefix) {
			return line, true
		}
		text = rest
	}
	return "", false
}
