package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/fingerprint"
)

// version is the plugin's version; bump it when behaviour changes.
const version = "1.0.0"

// config is the policy's config; its zero value is not the default (see
// defaults).
type config struct {
	KeepTask    bool   `json:"keep_task"`
	MinTokens   int    `json:"min_tokens"`
	MinTurns    int    `json:"min_turns"`
	FoldTokens  int    `json:"fold_tokens"`
	MaxChunks   int    `json:"max_chunks"`
	MergeKeep   int    `json:"merge_keep"`
	ChunkItems  int    `json:"chunk_items"`
	UserChars   int    `json:"user_chars"`
	SummaryRole string `json:"summary_role"`
}

var defaults = config{
	KeepTask:    true,
	MinTokens:   4000,
	MinTurns:    8,
	FoldTokens:  700,
	MaxChunks:   8,
	MergeKeep:   1,
	ChunkItems:  8,
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
    "chunk_items": {"type": "integer", "minimum": 1,
      "description": "items of each kind (files, definitions, symbols, errors, ids, numbers) a chunk lists at most, earliest first; an item left out may appear in a later chunk; a merged message keeps twice as many"},
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
			"right after the task; the ledger grows by one chunk per jump, earlier chunks never change except in a rare merge, " +
			"and the newest chunk is marked as a prompt-cache breakpoint.",
		ConfigSchema: schema,
		Defaults:     defaults,
		Compact:      compact,
	}
}

func decodeConfig(req *abi.CompactRequest) (config, error) {
	cfg := defaults
	if err := req.DecodeConfig(&cfg); err != nil {
		return cfg, err
	}
	// The host validated the config against the schema; these guard
	// against a host that did not.
	if cfg.FoldTokens < 1 || cfg.MaxChunks < 2 || cfg.MergeKeep < 1 || cfg.MergeKeep >= cfg.MaxChunks || cfg.ChunkItems < 1 || cfg.MinTokens < 0 || cfg.MinTurns < 0 || cfg.UserChars < 0 {
		return cfg, &abi.Error{Code: abi.CodeInvalidConfig, Message: "fold_tokens, max_chunks (≥ 2), merge_keep (≥ 1, below max_chunks) and chunk_items must be positive; min_tokens, min_turns and user_chars not negative"}
	}
	if cfg.SummaryRole != abi.RoleAssistant && cfg.SummaryRole != abi.RoleUser {
		return cfg, &abi.Error{Code: abi.CodeInvalidConfig, Message: "summary_role must be assistant or user"}
	}
	return cfg, nil
}

func compact(_ pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	cfg, err := decodeConfig(req)
	if err != nil {
		return nil, err
	}
	msgs := req.Messages
	pinned := convo.Pinned(msgs, cfg.KeepTask)
	units := convo.Units(msgs[pinned:])
	for i := range units {
		units[i].Start += pinned
		units[i].End += pinned
	}
	plan := replay(msgs, pinned, units, cfg)
	if len(plan.groups) == 0 {
		res := abi.Unchanged(len(msgs), fmt.Sprintf("%d turns after the task: nothing folded yet", len(units)))
		if pinned > 0 {
			res.CacheBreakpoints = []int{pinned - 1}
		}
		return res, nil
	}
	texts := render(msgs, units, plan, cfg)
	role := cfg.SummaryRole
	if pinned == convo.LeadingSystem(msgs) {
		role = abi.RoleUser // the ledger opens the conversation: Anthropic wants the user first
	}
	tail := units[plan.folded].Start
	items := make([]abi.Item, 0, pinned+len(texts)+len(msgs)-tail)
	for i := 0; i < pinned; i++ {
		items = append(items, abi.Ref(i))
	}
	for _, t := range texts {
		items = append(items, abi.New(abi.Message{Role: role, Content: abi.TextContent(t)}))
	}
	for i := tail; i < len(msgs); i++ {
		items = append(items, abi.Ref(i))
	}
	marks := []int{pinned + len(texts) - 1}
	if pinned > 0 {
		marks = []int{pinned - 1, pinned + len(texts) - 1}
	}
	return &abi.CompactResult{
		Messages:          items,
		Compacted:         true,
		Summary:           fmt.Sprintf("folded %d of %d turns into a ledger of %d chunk(s); %d turn(s) verbatim", plan.folded, len(units), len(texts), len(units)-plan.folded),
		EntriesSummarized: tail - pinned,
		CacheBreakpoints:  marks,
	}, nil
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
func replay(msgs []abi.Message, pinned int, units []convo.Unit, cfg config) plan {
	var p plan
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
		if total < cfg.MinTokens || k < cfg.MinTurns || tail < cfg.FoldTokens || k == p.folded {
			continue
		}
		p.chunks = append(p.chunks, [2]int{p.folded, k})
		p.groups = append(p.groups, [2]int{len(p.chunks) - 1, len(p.chunks)})
		p.folded, tail = k, 0
		if len(p.groups) > cfg.MaxChunks {
			cut := len(p.groups) - cfg.MergeKeep
			merged := [2]int{p.groups[0][0], p.groups[cut-1][1]}
			p.groups = append([][2]int{merged}, p.groups[cut:]...)
		}
	}
	return p
}

