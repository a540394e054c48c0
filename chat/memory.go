package chat

import (
	"bytes"
	"container/list"
	"encoding/json"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/jsonscan"
)

// DefaultMemoryBytes bounds a Memory when MemoryOptions.MaxBytes is 0.
const DefaultMemoryBytes = 64 << 20

// Memory remembers the conversations the daemon read, so that a request
// which repeats an earlier one and adds messages (what an agent sends
// every turn) is parsed, and counted, only for what it adds.
//
// An entry is the longest request seen of one conversation (the last one,
// unless a shorter one came after it out of order): its bytes (the
// request body, kept as it was read, not copied), each message's parsed
// form and byte span, and the token counts the compactor set. A new
// request finds its entry by a hash of its leading messages up to and
// including the first user message (read first, skipped over rather than
// parsed: only their roles are read, since the system prompt is often
// the largest message), then compares its bytes with the entry's: every whole message that is
// byte-identical, in place, is taken from the entry (its bytes are the
// new request's, its parsed form and counts the entry's); the scanner
// resumes after the last one. Nothing is trusted that was not compared,
// so a hash collision or an edited history costs a parse, never a wrong
// answer.
//
// Memory is bounded by MaxBytes: request bytes held plus an estimate of
// the parsed forms (decoded texts included). When a new entry would pass
// it, the least recently used entries go. Each key holds at most four
// conversations (agents that share a system prompt and a first message);
// the least recently used of them goes first. A Memory is safe for
// concurrent use; entries are never modified after they are stored.
//
// A Memory also keeps, under a conversation id, the last request a caller
// forwarded in a provider's wire format (LastRequest, RememberRequest):
// the proxy's per-item counts, calibration and body for manual
// compaction. Those are bounded apart, by MemoryOptions.MaxRequestBytes.
// A caller that learns a conversation's id only by reading its request
// finds the last requests that opened with the same bytes
// (RequestsSharing), to read the new one past what it repeats.
type Memory struct {
	seed maphash.Seed
	max  int64

	mu    sync.Mutex
	used  int64
	byKey map[uint64][]*list.Element // most recent first
	lru   *list.List                 // of *memEntry, most recent at the front

	// The last requests by conversation id (requests.go).
	maxRequests, requestBytes int64
	byID                      map[string]*list.Element
	requests                  *list.List // of *requestEntry, most recent at the front
	// byOpening finds them by their body's first RequestOpeningBytes
	// (requests.go: RequestsSharing), most recently remembered first.
	byOpening map[uint64][]*list.Element

	hits, misses, reused, parsed atomic.Uint64
}

// MemoryOptions configure a Memory. The zero value holds DefaultMemoryBytes.
type MemoryOptions struct {
	// MaxBytes bounds the memory of conversations ScanMessages read; 0
	// means DefaultMemoryBytes.
	MaxBytes int64
	// MaxRequestBytes bounds the last requests kept by id
	// (RememberRequest); 0 means DefaultMemoryBytes.
	MaxRequestBytes int64
}

// maxPerKey is how many conversations one key keeps.
const maxPerKey = 4

// NewMemory returns an empty Memory.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMemoryBytes
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMemoryBytes
	}
	return &Memory{seed: maphash.MakeSeed(), max: opts.MaxBytes, byKey: map[uint64][]*list.Element{}, lru: list.New(),
		maxRequests: opts.MaxRequestBytes, byID: map[string]*list.Element{}, requests: list.New(), byOpening: map[uint64][]*list.Element{}}
}

// memEntry is one remembered request. Immutable once stored.
type memEntry struct {
	key   uint64
	array []byte        // the messages array, from '[' to the end of the last message
	spans []msgSpan     // per message, relative to array
	msgs  []abi.Message // parsed, Tokens counted by tokName
	// tokName is the tokenizer the Tokens fields were counted with
	// ("" if they were not).
	tokName string
	size    int64
}

// msgSpan is where a message is in its array.
type msgSpan struct {
	start, end int32
}

// memo is what a conversation parsed through a Memory carries for
// Remember.
type memo struct {
	mem   *Memory
	key   uint64
	array []byte // the request's bytes from the array's '[' on
	spans []msgSpan
	body  int // the size of the whole request body held
	// reused is how many leading messages came from a remembered request.
	reused int
}

