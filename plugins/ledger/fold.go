package main

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/idents"
)

// foldTexts appends the texts of message m that fold reads items from,
// in fold's order, with how to read each: the text of a user or tool
// message (observed), the assistant's text and each tool call's
// arguments (unescaped), and any other message's text.
// extractMessages extracts them all in one host call.
func foldTexts(texts []idents.Input, m *abi.Message) []idents.Input {
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

// fold appends the items of message m to buf: what it ran (tool calls,
// and a text-protocol agent's fenced commands), the files, names, ids it
// holds, the errors and numbers it observed, and what the user said.
// texts are m's texts as foldTexts lists them, and got their items
// (idents.Extract's, one slice per text).
func fold(buf []item, m *abi.Message, cfg config, texts []idents.Input, got [][]item) []item {
	switch m.Role {
	case abi.RoleUser:
		buf = saidItems(buf, texts[0].Text, cfg.UserChars)
		return append(buf, got[0]...)
	case abi.RoleAssistant:
		buf = fencedCommands(buf, texts[0].Text)
		buf = append(buf, got[0]...)
		for k, tc := range m.ToolCalls {
			if tc.Function.Name != "" {
				buf = append(buf, item{Kind: kindRan, Text: tc.Function.Name})
			}
			for _, w := range commandWords(texts[1+k].Text) {
				buf = append(buf, item{Kind: kindRan, Text: w})
			}
			buf = append(buf, got[1+k]...)
		}
		return buf
	}
	return append(buf, got[0]...)
}

// saidItems appends what a user message after the task said: the whole
// message, on one line, when it is short (a chat turn: at most userChars
// characters); of a longer one (a pasted log, a text-protocol agent's
// observation), only its sentences that ask for something (see
// instruction), each cut to userChars.
func saidItems(buf []item, text string, userChars int) []item {
	if userChars <= 0 {
		return buf
	}
	if n := oneLineRunes(text, userChars); n > 0 && n <= userChars {
		return append(buf, item{Kind: kindSaid, Text: oneLine(text)})
	}
	for len(text) > 0 {
		end := sentenceEnd(text)
		s := strings.TrimSpace(text[:end])
		text = text[end:]
		if len(s) >= 12 && instruction(s) {
			buf = append(buf, item{Kind: kindSaid, Text: clipRunes(oneLine(s), userChars)})
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
func fencedCommands(buf []item, text string) []item {
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
			buf = append(buf, item{Kind: kindRan, Text: w})
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
		if !contains(out, w) {
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
