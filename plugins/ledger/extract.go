package main

import "strings"

// Kinds of ledger items, in the order a chunk lists them.
const (
	kindFile = iota
	kindDef
	kindSymbol
	kindError
	kindID
	kindNumber
	numKinds
)

// kindNames label each kind's line in a chunk.
var kindNames = [numKinds]string{"files", "defined", "symbols", "errors", "ids", "numbers"}

// item is one fact a folded message holds.
type item struct {
	kind int
	text string
}

// The scanners below work on bytes with a class table: a Go guest pays a
// check of the host's time limit at every loop header, so they make one
// pass over each text with simple loops and no regular expressions.

const (
	cWord  = 1 << iota // A-Z a-z 0-9 _
	cDigit             // 0-9
	cUpper             // A-Z
	cPath              // word bytes and . / -
)

var class = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c >= '0' && c <= '9':
			t[c] = cWord | cDigit | cPath
		case c >= 'A' && c <= 'Z':
			t[c] = cWord | cUpper | cPath
		case c >= 'a' && c <= 'z', c == '_':
			t[c] = cWord | cPath
		case c == '.' || c == '/' || c == '-':
			t[c] = cPath
		}
	}
	return t
}()

func isWord(c byte) bool { return class[c]&cWord != 0 }

// definer reports whether a name is defined after w.
func definer(w string) bool {
	switch w {
	case "def", "class", "func", "function", "fn", "struct", "interface", "type":
		return true
	}
	return false
}

// extract appends the items of text to out, in order of appearance.
// Numbers are taken only from observations (tool results and user
// messages after the task): elsewhere they are mostly the agent's own.
func extract(out []item, text string, numbers bool) []item {
	prevWord := ""
	for i := 0; i < len(text); {
		c := text[i]
		if class[c]&cPath == 0 {
			if c == '\n' {
				prevWord = ""
			}
			i++
			continue
		}
		start := i
		if numbers && class[c]&cDigit != 0 && (start == 0 || !isWord(text[start-1])) {
			if n := separatedNumber(text, start); n != "" {
				out = append(out, item{kindNumber, n})
				i += len(n)
				prevWord = n
				continue
			}
		}
		for i < len(text) && class[text[i]]&cPath != 0 {
			i++
		}
		run := text[start:i]
		if start > 0 && (text[start-1] == ':' || text[start-1] == '@') && strings.Contains(run, "/") {
			// Part of a URL or an address: not a file of the workspace.
			prevWord = ""
			continue
		}
		var next, after byte // the byte after the run, and after spaces
		if i < len(text) {
			next = text[i]
		}
		for k := i; k < len(text) && k < i+8; k++ {
			if text[k] != ' ' {
				after = text[k]
				break
			}
		}
		out = classify(out, run, next, after, prevWord, numbers)
		prevWord = run
	}
	return extractErrors(out, text)
}

// classify appends the items one run of path bytes holds.
func classify(out []item, run string, next, after byte, prevWord string, numbers bool) []item {
	run = strings.TrimRight(run, ".-")
	if run == "" {
		return out
	}
	if p := filePath(run); p != "" {
		out = append(out, item{kindFile, p})
	}
	// A definition: def/class/func… then a name and what opens its
	// parameters or body (def f(, class C:, struct S {, func F[T]).
	if definer(prevWord) && isIdent(run) && len(run) >= 3 && (after == '(' || after == ':' || after == '{' || after == '<' || after == '[') {
		out = append(out, item{kindDef, run})
	} else if next == '(' && len(run) >= 4 && isSymbol(run) {
		out = append(out, item{kindSymbol, run})
	}
	if numbers && isDecimal(run) {
		return append(out, item{kindNumber, run})
	}
	// Words: ids and numbers.
	for j := 0; j < len(run); {
		if !isWord(run[j]) && run[j] != '-' {
			j++
			continue
		}
		k := j
		for k < len(run) && (isWord(run[k]) || run[k] == '-' && k+1 < len(run) && isWord(run[k+1])) {
			k++
		}
		if k == j { // a '-' not followed by a word byte
			j++
			continue
		}
		w := run[j:k]
		switch {
		case isID(w):
			out = append(out, item{kindID, w})
		case numbers && j == 0 && k == len(run) && isNumber(w):
			out = append(out, item{kindNumber, w})
		}
		j = k
	}
	return out
}

// filePath returns the file path in run: a path with a directory and an
// extension of one to eight characters starting with a letter
// (src/app/main.py, ./pkg/x.go, /testbed/setup.cfg), or "".
func filePath(run string) string {
	slash := strings.LastIndexByte(run, '/')
	if slash <= 0 || slash == len(run)-1 {
		return ""
	}
	dot := strings.LastIndexByte(run, '.')
	if dot < slash+2 || dot == len(run)-1 || len(run)-dot-1 > 8 {
		return ""
	}
	ext := run[dot+1:]
	if c := ext[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return ""
	}
	for k := 0; k < len(ext); k++ {
		if class[ext[k]]&cWord == 0 || ext[k] == '_' {
			return ""
		}
	}
	return run
}

// isIdent reports whether s is an identifier: a letter or '_', then word
// bytes.
func isIdent(s string) bool {
	if s == "" || class[s[0]]&cDigit != 0 {
		return false
	}
	for k := 0; k < len(s); k++ {
		if !isWord(s[k]) {
			return false
		}
	}
	return true
}

