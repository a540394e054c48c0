package main

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/fingerprint"
)

// entry is one chunk of the ledger as rendered: its text (with its JSON,
// made once: a chunk is sent in many results), and the hashes of what
// listing it made known (see seeHashes) that neither the pinned messages
// nor an earlier chunk had, each once: later chunks do not list them
// again. Neither holds a pointer into the request.
type entry struct {
	text   abi.Content
	lists  [numKinds][]string // what text lists, by kind (substrings of text, not of the request)
	hashes []uint64
}

// emptyPrefix starts the text of a chunk that lists nothing new.
const emptyPrefix = "[ledger: nothing new in turns "

// render builds the ledger's message texts. A chunk's text depends on its
// turns, on the pinned messages and on every earlier chunk (an item is
// listed once), so it is memoized under a hash of the pinned messages and
// of its own and all earlier chunks' turns: a conversation's next request
// renders only its new chunk, and a request whose chunks are all known
// (any turn order, any instance that served them) only hashes its turns.
func render(sc *scratch, h pdk.Host, msgs []abi.Message, pinned int, units []convo.Unit, p plan, cfg config) ([]abi.Content, error) {
	sc.entries = sized(sc.entries, len(p.chunks))
	sc.keys = sized(sc.keys, len(p.chunks))
	sc.cums = sized(sc.cums, len(p.chunks)) // the chain's state after each chunk
	entries, keys, cums := sc.entries, sc.keys, sc.cums
	pkey := pinnedKey(msgs[:pinned], cfg)
	var cum fingerprint.Hash
	cum.Str("compactd-ledger-render-v2")
	cum.Word(math.Float64bits(cfg.Share))
	cum.Word(pkey[0])
	cum.Word(pkey[1])
	// The chunks the conversation's previous request rendered, as far as
	// this one has them unchanged, come from its cursor without hashing
	// their messages again.
	cur, _ := chunkMemo.take(cursorKey(pkey)).(*cursor)
	known := cur.known(msgs, units, p.chunks, pkey, cfg.Share)
	if known > 0 {
		copy(keys, cur.keys[:known])
		copy(cums, cur.cums[:known])
		copy(entries, cur.entries[:known])
		cum = cur.cums[known-1]
	}
	var seen *hashSet // built on the first chunk not in the memo
	for ci, span := range p.chunks {
		if ci < known {
			continue
		}
		xkey := unitsKey(msgs, units[span[0]:span[1]], cfg)
		cum.Word(xkey[0])
		cum.Word(xkey[1])
		keys[ci] = cum.Sum128()
		cums[ci] = cum
		if e, ok := chunkMemo.get(keys[ci]).(*entry); ok {
			entries[ci] = e
			continue
		}
		if seen == nil {
			var err error
			if seen, err = seenBefore(h, msgs[:pinned], pkey, entries[:ci], keys, cfg); err != nil {
				return nil, err
			}
		}
		first := units[span[0]].Start
		e, err := buildChunk(sc, h, msgs[first:units[span[1]-1].End], first, seen, ci == 0, span, cfg)
		if err != nil {
			return nil, err
		}
		entries[ci] = e
		chunkMemo.put(keys[ci], e, 3*len(e.text.Text())+8*len(e.hashes)+64)
	}
	if cur = cur.extend(known, msgs, units, p.chunks, pkey, cfg.Share, keys, cums, entries); cur != nil {
		chunkMemo.put(cursorKey(pkey), cur, cur.size())
	}
	if seen != nil && len(keys) > 0 {
		// The next jump of this conversation starts from here.
		chunkMemo.put(seenKey(keys[len(keys)-1]), &seenSet{seen}, 8*len(seen.slots)+64)
	}
	sc.texts = sized(sc.texts, len(p.groups))
	texts := sc.texts
	for gi, g := range p.groups {
		if g[1]-g[0] == 1 {
			texts[gi] = entries[g[0]].text
			continue
		}
		// A merged message's text depends on its chunks (and, through
		// them, on the earlier ones).
		var gh fingerprint.Hash
		gh.Str("compactd-ledger-group-v3")
		gh.Word(keys[g[1]-1][0])
		gh.Word(keys[g[1]-1][1])
		gh.Word(uint64(g[0]))
		gkey := gh.Sum128()
		if t, ok := chunkMemo.get(gkey).(abi.Content); ok {
			texts[gi] = t
			continue
		}
		t := mergeChunks(entries[g[0]:g[1]], g[0] == 0, p.chunks[g[0]][0], p.chunks[g[1]-1][1])
		texts[gi] = pdk.StringContent(t)
		chunkMemo.put(gkey, texts[gi], 2*len(t)+32)
	}
	return texts, nil
}

