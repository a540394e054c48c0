// Package idents finds the identifiers a text of an agent's conversation
// holds: the file paths, the names it defines and calls, ids, numbers and
// error lines. It is the extraction the ledger policy folds old turns
// into, and the host serves it to plugins natively through the
// extract_identifiers host function (abi/README.md), whose wire format is
// in wire.go.
//
// It imports nothing but the standard library: the host, a Go plugin and
// native tests share it.
package idents

import "strings"

// Kind is the kind of an Item. The order is the ledger's: a chunk lists
// its items kind by kind, in this order.
type Kind uint8

// Kinds of items. Extract finds KindFile to KindNumber; KindRan and
// KindSaid are a caller's own (the ledger's tools run and what the user
// said), listed here so one enumeration orders them all.
const (
	KindRan    Kind = iota // tools called and the programs their commands ran
	KindFile               // file paths
	KindDef                // names defined (def/class/func … followed by its parameters or body)
	KindName               // other identifiers: called, snake_case, camelCase
	KindError              // error lines observed
	KindID                 // ids: words mixing letters and digits
	KindNumber             // numbers and dates observed
	KindSaid               // what the user said after the task
	NumKinds               // the number of kinds
)

// Item is one fact a text holds: its kind and its text, which is a
// substring of the text it was found in, except a range of listed line
// numbers ("10-12"), which joins two.
type Item struct {
	Kind Kind
	Text string
}

// MaxErrorBytes bounds the text of a KindError item: an error line is cut
// to at most this many bytes, at a UTF-8 boundary.
const MaxErrorBytes = 160

// The scanners below work on bytes with a class table: a Go guest pays a
// check of the host's time limit at every loop header, so they make one
// pass over each text with simple loops and no regular expressions.

const (
	cWord  = 1 << iota // A-Z a-z 0-9 _
	cDigit             // 0-9
	cUpper             // A-Z
	cPath              // word bytes and . / -
	cLower             // a-z
	cMark              // _ and . (what makes a plain word a name, a path or a number's part)
	cDot               // .
)

var class = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c >= '0' && c <= '9':
			t[c] = cWord | cDigit | cPath
		case c >= 'A' && c <= 'Z':
			t[c] = cWord | cUpper | cPath
		case c >= 'a' && c <= 'z':
			t[c] = cWord | cLower | cPath
		case c == '_':
			t[c] = cWord | cPath | cMark
		case c == '.':
			t[c] = cPath | cMark | cDot
		case c == '/' || c == '-':
			t[c] = cPath
		}
	}
	return t
}()

func isWord(c byte) bool  { return class[c]&cWord != 0 }
func isDigit(c byte) bool { return class[c]&cDigit != 0 }
func isAlnum(c byte) bool { return class[c]&(cDigit|cUpper|cLower) != 0 }

// definer reports whether a name is defined after w: def, class, func,
// function, fn, struct, interface, type, trait or enum. (By length, then
// constant compares: a string switch cost a tenth of Extract, asked of
// every word.)
func definer(w string) bool {
	switch len(w) {
	case 2:
		return w == "fn"
	case 3:
		return w == "def"
	case 4:
		return w == "func" || w == "type" || w == "enum"
	case 5:
		return w == "class" || w == "trait"
	case 6:
		return w == "struct"
	case 8:
		return w == "function"
	case 9:
		return w == "interface"
	}
	return false
}