func unitTokens(msgs []abi.Message, u convo.Unit) int {
	n := 0
	for i := u.Start; i < u.End; i++ {
		n += msgs[i].Tokens
	}
	return n
}

// chunk is one jump's share of the ledger: what the folded turns ran and
// the items they hold that no earlier chunk lists.
type chunk struct {
	from, to int // unit indices
	commands []command
	items    [numKinds][]string
	users    []string
}

// command counts one tool (and the first words of its commands).
type command struct {
	name  string
	count int
	words []wordCount
}

type wordCount struct {
	word  string
	count int
}

// render builds the ledger's message texts. A chunk's lists depend on its
// turns and on every earlier chunk's (an item is listed once), so a
// rendered chunk is memoized under a hash of its own and all earlier
// chunks' turns: a conversation's next request re-renders only its new
// chunk.
func render(msgs []abi.Message, units []convo.Unit, p plan, cfg config) []string {
	chunks := make([]chunk, len(p.chunks))
	keys := make([][2]uint64, len(p.chunks))
	var seen map[item]bool // built on the first chunk not in the memo
	var cum fingerprint.Hash
	cum.Str("compactd-ledger-render-v1")
	cum.Word(uint64(cfg.ChunkItems))
	for ci, span := range p.chunks {
		xkey := extractionKey(msgs, units[span[0]:span[1]], cfg)
		cum.Word(xkey[0])
		cum.Word(xkey[1])
		ckey := cum.Sum128()
		keys[ci] = ckey
		if c, ok := chunkMemo.get(ckey).(*chunk); ok {
			chunks[ci] = *c
			chunks[ci].from, chunks[ci].to = span[0], span[1]
			continue
		}
		if seen == nil {
			seen = make(map[item]bool)
			for _, c := range chunks[:ci] {
				for kind, list := range c.items {
					for _, text := range list {
						seen[item{kind, text}] = true
					}
				}
			}
		}
		x := extractChunk(msgs, units[span[0]:span[1]], xkey, cfg)
		c := &chunks[ci]
		c.from, c.to = span[0], span[1]
		c.commands, c.users = x.commands, x.users
		size := 0
		for _, it := range x.items {
			if len(c.items[it.kind]) >= cfg.ChunkItems || seen[it] {
				continue
			}
			seen[it] = true
			c.items[it.kind] = append(c.items[it.kind], it.text)
			size += len(it.text) + 16
		}
		memoized := *c
		chunkMemo.put(ckey, &memoized, size+64)
	}
	texts := make([]string, len(p.groups))
	for gi, g := range p.groups {
		// A group's text depends on its chunks (and, through them, on the
		// earlier ones) and on where it starts and ends.
		var gh fingerprint.Hash
		gh.Str("compactd-ledger-group-v1")
		gh.Word(keys[g[1]-1][0])
		gh.Word(keys[g[1]-1][1])
		gh.Word(uint64(g[0]))
		gh.Word(uint64(chunks[g[0]].from))
		gh.Word(uint64(chunks[g[1]-1].to))
		gkey := gh.Sum128()
		if t, ok := chunkMemo.get(gkey).(string); ok {
			texts[gi] = t
			continue
		}
		texts[gi] = renderGroup(chunks[g[0]:g[1]], cfg)
		chunkMemo.put(gkey, texts[gi], len(texts[gi])+32)
	}
	return texts
}

