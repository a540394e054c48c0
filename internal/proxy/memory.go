package proxy

import (
	"container/list"
	"sync"
)

// memory remembers, per proxied conversation, what the next request needs
// and manual compaction uses: the last request's body (never its headers),
// the token count of each of its messages by a hash of the message's
// bytes (so a request that extends the previous one counts only its new
// messages), and how far the provider's count of the forwarded prompt was
// above compactd's (tool definitions, images and tokenizer differences),
// which calibrates the next pre-flight count.
//
// It lives in memory only and is bounded: at most maxBytes of bodies and
// counts over all conversations, the least recently used dropped first.
// It is safe for concurrent use.
type memory struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	entries  map[string]*list.Element
	lru      *list.List // of *entry, most recent first
}

// entry is one conversation's memory. Its fields are written only under
// memory.mu; readers get copies (snapshot).
type entry struct {
	id       string
	provider string
	model    string
	body     []byte   // the last request, as the caller sent it
	hashes   []uint64 // per message of body: the hash of its bytes
	counts   []int    // per message: its token count
	// offset is the provider's input tokens minus compactd's count of the
	// prompt it was sent, for the last response with usage (>= 0).
	offset int
	// chosen is the pipeline the request's X-Compactd-Policy named (nil:
	// none), for a manual compaction of it (StoredRoute).
	chosen []string
}

func (e *entry) size() int64 {
	return int64(len(e.body)+len(e.id)+len(e.model)) + int64(len(e.hashes))*16 + 128
}

func newMemory(maxBytes int64) *memory {
	return &memory{maxBytes: maxBytes, entries: map[string]*list.Element{}, lru: list.New()}
}

// setLimit changes the bound (a config reload); it applies at once.
func (m *memory) setLimit(maxBytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxBytes = maxBytes
	m.evictLocked()
}

// snapshot returns a copy of the conversation's entry (nil if unknown).
// The slices are shared and must not be modified.
func (m *memory) snapshot(id string) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.entries[id]
	if !ok {
		return nil
	}
	m.lru.MoveToFront(el)
	e := *el.Value.(*entry)
	return &e
}

// remember stores a request. The offset of an earlier request is kept. A
// body that alone is over the bound is not stored (its counts still are).
func (m *memory) remember(id, provider, model string, body []byte, hashes []uint64, counts []int, chosen []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &entry{id: id, provider: provider, model: model, body: body, hashes: hashes, counts: counts, chosen: chosen}
	if e.size() > m.maxBytes {
		e.body = nil
	}
	if el, ok := m.entries[id]; ok {
		old := el.Value.(*entry)
		e.offset = old.offset
		m.bytes -= old.size()
		el.Value = e
		m.lru.MoveToFront(el)
	} else {
		m.entries[id] = m.lru.PushFront(e)
	}
	m.bytes += e.size()
	m.evictLocked()
}

// setOffset records the calibration of the conversation's next count.
func (m *memory) setOffset(id string, offset int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.entries[id]; ok {
		el.Value.(*entry).offset = max(offset, 0)
	}
}

func (m *memory) evictLocked() {
	for m.bytes > m.maxBytes && m.lru.Len() > 0 {
		el := m.lru.Back()
		e := el.Value.(*entry)
		m.lru.Remove(el)
		delete(m.entries, e.id)
		m.bytes -= e.size()
	}
}

// stats returns the number of conversations and bytes held.
func (m *memory) stats() (int, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len(), m.bytes
}