// Extract appends the items of text to out, in order of appearance.
// observed is true for what came back to the agent (tool results, user
// messages after the task): numbers and errors are taken only from there —
// in the agent's own words they are mostly its guesses and code.
func Extract(out []Item, text string, observed bool) []Item {
	prevWord := ""
	var lines lineRun
	for i := 0; i < len(text); {
		c := text[i]
		if observed && (i == 0 || text[i-1] == '\n') {
			if n, end, ok := lineNumber(text, i); ok {
				out = lines.add(out, text[i:end], n)
				i = end
				continue
			}
		}
		if class[c]&cPath == 0 {
			if c == '\n' {
				prevWord = ""
			}
			i++
			continue
		}
		if i > 0 && text[i-1] == '\\' {
			// An escape sequence (\n, \t, \u00e9) inside a quoted
			// string of code: its letter is not part of the word after.
			i++
			continue
		}
		start := i
		if observed && isDigit(c) && (start == 0 || !isWord(text[start-1])) {
			if n := separatedNumber(text, start); n != "" {
				out = append(out, Item{KindNumber, n})
				i += len(n)
				prevWord = n
				continue
			}
		}
		// The run's classes, gathered as it is scanned: most runs are
		// plain words, told apart here without a second pass.
		var seen uint8
		capAfterLower := false
		for i < len(text) {
			cl := class[text[i]]
			if cl&cPath == 0 {
				break
			}
			if cl&cUpper != 0 && seen&cLower != 0 {
				capAfterLower = true
			}
			seen |= cl
			i++
		}
		run := text[start:i]
		if start > 0 && (text[start-1] == ':' || text[start-1] == '@') && strings.Contains(run, "/") {
			// Part of a URL or an address: not a file of the workspace.
			prevWord = ""
			continue
		}
		var next, after byte // the byte after the run, and the first one after spaces
		if i < len(text) {
			next = text[i]
		}
		plain := !capAfterLower && (seen&(cDigit|cMark) == 0 || plainRun(run))
		if next != '(' && plain && !definer(prevWord) {
			// Most runs are words of prose or code that hold no
			// item: classify would find none.
			prevWord = run
			continue
		}
		for k := i; k < len(text) && k < i+8; k++ {
			if text[k] != ' ' {
				after = text[k]
				break
			}
		}
		// A JSON object's key ("user_id": …) is the format's vocabulary,
		// repeated in every result, not a fact met.
		key := next == '"' && i+1 < len(text) && (text[i+1] == ':' || text[i+1] == ' ' && i+2 < len(text) && text[i+2] == ':')
		out = classify(out, run, seen&cDot != 0, next, after, prevWord, observed, key)
		prevWord = run
	}
	out = lines.flush(out)
	if observed {
		out = extractErrors(out, text)
	}
	return out
}

// lineNumber reads the line number that opens a line of a listing at
// text[i:] (grep -n's "12:" and "12-", nl's and cat -n's "    12\t"): its
// value and where its digits end.
func lineNumber(text string, i int) (n, end int, ok bool) {
	j := i
	for j < len(text) && j-i < 8 && text[j] == ' ' {
		j++
	}
	d := j
	for j < len(text) && j-d < 7 && isDigit(text[j]) {
		n = n*10 + int(text[j]-'0')
		j++
	}
	if j == d || j >= len(text) {
		return 0, 0, false
	}
	// grep -n's "12:" is left out: a match line's number and text are
	// the match's, read as they are; its context lines ("12-") and a
	// listing's ("    12\t") become one range.
	// Not a date's year (2024-05-15 opening a line).
	if text[j] == '\t' || text[j] == '-' && !(j+1 < len(text) && isDigit(text[j+1])) {
		return n, j, true
	}
	return 0, 0, false
}

// lineRun gathers consecutive line numbers of a listing into one range.
type lineRun struct {
	first, last int
	firstText   string
	lastText    string
	n           int
}

func (r *lineRun) add(out []Item, text string, n int) []Item {
	text = strings.TrimLeft(text, " ")
	if r.n > 0 && n == r.last+1 {
		r.last, r.lastText = n, text
		r.n++
		return out
	}
	out = r.flush(out)
	r.first, r.last, r.firstText, r.lastText, r.n = n, n, text, text, 1
	return out
}

func (r *lineRun) flush(out []Item) []Item {
	switch {
	case r.n == 0:
	case r.n == 1:
		if len(r.firstText) >= 3 {
			out = append(out, Item{KindNumber, r.firstText})
		}
	default:
		out = append(out, Item{KindNumber, r.firstText + "-" + r.lastText})
	}
	r.n = 0
	return out
}