// extraction is what one chunk's turns hold, before the ledger's
// deduplication across chunks and its caps: items in order of first
// appearance (each once), the commands run, the user's words.
type extraction struct {
	items    []item
	commands []command
	users    []string
}

// extractionKey is the memo key of units' extraction: a hash of their
// messages and of the settings extraction depends on.
func extractionKey(msgs []abi.Message, units []convo.Unit, cfg config) [2]uint64 {
	var h fingerprint.Hash
	h.Str("compactd-ledger-chunk-v1")
	h.Word(uint64(cfg.UserChars))
	for _, u := range units {
		for i := u.Start; i < u.End; i++ {
			h.Message(&msgs[i])
		}
	}
	return h.Sum128()
}

// extractChunk returns the extraction of units (whose key is key), from
// the memo when these very turns were extracted before.
func extractChunk(msgs []abi.Message, units []convo.Unit, key [2]uint64, cfg config) *extraction {
	if x, ok := chunkMemo.get(key).(*extraction); ok {
		return x
	}
	x := &extraction{}
	var buf []item
	for _, u := range units {
		for i := u.Start; i < u.End; i++ {
			buf = x.fold(buf, &msgs[i], cfg)
		}
	}
	dup := make(map[item]bool, len(buf))
	size := 0
	for _, it := range buf {
		if dup[it] {
			continue
		}
		dup[it] = true
		// Copies: the texts point into the request, which the host
		// overwrites with the next one.
		it.text = strings.Clone(it.text)
		x.items = append(x.items, it)
		size += len(it.text) + 24
	}
	for i := range x.users {
		x.users[i] = strings.Clone(x.users[i])
		size += len(x.users[i])
	}
	for i := range x.commands {
		x.commands[i].name = strings.Clone(x.commands[i].name)
		for k := range x.commands[i].words {
			x.commands[i].words[k].word = strings.Clone(x.commands[i].words[k].word)
		}
		size += 64
	}
	chunkMemo.put(key, x, size)
	return x
}

// memo keeps extractions and rendered chunks by a fingerprint of the
// turns (and settings) they come from, up to a size, evicting the oldest
// first. Extracting and deduplicating are the policy's costly steps and a
// conversation's chunks come back on every request, so an instance that
// served a conversation before only hashes its turns. A hit returns
// exactly what computing again would: the result never depends on the
// memo, only the time does. A guest serves one call at a time; the lock is
// for native callers.
type memo struct {
	mu    sync.Mutex
	max   int
	size  int
	m     map[[2]uint64]memoEntry
	order [][2]uint64
}

type memoEntry struct {
	v    any // an *extraction, a *chunk or a group's text
	size int
}

// chunkMemo serves every call of this instance (8 MiB of extractions and
// chunks, a few hundred conversations' worth).
var chunkMemo = &memo{max: 8 << 20, m: map[[2]uint64]memoEntry{}}

// clear empties the memo.
func (c *memo) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.order, c.size = map[[2]uint64]memoEntry{}, nil, 0
}

func (c *memo) get(key [2]uint64) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key].v
}

func (c *memo) put(key [2]uint64, v any, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok || size > c.max {
		return
	}
	for c.size+size > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.size -= c.m[old].size
		delete(c.m, old)
	}
	c.m[key] = memoEntry{v, size}
	c.order = append(c.order, key)
	c.size += size
}

