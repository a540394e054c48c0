package tokens

import "sync"

// key identifies a message's base count; see Counter.key.
type key struct {
	hash uint64
	size int
	enc  uint8
}

// cache is a bounded map from message key to base count, split into shards
// (by hash) that each have their own mutex, so goroutines counting
// different messages rarely wait for each other.
//
// Each shard evicts by generations ("clear half"): new entries go into the
// current generation; when it holds half the shard's share, the previous
// generation is dropped whole and the current one becomes the previous.
// A hit in the previous generation moves the entry back into the current
// one. So an entry used at least once every half-cache of insertions stays
// (the history an agent re-sends on every call), the bound is never
// exceeded, and every operation is O(1) amortised: a dropped generation is
// one map left to the garbage collector.
type cache struct {
	shards []shard
	mask   uint64
}

type shard struct {
	mu       sync.Mutex
	cur      map[key]int
	prev     map[key]int
	half     int  // most entries in one generation
	keepPrev bool // false when the shard holds a single entry
}

// Shard counts grow with the bound up to maxShards while each shard keeps
// at least 2×minShardHalf entries.
const (
	maxShards    = 64
	minShardHalf = 512
)

// newCache returns a cache holding at most n > 0 entries.
func newCache(n int) *cache {
	shards := 1
	for shards < maxShards && n/(2*shards) >= 2*minShardHalf {
		shards *= 2
	}
	per := n / shards // ≥ 1
	c := &cache{shards: make([]shard, shards), mask: uint64(shards - 1)}
	for i := range c.shards {
		s := &c.shards[i]
		s.half = max(per/2, 1)
		s.keepPrev = per >= 2
	}
	return c
}

func (c *cache) shard(k key) *shard { return &c.shards[k.hash&c.mask] }

func (c *cache) get(k key) (int, bool) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.cur[k]; ok {
		return n, true
	}
	if n, ok := s.prev[k]; ok {
		delete(s.prev, k)
		s.insert(k, n)
		return n, true
	}
	return 0, false
}

func (c *cache) put(k key, n int) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cur[k]; ok {
		s.cur[k] = n
		return
	}
	delete(s.prev, k)
	s.insert(k, n)
}

// insert adds a key that is in neither generation. s.mu must be held.
func (s *shard) insert(k key, n int) {
	if len(s.cur) >= s.half {
		s.prev = nil
		if s.keepPrev {
			s.prev = s.cur
		}
		s.cur = nil
	}
	if s.cur == nil {
		s.cur = make(map[key]int, min(s.half, 1024))
	}
	s.cur[k] = n
}

// len returns the number of entries, shard by shard.
func (c *cache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.prev)
		s.mu.Unlock()
	}
	return n
}