// cursor is where a conversation's previous request left the ledger: its
// chunks (unit ranges, and the messages each ends before), the host's
// hashes of the messages they fold, and each chunk's memo key, key
// chain and entry. A request that starts with the same pinned messages
// and folds the same messages into its first chunks takes those from it
// instead of hashing them again (a conversation's next request adds a
// chunk or none). Only kept when the host sends message hashes: they are
// what tells the messages are the same.
type cursor struct {
	pkey    [2]uint64
	share   uint64      // math.Float64bits(cfg.Share)
	start   int         // the message the first chunk starts at
	chunks  [][2]int    // each chunk's units
	ends    []int       // the message each chunk ends before
	hashes  [][2]uint64 // the host's hashes of msgs[start:ends[len-1]]
	keys    [][2]uint64
	cums    []fingerprint.Hash
	entries []*entry
}

// cursorKey is the memo key of the cursor of the conversations whose
// pinned messages' key is pkey.
func cursorKey(pkey [2]uint64) [2]uint64 { return [2]uint64{pkey[0] ^ 0xC0C5, pkey[1] ^ 0xC0C5} }

// known returns how many of chunks (over units of msgs) c holds as they
// are: the same units, ending at the same messages, whose hashes are the
// same. A nil c holds none.
func (c *cursor) known(msgs []abi.Message, units []convo.Unit, chunks [][2]int, pkey [2]uint64, share float64) int {
	if c == nil || c.pkey != pkey || c.share != math.Float64bits(share) || len(chunks) == 0 || units[chunks[0][0]].Start != c.start {
		return 0
	}
	n, from := 0, c.start
	for ; n < len(chunks) && n < len(c.chunks); n++ {
		end := units[chunks[n][1]-1].End
		if chunks[n] != c.chunks[n] || end != c.ends[n] {
			break
		}
		same := true
		for i := from; i < end; i++ {
			if x := msgs[i].Hash; x != c.hashes[i-c.start] || x == [2]uint64{} {
				same = false
				break
			}
		}
		if !same {
			break
		}
		from = end
	}
	return n
}

// extend returns the cursor of this request: c's first known chunks, then
// the rest of chunks; nil when a message of theirs has no hash from the
// host. c is reused (the caller took it from the memo).
func (c *cursor) extend(known int, msgs []abi.Message, units []convo.Unit, chunks [][2]int, pkey [2]uint64, share float64, keys [][2]uint64, cums []fingerprint.Hash, entries []*entry) *cursor {
	if len(chunks) == 0 {
		return nil
	}
	start := units[chunks[0][0]].Start
	if known == 0 || c == nil {
		c = &cursor{pkey: pkey, share: math.Float64bits(share), start: start}
		known = 0
	}
	from := start
	if known > 0 {
		from = c.ends[known-1]
	}
	c.chunks, c.ends, c.keys, c.cums, c.entries = c.chunks[:known], c.ends[:known], c.keys[:known], c.cums[:known], c.entries[:known]
	c.hashes = c.hashes[:from-start]
	for n := known; n < len(chunks); n++ {
		end := units[chunks[n][1]-1].End
		for i := from; i < end; i++ {
			if msgs[i].Hash == [2]uint64{} {
				return nil
			}
			c.hashes = append(c.hashes, msgs[i].Hash)
		}
		c.chunks = append(c.chunks, chunks[n])
		c.ends = append(c.ends, end)
		c.keys = append(c.keys, keys[n])
		c.cums = append(c.cums, cums[n])
		c.entries = append(c.entries, entries[n])
		from = end
	}
	return c
}

