// Package facts finds the facts of a conversation's messages that an
// agent refers to later: what it ran (the tools it called, the programs
// its commands ran), the identifiers package idents finds (files, names
// defined and used, errors, ids, numbers) and what the user asked after
// the task. The ledger policy lists them; the host finds them natively
// for a plugin (the extract_message_facts_into host function), and a
// plugin without that host function finds the same with Collect.
package facts

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/idents"
)

// Options are what a message's facts depend on besides the message.
type Options struct {
	// UserChars is how many characters of a user message after the task
	// its KindSaid item quotes (0: no KindSaid items): all of a short
	// one, else each of its sentences that asks for something, cut.
	UserChars int
}

// Set is the facts of some messages: each once, in order of first
// appearance.
type Set struct {
	Items []idents.Item
	// Used[i]: Items[i] is in the agent's own words (an assistant
	// message's text or tool calls), not only in what it observed.
	Used []bool
}

// Extractor returns each text's identifiers, idents.Extract(nil,
// text.Text, text.Observed) for each (a plugin's host does it natively
// for a batch). An item's text may point into its input's.
type Extractor func(texts []idents.Input) ([][]idents.Item, error)

// ExtractHere is the Extractor that runs idents.Extract in the caller.
func ExtractHere(texts []idents.Input) ([][]idents.Item, error) {
	out := make([][]idents.Item, len(texts))
	for i, in := range texts {
		out[i] = idents.Extract(nil, in.Text, in.Observed)
	}
	return out, nil
}

// Collect returns the facts of msgs, each once, in order of first
// appearance; a fact is used when any of its appearances is the agent's
// own. extract finds the identifiers of all their texts, in one call.
// Items point into msgs' texts.
func Collect(msgs []abi.Message, opts Options, extract Extractor) (*Set, error) {
	var texts []idents.Input
	starts := make([]int, len(msgs)+1) // msgs[i]'s texts are texts[starts[i]:starts[i+1]]
	for i := range msgs {
		starts[i] = len(texts)
		texts = Texts(texts, &msgs[i])
	}
	starts[len(msgs)] = len(texts)
	got, err := extract(texts)
	if err != nil {
		return nil, err
	}
	if len(got) != len(texts) {
		return nil, fmt.Errorf("facts: %d texts extracted, %d sent", len(got), len(texts))
	}
	n := 0
	for _, g := range got {
		n += len(g)
	}
	var d deduper
	d.reset(n + 8) // room for the identifiers and a few commands
	var buf []idents.Item
	for i := range msgs {
		buf = Append(buf[:0], &msgs[i], opts, texts[starts[i]:starts[i+1]], got[starts[i]:starts[i+1]])
		used := msgs[i].Role == abi.RoleAssistant
		for _, it := range buf {
			d.add(it, used)
		}
	}
	return &d.set, nil
}

// Texts appends the texts of message m that Append reads items from, in
// Append's order, with how to read each: the text of a user or tool
// message (observed), the assistant's text and each tool call's
// arguments (unescaped), and any other message's text.
func Texts(texts []idents.Input, m *abi.Message) []idents.Input {
	switch m.Role {
	case abi.RoleUser, abi.RoleTool:
		return append(texts, idents.Input{Text: m.Text(), Observed: true})
	case abi.RoleAssistant:
		texts = append(texts, idents.Input{Text: m.Text()})
		for _, tc := range m.ToolCalls {
			texts = append(texts, idents.Input{Text: unescapeJSON(tc.Function.Arguments)})
		}
		return texts
	}
	return append(texts, idents.Input{Text: m.Text()})
}

