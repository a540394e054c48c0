package main

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/decision"
	"github.com/compactd/compactd/plugins/internal/fingerprint"
)

// version is the plugin's version; bump it when behaviour changes.
const version = "2.1.0"

// config is the policy's config; its zero value is not the default (see
// defaults).
type config struct {
	KeepTask    bool    `json:"keep_task"`
	MinTokens   int     `json:"min_tokens"`
	MinTurns    int     `json:"min_turns"`
	FoldTokens  int     `json:"fold_tokens"`
	MaxChunks   int     `json:"max_chunks"`
	MergeKeep   int     `json:"merge_keep"`
	MergeFan    int     `json:"merge_fan"`
	Share       float64 `json:"share"`
	UserChars   int     `json:"user_chars"`
	SummaryRole string  `json:"summary_role"`
}

var defaults = config{
	KeepTask:    true,
	MinTokens:   3000,
	MinTurns:    4,
	FoldTokens:  250,
	MaxChunks:   200,
	MergeKeep:   1,
	MergeFan:    8,
	Share:       0.3,
	UserChars:   200,
	SummaryRole: abi.RoleAssistant,
}

const schema = `{
  "type": "object",
  "properties": {
    "keep_task": {"type": "boolean",
      "description": "keep the first user message (the task) verbatim; false folds it like any other turn"},
    "min_tokens": {"type": "integer", "minimum": 0,
      "description": "nothing is folded until the conversation holds this many tokens"},
    "min_turns": {"type": "integer", "minimum": 0,
      "description": "nothing is folded until this many turns (tool-call units, replies, user messages) follow the task: a fold rewrites the prompt cache once and pays back over the turns after it"},
    "fold_tokens": {"type": "integer", "minimum": 1,
      "description": "a jump: once the turns kept verbatim before the newest one hold this many tokens, they are folded into a new ledger chunk"},
    "max_chunks": {"type": "integer", "minimum": 2,
      "description": "when a jump makes more chunks than this, the oldest ones merge into one (the only time earlier ledger bytes change)"},
    "merge_keep": {"type": "integer", "minimum": 1,
      "description": "chunks left as they are when the oldest merge (the newest ones, the new chunk included); must be below max_chunks"},
    "merge_fan": {"type": "integer", "minimum": 0,
      "description": "when the newest this many ledger messages each hold as many chunks, they merge into one (their lists joined by kind): the ledger stays a few messages, and a merge rewrites only its newest part (0: never)"},
    "share": {"type": "number", "minimum": 0,
      "description": "a chunk lists what the agent used (files, names, ids in its own commands and words) and, of what it only observed, the kinds taking turns, as much as fits in this share of the tokens the chunk folds; an item left out may be listed when it comes back"},
    "user_chars": {"type": "integer", "minimum": 0,
      "description": "characters of each folded user message quoted in its chunk (0: none)"},
    "summary_role": {"enum": ["assistant", "user"],
      "description": "the role of the ledger's messages (a ledger that would open the conversation is always the user's)"}
  },
  "additionalProperties": false
}`

func policy() pdk.Policy {
	return pdk.Policy{
		Name:    "ledger",
		Version: version,
		Description: "Keeps the system messages, the task and the newest turn verbatim and folds everything older into an append-only, " +
			"deduplicated ledger of what the agent ran and met (commands, files, definitions, symbols, errors, ids, numbers, user words) " +
			"right after the task; the ledger grows by one chunk per jump, and only its newest messages merge, " +
			"so its older messages never change; the newest message and the ends of the stable ones are marked as prompt-cache breakpoints.",
		ConfigSchema: schema,
		Defaults:     defaults,
		Compact:      compact,
		// The memo keys hash the host's message hashes when it sends them.
		ContentHashes: true,
		// A request reads the contents of the turns it folds into a new
		// chunk (and of the task, once per instance): the host sends the
		// rest without them.
		View: abi.ViewHeaders,
	}
}

// lastConfig is the config the last call decoded and the JSON it came
// from: an instance sees the same config on almost every call, and
// DecodeConfig's cache still finds it by reflection, tens of microseconds
// of every request in the guest. A guest serves one call at a time; the
// lock is for native callers.
var lastConfig struct {
	sync.Mutex
	raw string
	cfg config
}

// decodeConfig returns the request's config: the last call's when the
// JSON is the same (a config holds no pointers: a copy shares nothing).
func decodeConfig(req *abi.CompactRequest) (config, error) {
	lastConfig.Lock()
	if lastConfig.raw != "" && lastConfig.raw == string(req.Config) {
		cfg := lastConfig.cfg
		lastConfig.Unlock()
		return cfg, nil
	}
	lastConfig.Unlock()
	cfg, err := decodeConfigJSON(req)
	if err == nil && len(req.Config) > 0 {
		lastConfig.Lock()
		lastConfig.raw, lastConfig.cfg = string(req.Config), cfg
		lastConfig.Unlock()
	}
	return cfg, err
}

