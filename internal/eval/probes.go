package eval

import (
	"encoding/json"
	"hash/fnv"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/convo"
)

// Probe kinds, in report order. A fact found as several kinds counts as
// the first of them in this order.
const (
	ProbePath       = "path"
	ProbeFunction   = "function"
	ProbeError      = "error"
	ProbeID         = "id"
	ProbeSnake      = "snake_case"
	ProbeNumber     = "number"
	ProbeConstraint = "constraint"
)

// kind indexes probeKinds.
type kind int

const (
	kindPath kind = iota
	kindFunction
	kindError
	kindID
	kindSnake
	kindNumber
	kindConstraint
	numKinds
)

var probeKinds = [numKinds]string{ProbePath, ProbeFunction, ProbeError, ProbeID, ProbeSnake, ProbeNumber, ProbeConstraint}

// ProbeKinds lists the kinds in report order.
var ProbeKinds = probeKinds[:]

// Positions of a probe in its request's history: the third of the
// history (the messages between the task and the request's last turn) it
// was last seen in.
const (
	PositionFirst  = "first"
	PositionMiddle = "middle"
	PositionLast   = "last"
)

// Positions lists the positions in report order.
var Positions = []string{PositionFirst, PositionMiddle, PositionLast}

// DefaultProbesPerRequest is how many probes a request gets at most: a
// third from each third of its history.
const DefaultProbesPerRequest = 24

// ProbeOptions tune retention probes. The zero value is the default.
type ProbeOptions struct {
	// PerRequest caps the probes drawn for one request (default
	// DefaultProbesPerRequest), split evenly between the thirds of its
	// history.
	PerRequest int
}

// Probe is a fact from a request's history that the compacted request
// should still hold: an identifier, a number, an error or a constraint.
type Probe struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
	// At is the request the probe was drawn for (its length in messages).
	At int `json:"at"`
	// Message is the last message of the request's history the fact was
	// found in; Position the third of the history that message is in.
	Message  int    `json:"message"`
	Position string `json:"position"`
	// Word: the text must appear with no letter, digit or '_' right
	// before or after it (identifiers and numbers); otherwise as a plain
	// substring (error lines and sentences, which may be cut).
	Word bool `json:"-"`
	// fact is where the probe came from (its occurrences).
	fact *fact
}

// fact is one distinct text found in a conversation's history, with
// every message it was found in.
type fact struct {
	kind kind
	text string
	word bool
	// occ are the messages it was found in, ascending.
	occ []int
	// pinned: it also appears in a message every policy keeps whole (the
	// leading system messages, the task), so it would measure nothing.
	pinned bool
	hash   uint64
}

// ProbeSet holds the facts of one recorded conversation, found once, and
// draws each request's probes from them. It is not safe for concurrent
// use; eval builds one per conversation, on the goroutine that replays it.
type ProbeSet struct {
	msgs []abi.Message
	raw  []json.RawMessage
	// texts are the messages' texts as a model reads them (messageText).
	texts []string
	// start is the first message after the pinned prefix (the leading
	// system messages and the task).
	start int
	// facts are ordered by their first occurrence.
	facts []*fact
	// byRaw finds an original message from its raw bytes' address: a
	// compacted request refers to the messages it kept (host.Result's
	// refs), so their text need not be decoded again.
	byRaw map[*byte]int
	// words are the messages' word sets (wordSet), built when a probe is
	// first looked for in the message.
	words []map[string]bool
	opts  ProbeOptions
	id    uint64
}

