package chat

import (
	"container/list"
	"encoding/json"
	"hash/maphash"
)

// LastRequest is what a Memory keeps of a conversation's last request
// under the conversation's id, for a caller that forwards requests in a
// provider's wire format (compactd's proxy): enough to count the next
// request only for what it adds, to calibrate that count against the
// provider's, and to compact the request again on demand. Unlike the
// memory ScanMessages uses, which finds a conversation by its bytes, this
// one is found by an id the caller names, and holds messages (or a
// format's items) by a hash of their bytes, in any wire format.
type LastRequest struct {
	// Format and Model are the request's wire format and model.
	Format, Model string
	// Body is the request body as the caller sent it, held, not copied;
	// nil when it alone is over the bound. It must not be modified.
	Body []byte
	// Hashes and Counts are per message (or item) of the request's
	// conversation, in order: a hash of its bytes (ItemCounts) and its
	// token count.
	Hashes []uint64
	Counts []int
	// Pipeline is the pipeline the request named (nil: none).
	Pipeline []string
	// ListStart is the offset in Body of the '[' that opens the request's
	// list (its messages, or a format's items), and Spans the byte spans
	// [start, end) in Body of the list's elements (nil when the list is
	// not an array): a caller reads the next request only past the
	// elements it shares, byte for byte and in place, with this one.
	ListStart int
	Spans     [][2]int
	// DerivedID is the conversation id the caller derived from the
	// request's leading elements and system prompt ("" when the caller was
	// told the id, as by a header): LeadElems is how many leading elements
	// of the list decided it and System the span in Body of the system
	// prompt it read ([0, 0]: none). A next request that holds those
	// elements in place and the same system prompt, byte for byte, has the
	// same id.
	DerivedID string
	LeadElems int
	System    [2]int
	// Offset is how many tokens the provider counted beyond the caller's
	// count of the prompt it was sent, for the last response that
	// reported usage (never negative). Calibrate sets it, and
	// RememberRequest keeps it for the conversation's next request.
	Offset int
}

// requestEntry is one conversation's last request; its fields are written
// only under Memory.mu.
type requestEntry struct {
	id string
	LastRequest
	// opening is the key of the entry in Memory.byOpening (openingKey),
	// when indexed says it is there.
	opening uint64
	indexed bool
}

// RequestOpeningBytes is how many leading bytes of a last request's body
// RequestsSharing matches on: a body shorter than that is not found by
// its bytes (it is cheap to read whole).
const RequestOpeningBytes = 1024

// maxPerOpening is how many last requests one opening keeps findable
// (conversations of agents that open with the same model, system prompt
// and task), the most recently remembered ones.
const maxPerOpening = 32

// openingKey is the key of a body's opening in format, and whether it
// has one (the body is at least RequestOpeningBytes long).
func (m *Memory) openingKey(format string, body []byte) (uint64, bool) {
	if len(body) < RequestOpeningBytes {
		return 0, false
	}
	var h maphash.Hash
	h.SetSeed(m.seed)
	h.WriteString(format)
	h.WriteByte(0)
	h.Write(body[:RequestOpeningBytes])
	return h.Sum64(), true
}