// fold adds message m's commands and user words to x and appends its
// items to buf.
func (c *extraction) fold(buf []item, m *abi.Message, cfg config) []item {
	switch m.Role {
	case abi.RoleUser:
		text := m.Text()
		if cfg.UserChars > 0 {
			if q := clipRunes(oneLine(text), cfg.UserChars); q != "" {
				c.users = append(c.users, q)
			}
		}
		return extract(buf, text, true)
	case abi.RoleTool:
		return extract(buf, m.Text(), true)
	case abi.RoleAssistant:
		buf = extract(buf, m.Text(), false)
		for _, tc := range m.ToolCalls {
			args := unescapeJSON(tc.Function.Arguments)
			c.count(tc.Function.Name, commandWords(args))
			buf = extract(buf, args, false)
		}
		return buf
	}
	return extract(buf, m.Text(), false)
}

func (c *extraction) count(name string, words []string) {
	var cmd *command
	for i := range c.commands {
		if c.commands[i].name == name {
			cmd = &c.commands[i]
		}
	}
	if cmd == nil {
		c.commands = append(c.commands, command{name: name})
		cmd = &c.commands[len(c.commands)-1]
	}
	cmd.count++
next:
	for _, w := range words {
		for k := range cmd.words {
			if cmd.words[k].word == w {
				cmd.words[k].count++
				continue next
			}
		}
		cmd.words = append(cmd.words, wordCount{w, 1})
	}
}

// renderGroup writes one ledger message: one chunk, or several merged.
// A merged message joins their lists in order, keeping of each kind twice
// what one chunk holds, earliest first (what it drops is gone: later
// chunks left it out as already listed).
func renderGroup(cs []chunk, cfg config) string {
	var b strings.Builder
	b.WriteString("[compactd ledger: turns ")
	b.WriteString(strconv.Itoa(cs[0].from + 1))
	if last := cs[len(cs)-1].to; last > cs[0].from+1 {
		b.WriteByte('-')
		b.WriteString(strconv.Itoa(last))
	}
	b.WriteString(" after the task, folded; each item once, earliest first]")
	var cmds []command
	for _, c := range cs {
		for _, cmd := range c.commands {
			cmds = mergeCommand(cmds, cmd)
		}
	}
	if len(cmds) > 0 {
		b.WriteString("\nran:")
		for _, cmd := range cmds {
			b.WriteByte(' ')
			b.WriteString(cmd.name)
			b.WriteString(" ×")
			b.WriteString(strconv.Itoa(cmd.count))
			if len(cmd.words) > 0 {
				b.WriteString(" (")
				for k, w := range cmd.words {
					if k > 0 {
						b.WriteString(", ")
					}
					b.WriteString(w.word)
					if w.count > 1 {
						b.WriteString(" ×")
						b.WriteString(strconv.Itoa(w.count))
					}
				}
				b.WriteByte(')')
			}
			b.WriteByte(';')
		}
	}
	for kind := 0; kind < numKinds; kind++ {
		first := true
		limit := -1 // one chunk: its own cap applied already
		if len(cs) > 1 {
			limit = 2 * cfg.ChunkItems
		}
		for _, c := range cs {
			for _, it := range c.items[kind] {
				if limit == 0 {
					break
				}
				limit--
				switch {
				case first && kind == kindError:
					b.WriteString("\nerrors:\n- ")
				case first:
					b.WriteString("\n" + kindNames[kind] + ": ")
				case kind == kindError:
					b.WriteString("\n- ")
				default:
					b.WriteByte(' ')
				}
				first = false
				b.WriteString(it)
			}
		}
	}
	for _, c := range cs {
		for _, u := range c.users {
			b.WriteString("\nuser said: ")
			b.WriteString(u)
		}
	}
	return b.String()
}

