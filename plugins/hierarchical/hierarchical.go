package main

import (
	"encoding/json"
	"fmt"
	"strconv"
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
	RecentWindow      int    `json:"recent_window"`
	MediumWindow      int    `json:"medium_window"`
	CompressThreshold int    `json:"compress_threshold"`
	MaxSummaries      int    `json:"max_summaries"`
	MediumOutputChars int    `json:"medium_output_chars"`
	KeepTask          bool   `json:"keep_task"`
	SummaryRole       string `json:"summary_role"`
	Reset             bool   `json:"reset"`
	// SummaryDetailLevels is rlm-code's (informational there too): accepted
	// so its configs load, and unused.
	SummaryDetailLevels *int `json:"summary_detail_levels,omitempty"`
}

var defaults = config{
	RecentWindow:      3,
	MediumWindow:      5,
	CompressThreshold: 16,
	MaxSummaries:      3,
	MediumOutputChars: 50,
	KeepTask:          true,
	SummaryRole:       abi.RoleAssistant,
}

const schema = `{
  "type": "object",
  "properties": {
    "recent_window": {"type": "integer", "minimum": 1,
      "description": "the newest entries (turn units), kept in full at each compaction cycle"},
    "medium_window": {"type": "integer", "minimum": 0,
      "description": "the entries before them, summarized at partial detail (action and the start of the output)"},
    "compress_threshold": {"type": "integer", "minimum": 1,
      "description": "a compaction cycle runs when the entries kept in full plus the old-tier summaries exceed this"},
    "max_summaries": {"type": "integer", "minimum": 1,
      "description": "old-tier summaries kept, one per cycle, newest last"},
    "medium_output_chars": {"type": "integer", "minimum": 1,
      "description": "characters of each medium-tier entry's output kept in its summary"},
    "keep_task": {"type": "boolean",
      "description": "keep the task (the first user message) verbatim and count entries after it; false: the task is an entry like the others"},
    "summary_role": ` + steps.SummaryRoleSchema + `,
    "reset": {"type": "boolean",
      "description": "rlm-code's reset(): drop the old-tier summaries accumulated so far (the state remembers it; send it on one request)"},
    "summary_detail_levels": {"type": "integer", "minimum": 1,
      "description": "rlm-code's key, informational there: accepted and unused"}
  },
  "additionalProperties": false
}`

func policy() pdk.Policy {
	return pdk.Policy{
		Name:         "hierarchical",
		Version:      version,
		Description:  "Multi-tier compaction for long sessions: the newest entries in full, the ones before at partial detail, older ones as accumulated one-line summaries kept in the conversation's state.",
		ConfigSchema: schema,
		Defaults:     defaults,
		Compact:      compact,
	}
}

// header is the first line of the summary message; it lets the policy
// recognize its own summary when an agent sends a compacted history back.
const header = "[Summary of earlier steps]"

// stateVersion is the version of the state's layout.
const stateVersion = 1

// state is what the policy keeps per conversation between calls (the
// ABI's context.state): the tiers so far, and where in the conversation
// they end. Entries are counted in the full history (the conversation as
// the agent first sent it, without this policy's summary).
type state struct {
	V int `json:"v"`
	// Folded is how many entries the tiers cover.
	Folded int `json:"folded"`
	// Hash is an FNV-1a 64 hash (hex) of the folded entries' messages.
	Hash string `json:"hash"`
	// Next is the hash of the first message kept in full.
	Next string `json:"next"`
	// Cycles is how many compaction cycles ran.
	Cycles int `json:"cycles"`
	// OldSteps counts the entries in the old tier, over all cycles.
	OldSteps int `json:"old_steps"`
	// Summaries are the old-tier summaries, one per cycle that had old
	// entries, oldest first; at most max_summaries.
	Summaries []string `json:"summaries,omitempty"`
	// Medium is the medium tier: the entries summarized at partial detail
	// in the last cycle, their count and distinct actions (first seen
	// first), which the next cycle folds into the old tier.
	Medium        string   `json:"medium,omitempty"`
	MediumSteps   int      `json:"medium_steps,omitempty"`
	MediumActions []string `json:"medium_actions,omitempty"`
}