// size is what c costs the memo: its slices (the entries it points to
// are counted where the memo holds them).
func (c *cursor) size() int {
	return 16*len(c.hashes) + (16+8+16+16+8)*len(c.chunks) + 128
}

// seenSet is what a ledger lists (and its pinned messages hold) up to a
// chunk, as seenBefore returns it.
type seenSet struct{ m *hashSet }

// seenKey is the memo key of the seen set after the chunk whose key is k.
func seenKey(k [2]uint64) [2]uint64 { return [2]uint64{k[0] ^ 0x5EE5, k[1]} }

// seenBefore returns the hashes of what the pinned messages hold and what
// the chunks before the next one (entries, whose keys are keys) list.
// The set the previous call left for the last of them is taken from the
// memo, which then no longer has it: the caller adds to it.
func seenBefore(h pdk.Host, pinned []abi.Message, pkey [2]uint64, entries []*entry, keys [][2]uint64, cfg config) (*hashSet, error) {
	if len(entries) > 0 {
		if s, ok := chunkMemo.take(seenKey(keys[len(entries)-1])).(*seenSet); ok {
			return s.m, nil
		}
	}
	n := 0
	for _, e := range entries {
		n += len(e.hashes)
	}
	hs, err := pinnedHashes(h, pinned, pkey, cfg)
	if err != nil {
		return nil, err
	}
	seen := newHashSet(len(hs) + n + 64)
	for _, x := range hs {
		seen.add(x)
	}
	for _, e := range entries {
		for _, x := range e.hashes {
			seen.add(x)
		}
	}
	return seen, nil
}

// buildChunk renders the chunk of msgs (the request's messages from index
// at: the turns span, in units, folded at one jump), listing what seen
// does not hold, and adds what it lists to seen.
func buildChunk(sc *scratch, h pdk.Host, msgs []abi.Message, at int, seen *hashSet, first bool, span [2]int, cfg config) (*entry, error) {
	x, err := extractMessages(h, msgs, at, cfg, sc.textHashes)
	if err != nil {
		return nil, err
	}
	sc.textHashes = x.hashes[:0]
	budget := cfg.Share * float64(messagesTokens(msgs))
	state := selectItems(sc, x, seen, budget)
	e := &entry{hashes: slices.Clone(sc.known)}
	// The picked items' lists by kind, sliced from one array: first the
	// texts of the host's answer (valid until the next extraction), then,
	// once the chunk is rendered, the same texts in it, so the entry keeps
	// no copy of its own.
	var counts [numKinds]int
	n := 0
	for i, it := range x.items {
		if state[i] == itemPicked {
			counts[it.Kind]++
			n++
		}
	}
	all := make([]string, n)
	for kind, from := 0, 0; kind < len(counts); kind++ {
		e.lists[kind] = all[from : from : from+counts[kind]]
		from += counts[kind]
	}
	for i, it := range x.items {
		if state[i] == itemPicked {
			e.lists[it.Kind] = append(e.lists[it.Kind], it.Text)
		}
	}
	sc.offsets = sc.offsets[:0]
	text := renderChunk(&e.lists, first, span, &sc.offsets)
	offs := sc.offsets
	for _, list := range e.lists {
		for j, it := range list {
			list[j], offs = text[offs[0]:offs[0]+len(it)], offs[1:]
		}
	}
	e.text = pdk.StringContent(text)
	return e, nil
}

// The states selectItems leaves each item in.
const (
	itemSkipped = iota // seen before, or not picked in time
	itemQueued         // only observed: waits for its kind's turn
	itemPicked         // listed in the chunk
)

