package chat

import (
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
	if el, ok := m.byID[id]; ok {
		old := el.Value.(*requestEntry)
		e.Offset = old.Offset
		m.requestBytes -= old.size()
		el.Value = e
		m.requests.MoveToFront(el)
	} else {
		m.byID[id] = m.requests.PushFront(e)
	}
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