func compact(_ pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	cfg := defaults
	if err := req.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	msgs := req.Messages
	pinned := convo.Pinned(msgs, cfg.KeepTask)
	entries := steps.Entries(msgs, pinned, len(msgs))
	st, live, resumed, stale := resume(req.Context.State, msgs, entries)
	adopted := resumed && live == 1 && isSummary(msgs, entries[0])
	cycles := st.Cycles
	first := live // the first entry kept in full
	// Replay the growth of the live entries one at a time, running a
	// cycle whenever the policy, called after that entry, would have.
	for n := live + 1; n <= len(entries); n++ {
		kept := n - first
		if kept > cfg.RecentWindow && kept+len(st.Summaries) > cfg.CompressThreshold {
			next := n - cfg.RecentWindow
			cycle(&st, msgs, entries[first:next], entries[next], cfg)
			first = next
		}
	}
	// The host decided to compact: a cycle now, whatever
	// compress_threshold says, when entries beyond the recent window are
	// kept in full. The state remembers it like any other cycle.
	if decision.Due(req) && len(entries)-first > cfg.RecentWindow {
		next := len(entries) - cfg.RecentWindow
		cycle(&st, msgs, entries[first:next], entries[next], cfg)
		first = next
	}

	reset := cfg.Reset && (len(st.Summaries) > 0 || st.OldSteps > 0)
	if reset {
		// rlm-code's reset(): the accumulated old tier is forgotten.
		st.Summaries, st.OldSteps = nil, 0
	}
	res := &abi.CompactResult{}
	switch {
	case reset || st.Cycles != cycles || (!resumed && st.Cycles > 0):
		res.State = encodeState(&st)
	case stale != "":
		res.State = json.RawMessage("{}") // clear a state that does not apply
	}
	if st.Cycles == 0 {
		res.Messages = abi.Unchanged(len(msgs), "").Messages
		res.CacheBreakpoints = cachemark.Marks(pinned)
		res.Summary = fmt.Sprintf("%d entries: no compaction cycle yet%s", len(entries), stale)
		return res, nil
	}
	text := render(&st)
	keepFrom := entries[first].Start
	items := make([]abi.Item, 0, pinned+1+len(msgs)-keepFrom)
	for i := 0; i < pinned; i++ {
		items = append(items, abi.Ref(i))
	}
	stable := len(items)
	start := pinned
	if adopted && first == 1 && entries[0].Output == text {
		// The agent sent back our summary, unchanged since: keep its bytes.
		items = append(items, abi.Ref(entries[0].Start))
		start = entries[0].End
	} else {
		items = append(items, abi.New(abi.Message{Role: steps.SummaryRole(cfg.SummaryRole, msgs, items), Content: abi.TextContent(text)}))
	}
	for i := start; i < keepFrom; i++ {
		if msgs[i].IsSystem() {
			items = append(items, abi.Ref(i))
		}
	}
	summaryEnd := len(items)
	for i := keepFrom; i < len(msgs); i++ {
		items = append(items, abi.Ref(i))
	}
	res.Messages = items
	// The pinned prefix never changes and the summary only at a cycle:
	// a cycle's request reads the pinned prefix and writes the rest.
	res.CacheBreakpoints = cachemark.Marks(stable, summaryEnd)
	res.Compacted = len(items) != len(msgs) || !items[pinned].IsRef()
	res.Summary = fmt.Sprintf("hierarchical: %d old, %d medium, %d recent%s", st.OldSteps, st.MediumSteps, len(entries)-first, stale)
	if reset {
		res.Summary += " (reset: the old tier was dropped)"
	}
	if res.Compacted {
		res.EntriesSummarized = first
	}
	return res, nil
}

// resume decides where the replay starts. It returns the state to start
// from and the index of the first live entry (entries before it are in the
// state's tiers); resumed is false when the replay starts from scratch, and
// stale then says why a stored state was not used (for the summary: not a
// warning, since the result is as good).
//
// The stored state applies when the conversation is the full history whose
// first st.Folded entries hash to st.Hash (an agent that resends its whole
// history), or when it starts with this policy's summary followed by the
// message st.Next names (an agent that kept the compacted conversation).
// Otherwise — no state, or a history that was edited or compacted by
// something else — the replay starts from scratch, which gives the same
// result as the state would have for an unedited full history.
func resume(raw json.RawMessage, msgs []abi.Message, entries []steps.Entry) (st state, live int, resumed bool, stale string) {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" {
		return state{}, 0, false, ""
	}
	if err := json.Unmarshal(raw, &st); err != nil || st.V != stateVersion || st.Cycles < 1 || st.Folded < 1 || st.OldSteps < 0 || st.MediumSteps < 0 {
		return state{}, 0, false, " (ignored a state this version does not read)"
	}
	if len(entries) >= 2 && isSummary(msgs, entries[0]) && hashHex(hashMessages(offset, msgs[entries[1].Start:entries[1].Start+1])) == st.Next {
		return st, 1, true, ""
	}
	if len(entries) > st.Folded {
		h := uint64(offset)
		for _, e := range entries[:st.Folded] {
			h = hashMessages(h, msgs[e.Start:e.End])
		}
		if hashHex(h) == st.Hash {
			return st, st.Folded, true, ""
		}
	}
	return state{}, 0, false, " (the stored state did not match the conversation: recomputed)"
}

