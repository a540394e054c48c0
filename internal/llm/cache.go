package llm

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"math"
	"sync"
	"time"

	"github.com/compactd/compactd/abi"
)

// Cache stores completions by a content-addressed key, so identical
// summarization requests are paid for once. Agents re-send their whole
// history every turn; with the cache a turn-by-turn replay calls the
// provider once per new span, and the same history yields byte-identical
// summaries (so the provider's prompt cache keeps hitting downstream).
//
// Keys are 64 lowercase hex characters (CacheKey). Values are opaque
// bytes (a few KB: a summary and its usage) that the Client encodes and
// decodes itself; a value it cannot decode is treated as a miss and
// overwritten.
//
// Implementations must be safe for concurrent use, and bounded: they
// evict (least recently used, or oldest first) to stay under a size
// limit. A persistent implementation (the daemon's embedded store) must
// also:
//   - survive restarts: a value Put before a restart is returned by Get
//     after it;
//   - treat a missing key as (nil, false, nil), never as an error;
//   - return an error only for a real storage failure: the Client then
//     counts it (Stats.CacheErrors), logs it and calls the provider as if
//     it had missed, so a broken store never fails a compaction;
//   - not keep the value slice passed to Put, nor let callers modify what
//     Get returned (copy in and out, as bbolt requires anyway);
//   - keep its own bookkeeping for eviction (e.g. an access-time or
//     insertion-sequence bucket next to the data bucket), since bbolt has
//     no TTL or size limit of its own.
//
// NewKVCache adapts a bucket of the daemon's embedded store (which already
// evicts the oldest writes past its MaxBytes and copies values in and out)
// to this interface.
//
// Entries never go stale: the key covers everything that determines the
// answer (provider, endpoint, model, messages, parameters), and a format
// change bumps the version mixed into the key.
type Cache interface {
	// Get returns the value stored under key.
	Get(ctx context.Context, key string) (value []byte, ok bool, err error)
	// Put stores value under key, evicting older entries as needed.
	Put(ctx context.Context, key string, value []byte) error
}

// cacheKeyVersion is mixed into every key; bump it when the key's inputs
// or the entry encoding change.
const cacheKeyVersion = "compactd-llm-cache-v1"

// CacheKey returns the content-addressed key of a completion: SHA-256 over
// the provider kind, base URL, model, every message (role and content),
// max_tokens, temperature and stop sequences, each length-prefixed so no
// two requests share a key. model is the model actually sent (the
// request's, or the configured default).
func CacheKey(kind, baseURL, model string, req abi.LLMRequest) string {
	h := sha256.New()
	str := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	num := func(v uint64) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], v)
		h.Write(n[:])
	}
	str(cacheKeyVersion)
	str(kind)
	str(baseURL)
	str(model)
	num(uint64(len(req.Messages)))
	for _, m := range req.Messages {
		str(m.Role)
		str(m.Content)
	}
	num(uint64(int64(req.MaxTokens)))
	num(math.Float64bits(req.Temperature + 0)) // +0 folds -0 into 0
	num(uint64(len(req.Stop)))
	for _, s := range req.Stop {
		str(s)
	}
	return hexSum(h)
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// cacheEntry is what the Client stores: the completion and what it cost
// when it was made.
type cacheEntry struct {
	V      int    `json:"v"`
	Text   string `json:"text"`
	Model  string `json:"model,omitempty"`
	Input  int    `json:"in"`
	Output int    `json:"out"`
}

func encodeEntry(resp abi.LLMResponse) []byte {
	b, _ := json.Marshal(cacheEntry{V: 1, Text: resp.Text, Model: resp.Model, Input: resp.Usage.InputTokens, Output: resp.Usage.OutputTokens})
	return b
}

func decodeEntry(b []byte) (abi.LLMResponse, bool) {
	var e cacheEntry
	if json.Unmarshal(b, &e) != nil || e.V != 1 || e.Text == "" {
		return abi.LLMResponse{}, false
	}
	return abi.LLMResponse{Text: e.Text, Model: e.Model, Usage: abi.LLMUsage{InputTokens: e.Input, OutputTokens: e.Output}}, true
}

// MemoryCache is an in-memory Cache bounded by bytes, evicting the least
// recently used entry first. It is safe for concurrent use; its contents
// do not survive a restart.
type MemoryCache struct {
	max int64

	mu    sync.Mutex
	size  int64
	order *list.List // front: most recently used
	items map[string]*list.Element
}

type memEntry struct {
	key   string
	value []byte
}

// entryOverhead approximates the memory an entry costs besides its key
// and value (map slot, list element, headers).
const entryOverhead = 128

var _ Cache = (*MemoryCache)(nil)

// NewMemoryCache returns a cache holding at most maxBytes of keys and
// values (plus a small per-entry overhead). An entry larger than maxBytes
// is not stored.
func NewMemoryCache(maxBytes int64) *MemoryCache {
	return &MemoryCache{max: maxBytes, order: list.New(), items: map[string]*list.Element{}}
}

// Get implements Cache. It never fails.
func (c *MemoryCache) Get(_ context.Context, key string) ([]byte, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, false, nil
	}
	c.order.MoveToFront(el)
	return append([]byte(nil), el.Value.(*memEntry).value...), true, nil
}

// Put implements Cache. It never fails.
func (c *MemoryCache) Put(_ context.Context, key string, value []byte) error {
	cost := entryCost(key, value)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
	if cost > c.max {
		return nil
	}
	for c.size+cost > c.max {
		c.remove(c.order.Back())
	}
	c.items[key] = c.order.PushFront(&memEntry{key: key, value: append([]byte(nil), value...)})
	c.size += cost
	return nil
}

// Len returns the number of entries.
func (c *MemoryCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// Bytes returns the bytes the entries account for.
func (c *MemoryCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

func (c *MemoryCache) remove(el *list.Element) {
	e := c.order.Remove(el).(*memEntry)
	delete(c.items, e.key)
	c.size -= entryCost(e.key, e.value)
}

func entryCost(key string, value []byte) int64 {
	return int64(len(key) + len(value) + entryOverhead)
}

// KV is a bounded, byte-keyed store such as the daemon's store.Bucket:
// Get returns nil and no error for an absent key.
type KV interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	Put(ctx context.Context, key, value []byte) error
}

// NewKVCache returns a Cache over kv: the persistent summary cache when
// kv is a bucket of the daemon's embedded store opened with a size bound
// (e.g. store.BucketOptions{MaxBytes: cfg.CacheMaxBytes}). kv must meet
// the Cache contract above (bounded, safe for concurrent use, copies).
func NewKVCache(kv KV) Cache {
	if l, ok := kv.(KVLeaser); ok {
		return leasingKVCache{kvCache{kv}, l}
	}
	return kvCache{kv}
}

// KVLeaser is a KV shared by several daemons that can lease a key (see
// Leaser): the shared store's buckets.
type KVLeaser interface {
	KV
	Lease(ctx context.Context, key []byte, ttl time.Duration) (release func(), won bool, err error)
}

type leasingKVCache struct {
	kvCache
	l KVLeaser
}

func (c leasingKVCache) Lease(ctx context.Context, key string, ttl time.Duration) (func(), bool, error) {
	return c.l.Lease(ctx, []byte(key), ttl)
}

type kvCache struct{ kv KV }

func (c kvCache) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := c.kv.Get(ctx, []byte(key))
	if err != nil {
		return nil, false, err
	}
	return v, v != nil, nil
}

func (c kvCache) Put(ctx context.Context, key string, value []byte) error {
	return c.kv.Put(ctx, []byte(key), value)
}