// selectItems picks the items of extraction x a chunk lists and records
// them in seen: of those seen does not hold, every one the agent used,
// then what it only observed, the kinds taking turns (each in order of
// appearance), while the chunk's estimated size stays within budget
// tokens. state[i] is itemPicked for a picked item (in sc's array); what
// the picked items made known that seen did not hold (see seeHashes) is
// left in sc.known.
func selectItems(sc *scratch, x extraction, seen *hashSet, budget float64) (state []uint8) {
	sc.states = reserve(sc.states, len(x.items))[:len(x.items)]
	state = sc.states
	clear(state)
	th := x.hashes
	known, parts := sc.known[:0], sc.parts[:0]
	take := func(i int) {
		state[i] = itemPicked
		parts = seeHashes(parts[:0], x.items[i], th[i])
		for _, h := range parts {
			if seen.add(h) {
				known = append(known, h)
			}
		}
	}
	for i, it := range x.items {
		switch {
		case seen.has(th[i]):
		case x.used[i]:
			take(i)
			budget -= itemTokens(it.Text)
		default:
			state[i] = itemQueued
		}
	}
	// Each kind's queue is its queued items in order; next[kind] is
	// where the rest of it starts.
	var next [numKinds]int
	for more := true; more && budget > 0; {
		more = false
		for kind := range next {
			i := next[kind]
			for i < len(x.items) && (state[i] != itemQueued || int(x.items[i].Kind) != kind) {
				i++
			}
			next[kind] = min(i+1, len(x.items))
			if i == len(x.items) {
				continue
			}
			more = true
			it := x.items[i]
			if cost := itemTokens(it.Text); cost <= budget && !seen.has(th[i]) {
				take(i)
				budget -= cost
			}
		}
	}
	sc.known, sc.parts = known, parts
	return state
}

// itemTokens estimates an item's tokens in a ledger line.
func itemTokens(text string) float64 { return 1 + float64(len(text))/4 }

// messagesTokens is the tokens of msgs.
func messagesTokens(msgs []abi.Message) int {
	n := 0
	for i := range msgs {
		n += msgs[i].Tokens
	}
	return n
}

// textHash is the hash an item's text is known by in the ledger's
// deduplication.
func textHash(s string) uint64 {
	var h fingerprint.Hash
	h.Str(s)
	return h.Sum128()[0]
}

// seeHashes appends the hashes of what listing it makes known (h is the
// hash of its text, textHash(it.Text)): its text,
// and what the text holds as well — a qualified name its parts
// (self.match_re.search holds match_re), a path what ends it after a
// slash (/testbed/a/b.py holds a/b.py and b.py).
func seeHashes(dst []uint64, it item, h uint64) []uint64 {
	dst = append(dst, h)
	switch it.Kind {
	case kindName:
		if strings.IndexByte(it.Text, '.') >= 0 {
			for s := it.Text; ; { // each part between dots, as strings.Split gives them
				i := strings.IndexByte(s, '.')
				if i < 0 {
					dst = append(dst, textHash(s))
					break
				}
				dst = append(dst, textHash(s[:i]))
				s = s[i+1:]
			}
		}
	case kindFile:
		for p := it.Text; ; {
			i := strings.IndexByte(p, '/')
			if i < 0 {
				break
			}
			p = p[i+1:]
			dst = append(dst, textHash(p))
		}
	}
	return dst
}

// renderChunk writes one chunk: a line per kind, in the order of the
// kinds. The first chunk of the ledger says what the ledger is; the
// others are only its lines, or say that the turns they fold held nothing
// new. Unless at is nil, it appends to *at where each item starts in the
// text, in the lists' order.
func renderChunk(lists *[numKinds][]string, first bool, span [2]int, at *[]int) string {
	var b strings.Builder
	size := 160 // the first chunk's header, or an empty chunk's line
	for _, list := range lists {
		size += 16 // a kind's label
		for _, it := range list {
			size += 3 + len(it)
		}
	}
	b.Grow(size)
	if first {
		b.WriteString("[compactd ledger: what the turns after the task ran and met, each item once, earliest first; the ledger messages after this one continue it]")
	}
	for kind, list := range lists {
		if len(list) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(kindNames[kind])
		b.WriteByte(':')
		lines := idents.Kind(kind) == kindError || idents.Kind(kind) == kindSaid
		for _, it := range list {
			if lines {
				b.WriteString("\n- ")
			} else {
				b.WriteByte(' ')
			}
			if at != nil {
				*at = append(*at, b.Len())
			}
			b.WriteString(it)
		}
	}
	if b.Len() == 0 {
		b.WriteString(emptyPrefix)
		b.WriteString(strconv.Itoa(span[0] + 1))
		b.WriteByte('-')
		b.WriteString(strconv.Itoa(span[1]))
		b.WriteByte(']')
	}
	return b.String()
}

