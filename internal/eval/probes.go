package eval

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
)

// Probe kinds.
const (
	ProbePath       = "path"
	ProbeFunction   = "function"
	ProbeError      = "error"
	ProbeID         = "id"
	ProbeNumber     = "number"
	ProbeConstraint = "constraint"
)

// ProbeKinds lists the kinds in report order.
var ProbeKinds = []string{ProbePath, ProbeFunction, ProbeError, ProbeID, ProbeNumber, ProbeConstraint}

// Probe is a fact from early in a conversation that a compacted context
// should still hold: an identifier, an error, a number or a constraint.
type Probe struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
	// Message is the index of the message it was first seen in.
	Message int `json:"message"`
	// Word: the text must appear with no letter, digit or '_' right
	// before or after it (identifiers and numbers); otherwise as a plain
	// substring (error lines and sentences, which may be cut).
	Word bool `json:"-"`
}

// ProbeOptions tune probe extraction. The zero value is the default.
type ProbeOptions struct {
	// PerKind caps the probes of each kind per conversation (default 8):
	// the earliest ones are taken.
	PerKind int
	// EarlyShare is the share of the non-system messages, from the start,
	// that probes are taken from (default 0.5).
	EarlyShare float64
}

var (
	rePath = regexp.MustCompile(`(?:\.{1,2}/|/)?(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)+[A-Za-z0-9_][A-Za-z0-9_.-]*\.[A-Za-z][A-Za-z0-9]{0,7}\b`)
	reDef  = regexp.MustCompile(`\b(?:def|class|func|function|fn|interface|struct)\s+([A-Za-z_][A-Za-z0-9_]{2,})\s*[(:<{]`)
	reCall = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[a-z][a-z0-9]*_[a-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]+)\(`)
	reErr  = regexp.MustCompile(`\b(?:[A-Z][A-Za-z]*(?:Error|Exception)\b(?::[^\n]*)?|FAILED [^\s]+|[Ee]rror: [^\n]+)`)
	reWord = regexp.MustCompile(`[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*`)
	reNum  = regexp.MustCompile(`\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d{3,}`)
	reCons = regexp.MustCompile(`(?i)\b(?:must|mustn't|do not|don't|never|only|should|shouldn't|make sure|ensure|without|at least|at most|no more than|prefer|instead of|cannot|can't|not allowed|avoid)\b`)
	reSent = regexp.MustCompile(`[^.!?\n]+[.!?]?`)
)

// maxProbeText caps the length of an error or constraint probe.
const maxProbeText = 120

// stopCalls are calls too common to say anything about a conversation.
var stopCalls = map[string]bool{
	"self.assertEqual": true, "self.assertTrue": true, "self.assertFalse": true,
	"os.path.join": true, "sys.exit": true, "json.loads": true, "json.dumps": true,
}

// ExtractProbes returns the probes of a conversation: facts from its early
// messages (the first EarlyShare of the messages after the leading system
// ones) that do not also appear in a system message or in the last
// message — those are kept by every valid compaction, so they would
// measure nothing. Kinds, each capped at PerKind, earliest first:
//
//   - path: file paths with a directory and an extension (src/app/main.py);
//   - function: names defined (def/class/func …) or called with a dot, an
//     underscore or camelCase (parse_args(, os.getcwd(, getUser();
//   - error: exception lines (ValueError: …), "FAILED test", "error: …";
//   - id: words of 5–64 characters mixing letters with two or more
//     digits (ZFA04Y, HAT170, mia_li_3668, a1b2c3d), but not a number and
//     a word joined by a hyphen (64-bit, RSA-1024);
//   - number: numbers of three or more digits, or with a decimal point,
//     from tool results and later user messages (observations);
//   - constraint: the user's sentences with must, do not, never, only,
//     make sure, at least, … (15–120 characters).
func ExtractProbes(msgs []abi.Message, opts ProbeOptions) []Probe {
	if opts.PerKind <= 0 {
		opts.PerKind = 8
	}
	if opts.EarlyShare <= 0 || opts.EarlyShare > 1 {
		opts.EarlyShare = 0.5
	}
	lead := convo.LeadingSystem(msgs)
	if len(msgs)-lead < 2 {
		return nil
	}
	end := lead + int(float64(len(msgs)-lead)*opts.EarlyShare)
	end = min(max(end, lead+1), len(msgs)-1)

	var excluded strings.Builder
	for i := range msgs {
		if msgs[i].IsSystem() || i == len(msgs)-1 {
			excluded.WriteString(messageText(&msgs[i]))
			excluded.WriteByte('\n')
		}
	}
	ex := excluded.String()

	firstUser := -1
	seen := map[string]bool{}
	count := map[string]int{}
	var out []Probe
	var text string // the current message's
	add := func(kind, s string, i int, word bool) {
		s = strings.TrimSpace(s)
		if s == "" || count[kind] >= opts.PerKind || seen[kind+"\x00"+s] {
			return
		}
		p := Probe{Kind: kind, Text: s, Message: i, Word: word}
		// A match inside a longer word (pyx_f in __pyx_f) could never be
		// found as a word: skip it.
		if !p.In(text) || p.In(ex) {
			return
		}
		seen[kind+"\x00"+s] = true
		count[kind]++
		out = append(out, p)
	}
	for i := lead; i < end; i++ {
		m := &msgs[i]
		if m.IsSystem() {
			continue
		}
		if m.Role == abi.RoleUser && firstUser < 0 {
			firstUser = i
		}
		text = messageText(m)
		full := func(kind string) bool { return count[kind] >= opts.PerKind }
		if !full(ProbePath) {
			for _, s := range rePath.FindAllStringIndex(text, -1) {
				if s[0] >= 1 && (text[s[0]-1] == ':' || text[s[0]-1] == '/') {
					continue // part of a URL
				}
				add(ProbePath, text[s[0]:s[1]], i, true)
			}
		}
		if !full(ProbeFunction) {
			for _, sm := range reDef.FindAllStringSubmatch(text, -1) {
				add(ProbeFunction, sm[1], i, true)
			}
			for _, sm := range reCall.FindAllStringSubmatch(text, -1) {
				if name := sm[1]; len(name) >= 4 && !stopCalls[name] {
					add(ProbeFunction, name, i, true)
				}
			}
		}
		if !full(ProbeError) {
			for _, e := range reErr.FindAllString(text, -1) {
				add(ProbeError, clip(e, maxProbeText), i, false)
			}
		}
		if !full(ProbeID) {
			for _, w := range reWord.FindAllString(text, -1) {
				if isID(w) {
					add(ProbeID, w, i, true)
				}
			}
		}
		if !full(ProbeNumber) && (m.Role == abi.RoleTool || (m.Role == abi.RoleUser && i != firstUser)) {
			for _, s := range reNum.FindAllStringIndex(text, -1) {
				if wordByte(text, s[0]-1) || wordByte(text, s[1]) || (s[0] > 0 && text[s[0]-1] == '.') || (s[1] < len(text) && text[s[1]] == '.' && wordByte(text, s[1]+1)) {
					continue // part of an identifier, a version or a longer number
				}
				add(ProbeNumber, text[s[0]:s[1]], i, true)
			}
		}
		if !full(ProbeConstraint) && m.Role == abi.RoleUser {
			for _, s := range reSent.FindAllString(text, -1) {
				s = strings.TrimSpace(s)
				if len(s) >= 15 && len(s) <= maxProbeText && reCons.MatchString(s) {
					add(ProbeConstraint, s, i, false)
				}
			}
		}
	}
	return out
}

// isID reports whether a word looks like an identifier: letters and
// at least two digits mixed, 5 to 64 characters (address1 and utf8 are
// not ids; ZFA04Y, HAT170 and mia_li_3668 are).
func isID(w string) bool {
	if len(w) < 5 || len(w) > 64 {
		return false
	}
	// A number and a word joined by a hyphen is vocabulary, not an id:
	// 64-bit, RSA-1024, utf-16.
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

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// In reports whether the probe appears in text.
func (p Probe) In(text string) bool {
	if !p.Word {
		return strings.Contains(text, p.Text)
	}
	for off := 0; ; {
		i := strings.Index(text[off:], p.Text)
		if i < 0 {
			return false
		}
		start, end := off+i, off+i+len(p.Text)
		if !wordByte(text, start-1) && !wordByte(text, end) {
			return true
		}
		off = start + 1
	}
}

// wordByte reports whether text[i] exists and is a letter, digit or '_'.
func wordByte(text string, i int) bool {
	if i < 0 || i >= len(text) {
		return false
	}
	c := text[i]
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= utf8.RuneSelf
}

// messageText is everything of a message a model reads: its text, name,
// and tool calls' names and arguments.
func messageText(m *abi.Message) string {
	if len(m.ToolCalls) == 0 && m.Name == "" {
		return m.Text()
	}
	var b strings.Builder
	b.WriteString(m.Text())
	if m.Name != "" {
		b.WriteByte('\n')
		b.WriteString(m.Name)
	}
	for _, tc := range m.ToolCalls {
		b.WriteByte('\n')
		b.WriteString(tc.Function.Name)
		b.WriteByte(' ')
		b.WriteString(tc.Function.Arguments)
	}
	return b.String()
}

// contextText joins the text of every message, as a model would see it.
func contextText(msgs []abi.Message) string {
	var b strings.Builder
	for i := range msgs {
		b.WriteString(messageText(&msgs[i]))
		b.WriteByte('\n')
	}
	return b.String()
}

// clip cuts s to at most n bytes at a rune boundary.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Retention is how many of a conversation's probes the compacted context
// at its last turn still holds.
type Retention struct {
	Probes   int `json:"probes"`
	Retained int `json:"retained"`
	// ByKind maps a kind to [probes, retained].
	ByKind map[string][2]int `json:"by_kind,omitempty"`
	Lost   []Probe           `json:"lost,omitempty"`
}

// Add adds o's counts (not its lost list) to r.
func (r *Retention) Add(o Retention) {
	r.Probes += o.Probes
	r.Retained += o.Retained
	for k, v := range o.ByKind {
		if r.ByKind == nil {
			r.ByKind = map[string][2]int{}
		}
		cur := r.ByKind[k]
		r.ByKind[k] = [2]int{cur[0] + v[0], cur[1] + v[1]}
	}
}

// Share is Retained/Probes (1 when there are no probes).
func (r Retention) Share() float64 {
	if r.Probes == 0 {
		return 1
	}
	return float64(r.Retained) / float64(r.Probes)
}

// Retain checks each probe against the text of msgs.
func Retain(probes []Probe, msgs []abi.Message) Retention {
	text := contextText(msgs)
	r := Retention{Probes: len(probes)}
	if len(probes) > 0 {
		r.ByKind = map[string][2]int{}
	}
	for _, p := range probes {
		k := r.ByKind[p.Kind]
		k[0]++
		if p.In(text) {
			r.Retained++
			k[1]++
		} else {
			r.Lost = append(r.Lost, p)
		}
		r.ByKind[p.Kind] = k
	}
	return r
}