// isSummary reports whether entry e is this policy's summary message (a
// user or an assistant message, as summary_role made it).
func isSummary(msgs []abi.Message, e steps.Entry) bool {
	return (e.Action == steps.ActionUser || e.Action == steps.ActionReply) && strings.HasPrefix(e.Output, header+"\n")
}

// cycle runs one compaction cycle: the previous medium tier and the
// entries older than the new one (old) become one old-tier summary,
// medium becomes the new medium tier, and next is the first entry kept in
// full.
func cycle(st *state, msgs []abi.Message, folded []steps.Entry, next steps.Entry, cfg config) {
	split := max(0, len(folded)-cfg.MediumWindow)
	old, medium := folded[:split], folded[split:]
	if n := st.MediumSteps + len(old); n > 0 {
		actions := st.MediumActions
		for _, a := range steps.Actions(old) {
			if !contains(actions, a) {
				actions = append(actions, a)
			}
		}
		st.Summaries = append(st.Summaries, "["+strconv.Itoa(n)+" steps: "+strings.Join(actions, ", ")+"]")
		if over := len(st.Summaries) - cfg.MaxSummaries; over > 0 {
			st.Summaries = append([]string(nil), st.Summaries[over:]...)
		}
		st.OldSteps += n
	}
	parts := make([]string, len(medium))
	for i, e := range medium {
		parts[i] = strings.TrimSpace(e.Action + ": " + steps.Clip(e.Output, cfg.MediumOutputChars))
	}
	st.Medium = strings.Join(parts, " | ")
	st.MediumSteps = len(medium)
	st.MediumActions = steps.Actions(medium)

	h := uint64(offset)
	if st.Hash != "" {
		h, _ = strconv.ParseUint(st.Hash, 16, 64)
	}
	for _, e := range folded {
		h = hashMessages(h, msgs[e.Start:e.End])
	}
	st.V = stateVersion
	st.Hash = hashHex(h)
	st.Next = hashHex(hashMessages(offset, msgs[next.Start:next.Start+1]))
	st.Folded += len(folded)
	st.Cycles++
}

// render writes the summary message: the header, the old tier's summaries
// (oldest first) and the medium tier.
func render(st *state) string {
	var b strings.Builder
	b.WriteString(header)
	if len(st.Summaries) > 0 {
		b.WriteString("\nOlder: ")
		b.WriteString(strings.Join(st.Summaries, " | "))
	}
	if st.Medium != "" {
		b.WriteString("\nThen: ")
		b.WriteString(st.Medium)
	}
	return b.String()
}

func encodeState(st *state) json.RawMessage {
	b, _ := json.Marshal(st) // strings and ints: cannot fail
	return b
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// FNV-1a, 64 bits: a streaming hash, so a state's hash can be extended
// with the entries a later cycle folds.
const (
	offset = 14695981039346656037
	prime  = 1099511628211
)

// hashMessages extends h with what identifies each message: role, name,
// text, tool_call_id and tool calls.
func hashMessages(h uint64, msgs []abi.Message) uint64 {
	str := func(s string) {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
		h *= prime // a 0 byte: the separator
	}
	for i := range msgs {
		m := &msgs[i]
		str(m.Role)
		str(m.Name)
		str(m.Text())
		str(m.ToolCallID)
		for _, c := range m.ToolCalls {
			str(c.ID)
			str(c.Function.Name)
			str(c.Function.Arguments)
		}
		h = (h ^ 0xff) * prime
	}
	return h
}

func hashHex(h uint64) string { return strconv.FormatUint(h, 16) }