// mergeChunks renders chunks (the turns from to to, in units) as one
// message: one line per kind listing every chunk's items of that kind in
// order, so the kinds' labels are written once.
func mergeChunks(es []*entry, first bool, from, to int) string {
	var lists [numKinds][]string
	for _, e := range es {
		for kind := range lists {
			lists[kind] = append(lists[kind], e.lists[kind]...)
		}
	}
	return renderChunk(&lists, first, [2]int{from, to}, nil)
}

// extraction is what some messages hold, before the ledger leaves out
// what it already lists: items in order of first appearance, each once.
// Its items' texts are valid until the next extractMessages call (the
// host's answer, decoded in place): a chunk copies what it lists.
type extraction struct {
	items []item
	// used[i]: items[i] is in the agent's own words (its text, its tool
	// calls), not only in what it observed.
	used []bool
	// hashes[i] is textHash(items[i].Text).
	hashes []uint64
}

// extractMessages returns the facts of msgs, the request's messages from
// index first on, each once (the host finds them: see pdk.Host's
// MessageFacts), with their text hashes, in th when it has room.
func extractMessages(h pdk.Host, msgs []abi.Message, first int, cfg config, th []uint64) (extraction, error) {
	set, err := h.MessageFacts(msgs, first, facts.Options{UserChars: cfg.UserChars})
	if err != nil {
		return extraction{}, err
	}
	th = reserve(th, len(set.Items))[:len(set.Items)]
	for k, it := range set.Items {
		th[k] = textHash(it.Text)
	}
	return extraction{items: set.Items, used: set.Used, hashes: th}, nil
}

// pinnedHashes returns the hashes of what the pinned messages (the system
// messages and the task, the request's first messages, whose memo key is
// key) hold: the ledger does not list it, the request holds it verbatim.
func pinnedHashes(h pdk.Host, msgs []abi.Message, key [2]uint64, cfg config) ([]uint64, error) {
	if hs, ok := chunkMemo.get(key).([]uint64); ok {
		return hs, nil
	}
	x, err := extractMessages(h, msgs, 0, cfg, nil)
	if err != nil {
		return nil, err
	}
	var hs []uint64
	for i, it := range x.items {
		hs = seeHashes(hs, it, x.hashes[i])
	}
	slices.Sort(hs)
	hs = slices.Compact(hs)
	chunkMemo.put(key, hs, 8*len(hs)+64)
	return hs, nil
}

// unitsKey is the memo key of units' messages: a hash of them and of the
// settings their items depend on.
func unitsKey(msgs []abi.Message, units []convo.Unit, cfg config) [2]uint64 {
	var h fingerprint.Hash
	hashed := len(units) > 0 && hostHashed(msgs[units[0].Start:units[len(units)-1].End])
	if hashed {
		h.Str("compactd-ledger-chunk-v3-host")
	} else {
		h.Str("compactd-ledger-chunk-v2")
	}
	h.Word(uint64(cfg.UserChars))
	for _, u := range units {
		for i := u.Start; i < u.End; i++ {
			message(&h, &msgs[i], hashed)
		}
	}
	return h.Sum128()
}

// hostHashed reports whether the host sent every message's hash
// (abi.Message.Hash: the fast path, ABI 1.1). Then the memo keys hash
// those, 16 bytes a message, instead of every text: hashing the folded
// messages' texts was most of a memo hit's time.
func hostHashed(msgs []abi.Message) bool {
	for i := range msgs {
		if msgs[i].Hash == [2]uint64{} {
			return false
		}
	}
	return true
}

// message adds a message to a memo key: the host's hash of it when
// hashed, else what identifies it.
func message(h *fingerprint.Hash, m *abi.Message, hashed bool) {
	if hashed {
		h.Word(m.Hash[0])
		h.Word(m.Hash[1])
		return
	}
	h.Message(m)
}