// Append appends the facts of message m to buf, repeats included: what
// it ran (tool calls, and a text-protocol agent's fenced commands), the
// files, names, ids it holds, the errors and numbers it observed, and what
// the user said. texts are m's texts as Texts lists them, and got their
// identifiers (one slice per text).
func Append(buf []idents.Item, m *abi.Message, opts Options, texts []idents.Input, got [][]idents.Item) []idents.Item {
	switch m.Role {
	case abi.RoleUser:
		buf = saidItems(buf, texts[0].Text, opts.UserChars)
		return append(buf, got[0]...)
	case abi.RoleAssistant:
		buf = fencedCommands(buf, texts[0].Text)
		buf = append(buf, got[0]...)
		for k, tc := range m.ToolCalls {
			if tc.Function.Name != "" {
				buf = append(buf, idents.Item{Kind: idents.KindRan, Text: tc.Function.Name})
			}
			for _, w := range commandWords(texts[1+k].Text) {
				buf = append(buf, idents.Item{Kind: idents.KindRan, Text: w})
			}
			buf = append(buf, got[1+k]...)
		}
		return buf
	}
	return append(buf, got[0]...)
}

// deduper builds a Set: a scan of the items kept finds a repeat while
// they are few (a turn's dozen), a map once they are more.
type deduper struct {
	set Set
	at  map[idents.Item]int
}

// dedupScanMax is the most items deduper scans instead of making a map.
const dedupScanMax = 32

func (d *deduper) reset(n int) {
	d.set = Set{Items: make([]idents.Item, 0, n), Used: make([]bool, 0, n)}
	d.at = nil
}

// add records it: a new fact, or a repeat of one kept (marked used if
// this appearance is).
func (d *deduper) add(it idents.Item, used bool) {
	i := -1
	if d.at != nil {
		if k, ok := d.at[it]; ok {
			i = k
		}
	} else {
		for k, kept := range d.set.Items {
			if kept == it {
				i = k
				break
			}
		}
	}
	if i >= 0 {
		d.set.Used[i] = d.set.Used[i] || used
		return
	}
	d.set.Items = append(d.set.Items, it)
	d.set.Used = append(d.set.Used, used)
	if d.at != nil {
		d.at[it] = len(d.set.Items) - 1
	} else if len(d.set.Items) > dedupScanMax {
		d.at = make(map[idents.Item]int, 2*len(d.set.Items))
		for k, kept := range d.set.Items {
			if _, ok := d.at[kept]; !ok {
				d.at[kept] = k
			}
		}
	}
}

// saidItems appends what a user message after the task said: the whole
// message, on one line, when it is short (a chat turn: at most userChars
// characters); of a longer one (a pasted log, a text-protocol agent's
// observation), only its sentences that ask for something (see
// instruction), each cut to userChars.
func saidItems(buf []idents.Item, text string, userChars int) []idents.Item {
	if userChars <= 0 {
		return buf
	}
	if n := oneLineRunes(text, userChars); n > 0 && n <= userChars {
		return append(buf, idents.Item{Kind: idents.KindSaid, Text: oneLine(text)})
	}
	for len(text) > 0 {
		end := sentenceEnd(text)
		s := strings.TrimSpace(text[:end])
		text = text[end:]
		if len(s) >= 12 && instruction(s) {
			buf = append(buf, idents.Item{Kind: idents.KindSaid, Text: clipRunes(oneLine(s), userChars)})
		}
	}
	return buf
}

// sentenceEnd returns the end of text's first sentence: after a newline,
// or after '.', '!' or '?' followed by a space.
func sentenceEnd(text string) int {
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '\n':
			return i + 1
		case '.', '!', '?':
			if i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\n' {
				return i + 1
			}
		}
	}
	return len(text)
}

// instructionWords mark a sentence that asks for something or forbids it.
var instructionWords = []string{"must", "never", "do not", "don't", "make sure", "please", "should", "need to", "have to",
	"only", "avoid", "instead", "cannot", "can't", "not allowed", "required", "ensure", "at least", "at most", "no more than", "prefer"}

// instructionStarts lists instructionWords by their first byte.
var instructionStarts = func() (t [256][]string) {
	for _, w := range instructionWords {
		t[w[0]] = append(t[w[0]], w)
	}
	return t
}()

