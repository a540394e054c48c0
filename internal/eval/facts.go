package eval

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/compactd/compactd/abi"
)

// The facts of a message are found by hand-written scanners, one pass
// each over its text: regular expressions over every message of every
// conversation cost seconds per data file, more than the replay itself.
// Paths and constraints, which need them, run them on short pieces only.

var (
	rePath = regexp.MustCompile(`(?:\.{1,2}/|/)?(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)+[A-Za-z0-9_][A-Za-z0-9_.-]*\.[A-Za-z][A-Za-z0-9]{0,7}\b`)
	reCons = regexp.MustCompile(`(?i)\b(?:must|mustn't|do not|don't|never|only|should|shouldn't|make sure|ensure|without|at least|at most|no more than|prefer|instead of|cannot|can't|not allowed|avoid)\b`)
	// A sentence ends at . ! or ? before a space or the end (setup.cfg
	// does not end one).
	reSent = regexp.MustCompile(`(?:[^.!?\n]|[.!?][^\s.!?])+[.!?]?`)
)

// maxProbeText caps the length of an error or constraint probe.
const maxProbeText = 120

// stopCalls are calls too common to say anything about a conversation.
var stopCalls = map[string]bool{
	"self.assertEqual": true, "self.assertTrue": true, "self.assertFalse": true,
	"os.path.join": true, "sys.exit": true, "json.loads": true, "json.dumps": true,
}

// defKeywords introduce a definition: def name(, class Name:, func name(…
var defKeywords = map[string]bool{"def": true, "class": true, "func": true, "function": true, "fn": true, "interface": true, "struct": true}

// factText is the text facts are taken from: the message's text and the
// values of its tool calls' arguments (decoded, so a name after an
// escaped newline is a word of its own), without the names of the tools
// it calls and of their parameters — the agent's vocabulary, not facts
// it met.
func factText(m *abi.Message) string {
	text := m.Text()
	if len(m.ToolCalls) == 0 {
		return text
	}
	var b strings.Builder
	b.WriteString(text)
	for _, tc := range m.ToolCalls {
		b.WriteByte('\n')
		writeArguments(&b, tc.Function.Arguments, false)
	}
	return b.String()
}

// writeArguments writes a tool call's arguments as a model reads them:
// the values of the JSON object (and, with keys, its keys), strings
// unescaped, one per line; arguments that are not JSON as they are.
func writeArguments(b *strings.Builder, args string, keys bool) {
	var v any
	if json.Unmarshal([]byte(args), &v) != nil {
		b.WriteString(args)
		return
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				if keys {
					b.WriteString(k)
					b.WriteByte('\n')
				}
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case nil:
		default:
			s, _ := json.Marshal(x)
			b.Write(s)
			b.WriteByte('\n')
		}
	}
	walk(v)
}

// extractFacts calls add for every fact of a message's fact text (its
// kind, the text, whether it must be found as a whole word). Errors and
// numbers are taken from what the agent observed (tool results and user
// messages), constraints from user messages; paths, function and class
// names, ids and snake_case names from every message.
func extractFacts(m *abi.Message, text string, add func(k kind, text string, word bool)) {
	if text == "" {
		return
	}
	observed := m.Role == abi.RoleTool || m.Role == abi.RoleUser
	scanPaths(text, add)
	scanWords(text, add)
	scanCalls(text, add)
	if observed {
		scanErrors(text, add)
		scanNumbers(text, add)
	}
	if m.Role == abi.RoleUser {
		for _, s := range reSent.FindAllString(text, -1) {
			s = strings.TrimSpace(s)
			if len(s) >= 15 && len(s) <= maxProbeText && reCons.MatchString(s) {
				add(kindConstraint, s, false)
			}
		}
	}
}