// plainRun reports whether a run of path bytes (classify trims its
// trailing '.' and '-') holds no digit, '_' or '.', nor a capital after a
// lower-case letter: then it is no path, number, id or name, and holds an
// item only as a called or defined name.
func plainRun(run string) bool {
	end := len(run)
	for end > 0 && (run[end-1] == '.' || run[end-1] == '-') {
		end--
	}
	lower := false
	for k := 0; k < end; k++ {
		c := class[run[k]]
		switch {
		case c&(cDigit|cMark) != 0:
			return false
		case c&cLower != 0:
			lower = true
		case c&cUpper != 0 && lower:
			return false
		}
	}
	return true
}

// classify appends the items one run of path bytes holds.
// dotted says whether run holds a '.' (its trailing ones included).
func classify(out []Item, run string, dotted bool, next, after byte, prevWord string, observed, key bool) []Item {
	// Trimmed as strings.TrimRight(run, ".-") and TrimLeft(run, "-")
	// would, without building their cutset on every run.
	for len(run) > 0 && (run[len(run)-1] == '.' || run[len(run)-1] == '-') {
		run = run[:len(run)-1]
	}
	for len(run) > 0 && run[0] == '-' {
		run = run[1:]
	}
	if run == "" {
		return out
	}
	p := ""
	if dotted && strings.IndexByte(run, '.') >= 0 { // a path has a dot before its extension
		p = filePath(run)
	}
	if p != "" {
		// The words of a path are the path's: its item holds them. A
		// library's file seen in a traceback or a log is the
		// environment's, not the workspace's.
		if observed && libraryPath(p) {
			return out
		}
		return append(out, Item{KindFile, p})
	}
	// A definition: def/class/func… then a name and what opens its
	// parameters or body (def f(, class C:, struct S {, func F[T]).
	if (after == '(' || after == ':' || after == '{' || after == '<' || after == '[') && len(run) >= 3 && definer(prevWord) && isIdent(run) {
		return append(out, Item{KindDef, run})
	}
	if next == '(' && len(run) >= 4 && isSymbol(run) {
		// A called name: a qualified one holds its parts.
		return append(out, Item{KindName, run})
	}
	if observed && isDigit(run[0]) && (isDecimal(run) || isDate(run)) {
		return append(out, Item{KindNumber, run})
	}
	// The words of the run (a dotted name's parts, a dashed id): ids,
	// names, numbers.
	for j := 0; j < len(run); {
		if !isWord(run[j]) {
			j++
			continue
		}
		k := j
		for k < len(run) && (isWord(run[k]) || run[k] == '-' && k+1 < len(run) && isAlnum(run[k+1]) && k > j && isAlnum(run[k-1])) {
			k++
		}
		w := run[j:k]
		last := k == len(run)
		switch {
		case isID(w):
			out = append(out, Item{KindID, w})
		case key && last:
		case isName(w):
			out = append(out, Item{KindName, w})
		case observed && j == 0 && last && isNumber(w):
			out = append(out, Item{KindNumber, w})
		}
		j = k
	}
	return out
}

// fileExts are the extensions of a file named without a directory
// (reproduce.py, setup.cfg): with a directory any extension makes a path,
// alone a dotted name (np.zeros, self.path) would.
var fileExts = map[string]bool{
	"py": true, "pyi": true, "go": true, "rs": true, "c": true, "h": true, "cc": true, "cpp": true, "hpp": true,
	"js": true, "ts": true, "tsx": true, "jsx": true, "mjs": true, "java": true, "kt": true, "rb": true, "php": true,
	"cs": true, "swift": true, "sh": true, "sql": true, "json": true, "yaml": true, "yml": true, "toml": true,
	"cfg": true, "ini": true, "txt": true, "md": true, "rst": true, "html": true, "css": true, "xml": true,
	"csv": true, "lock": true, "log": true, "patch": true, "diff": true, "ipynb": true,
}

