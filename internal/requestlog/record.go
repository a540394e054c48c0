// Package requestlog keeps one record per proxied and /v1/compact request:
// what compactd did to it, what the upstream answered and billed, and how
// long each part took. Records hold no prompt content and no header (no
// credential): only counts, names, statuses, durations and compactd's own
// warnings.
//
// A Log keeps the records in a bounded ring in memory (bounded in total
// and per conversation), optionally appends them to a JSON-lines access
// file rotated by size (File), and optionally copies each conversation's
// latest records into the state store (a bounded bucket, so every replica
// of a fleet sees them).
package requestlog

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/models"
)

// Kinds of request.
const (
	KindProxy   = "proxy"   // a proxied provider request
	KindCompact = "compact" // POST /v1/compact
)

// Record is one request.
type Record struct {
	// ID is unique across a fleet: the daemon's instance id and a sequence.
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// ConversationID is empty when the request could not be read.
	ConversationID string `json:"conversation_id,omitempty"`
	// Format is the wire format: "openai", "anthropic", "responses".
	Format   string   `json:"format,omitempty"`
	Model    string   `json:"model,omitempty"`
	Pipeline []string `json:"pipeline,omitempty"`
	// Route is what chose a proxied request's pipeline and threshold: the
	// model pattern of the proxy.routes entry that matched, "header"
	// (X-Compactd-Policy) or "default".
	Route string `json:"route,omitempty"`
	// Compacted is set when the request went on compacted; Reason says
	// why a compaction ran, NotCompacted why the request went on as it came.
	Compacted     bool   `json:"compacted"`
	Reason        string `json:"reason,omitempty"`
	NotCompacted  string `json:"not_compacted,omitempty"`
	TokensBefore  int    `json:"tokens_before,omitempty"`
	TokensAfter   int    `json:"tokens_after,omitempty"`
	ContextWindow int    `json:"context_window,omitempty"`
	// Usage is the upstream's, when its answer reported one.
	Usage *Usage `json:"usage,omitempty"`
	// Status is the upstream's HTTP status, or compactd's own when the
	// answer did not come from the upstream (Upstream false).
	Status   int  `json:"status,omitempty"`
	Upstream bool `json:"upstream,omitempty"`
	// Durations in milliseconds: compactd's own part (reading, counting,
	// compacting), the upstream's (from sending the request to the end of
	// its answer), and the time from sending to the answer's headers.
	CompactdMS  float64 `json:"compactd_ms"`
	UpstreamMS  float64 `json:"upstream_ms,omitempty"`
	FirstByteMS float64 `json:"first_byte_ms,omitempty"`
	// CostUSD is what the request's usage cost at the model's catalog
	// price; FullCostUSD what it would have cost had the tokens
	// compaction removed been sent as uncached input. Both are absent
	// when the model has no price in the catalog or there is no usage.
	CostUSD     *float64 `json:"cost_usd,omitempty"`
	FullCostUSD *float64 `json:"full_cost_usd,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
}

// Usage is an upstream's token usage for one answer.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	CachedTokens int `json:"cached_tokens,omitempty"`
	// CacheWriteTokens are the input tokens written to the prompt cache
	// (Anthropic's cache_creation_input_tokens), billed at the catalog's
	// cache-write price.
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
	OutputTokens     int `json:"output_tokens"`
}

// Price sets CostUSD and FullCostUSD from r's usage and model (no-op
// without usage or a catalog price).
func (r *Record) Price() {
	if r.Usage == nil {
		return
	}
	removed := 0
	if r.Compacted && r.TokensBefore > r.TokensAfter {
		removed = r.TokensBefore - r.TokensAfter
	}
	if paid, full, ok := Cost(r.Model, *r.Usage, removed); ok {
		r.CostUSD, r.FullCostUSD = &paid, &full
	}
}

// Cost prices one answer's usage u at model's catalog price: paid is
// what u cost, full what it would have cost had the removed tokens that
// compaction took out been sent too (as uncached input). ok is false
// when the catalog has no price for model.
func Cost(model string, u Usage, removed int) (paid, full float64, ok bool) {
	p, ok := models.PriceOf(model)
	if !ok {
		return 0, 0, false
	}
	paid = p.Cost(u.InputTokens, u.CachedTokens, u.CacheWriteTokens, u.OutputTokens)
	full = p.Cost(u.InputTokens+max(removed, 0), u.CachedTokens, u.CacheWriteTokens, u.OutputTokens)
	return paid, full, true
}

// before reports whether a sorts after b in a listing (newest first):
// later time, then larger ID.
func newer(a, b *Record) bool {
	if !a.Time.Equal(b.Time) {
		return a.Time.After(b.Time)
	}
	return a.ID > b.ID
}

// Cursor is a position in a listing: the records after it are older.
type Cursor struct {
	time time.Time
	id   string
}

// CursorOf returns the cursor just past r.
func CursorOf(r *Record) string { return strconv.FormatInt(r.Time.UnixNano(), 10) + "." + r.ID }

// ParseCursor reads a cursor from a listing's next_cursor ("" is the start).
func ParseCursor(s string) (*Cursor, error) {
	if s == "" {
		return nil, nil
	}
	ns, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, fmt.Errorf("cursor %q is not one a listing returned", s)
	}
	return &Cursor{time: time.Unix(0, n), id: id}, nil
}

// past reports whether r comes after c in a listing.
func (c *Cursor) past(r *Record) bool {
	return c == nil || newer(&Record{Time: c.time, ID: c.id}, r)
}