// isSymbol reports whether a called name is distinctive enough to keep: a
// qualified name (a.b.c), or one with an underscore inside or a capital
// after a lower-case letter (parse_args, getUser).
func isSymbol(s string) bool {
	dotted, lower := false, false
	start := 0
	for k := 0; k <= len(s); k++ {
		if k < len(s) && s[k] != '.' {
			continue
		}
		if !isIdent(s[start:k]) {
			return false
		}
		if k < len(s) {
			dotted = true
		}
		start = k + 1
	}
	if dotted {
		return true
	}
	for k := 0; k < len(s); k++ {
		c := s[k]
		switch {
		case c == '_' && k < len(s)-1:
			return true
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= 'A' && c <= 'Z' && lower:
			return true
		}
	}
	return false
}

// isID reports whether a word is an identifier-like token: 5 to 64
// characters mixing letters and at least two digits (ZFA04Y, mia_li_3668,
// a1b2c3d), but not a number joined to a word (64-bit, utf-16).
func isID(w string) bool {
	if len(w) < 5 || len(w) > 64 {
		return false
	}
	if a, b, ok := strings.Cut(w, "-"); ok && !strings.Contains(b, "-") && (allDigits(a) || allDigits(b)) {
		return false
	}
	letters, digits := 0, 0
	for k := 0; k < len(w); k++ {
		switch c := w[k]; {
		case class[c]&cDigit != 0:
			digits++
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			letters++
		}
	}
	return letters > 0 && digits >= 2
}

func allDigits(s string) bool {
	for k := 0; k < len(s); k++ {
		if class[s[k]]&cDigit == 0 {
			return false
		}
	}
	return s != ""
}

// isNumber reports whether w, a word that is the whole of its run, is a
// number worth keeping: three or more digits. Digits inside a longer run
// (v1.234, file_123.py, 10.0.1) are part of a name or a version.
func isNumber(w string) bool {
	return len(w) >= 3 && allDigits(w)
}

// isDecimal reports whether s is digits, a point and digits (3.14159).
func isDecimal(s string) bool {
	a, b, ok := strings.Cut(s, ".")
	return ok && allDigits(a) && allDigits(b)
}

// separatedNumber returns the number with thousands separators that
// starts at text[i] (4,500 or 1,234,567.89), or "".
func separatedNumber(text string, i int) string {
	j := i
	for j < len(text) && j-i < 3 && class[text[j]]&cDigit != 0 {
		j++
	}
	if j == i || j-i > 3 {
		return ""
	}
	groups := 0
	for j+4 <= len(text) && text[j] == ',' && allDigits(text[j+1:j+4]) && (j+4 == len(text) || class[text[j+4]]&cDigit == 0) {
		j += 4
		groups++
	}
	if groups == 0 {
		return ""
	}
	if j+1 < len(text) && text[j] == '.' && class[text[j+1]]&cDigit != 0 {
		j++
		for j < len(text) && class[text[j]]&cDigit != 0 {
			j++
		}
	}
	if j < len(text) && isWord(text[j]) {
		return ""
	}
	return text[i:j]
}

// extractErrors appends each error line of text: an exception
// (ValueError: …, KeyError), a failed test (FAILED tests/x.py::t) or an
// "error: …" line, from its start to the end of its line, at most
// maxErrorChars.
func extractErrors(out []item, text string) []item {
	// The next mention of each marker at or after i; each is searched
	// again only once passed, so the scan stays linear.
	markers := [...]string{"rror", "xception", "FAILED "}
	var next [len(markers)]int
	for k, m := range markers {
		next[k] = index(text, 0, m)
	}
	for i := 0; ; {
		at := -1
		for k, m := range markers {
			if next[k] >= 0 && next[k] < i {
				next[k] = index(text, i, m)
			}
			if next[k] >= 0 && (at < 0 || next[k] < at) {
				at = next[k]
			}
		}
		if at < 0 {
			return out
		}
		start, ok := errorStart(text, at)
		if !ok {
			i = at + 1
			continue
		}
		end := strings.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text) - start
		}
		line := strings.TrimSpace(text[start : start+end])
		out = append(out, item{kindError, clipBytes(line, maxErrorChars)})
		i = max(start+end, at+1)
	}
}

// index is strings.Index(text[from:], sub) as an index into text, or -1.
func index(text string, from int, sub string) int {
	if from > len(text) {
		return -1
	}
	if j := strings.Index(text[from:], sub); j >= 0 {
		return from + j
	}
	return -1
}

// errorStart finds where the error mentioned at text[at:] starts: the
// capitalized word ending in Error or Exception that contains at, "FAILED
// " at at, or "error: "/"Error: " at the start of a word. ok is false when
// the mention is not an error line (e.g. "errors", "terror").
func errorStart(text string, at int) (int, bool) {
	if strings.HasPrefix(text[at:], "FAILED ") {
		return at, at == 0 || !isWord(text[at-1])
	}
	// Back to the start of the word.
	s := at
	for s > 0 && isWord(text[s-1]) {
		s--
	}
	e := at
	for e < len(text) && isWord(text[e]) {
		e++
	}
	word := text[s:e]
	switch {
	case (strings.HasSuffix(word, "Error") || strings.HasSuffix(word, "Exception")) && len(word) > len("Error") && class[word[0]]&cUpper != 0:
		return s, true
	case (word == "error" || word == "Error") && strings.HasPrefix(text[e:], ": "):
		return s, true
	}
	return 0, false
}

// clipBytes cuts s to at most n bytes at a UTF-8 boundary.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