func mergeCommand(list []command, cmd command) []command {
	for i := range list {
		if list[i].name != cmd.name {
			continue
		}
		list[i].count += cmd.count
		for _, w := range cmd.words {
			found := false
			for k := range list[i].words {
				if list[i].words[k].word == w.word {
					list[i].words[k].count += w.count
					found = true
					break
				}
			}
			if !found {
				list[i].words = append(list[i].words, w)
			}
		}
		return list
	}
	cmd.words = append([]wordCount(nil), cmd.words...)
	return append(list, cmd)
}

// commandWords returns the programs a shell command runs: the first word
// of each part of its first line between &&, ||, ; and |, without cd. args is the
// tool call's arguments, unescaped; the command is its first string value
// (most agents' tools take one: {"command": "…"}).
func commandWords(args string) []string {
	cmd := firstStringValue(args)
	// The first line: what follows is a heredoc or a script's body.
	if nl := strings.IndexByte(cmd, '\n'); nl >= 0 {
		cmd = cmd[:nl]
	}
	var out []string
	for len(cmd) > 0 {
		end := strings.IndexAny(cmd, "&|;\n")
		part := cmd
		if end >= 0 {
			part, cmd = cmd[:end], cmd[end+1:]
		} else {
			cmd = ""
		}
		w := firstWord(part)
		if w == "" || w == "cd" || !isCommandWord(w) {
			continue
		}
		if !contains(out, w) {
			out = append(out, w)
		}
		if len(out) == 3 {
			break
		}
	}
	return out
}

// firstStringValue returns the first string value of a JSON object's
// text (already unescaped, so it ends at the next quote), or "".
func firstStringValue(args string) string {
	colon := strings.IndexByte(args, ':')
	if colon < 0 {
		return ""
	}
	rest := strings.TrimLeft(args[colon+1:], " \t\r\n")
	if !strings.HasPrefix(rest, "\"") {
		return ""
	}
	rest = rest[1:]
	if end := strings.LastIndexByte(rest, '"'); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

func firstWord(s string) string {
	s = strings.TrimLeft(s, " \t\r(")
	end := strings.IndexAny(s, " \t\r)")
	if end >= 0 {
		s = s[:end]
	}
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:] // /usr/bin/python → python
	}
	return s
}

// isCommandWord reports whether w looks like a program name.
func isCommandWord(w string) bool {
	if len(w) > 32 {
		return false
	}
	for k := 0; k < len(w); k++ {
		if c := w[k]; !(isWord(c) || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// unescapeJSON undoes the escapes of JSON text (the arguments of a tool
// call): outside strings JSON has no backslashes, so the whole text can be
// unescaped at once. Invalid escapes are kept as they are.
func unescapeJSON(s string) string {
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		b.WriteString(s[:i])
		if i+1 >= len(s) {
			b.WriteByte('\\')
			s = ""
			break
		}
		switch c := s[i+1]; c {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '"', '\\', '/':
			b.WriteByte(c)
		case 'u':
			if r, ok := hex4(s[i+2:]); ok {
				b.WriteRune(r)
				s = s[i+6:]
				i = strings.IndexByte(s, '\\')
				continue
			}
			b.WriteString(`\u`)
		default:
			b.WriteByte('\\')
			b.WriteByte(c)
		}
		s = s[i+2:]
		i = strings.IndexByte(s, '\\')
	}
	b.WriteString(s)
	return b.String()
}

func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for k := 0; k < 4; k++ {
		c := s[k]
		switch {
		case c >= '0' && c <= '9':
			r = r*16 + rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r*16 + rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r*16 + rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// oneLine puts s on one line: runs of white space become one space.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// clipRunes cuts s to at most n runes, marking a cut with "…".
func clipRunes(s string, n int) string {
	count := 0
	for i := range s {
		if count == n {
			return s[:i] + "…"
		}
		count++
	}
	return s
}

// maxErrorChars bounds an error line in the ledger.
const maxErrorChars = 160
