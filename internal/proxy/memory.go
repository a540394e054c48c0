package proxy

import (
	"encoding/json"

	"github.com/compactd/compactd/chat"
)

// requestMemory is what the proxy needs of the daemon's chat.Memory: per
// proxied conversation, by its id, the last request's body (never its
// headers), the token count of each of its messages by a hash of the
// message's bytes (so a request that extends the previous one counts only
// its new messages), how far the provider's count of the forwarded
// prompt was above compactd's (tool definitions, images and tokenizer
// differences), which calibrates the next pre-flight count, and the
// pipeline the request chose. A request whose id is not known before it
// is read (derived from its messages) finds the last requests that
// opened the same way (RequestsSharing) and is read past what it shares
// with the likeliest of them. It lives in memory only, bounded by
// proxy.max_stored_bytes.
type requestMemory interface {
	LastRequest(id string) (chat.LastRequest, bool)
	RequestsSharing(format string, body []byte, dst []chat.LastRequest) []chat.LastRequest
	RememberRequest(id string, r chat.LastRequest)
	Calibrate(id string, offset int)
	ItemCounts(items []json.RawMessage, prev *chat.LastRequest) (hashes []uint64, counts []int, missing []int)
	SetRequestLimit(maxBytes int64)
	Stats() chat.MemoryStats
}

var _ requestMemory = (*chat.Memory)(nil)