// pinnedKey is the memo key of the pinned messages' hashes.
func pinnedKey(msgs []abi.Message, cfg config) [2]uint64 {
	var h fingerprint.Hash
	hashed := hostHashed(msgs)
	if hashed {
		h.Str("compactd-ledger-pinned-v3-host")
	} else {
		h.Str("compactd-ledger-pinned-v2")
	}
	h.Word(uint64(cfg.UserChars))
	for i := range msgs {
		message(&h, &msgs[i], hashed)
	}
	return h.Sum128()
}

// memo keeps rendered chunks, merged messages and the pinned messages'
// hashes by a fingerprint of the messages (and settings) they come from,
// up to a size, evicting the oldest first. Extracting and deduplicating
// are the policy's costly steps and a conversation's chunks come back on
// every request, so an instance that served a conversation before only
// hashes its turns. A hit returns exactly what computing again would: the
// result never depends on the memo, only the time does. Its values hold
// no pointers into a request, and few pointers at all (a chunk is a
// string and a slice of hashes), so the guest's garbage collector scans
// little. A guest serves one call at a time; the lock is for native
// callers.
type memo struct {
	mu    sync.Mutex
	max   int
	size  int
	m     memoMap
	order []memoSlot // oldest first; a slot whose seq is not its entry's is stale
	seq   uint64     // the last put's
}

type memoEntry struct {
	v    any // an *entry, a merged message's text, or the pinned []uint64
	size int
	seq  uint64 // the put that stored it: its slot in the order
}

// memoSlot is a put's place in the eviction order.
type memoSlot struct {
	key [2]uint64
	seq uint64
}

// current reports whether s is the slot of an entry the memo holds: not
// one of a key taken since, nor of a key taken and put again (whose
// current slot is a later one).
func (c *memo) current(s memoSlot) bool {
	e, ok := c.m.get(s.key)
	return ok && e.seq == s.seq
}

// chunkMemo serves every call of this instance. A conversation of 500
// mini-swe-agent messages takes about 175 KB of it (230 KB of the
// guest's heap, measured natively): 32 MiB holds some 190 such long
// conversations at once. At 8 MiB, 64 agents of 500 messages
// each, taking turns, missed on every request and rendered their whole
// ledger again (40 ms of the daemon's CPU a request instead of 2; the
// instance's linear memory afterwards: 48 MB, against 43 MB at 8 MiB).
var chunkMemo = &memo{max: memoBytes}

// memoBytes bounds chunkMemo (its own estimate of what it holds).
const memoBytes = 32 << 20

// clear empties the memo.
func (c *memo) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.order, c.size = memoMap{}, nil, 0
}

func (c *memo) get(key [2]uint64) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, _ := c.m.get(key)
	return e.v
}

// take returns the value of key and removes it from the memo. Its slot
// stays in the eviction order (a linear search would cost every request
// that takes a cursor or a seen set), stale: evicting it frees nothing,
// and put drops stale slots before they outnumber the entries.
func (c *memo) take(key [2]uint64) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m.del(key)
	if !ok {
		return nil
	}
	c.size -= e.size
	return e.v
}

func (c *memo) put(key [2]uint64, v any, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m.find(key) >= 0 || size > c.max {
		return
	}
	for c.size+size > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		if c.current(old) {
			e, _ := c.m.del(old.key)
			c.size -= e.size
		}
	}
	c.seq++
	c.m.set(key, memoEntry{v, size, c.seq})
	c.order = append(c.order, memoSlot{key, c.seq})
	c.size += size
	if len(c.order) > 2*c.m.len()+64 {
		// Drop the stale slots (amortized: the order at least halves,
		// down to one slot per entry). A key taken and put again, as a
		// conversation's cursor is on every request, leaves one stale
		// slot each time: counted as current, they kept the order long
		// and made every put scan it.
		c.order = slices.DeleteFunc(c.order, func(s memoSlot) bool { return !c.current(s) })
	}
}