// instruction reports whether sentence s holds one of instructionWords as
// words (any case). An ASCII sentence is read in one pass, each word start
// compared with the words that begin with its letter; another is lowered
// first (strings.ToLower may change its length).
func instruction(s string) bool {
	for k := 0; k < len(s); k++ {
		if s[k] >= utf8.RuneSelf {
			return instructionLowered(strings.ToLower(s))
		}
	}
	for i := 0; i < len(s); i++ {
		if i > 0 && isWord(s[i-1]) {
			continue
		}
		for _, w := range instructionStarts[lowerASCII(s[i])] {
			end := i + len(w)
			if end <= len(s) && equalFoldASCII(s[i:end], w) && (end == len(s) || !isWord(s[end])) {
				return true
			}
		}
	}
	return false
}

// instructionLowered is instruction on a sentence already lowered.
func instructionLowered(lower string) bool {
	for _, w := range instructionWords {
		for from := 0; ; {
			i := strings.Index(lower[from:], w)
			if i < 0 {
				break
			}
			i += from
			end := i + len(w)
			if (i == 0 || !isWord(lower[i-1])) && (end == len(lower) || !isWord(lower[end])) {
				return true
			}
			from = i + 1
		}
	}
	return false
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// equalFoldASCII reports whether s, ASCII, lowered is lower.
func equalFoldASCII(s, lower string) bool {
	for k := 0; k < len(s); k++ {
		if lowerASCII(s[k]) != lower[k] {
			return false
		}
	}
	return true
}

// fencedCommands appends the programs of the commands in a text's fenced
// blocks (a text-protocol agent's actions: ```\nopen server.py\n```).
func fencedCommands(buf []idents.Item, text string) []idents.Item {
	for {
		i := strings.Index(text, "```")
		if i < 0 {
			return buf
		}
		text = text[i+3:]
		nl := strings.IndexByte(text, '\n')
		if nl < 0 {
			return buf
		}
		body := text[nl+1:]
		end := strings.Index(body, "```")
		if end < 0 {
			end = len(body)
		}
		for _, w := range shellWords(body[:end]) {
			buf = append(buf, idents.Item{Kind: idents.KindRan, Text: w})
		}
		if end == len(body) {
			return buf
		}
		text = body[end+3:]
	}
}

// commandWords returns the programs of a shell command a tool call ran
// (see shellWords). args is the tool call's arguments, unescaped; the
// command is the string value of its "command", "cmd" or "script" member,
// as shell tools name it ({"command": "…"}).
func commandWords(args string) []string {
	for _, key := range []string{`"command"`, `"cmd"`, `"script"`} {
		if i := strings.Index(args, key); i >= 0 {
			return shellWords(stringValue(args[i+len(key):]))
		}
	}
	return nil
}

// shellWords returns the programs a shell command runs: the first word of
// each part of its first line between &&, ||, ; and |, without cd; at most
// three.
func shellWords(cmd string) []string {
	// The first line: what follows is a heredoc or a script's body.
	if nl := strings.IndexByte(strings.TrimLeft(cmd, " \t\r\n"), '\n'); nl >= 0 {
		cmd = strings.TrimLeft(cmd, " \t\r\n")[:nl]
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
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
		if len(out) == 3 {
			break
		}
	}
	return out
}

// stringValue returns the string value after a JSON key (": \"…\""), in
// text already unescaped, so it ends at the last quote before the next
// member's key or the object's end; "" if the value is not a string.
func stringValue(rest string) string {
	rest = strings.TrimLeft(rest, " \t\r\n")
	if !strings.HasPrefix(rest, ":") {
		return ""
	}
	rest = strings.TrimLeft(rest[1:], " \t\r\n")
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

// oneLineRunes returns the runes of oneLine(s), counted only up to just
// past limit (a longer text returns limit+1): a long text is not copied
// to learn that it is long.
func oneLineRunes(s string, limit int) int {
	n, gap := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			gap = n > 0
			continue
		}
		if gap {
			n++
			gap = false
		}
		n++
		if n > limit {
			return limit + 1
		}
	}
	return n
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

// isWord reports whether c is a word byte: A-Z a-z 0-9 _.
func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}
