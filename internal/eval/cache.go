package eval

import (
	"bytes"
	"encoding/json"
)

// Rules are a provider's prompt-cache rules (see the Cache* modes).
type Rules struct {
	Mode string
	// MinTokens is the shortest prefix the provider caches.
	MinTokens int
	// Increment is the step of automatic cache hits above MinTokens
	// (OpenAI: 128); 0 or 1 means any length.
	Increment int
}

// Request describes one request of a session, as far as billing needs:
// token counts are the billed model's.
type Request struct {
	// Tokens is the request's messages' tokens (without reply priming).
	Tokens int
	// Priming is what the request adds after its last message
	// (tokens.ReplyPrimingTokens). It is never served from a cache.
	Priming int
	// Prefix is the tokens of the leading messages that are byte-identical
	// to the previous request's (whole messages only; see CommonPrefix).
	Prefix int
	// First is true for a session's first request.
	First bool
	// PrevTokens is the previous request's messages' tokens.
	PrevTokens int
	// PrevIsPrefix reports that every message of the previous request is
	// the same, in the same place, in this one.
	PrevIsPrefix bool
	// System is the tokens of the leading system/developer messages.
	System int
	// Output is the tokens of the model's reply.
	Output int
}

// Usage is one request's tokens split the way a provider bills them.
// Input + CacheRead + CacheWrite is the request's whole input.
type Usage struct {
	Input      int `json:"input"`                 // billed at the input price
	CacheRead  int `json:"cache_read,omitempty"`  // billed at the cached-input price
	CacheWrite int `json:"cache_write,omitempty"` // billed at the cache-write price
	Output     int `json:"output"`
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.Input += o.Input
	u.CacheRead += o.CacheRead
	u.CacheWrite += o.CacheWrite
	u.Output += o.Output
}

// TotalInput is the request's whole input.
func (u Usage) TotalInput() int { return u.Input + u.CacheRead + u.CacheWrite }

// Split bills one request under the rules.
//
// Automatic (OpenAI, DeepSeek): the provider serves from its cache the
// longest prefix this request shares with the previous one, rounded down
// to MinTokens + k×Increment tokens; nothing under MinTokens is served.
// Writing costs nothing.
//
// Breakpoints (Anthropic): the agent marks two cache breakpoints in every
// request, after the leading system messages and after the last message
// (both a documented Anthropic pattern; up to 4 are allowed). The cache
// then holds two entries that matter: the system prefix and the previous
// request as a whole. A request reads the longer of them that is a prefix
// of it (the previous request only when all its messages are unchanged
// at the start of this one; a partial match reads nothing from that
// entry, because Anthropic only matches a prefix that ends at a
// breakpoint), and writes everything from there to its last message. A
// request shorter than MinTokens is neither read from nor written to the
// cache. Entries are assumed alive for the whole session (the 5-minute
// TTL is refreshed by each hit; agent turns are seconds apart); entries
// of requests before the previous one are assumed expired.
func (r Rules) Split(q Request) Usage {
	u := Usage{Output: q.Output}
	switch r.Mode {
	case CacheAutomatic:
		if !q.First {
			u.CacheRead = r.cached(q.Prefix)
		}
	case CacheBreakpoints:
		if q.Tokens < r.MinTokens || q.Tokens == 0 {
			break
		}
		read := 0
		if !q.First {
			if q.System >= r.MinTokens && q.System <= q.Tokens {
				read = q.System
			}
			if q.PrevIsPrefix && q.PrevTokens >= r.MinTokens && q.PrevTokens > read {
				read = q.PrevTokens
			}
		}
		u.CacheRead = read
		u.CacheWrite = q.Tokens - read
	}
	u.Input = q.Tokens + q.Priming - u.CacheRead - u.CacheWrite
	return u
}

// cached rounds a shared prefix down to what an automatic cache serves.
func (r Rules) cached(prefix int) int {
	if prefix < r.MinTokens || prefix <= 0 {
		return 0
	}
	if r.Increment <= 1 {
		return prefix
	}
	return r.MinTokens + (prefix-r.MinTokens)/r.Increment*r.Increment
}

// Cost is the price of u in dollars.
func (p Price) Cost(u Usage) float64 {
	return (float64(u.Input)*p.Input + float64(u.CacheRead)*p.CachedInput +
		float64(u.CacheWrite)*p.CacheWrite + float64(u.Output)*p.Output) / 1e6
}

// CommonPrefix compares two requests message by message, by their raw
// bytes, and returns how many leading messages are identical and the sum
// of their token counts (tokens[i] is message i's count in cur). A
// message that differs ends the prefix even if it starts the same way: the
// prefix is counted in whole messages (see docs/eval.md).
func CommonPrefix(prev, cur []json.RawMessage, tokens []int) (messages, toks int) {
	for messages < len(prev) && messages < len(cur) && bytes.Equal(prev[messages], cur[messages]) {
		toks += tokens[messages]
		messages++
	}
	return messages, toks
}