// decodeConfigJSON decodes and checks the request's config.
func decodeConfigJSON(req *abi.CompactRequest) (config, error) {
	cfg := defaults
	if err := req.DecodeConfig(&cfg); err != nil {
		return cfg, err
	}
	// The host validated the config against the schema; these guard
	// against a host that did not.
	if cfg.FoldTokens < 1 || cfg.MaxChunks < 2 || cfg.MergeKeep < 1 || cfg.MergeKeep >= cfg.MaxChunks || cfg.MergeFan == 1 || cfg.MergeFan < 0 || cfg.Share < 0 || cfg.MinTokens < 0 || cfg.MinTurns < 0 || cfg.UserChars < 0 {
		return cfg, &abi.Error{Code: abi.CodeInvalidConfig, Message: "fold_tokens, max_chunks (≥ 2), merge_keep (≥ 1, below max_chunks) must be positive, merge_fan 0 or ≥ 2; min_tokens, min_turns, user_chars and share not negative"}
	}
	if cfg.SummaryRole != abi.RoleAssistant && cfg.SummaryRole != abi.RoleUser {
		return cfg, &abi.Error{Code: abi.CodeInvalidConfig, Message: "summary_role must be assistant or user"}
	}
	return cfg, nil
}

func compact(h pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	cfg, err := decodeConfig(req)
	if err != nil {
		return nil, err
	}
	msgs := req.Messages
	sc := scratches.Get().(*scratch)
	defer sc.release()
	pinned := convo.Pinned(msgs, cfg.KeepTask)
	sc.units = convo.AppendUnits(sc.units[:0], msgs[pinned:])
	units := sc.units
	for i := range units {
		units[i].Start += pinned
		units[i].End += pinned
	}
	forced := decision.LoadForced(req.Context.State, len(units)-1)
	plan := replay(sc, msgs, pinned, units, cfg, forced)
	if decision.Due(req) && len(units) > 0 && plan.folded < len(units)-1 {
		// The host decided: a jump now, whatever min_tokens, min_turns
		// and fold_tokens say. It is remembered in the state, so the
		// next turns replay the same ledger.
		forced = append(forced, len(units)-1)
		plan = replay(sc, msgs, pinned, units, cfg, forced)
	}
	state := decision.WithForced(nil, forced)
	if len(plan.groups) == 0 {
		res := abi.Unchanged(len(msgs), strconv.Itoa(len(units))+" turns after the task: nothing folded yet")
		if pinned > 0 {
			res.CacheBreakpoints = []int{pinned - 1}
		}
		res.State = state
		return res, nil
	}
	texts, err := render(sc, h, msgs, pinned, units, plan, cfg)
	if err != nil {
		return nil, err
	}
	role := cfg.SummaryRole
	if pinned == convo.LeadingSystem(msgs) {
		role = abi.RoleUser // the ledger opens the conversation: Anthropic wants the user first
	}
	tail := units[plan.folded].Start
	items := make([]abi.Item, 0, pinned+len(texts)+len(msgs)-tail)
	for i := 0; i < pinned; i++ {
		items = append(items, abi.Ref(i))
	}
	ledger := make([]abi.Message, len(texts)) // one allocation, not one a message
	for i, t := range texts {
		ledger[i] = abi.Message{Role: role, Content: t}
		items = append(items, abi.Item{Message: &ledger[i]})
	}
	for i := tail; i < len(msgs); i++ {
		items = append(items, abi.Ref(i))
	}
	marks := breakpoints(pinned, plan.groups, cfg.MergeFan)
	return &abi.CompactResult{
		Messages:          items,
		Compacted:         true,
		Summary:           foldedSummary(plan.folded, len(units), len(texts)),
		EntriesSummarized: tail - pinned,
		CacheBreakpoints:  marks,
		State:             state,
	}, nil
}

// foldedSummary is a compacted result's summary: "folded 12 of 14 turns
// into a ledger of 3 chunk(s); 2 turn(s) verbatim". (Built with strconv:
// fmt.Sprintf was a few microseconds of every request in the guest.)
func foldedSummary(folded, units, messages int) string {
	var b strings.Builder // String does not copy: one allocation
	b.Grow(96)
	var num [20]byte
	b.WriteString("folded ")
	b.Write(strconv.AppendInt(num[:0], int64(folded), 10))
	b.WriteString(" of ")
	b.Write(strconv.AppendInt(num[:0], int64(units), 10))
	b.WriteString(" turns into a ledger of ")
	b.Write(strconv.AppendInt(num[:0], int64(messages), 10))
	b.WriteString(" chunk(s); ")
	b.Write(strconv.AppendInt(num[:0], int64(units-folded), 10))
	b.WriteString(" turn(s) verbatim")
	return b.String()
}

// plan is where the replay put the ledger: the chunks made at each jump
// (unit ranges, oldest first), how they are grouped into messages after
// merges, and how many units are folded.
type plan struct {
	chunks [][2]int // [from, to) unit indices of each chunk, in the order made
	groups [][2]int // [first, last) chunk indices of each ledger message
	folded int      // units folded (chunks[len-1][1])
}