// isPathByte reports whether c may be part of a file path.
func isPathByte(c byte) bool {
	return c == '/' || c == '.' || c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// scanPaths finds file paths with a directory and an extension
// (src/app/main.py, ./tests/test_x.py, /etc/hosts.conf), not inside a URL.
func scanPaths(text string, add func(kind, string, bool)) {
	for i := 0; i < len(text); {
		if !isPathByte(text[i]) {
			i++
			continue
		}
		j := i
		slash := false
		for j < len(text) && isPathByte(text[j]) {
			slash = slash || text[j] == '/'
			j++
		}
		if slash {
			run := text[i:j]
			for _, s := range rePath.FindAllStringIndex(run, -1) {
				lo, hi := i+s[0], i+s[1]
				if lo >= 1 && (text[lo-1] == ':' || text[lo-1] == '/') {
					continue // part of a URL
				}
				if !wordByte(text, lo-1) && !wordByte(text, hi) {
					add(kindPath, text[lo:hi], true)
				}
			}
		}
		i = j
	}
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// scanWords finds ids and snake_case names among the words of text
// (letters and digits, joined by single '_' or '-'), and definitions: a
// def/class/func/… keyword, a name and one of ( : < { [.
func scanWords(text string, add func(kind, string, bool)) {
	for i := 0; i < len(text); {
		if !isAlnum(text[i]) {
			i++
			continue
		}
		lo := i
		for i < len(text) && isAlnum(text[i]) {
			i++
		}
		for i+1 < len(text) && (text[i] == '_' || text[i] == '-') && isAlnum(text[i+1]) {
			i++
			for i < len(text) && isAlnum(text[i]) {
				i++
			}
		}
		w := text[lo:i]
		whole := !wordByte(text, lo-1) && !wordByte(text, i)
		switch {
		case !whole, inPath(text, lo, i), escaped(text, lo):
		case isID(w):
			add(kindID, w, true)
		case isSnake(w) && !jsonKey(text, i):
			add(kindSnake, w, true)
		case defKeywords[w]:
			if name, ok := definedName(text, i); ok {
				add(kindFunction, name, true)
			}
		}
	}
}

// inPath reports whether the word text[lo:hi] is a part of a path (after
// or before a '/', or before an extension): the path's probe holds it.
func inPath(text string, lo, hi int) bool {
	return lo > 0 && text[lo-1] == '/' || hi < len(text) && (text[hi] == '/' || text[hi] == '.' && hi+1 < len(text) && (text[hi+1] >= 'a' && text[hi+1] <= 'z' || text[hi+1] >= 'A' && text[hi+1] <= 'Z'))
}

// escaped reports whether text[lo] follows a backslash: the rest of an
// escape sequence left in a tool's output (\u00e9t, \nname), not a word.
func escaped(text string, lo int) bool {
	return lo > 0 && text[lo-1] == '\\'
}

// definedName returns the name defined after a keyword ending at text[i]:
// white space, a name of four or more characters (shorter ones are as
// often English: "the class too:"), optional spaces, and one of
// ( : < { [.
func definedName(text string, i int) (string, bool) {
	j := i
	for j < len(text) && (text[j] == ' ' || text[j] == '\t') {
		j++
	}
	if j == i || j >= len(text) || !(text[j] == '_' || text[j] >= 'a' && text[j] <= 'z' || text[j] >= 'A' && text[j] <= 'Z') {
		return "", false
	}
	lo := j
	for j < len(text) && wordByte(text, j) && text[j] < 0x80 {
		j++
	}
	name := text[lo:j]
	for j < len(text) && (text[j] == ' ' || text[j] == '\t') {
		j++
	}
	if len(name) < 4 || j >= len(text) || !strings.ContainsRune("(:<{[", rune(text[j])) {
		return "", false
	}
	return name, true
}

// scanCalls finds names called with a dot, an underscore or camelCase
// (parse_args(, self.parser.reset(, getUser(, CompoundModel().
func scanCalls(text string, add func(kind, string, bool)) {
	for off := 0; ; {
		k := strings.IndexByte(text[off:], '(')
		if k < 0 {
			return
		}
		end := off + k
		off = end + 1
		lo := end
		for lo > 0 && (wordByte(text, lo-1) && text[lo-1] < 0x80 || text[lo-1] == '.') {
			lo--
		}
		if lo > 0 && text[lo-1] >= 0x80 {
			continue
		}
		name := callName(text[lo:end])
		if len(name) >= 4 && !stopCalls[name] {
			add(kindFunction, name, true)
		}
	}
}

// callName returns the longest tail of s that is a call probe: a dotted
// name (each part starting with a letter or '_'), a snake_case name, or a
// camelCase or PascalCase name with two humps; "" if none.
func callName(s string) string {
	// The dotted name starts after the last part that cannot start one.
	parts := strings.Split(s, ".")
	first := 0
	for i, p := range parts {
		if p == "" || !(p[0] == '_' || p[0] >= 'a' && p[0] <= 'z' || p[0] >= 'A' && p[0] <= 'Z') {
			first = i + 1
		}
	}
	if first >= len(parts) {
		return ""
	}
	if len(parts)-first >= 2 {
		return strings.Join(parts[first:], ".")
	}
	w := parts[first]
	switch {
	case isSnakeCall(w), isCamel(w):
		return w
	}
	return ""
}

// isSnakeCall: a lower-case letter, then lower-case letters and digits,
// an underscore and more of them (underscores included): [a-z][a-z0-9]*_[a-z0-9_]+.
func isSnakeCall(w string) bool {
	u := strings.IndexByte(w, '_')
	if u < 1 || u == len(w)-1 || w[0] < 'a' || w[0] > 'z' {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// isCamel: getUser, parseHTTPHeader, CompoundModel (letters and digits,
// an upper-case letter after a lower-case start or after the first hump).
func isCamel(w string) bool {
	if len(w) < 3 {
		return false
	}
	for i := 0; i < len(w); i++ {
		if !isAlnum(w[i]) {
			return false
		}
	}
	if w[0] >= 'a' && w[0] <= 'z' {
		// [a-z]+[A-Z][A-Za-z0-9]+
		i := 0
		for i < len(w) && w[i] >= 'a' && w[i] <= 'z' {
			i++
		}
		return i < len(w)-1 && w[i] >= 'A' && w[i] <= 'Z'
	}
	if w[0] >= 'A' && w[0] <= 'Z' {
		// [A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*
		i := 1
		for i < len(w) && (w[i] >= 'a' && w[i] <= 'z' || w[i] >= '0' && w[i] <= '9') {
			i++
		}
		return i > 1 && i < len(w) && w[i] >= 'A' && w[i] <= 'Z'
	}
	return false
}

// scanErrors finds error lines: an exception with its message
// (ValueError: bad token), "FAILED test_x", "error: …", each cut at
// maxProbeText bytes. A bare exception name is not an error the agent
// met.
func scanErrors(text string, add func(kind, string, bool)) {
	line := func(lo int) string {
		hi := strings.IndexByte(text[lo:], '\n')
		if hi < 0 {
			return text[lo:]
		}
		return text[lo : lo+hi]
	}
	for _, suffix := range []string{"Error", "Exception"} {
		for off := 0; ; {
			k := strings.Index(text[off:], suffix)
			if k < 0 {
				break
			}
			at := off + k
			end := at + len(suffix)
			off = end
			lo := at
			for lo > 0 && (text[lo-1] >= 'a' && text[lo-1] <= 'z' || text[lo-1] >= 'A' && text[lo-1] <= 'Z') {
				lo--
			}
			if wordByte(text, lo-1) || text[lo] < 'A' || text[lo] > 'Z' || wordByte(text, end) {
				continue
			}
			if end >= len(text) || text[end] != ':' || strings.TrimSpace(line(end+1)) == "" {
				continue
			}
			if e := clip(line(lo), maxProbeText); e != "" {
				add(kindError, e, false)
			}
		}
	}
	for _, lead := range []string{"FAILED ", "Error: ", "error: "} {
		for off := 0; ; {
			k := strings.Index(text[off:], lead)
			if k < 0 {
				break
			}
			at := off + k
			off = at + len(lead)
			if wordByte(text, at-1) {
				continue
			}
			rest := line(at + len(lead))
			if lead == "FAILED " {
				if sp := strings.IndexAny(rest, " \t\r"); sp >= 0 {
					rest = rest[:sp]
				}
			}
			if strings.TrimSpace(rest) == "" {
				continue
			}
			if e := clip(text[at:at+len(lead)+len(rest)], maxProbeText); e != "" {
				add(kindError, e, false)
			}
		}
	}
}

// scanNumbers finds numbers of three or more digits: 1234, 4,500, 56.78,
// not part of a word, a version (1.2.3) or a longer number.
func scanNumbers(text string, add func(kind, string, bool)) {
	digit := func(i int) bool { return i >= 0 && i < len(text) && text[i] >= '0' && text[i] <= '9' }
	for i := 0; i < len(text); {
		if !digit(i) {
			i++
			continue
		}
		lo := i
		for digit(i) {
			i++
		}
		digits := i - lo
		if digits <= 3 {
			// Thousands groups: ,ddd not followed by a digit.
			for i < len(text) && text[i] == ',' && digit(i+1) && digit(i+2) && digit(i+3) && !digit(i+4) {
				i += 4
				digits += 3
			}
		}
		if i+1 < len(text) && text[i] == '.' && digit(i+1) {
			i++
			for digit(i) {
				i++
				digits++
			}
		}
		hi := i
		if wordByte(text, lo-1) || (lo > 0 && text[lo-1] == '.') || escaped(text, lo) || wordByte(text, hi) ||
			(hi < len(text) && text[hi] == '.' && wordByte(text, hi+1)) {
			// Part of an identifier, a version or a longer number: skip
			// the rest of it.
			for i < len(text) && (wordByte(text, i) || text[i] == '.' && wordByte(text, i+1)) {
				i++
			}
			continue
		}
		if digits >= 3 {
			add(kindNumber, text[lo:hi], true)
		}
	}
}

// isID reports whether a word looks like an identifier: starting with a
// letter, letters and at least two digits mixed, 5 to 40 characters
// (address1, utf8 and a 64-digit hash are not ids; ZFA04Y, HAT170 and
// mia_li_3668 are).
func isID(w string) bool {
	if len(w) < 5 || len(w) > 40 || !(w[0] >= 'a' && w[0] <= 'z' || w[0] >= 'A' && w[0] <= 'Z') {
		return false
	}
	// A number and a word joined by a hyphen is vocabulary, not an id:
	// RSA-1024, utf-16.
	if a, b, ok := strings.Cut(w, "-"); ok && !strings.Contains(b, "-") && (allDigits(a) || allDigits(b)) {
		return false
	}
	letters, digits := 0, 0
	for _, r := range w {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case unicode.IsLetter(r):
			letters++
		}
	}
	return letters > 0 && digits >= 2
}

// isSnake reports whether a word is a snake_case name: lower-case letters
// and digits in two or more parts joined by single underscores, starting
// with a letter, 5 to 64 characters (max_length, test_separable_model,
// basic_economy).
func isSnake(w string) bool {
	if len(w) < 5 || len(w) > 64 || w[0] < 'a' || w[0] > 'z' || !strings.Contains(w, "_") {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// jsonKey reports whether the word ending at text[end] is an object key
// ("user_id": or 'user_id':): the schema of a tool's answers, repeated in
// every answer, not a fact.
func jsonKey(text string, end int) bool {
	i := end
	if i < len(text) && text[i] == '\\' {
		i++
	}
	if i >= len(text) || (text[i] != '"' && text[i] != '\'') {
		return false
	}
	i++
	for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
		i++
	}
	return i < len(text) && text[i] == ':'
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