// NewProbeSet finds the facts of a recorded conversation: every path,
// function or class name, error line, id, snake_case name, number and
// constraint in the messages after its pinned prefix (the leading system
// messages and the task, its first user message). Facts that also appear
// in the pinned prefix are marked: every valid compaction keeps them. id
// (the conversation's id) seeds the draws.
func NewProbeSet(msgs []abi.Message, id string, opts ProbeOptions) *ProbeSet {
	if opts.PerRequest <= 0 {
		opts.PerRequest = DefaultProbesPerRequest
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	s := &ProbeSet{msgs: msgs, opts: opts, id: h.Sum64(), texts: make([]string, len(msgs))}
	for i := range msgs {
		s.texts[i] = messageText(&msgs[i])
	}
	s.start = convo.LeadingSystem(msgs)
	if t := convo.Task(msgs); t >= 0 {
		s.start = max(s.start, t+1)
	}
	byText := map[string]*fact{}
	for i := s.start; i < len(msgs); i++ {
		if msgs[i].IsSystem() {
			continue
		}
		extractFacts(&msgs[i], factText(&msgs[i]), func(kind kind, text string, word bool) {
			f := byText[text]
			if f == nil {
				f = &fact{kind: kind, text: text, word: word}
				byText[text] = f
				s.facts = append(s.facts, f)
			}
			if kind < f.kind {
				f.kind, f.word = kind, word
			}
			if n := len(f.occ); n == 0 || f.occ[n-1] != i {
				f.occ = append(f.occ, i)
			}
		})
	}
	var pinned strings.Builder
	for i := 0; i < s.start; i++ {
		pinned.WriteString(s.texts[i])
		pinned.WriteByte('\n')
	}
	pinnedText := pinned.String()
	pinnedWords := wordSet(pinnedText)
	for _, f := range s.facts {
		p := Probe{Text: f.text, Word: f.word}
		switch {
		case f.word && isWordRun(f.text):
			f.pinned = pinnedWords[f.text]
		case f.word:
			// Each word run of a word probe is a whole word wherever the
			// probe appears: one missing from the text rules it out.
			f.pinned = allWords(f.text, pinnedWords) && p.In(pinnedText)
		default:
			f.pinned = p.In(pinnedText)
		}
		h := fnv.New64a()
		h.Write([]byte(probeKinds[f.kind]))
		h.Write([]byte{0})
		h.Write([]byte(f.text))
		f.hash = h.Sum64()
	}
	return s
}

// newProbeSet is NewProbeSet for a conversation with its raw messages:
// Retain then recognizes the messages a compacted request kept by their
// bytes' address (host.Result's refs) and does not search their text.
func newProbeSet(c *chat.Conversation, id string, opts ProbeOptions) *ProbeSet {
	s := NewProbeSet(c.Messages, id, opts)
	s.raw = c.Raw
	s.byRaw = make(map[*byte]int, len(c.Raw))
	for i, r := range c.Raw {
		if len(r) > 0 {
			s.byRaw[&r[0]] = i
		}
	}
	return s
}

// isWordRun reports whether s is made of word bytes only (see wordByte).
func isWordRun(s string) bool {
	for i := 0; i < len(s); i++ {
		if !wordByte(s, i) {
			return false
		}
	}
	return s != ""
}

// allWords reports whether every word run of s is in set.
func allWords(s string, set map[string]bool) bool {
	for i := 0; i < len(s); {
		if !wordByte(s, i) {
			i++
			continue
		}
		j := i
		for j < len(s) && wordByte(s, j) {
			j++
		}
		if !set[s[i:j]] {
			return false
		}
		i = j
	}
	return true
}

// wordSet returns the maximal runs of word bytes in text: a word-only
// probe appears in text as a word exactly when it is one of them.
func wordSet(text string) map[string]bool {
	set := map[string]bool{}
	for i := 0; i < len(text); {
		if !wordByte(text, i) {
			i++
			continue
		}
		j := i
		for j < len(text) && wordByte(text, j) {
			j++
		}
		set[text[i:j]] = true
		i = j
	}
	return set
}

// LastTurn returns where the last turn of a request of msgs begins: at its
// last assistant message (the agent's latest step, with the tool results
// or the user message answering it), or at its final message when no
// assistant message follows the pinned prefix (start). Every policy sends
// the last turn as it is, so facts in it measure nothing.
func LastTurn(msgs []abi.Message, start int) int {
	for i := len(msgs) - 1; i >= start; i-- {
		if msgs[i].Role == abi.RoleAssistant {
			return i
		}
	}
	return max(len(msgs)-1, start)
}

// candidate is a fact that may be drawn for a request.
type candidate struct {
	f    *fact
	last int // the last message of the history it was found in
	pri  uint64
}

// Draw returns the probes of the request of the conversation's first at
// messages: facts of its history — the messages between the pinned prefix
// and the request's last turn (LastTurn) — that appear neither in the
// pinned prefix nor in the last turn. Each fact's position is the third
// of the history holding the last message it was found in (how long ago
// the agent last saw it). At most PerRequest probes are drawn, a third of
// them from each third of the history; within a third, kinds take turns
// (starting from a kind that changes from request to request), and within
// a kind the facts are taken in an order that is pseudo-random but fixed
// by the conversation's id and at, so the same data gives the same probes
// on every run.
func (s *ProbeSet) Draw(at int) []Probe {
	at = min(at, len(s.msgs))
	last := LastTurn(s.msgs[:at], s.start)
	n := last - s.start
	if n <= 0 {
		return nil
	}
	seed := mix64(s.id ^ mix64(uint64(at)))
	quota := s.opts.PerRequest / len(Positions)
	extra := s.opts.PerRequest % len(Positions)
	// Each (third, kind) bucket keeps its keep best-placed candidates: a
	// kind gives at most quota probes to a third, plus a few spares for
	// candidates the last turn turns out to hold.
	keep := quota + extra + 4
	var buckets [3][numKinds][]candidate
	for _, f := range s.facts {
		if f.occ[0] >= last {
			break
		}
		if f.pinned {
			continue
		}
		k, _ := slices.BinarySearch(f.occ, last)
		if k < len(f.occ) && f.occ[k] < at {
			continue // found in the last turn
		}
		j := f.occ[k-1]
		third := third(j-s.start, n)
		c := candidate{f: f, last: j, pri: mix64(f.hash ^ seed)}
		b := &buckets[third][f.kind]
		if len(*b) == keep && c.pri >= (*b)[keep-1].pri {
			continue
		}
		i, _ := slices.BinarySearchFunc(*b, c.pri, func(x candidate, p uint64) int {
			switch {
			case x.pri < p:
				return -1
			case x.pri > p:
				return 1
			}
			return 0
		})
		*b = slices.Insert(*b, i, c)
		if len(*b) > keep {
			*b = (*b)[:keep]
		}
	}
	var lastText string
	lastTextDone := false
	var out []Probe
	for third := range Positions {
		want := quota
		if third < extra {
			want++
		}
		got := 0
		first := int((seed >> 8) % uint64(numKinds))
		for got < want {
			progress := false
			for kk := 0; kk < int(numKinds) && got < want; kk++ {
				k := kind((first + third + kk) % int(numKinds))
				b := &buckets[third][k]
				for len(*b) > 0 {
					c := (*b)[0]
					*b = (*b)[1:]
					p := Probe{Kind: probeKinds[k], Text: c.f.text, At: at, Message: c.last, Position: Positions[third], Word: c.f.word, fact: c.f}
					if !lastTextDone {
						lastText = strings.Join(s.texts[last:at], "\n")
						lastTextDone = true
					}
					if p.In(lastText) {
						continue // the last turn holds it, where it was not found as a fact
					}
					out = append(out, p)
					got++
					progress = true
					break
				}
			}
			if !progress {
				break
			}
		}
	}
	return out
}

// third returns the third (0, 1, 2) of a history of n messages that
// holds message i (0-based): the one its middle falls in, so a one-message
// history is a middle third and a two-message one a first and a last.
func third(i, n int) int {
	return (2*i + 1) * 3 / (2 * n)
}

// mix64 is SplitMix64's finalizer: a cheap, well-spread hash of x.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Retain checks a request's probes against the messages of the request
// as sent: a probe is kept when its text appears in any message's text,
// name, or tool call's name and arguments (a summary that mentions it
// counts).
func (s *ProbeSet) Retain(probes []Probe, msgs []abi.Message) Retention {
	return s.retain(probes, nil, msgs)
}

// retainSent is Retain for a request as sent, with its raw messages.
func (s *ProbeSet) retainSent(probes []Probe, out *chat.Conversation) Retention {
	return s.retain(probes, out.Raw, out.Messages)
}

func (s *ProbeSet) retain(probes []Probe, raw []json.RawMessage, msgs []abi.Message) Retention {
	r := Retention{Probes: len(probes)}
	if len(probes) == 0 {
		return r
	}
	// The original messages the request kept (known by their raw bytes'
	// address: orig[i] is message i's index in the conversation, or -1),
	// and the texts of its new messages, decoded once when a probe needs
	// them.
	kept := map[int]bool{}
	orig := make([]int, len(msgs))
	texts := make([]string, len(msgs))
	decoded := make([]bool, len(msgs))
	for i := range orig {
		orig[i] = -1
		if i >= len(raw) || len(raw[i]) == 0 || s.byRaw == nil {
			continue
		}
		if j, ok := s.byRaw[&raw[i][0]]; ok && len(raw[i]) == len(s.raw[j]) {
			kept[j] = true
			orig[i] = j
		}
	}
	in := func(i int, p Probe) bool {
		if j := orig[i]; j >= 0 {
			return s.inMessage(j, p)
		}
		if !decoded[i] {
			texts[i], decoded[i] = messageText(&msgs[i]), true
		}
		return p.In(texts[i])
	}
	r.ByKind = map[string][2]int{}
	r.ByPosition = map[string][2]int{}
	for _, p := range probes {
		found := false
		if p.fact != nil {
			for _, j := range p.fact.occ {
				if kept[j] {
					found = true
					break
				}
			}
		}
		for i := len(msgs) - 1; i >= 0 && !found; i-- {
			found = in(i, p)
		}
		r.count(p, found)
	}
	return r
}

// inMessage reports whether the probe appears in the conversation's
// message j. A word probe needs each of its word runs among the message's
// words (a set built once per message), which rules most messages out
// without searching their text.
func (s *ProbeSet) inMessage(j int, p Probe) bool {
	if p.Word {
		if s.words == nil {
			s.words = make([]map[string]bool, len(s.msgs))
		}
		if s.words[j] == nil {
			s.words[j] = wordSet(s.texts[j])
		}
		if !allWords(p.Text, s.words[j]) {
			return false
		}
		if isWordRun(p.Text) {
			return true
		}
	}
	return p.In(s.texts[j])
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
// and tool calls' names and arguments (decoded, see writeArguments).
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
		b.WriteByte('\n')
		writeArguments(&b, tc.Function.Arguments, true)
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

// maxLost bounds the lost probes a Retention keeps per position.
const maxLost = 2

// Retention counts the probes a compacted context still holds.
type Retention struct {
	Probes   int `json:"probes"`
	Retained int `json:"retained"`
	// ByKind maps a kind, and ByPosition a position (PositionFirst, …),
	// to [probes, retained].
	ByKind     map[string][2]int `json:"by_kind,omitempty"`
	ByPosition map[string][2]int `json:"by_position,omitempty"`
	// Lost are a few lost probes: the latest ones of each position.
	Lost []Probe `json:"lost,omitempty"`
}

// count adds one probe.
func (r *Retention) count(p Probe, kept bool) {
	k, pos := r.ByKind[p.Kind], r.ByPosition[p.Position]
	k[0]++
	pos[0]++
	if kept {
		r.Retained++
		k[1]++
		pos[1]++
	} else {
		r.Lost = append(r.Lost, p)
	}
	r.ByKind[p.Kind], r.ByPosition[p.Position] = k, pos
}

// Add adds o's counts (not its lost probes) to r.
func (r *Retention) Add(o Retention) {
	r.Probes += o.Probes
	r.Retained += o.Retained
	addCounts(&r.ByKind, o.ByKind)
	addCounts(&r.ByPosition, o.ByPosition)
}

// keepLost adds lost probes to r.Lost, keeping the latest maxLost of each
// position.
func (r *Retention) keepLost(lost []Probe) {
	for _, p := range lost {
		n, oldest := 0, -1
		for i, l := range r.Lost {
			if l.Position == p.Position {
				n++
				if oldest < 0 {
					oldest = i
				}
			}
		}
		if n < maxLost {
			r.Lost = append(r.Lost, p)
		} else {
			r.Lost = append(slices.Delete(r.Lost, oldest, oldest+1), p)
		}
	}
}

func addCounts(dst *map[string][2]int, src map[string][2]int) {
	for k, v := range src {
		if *dst == nil {
			*dst = map[string][2]int{}
		}
		cur := (*dst)[k]
		(*dst)[k] = [2]int{cur[0] + v[0], cur[1] + v[1]}
	}
}

// Share is Retained/Probes (1 when there are no probes).
func (r Retention) Share() float64 {
	if r.Probes == 0 {
		return 1
	}
	return float64(r.Retained) / float64(r.Probes)
}