// RequestsSharing appends to dst the last requests the memory holds in
// format whose bodies open with the same RequestOpeningBytes bytes as
// body (compared by a hash, not byte for byte), the most recently
// remembered first, at most 32; it returns dst. It is for a caller that
// does not know the conversation's id before reading the request (it is
// derived from the request's messages): any of them may be the
// conversation's last request, or another conversation's that opened the
// same way, so the caller compares the bytes itself (the one sharing the
// longest prefix with body is the likeliest) and trusts only what it
// compared. It does not count as a use of them (LastRequest does). The
// slices are shared and must not be modified.
func (m *Memory) RequestsSharing(format string, body []byte, dst []LastRequest) []LastRequest {
	key, ok := m.openingKey(format, body)
	if !ok {
		return dst
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, el := range m.byOpening[key] {
		if e := el.Value.(*requestEntry); e.Format == format {
			dst = append(dst, e.LastRequest)
		}
	}
	return dst
}

// indexLocked makes el's entry findable by its body's opening
// (RequestsSharing), when it holds a body long enough.
func (m *Memory) indexLocked(el *list.Element) {
	e := el.Value.(*requestEntry)
	key, ok := m.openingKey(e.Format, e.Body)
	if !ok {
		return
	}
	b := m.byOpening[key]
	if len(b) == maxPerOpening {
		b[len(b)-1].Value.(*requestEntry).indexed = false
		b = b[:len(b)-1]
	}
	b = append(b, nil)
	copy(b[1:], b)
	b[0] = el
	m.byOpening[key] = b
	e.opening, e.indexed = key, true
}

// unindexLocked removes el's entry from byOpening.
func (m *Memory) unindexLocked(el *list.Element) {
	e := el.Value.(*requestEntry)
	if !e.indexed {
		return
	}
	e.indexed = false
	b := m.byOpening[e.opening]
	for i, x := range b {
		if x == el {
			b = append(b[:i], b[i+1:]...)
			b[len(b):cap(b)][0] = nil // the dropped slot no longer holds the element
			break
		}
	}
	if len(b) == 0 {
		delete(m.byOpening, e.opening)
		return
	}
	m.byOpening[e.opening] = b
}

func (e *requestEntry) size() int64 {
	return int64(len(e.Body)+len(e.id)+len(e.Model)) + int64(len(e.Hashes))*16 + int64(len(e.Spans))*16 + 128
}

// LastRequest returns a copy of what the memory holds of conversation
// id's last request (RememberRequest), and whether it holds one. The
// slices are shared and must not be modified.
func (m *Memory) LastRequest(id string) (LastRequest, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byID[id]
	if !ok {
		return LastRequest{}, false
	}
	m.requests.MoveToFront(el)
	return el.Value.(*requestEntry).LastRequest, true
}

// RememberRequest stores r as conversation id's last request, replacing
// the one before; r.Offset is ignored, the conversation's offset
// (Calibrate) is kept. The requests held are bounded by
// MemoryOptions.MaxRequestBytes (SetRequestLimit), the least recently
// used dropped first; a body that alone is over the bound is not held
// (its counts still are). The memory keeps r's slices: they must not be
// modified afterwards.
func (m *Memory) RememberRequest(id string, r LastRequest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &requestEntry{id: id, LastRequest: r}
	e.Offset = 0
	if e.size() > m.maxRequests {
		e.Body, e.Spans = nil, nil // spans without the body they index are of no use
	}
	el, ok := m.byID[id]
	if ok {
		m.unindexLocked(el)
		old := el.Value.(*requestEntry)
		e.Offset = old.Offset
		m.requestBytes -= old.size()
		el.Value = e
		m.requests.MoveToFront(el)
	} else {
		el = m.requests.PushFront(e)
		m.byID[id] = el
	}
	m.indexLocked(el)
	m.requestBytes += e.size()
	m.evictRequestsLocked()
}

// Calibrate records how many tokens the provider counted beyond the
// caller's count for conversation id's last request (a negative offset
// counts as 0), for the next request's count. It does nothing when the
// memory holds no request of id.
func (m *Memory) Calibrate(id string, offset int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byID[id]; ok {
		el.Value.(*requestEntry).Offset = max(offset, 0)
	}
}

// SetRequestLimit changes the bound of the requests held
// (MemoryOptions.MaxRequestBytes); it applies at once.
func (m *Memory) SetRequestLimit(maxBytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxRequests = maxBytes
	m.evictRequestsLocked()
}

func (m *Memory) evictRequestsLocked() {
	for m.requestBytes > m.maxRequests && m.requests.Len() > 0 {
		el := m.requests.Back()
		e := el.Value.(*requestEntry)
		m.unindexLocked(el)
		m.requests.Remove(el)
		delete(m.byID, e.id)
		m.requestBytes -= e.size()
	}
}

// ItemCounts returns each item's hash and, for the items prev held, its
// token count, for a request's messages (or a format's items) as raw
// bytes: an item whose bytes hash as one of prev's items (the
// conversation's last request, nil if none), in place or moved, takes
// that item's count. missing lists, in order, the indexes of the others:
// their counts are 0, for the caller to count and fill in. Items are
// matched by a 64-bit hash of their bytes (seeded per Memory), not
// compared.
func (m *Memory) ItemCounts(items []json.RawMessage, prev *LastRequest) (hashes []uint64, counts []int, missing []int) {
	hashes = make([]uint64, len(items))
	counts = make([]int, len(items))
	var seen map[uint64]int
	for i, raw := range items {
		h := maphash.Bytes(m.seed, raw)
		hashes[i] = h
		if prev != nil {
			if i < len(prev.Hashes) && prev.Hashes[i] == h && i < len(prev.Counts) {
				counts[i] = prev.Counts[i]
				continue
			}
			if seen == nil {
				seen = make(map[uint64]int, len(prev.Hashes))
				for j, ph := range prev.Hashes[:min(len(prev.Hashes), len(prev.Counts))] {
					seen[ph] = j
				}
			}
			if j, ok := seen[h]; ok {
				counts[i] = prev.Counts[j]
				continue
			}
		}
		missing = append(missing, i)
	}
	return hashes, counts, missing
}