// MemoryStats are a Memory's counters.
type MemoryStats struct {
	// Hits and Misses count requests that found (or did not find) their
	// conversation; Reused and Parsed count messages taken from the memory
	// and messages parsed.
	Hits, Misses, Reused, Parsed uint64
	// Entries and Bytes are what it holds now.
	Entries int
	Bytes   int64
	// Requests and RequestBytes are the last requests held by id
	// (RememberRequest).
	Requests     int
	RequestBytes int64
}

// Stats returns the memory's counters.
func (m *Memory) Stats() MemoryStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoryStats{Hits: m.hits.Load(), Misses: m.misses.Load(), Reused: m.reused.Load(), Parsed: m.parsed.Load(),
		Entries: m.lru.Len(), Bytes: m.used, Requests: m.requests.Len(), RequestBytes: m.requestBytes}
}

// keyMessages is how many leading messages the key may cover at most when
// no user message comes earlier.
const keyMessages = 8

// ScanMessages parses the array of messages at s, as the package-level
// ScanMessages does, taking every message it can from a remembered
// request of the same conversation. The conversation's leading messages
// whose Tokens the memory knew are reported by Counted. Call Remember
// once the conversation's messages are counted, so the next request can
// use them.
func (m *Memory) ScanMessages(s *jsonscan.Scanner) (*Conversation, error) {
	data := s.Data()
	if k := s.Peek(); k != jsonscan.Array {
		return ScanMessages(s) // its error
	}
	arrStart := s.Pos()
	if c, ok, err := m.scanRemembered(s, arrStart); ok || err != nil {
		return c, err
	}
	s.Seek(arrStart)
	c := &Conversation{openAI: true}
	mo := &memo{mem: m, body: len(data)}
	c.memo = mo
	s.BeginArray()
	// The key: the messages up to and including the first user message.
	n, end := 0, false
	for n < keyMessages {
		var err error
		if end, err = c.scanOne(s, n, n == 0, arrStart); err != nil {
			return nil, err
		}
		if end {
			break
		}
		n++
		if c.Messages[n-1].Role == abi.RoleUser {
			break
		}
	}
	if n > 0 {
		mo.key = maphash.Bytes(m.seed, data[arrStart:arrStart+int(c.memo.spans[n-1].end)])
	}
	if !end && n > 0 {
		if e := m.lookup(mo.key); e != nil {
			if r := e.match(data[arrStart:], c.memo.spans[:n]); r > n {
				c.reuse(e, data, arrStart, n, r)
				m.hits.Add(1)
				m.reused.Add(uint64(r))
				n = r
				s.Seek(arrStart + int(e.spans[r-1].end))
			}
		} else {
			m.misses.Add(1)
		}
		for !end {
			var err error
			if end, err = c.scanOne(s, n, false, arrStart); err != nil {
				return nil, err
			}
			if !end {
				n++
			}
		}
	}
	m.parsed.Add(uint64(len(c.Messages) - mo.reused))
	mo.array = data[arrStart:s.Pos()]
	return c, nil
}

// scanRemembered is ScanMessages for a request that repeats a remembered
// one past its key, the common case (an agent's next turn): it finds the
// key's messages without parsing them (it reads only their roles, where
// parsing the system prompt cost as much as the rest of the request), and
// takes every message the remembered entry matches, byte for byte, before
// it parses the rest. ok is false, with nothing counted, when no entry
// matches past the key or the key's bytes do not read as objects: the
// caller then parses from the array's start, as before, so a miss and a
// malformed message are reported as they always were. err is a parse
// error past the reused messages.
func (m *Memory) scanRemembered(s *jsonscan.Scanner, arrStart int) (c *Conversation, ok bool, err error) {
	data := s.Data()
	if s.BeginArray() != nil {
		return nil, false, nil
	}
	var spans [keyMessages]msgSpan
	n := 0
	for n < keyMessages {
		more, err := s.NextElement(n == 0)
		if err != nil || !more || s.Peek() != jsonscan.Object {
			return nil, false, nil
		}
		start := s.Pos() // the '{', as scanOne's span starts
		role, err := skipMessage(s)
		if err != nil {
			return nil, false, nil
		}
		spans[n] = msgSpan{start: int32(start - arrStart), end: int32(s.Pos() - arrStart)}
		n++
		if role == abi.RoleUser {
			break
		}
	}
	key := maphash.Bytes(m.seed, data[arrStart:arrStart+int(spans[n-1].end)])
	e := m.lookup(key)
	if e == nil {
		return nil, false, nil
	}
	r := e.match(data[arrStart:], spans[:n])
	if r <= n {
		return nil, false, nil
	}
	c = &Conversation{openAI: true}
	mo := &memo{mem: m, body: len(data), key: key}
	c.memo = mo
	c.reuse(e, data, arrStart, n, r)
	m.hits.Add(1)
	m.reused.Add(uint64(r))
	s.Seek(arrStart + int(e.spans[r-1].end))
	for n = r; ; n++ {
		end, err := c.scanOne(s, n, false, arrStart)
		if err != nil {
			return nil, true, err
		}
		if end {
			break
		}
	}
	m.parsed.Add(uint64(len(c.Messages) - mo.reused))
	mo.array = data[arrStart:s.Pos()]
	return c, true, nil
}