// filePath returns the file path in run: a path with a directory and an
// extension of one to eight characters starting with a letter
// (src/app/main.py, ./pkg/x.go, /testbed/setup.cfg), or a file name with
// a known extension (reproduce.py); else "".
func filePath(run string) string {
	slash := strings.LastIndexByte(run, '/')
	if slash == len(run)-1 {
		return ""
	}
	dot := strings.LastIndexByte(run, '.')
	if dot < slash+2 || dot == len(run)-1 || len(run)-dot-1 > 8 {
		return ""
	}
	ext := run[dot+1:]
	if allDigits(ext) && strings.HasSuffix(run[:dot], ".so") && slash > 0 {
		return run // a shared library's version: /lib64/ld-linux-x86-64.so.2
	}
	if class[ext[0]]&(cUpper|cLower) == 0 {
		return ""
	}
	for k := 0; k < len(ext); k++ {
		if !isAlnum(ext[k]) {
			return ""
		}
	}
	if slash <= 0 && (!fileExts[ext] || strings.IndexByte(run[:dot], '.') >= 0 || !isIdent(strings.ReplaceAll(run[:dot], "-", "_"))) {
		return ""
	}
	return run
}

// libraryPath reports whether p is a file of an installed library or of
// the language runtime (site-packages, /usr/lib/python3.11/…).
func libraryPath(p string) bool {
	for _, dir := range []string{"/site-packages/", "/dist-packages/", "/node_modules/", "/lib/python", "/usr/lib/", "/usr/local/lib/", "/go/pkg/mod/", "/.cargo/registry/"} {
		if strings.Contains(p, dir) {
			return true
		}
	}
	return false
}