// replay computes the ledger's layout for the conversation as it grew,
// unit by unit, as a policy called on every turn would have made it: a
// pure function of the units' token counts. Once the conversation holds
// min_tokens and min_turns units follow the task, each time the units kept
// verbatim before the newest one
// hold fold_tokens, they become one chunk (a jump) and only the newest
// unit stays verbatim. When a jump makes more than max_chunks groups, all
// but the newest merge_keep merge into one.
func replay(sc *scratch, msgs []abi.Message, pinned int, units []convo.Unit, cfg config, forced []int) plan {
	// At most one chunk and one group per unit: room made once, not grown
	// jump by jump, in sc's arrays.
	sc.chunks, sc.groups = reserve(sc.chunks, len(units)), reserve(sc.groups, len(units))
	p := plan{chunks: sc.chunks, groups: sc.groups}
	next := 0 // forced[next] is the next forced jump
	total := 0
	for i := 0; i < pinned; i++ {
		total += msgs[i].Tokens
	}
	tail := 0 // tokens of units[p.folded : k-1]
	for k, u := range units {
		// The request now ends with unit k; units[p.folded:k] are the
		// verbatim turns before it.
		if k > 0 {
			tail += unitTokens(msgs, units[k-1])
		}
		total += unitTokens(msgs, u)
		force := next < len(forced) && forced[next] == k
		if force {
			next++
		}
		if !force && (total < cfg.MinTokens || k < cfg.MinTurns || tail < cfg.FoldTokens) || k == p.folded {
			continue
		}
		p.chunks = append(p.chunks, [2]int{p.folded, k})
		p.groups = append(p.groups, [2]int{len(p.chunks) - 1, len(p.chunks)})
		p.folded, tail = k, 0
		p.groups = fanMerge(p.groups, cfg.MergeFan)
		if len(p.groups) > cfg.MaxChunks {
			cut := len(p.groups) - cfg.MergeKeep
			merged := [2]int{p.groups[0][0], p.groups[cut-1][1]}
			p.groups = append([][2]int{merged}, p.groups[cut:]...)
		}
	}
	return p
}

// maxMarks is the breakpoints the policy marks: Anthropic honours four,
// and the caller's own mark on the request's end takes one.
const maxMarks = 3

// breakpoints marks the prefixes the next requests will still start
// with, so a breakpoint cache reads them: the newest ledger message (until
// the next merge), the end of the groups a merge of the newest ones
// leaves as they are (the last one holding fan or more chunks, then fan²
// or more), and the task. At most maxMarks, the longest prefixes kept.
func breakpoints(pinned int, groups [][2]int, fan int) []int {
	last := pinned + len(groups) - 1
	marks := make([]int, 1, maxMarks)
	marks[0] = last
	if fan >= 2 {
		for size := fan; len(marks) < maxMarks; size *= fan {
			end := -1
			for gi, g := range groups {
				if g[1]-g[0] >= size {
					end = gi
				}
			}
			if end < 0 {
				break
			}
			if m := pinned + end; m != marks[len(marks)-1] {
				marks = append(marks, m)
			}
		}
	}
	if pinned > 0 && len(marks) < maxMarks {
		marks = append(marks, pinned-1)
	}
	slices.Sort(marks)
	return marks
}

// fanMerge merges the newest fan groups into one while they hold as many
// chunks each (a counter in base fan: groups of 1, fan, fan², … chunks,
// largest first). Only the newest groups change, so the ledger's older
// messages stay as the prompt cache holds them.
func fanMerge(groups [][2]int, fan int) [][2]int {
	for fan >= 2 && len(groups) >= fan {
		tail := groups[len(groups)-fan:]
		size := tail[0][1] - tail[0][0]
		for _, g := range tail[1:] {
			if g[1]-g[0] != size {
				return groups
			}
		}
		merged := [2]int{tail[0][0], tail[fan-1][1]}
		groups = append(groups[:len(groups)-fan], merged)
	}
	return groups
}

func unitTokens(msgs []abi.Message, u convo.Unit) int {
	n := 0
	for i := u.Start; i < u.End; i++ {
		n += msgs[i].Tokens
	}
	return n
}

// scratch is a call's working memory that outlives it, so that a guest's
// calls reuse it instead of leaving it to the garbage collector (whose
// work, in a Go guest, grows with what each call allocates): the units,
// the plan's chunks and groups, and render's arrays. Nothing of it is in a
// result or the memo. A pool, not one value, since native callers (tests)
// call concurrently; a guest calls one at a time and gets the same one.
type scratch struct {
	units          []convo.Unit
	chunks, groups [][2]int
	entries        []*entry
	keys           [][2]uint64
	cums           []fingerprint.Hash
	texts          []abi.Content
	textHashes     []uint64 // an extraction's (extractMessages)
	states         []uint8  // selectItems'
	known          []uint64 // what selectItems' picks made known
	parts          []uint64 // seeHashes' for one item
	offsets        []int    // where renderChunk wrote each item
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// release returns sc to the pool, dropping what its arrays point to (the
// memo may evict it meanwhile).
func (sc *scratch) release() {
	clear(sc.entries[:cap(sc.entries)])
	clear(sc.texts[:cap(sc.texts)])
	scratches.Put(sc)
}

// reserve returns s emptied, with room for n elements.
func reserve[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// sized returns s with n zero elements.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}