// skipMessage consumes a message object without parsing it and returns
// its role (the last "role" member's string, "" if none).
func skipMessage(s *jsonscan.Scanner) (role string, err error) {
	if err := s.BeginObject(); err != nil {
		return "", err
	}
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil || !more {
			return role, err
		}
		if string(jsonscan.Key(key, esc)) == "role" && s.Peek() == jsonscan.String {
			if role, err = s.ReadString("role", roles...); err != nil {
				return "", err
			}
			continue
		}
		if _, _, _, err := s.Skip(); err != nil {
			return "", err
		}
	}
}

// scanOne parses the next message of the array into c (n messages so
// far), recording its span; end reports the array's closing bracket.
func (c *Conversation) scanOne(s *jsonscan.Scanner, n int, first bool, arrStart int) (end bool, err error) {
	data := s.Data()
	more, err := s.NextElement(first)
	if err != nil {
		return false, syntaxError(data, err)
	}
	if !more {
		return true, nil
	}
	if err := c.scanMessageAt(s, n); err != nil {
		return false, err
	}
	raw := c.Raw[len(c.Raw)-1]
	start := int32(s.Pos() - len(raw) - arrStart)
	c.memo.spans = append(c.memo.spans, msgSpan{start: start, end: start + int32(len(raw))})
	return false, nil
}

// match returns how many of e's messages the array data (from its '[')
// repeats byte for byte, in place; the first n are already known to.
func (e *memEntry) match(data []byte, known []msgSpan) int {
	for i, sp := range known {
		if i >= len(e.spans) || e.spans[i] != sp {
			return 0
		}
	}
	// The common case: the whole remembered conversation is repeated.
	if last := int(e.spans[len(e.spans)-1].end); last <= len(data) && bytes.Equal(data[:last], e.array[:last]) {
		return len(e.spans)
	}
	r := len(known)
	if r > 0 && !bytes.Equal(data[:e.spans[r-1].end], e.array[:e.spans[r-1].end]) {
		return 0
	}
	for ; r < len(e.spans); r++ {
		sp := e.spans[r]
		if int(sp.end) > len(data) || !bytes.Equal(data[e.spans[max(r-1, 0)].end:sp.end], e.array[e.spans[max(r-1, 0)].end:sp.end]) {
			break
		}
	}
	return r
}

// reuse replaces c's first n parsed messages and adds up to r from e,
// moved onto data's bytes.
func (c *Conversation) reuse(e *memEntry, data []byte, arrStart, n, r int) {
	// Made once at their size (and the turn's few new messages'), not
	// grown message by message: that growing was 2 % of a daemon's CPU.
	c.Raw = slices.Grow(c.Raw[:0], r+reuseRoom)
	c.Messages = slices.Grow(c.Messages[:0], r+reuseRoom)
	c.memo.spans = slices.Grow(c.memo.spans[:0], r+reuseRoom)
	for i := 0; i < r; i++ {
		sp := e.spans[i]
		raw := json.RawMessage(data[arrStart+int(sp.start) : arrStart+int(sp.end) : arrStart+int(sp.end)])
		msg := e.msgs[i]
		if !msg.Content.IsNull() {
			old := e.msgs[i].Content.Raw()
			off := offsetIn(e.array, old)
			msg.Content = msg.Content.WithRaw(json.RawMessage(data[arrStart+off : arrStart+off+len(old) : arrStart+off+len(old)]))
		}
		if e.tokName == "" {
			msg.Tokens = 0
		}
		c.Raw = append(c.Raw, raw)
		c.Messages = append(c.Messages, msg)
		c.memo.spans = append(c.memo.spans, sp)
	}
	c.memo.reused = r
	if e.tokName != "" {
		c.counted, c.countedBy = r, e.tokName
	}
}