// isIdent reports whether s is an identifier: a letter or '_', then word
// bytes.
func isIdent(s string) bool {
	if s == "" || isDigit(s[0]) {
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
// qualified name (a.b.c), a name (see isName) or a private one (_cstack).
func isSymbol(s string) bool {
	dotted := false
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
	if dotted || isName(s) {
		return true
	}
	// A called private name (_cstack), not a dunder (__init__).
	return strings.IndexByte(s, '_') >= 0 && !strings.HasPrefix(s, "__") && strings.Trim(s, "_") != ""
}

// isName reports whether w is an identifier distinctive enough to be a
// name rather than a word: 4+ characters with an underscore between two
// letters or digits (parse_args, _cstack_v2, MAX_LEN) or a capital after a
// lower-case letter (getUser, CompoundModel).
func isName(w string) bool {
	if len(w) < 4 || !isIdent(w) {
		return false
	}
	lower := false
	for k := 0; k < len(w); k++ {
		c := w[k]
		switch {
		case c == '_' && k > 0 && k < len(w)-1 && isAlnum(w[k-1]) && isAlnum(w[k+1]):
			return true
		case class[c]&cLower != 0:
			lower = true
		case class[c]&cUpper != 0 && lower:
			return true
		}
	}
	return false
}

// isID reports whether a word is an identifier-like token: 5 to 40
// characters mixing letters and at least two digits (ZFA04Y, mia_li_3668,
// a1b2c3d), but not a number joined to a word (64-bit, utf-16).
func isID(w string) bool {
	if len(w) < 5 || len(w) > 40 || w[0] == '0' && (w[1] == 'x' || w[1] == 'o') {
		// Longer: a checksum, not a name anyone refers to; 0x…: an
		// address or a mask.
		return false
	}
	letters, digits, dashes := 0, 0, 0
	for k := 0; k < len(w); k++ {
		switch c := w[k]; {
		case isDigit(c):
			digits++
		case class[c]&(cUpper|cLower) != 0:
			letters++
		case c == '-':
			dashes++
		}
	}
	if letters == 0 || digits < 2 {
		return false
	}
	if dashes == 1 { // a number joined to a word by its one dash: 64-bit, utf-16
		a, b, _ := strings.Cut(w, "-")
		return !allDigits(a) && !allDigits(b)
	}
	return true
}

func allDigits(s string) bool {
	for k := 0; k < len(s); k++ {
		if !isDigit(s[k]) {
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

// isDate reports whether s is a date: digits, '-' or '/', digits, the same
// separator, digits, with a four-digit year first or last (2024-05-15,
// 15/05/2024).
func isDate(s string) bool {
	if len(s) < 8 || len(s) > 10 {
		return false
	}
	sep := byte('-')
	if strings.IndexByte(s, '/') >= 0 {
		sep = '/'
	}
	parts := strings.Split(s, string(sep))
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if !allDigits(p) || len(p) > 4 {
			return false
		}
	}
	return len(parts[0]) == 4 || len(parts[2]) == 4
}

// separatedNumber returns the number with thousands separators that
// starts at text[i] (4,500 or 1,234,567.89), or "".
func separatedNumber(text string, i int) string {
	j := i
	for j < len(text) && j-i < 3 && isDigit(text[j]) {
		j++
	}
	if j == i || j-i > 3 {
		return ""
	}
	groups := 0
	for j+4 <= len(text) && text[j] == ',' && allDigits(text[j+1:j+4]) && (j+4 == len(text) || !isDigit(text[j+4])) {
		j += 4
		groups++
	}
	if groups == 0 {
		return ""
	}
	if j+1 < len(text) && text[j] == '.' && isDigit(text[j+1]) {
		j++
		for j < len(text) && isDigit(text[j]) {
			j++
		}
	}
	if j < len(text) && isWord(text[j]) {
		return ""
	}
	return text[i:j]
}

// extractErrors appends each error line of an observed text: an exception
// and its message at the start of a line (ValueError: …,
// django.core.exceptions.FieldError: …, a bare KeyError, pytest's "E   "
// lines), a failed test (FAILED tests/x.py::t) or an "error: …" (a
// compiler's, a tool's "Error: …"), from its start to the end of its line,
// at most MaxErrorBytes. An exception named inside a line (raise
// ValueError(…), except KeyError:) is code, not an error that happened.
func extractErrors(out []Item, text string) []Item {
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
		out = append(out, Item{KindError, clipBytes(line, MaxErrorBytes)})
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

// errorStart finds where the error mentioned at text[at:] starts. ok is
// false when the mention is not an error line (see extractErrors).
func errorStart(text string, at int) (int, bool) {
	if strings.HasPrefix(text[at:], "FAILED ") {
		return at, at == 0 || !isWord(text[at-1])
	}
	// Back to the start of the word, and of its dotted module path.
	s := at
	for s > 0 && isWord(text[s-1]) {
		s--
	}
	e := at
	for e < len(text) && isWord(text[e]) {
		e++
	}
	word := text[s:e]
	if (word == "error" || word == "Error") && strings.HasPrefix(text[e:], ": ") {
		return s, true
	}
	if !(strings.HasSuffix(word, "Error") || strings.HasSuffix(word, "Exception")) || len(word) <= len("Error") || class[word[0]]&cUpper == 0 {
		return 0, false
	}
	name := s
	for name > 1 && text[name-1] == '.' && isWord(text[name-2]) {
		name--
		for name > 0 && isWord(text[name-1]) {
			name--
		}
	}
	// Followed by its message: an error wherever it stands (a linter's
	// "- E999 IndentationError: unexpected indent").
	if e+2 < len(text) && text[e] == ':' && text[e+1] == ' ' && text[e+2] != ' ' && text[e+2] != '\n' {
		return name, true
	}
	// Alone, it ends its line ...
	if e < len(text) && text[e] != ':' && text[e] != '\n' && text[e] != '\r' {
		return 0, false
	}
	// ... and opens it: after indentation, or pytest's "E" marker.
	k := name
	for k > 0 && (text[k-1] == ' ' || text[k-1] == '\t') {
		k--
	}
	if k > 0 && text[k-1] == 'E' && (k == 1 || text[k-2] == '\n') {
		k--
	}
	if k > 0 && text[k-1] != '\n' {
		return 0, false
	}
	return name, true
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