// reuseRoom is the room reuse leaves for the messages a request adds to
// the one it repeats: an agent's turn adds a few.
const reuseRoom = 8

// offsetIn returns the offset of sub within b, which must hold it.
func offsetIn(b, sub []byte) int {
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(sub))) - uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// lookup returns the most recent entry for key.
func (m *Memory) lookup(key uint64) *memEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	els := m.byKey[key]
	if len(els) == 0 {
		return nil
	}
	m.lru.MoveToFront(els[0])
	return els[0].Value.(*memEntry)
}

// Remember stores a conversation that ScanMessages returned, with the
// token counts its messages hold now (counted by the tokenizer named
// tokName; "" if they are not counted), for the next request of the same
// conversation. Conversations from elsewhere are ignored. The
// conversation's messages must not be modified afterwards.
func Remember(c *Conversation, tokName string) {
	if c == nil || c.memo == nil || c.memo.key == 0 || len(c.Messages) == 0 || len(c.memo.spans) != len(c.Messages) {
		return
	}
	mo := c.memo
	e := &memEntry{key: mo.key, array: mo.array, spans: mo.spans, msgs: c.Messages, tokName: tokName}
	e.size = int64(mo.body) + int64(len(c.Messages))*perMessageBytes
	for i := range c.Messages {
		// A decoded text (an escaped string's) is held besides the bytes.
		if m := &c.Messages[i]; m.Content.IsString() && m.Content.Len() != len(m.Content.Raw())-2 {
			e.size += int64(m.Content.Len())
		}
	}
	mo.mem.store(e)
}

// perMessageBytes estimates a remembered message's parsed form: an
// abi.Message, its span and its strings.
const perMessageBytes = 256

func (m *Memory) store(e *memEntry) {
	if e.size > m.max/4 {
		return // one conversation may not take more than a quarter
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	els := m.byKey[e.key]
	// Replace the entry this conversation extends (same first message
	// span and the same bytes up to it), or add one. An entry that
	// extends e, a request of the conversation that came out of order
	// (many agents, retries), stays: it answers every shorter request in
	// whole and parses less of the longer ones.
	replaced := false
	for i, el := range els {
		old := el.Value.(*memEntry)
		if e.extends(old) {
			if len(old.spans) <= len(e.spans) || old.tokName != e.tokName && e.tokName != "" {
				m.used -= old.size
				el.Value = e
				m.used += e.size
			}
			m.lru.MoveToFront(el)
			els = append(append([]*list.Element{el}, els[:i]...), els[i+1:]...)
			replaced = true
			break
		}
	}
	if !replaced {
		el := m.lru.PushFront(e)
		m.used += e.size
		els = append([]*list.Element{el}, els...)
		if len(els) > maxPerKey {
			m.removeLocked(els[len(els)-1])
			els = els[:len(els)-1]
		}
	}
	m.byKey[e.key] = els
	for m.used > m.max && m.lru.Len() > 1 {
		m.removeLocked(m.lru.Back())
	}
}

// extends reports whether e repeats old's messages (or old repeats e's):
// the same conversation, one request later or earlier.
func (e *memEntry) extends(old *memEntry) bool {
	n := min(len(e.spans), len(old.spans))
	if n == 0 || e.spans[n-1] != old.spans[n-1] {
		return false
	}
	end := e.spans[n-1].end
	return bytes.Equal(e.array[:end], old.array[:end])
}

// removeLocked drops an entry; the caller holds m.mu.
func (m *Memory) removeLocked(el *list.Element) {
	e := el.Value.(*memEntry)
	m.lru.Remove(el)
	m.used -= e.size
	els := m.byKey[e.key]
	for i, x := range els {
		if x == el {
			els = append(els[:i:i], els[i+1:]...)
			break
		}
	}
	if len(els) == 0 {
		delete(m.byKey, e.key)
	} else {
		m.byKey[e.key] = els
	}
}
