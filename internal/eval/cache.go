package eval

import (
	"bytes"
	"encoding/json"

	"github.com/compactd/compactd/abi"
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
	// Output is the tokens of the model's reply.
	Output int

	// The rest describes the request's shape for breakpoint caches.

	// Messages holds each message's tokens (their sum is Tokens) and
	// Blocks each message's content blocks (see Blocks).
	Messages, Blocks []int
	// Breakpoints are the prefix lengths, in messages, after which the
	// request marks a cache breakpoint, ascending; the last one is
	// len(Messages).
	Breakpoints []int
	// PrefixMessages is how many leading messages are identical to the
	// previous request's (Prefix's messages).
	PrefixMessages int
	// Alive are the cache entries the previous request left, as prefix
	// lengths in messages (Rules.Entries of the previous request).
	Alive []int
}

// Lookback is how far back from a breakpoint, in content blocks,
// Anthropic looks for an earlier cache entry ("about 20 blocks").
const Lookback = 20

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
// Breakpoints (Anthropic): the request marks cache breakpoints
// (Breakpoints: the policy's marks, the request's end, and — when there
// is room among Anthropic's four — the end of the leading system
// messages; see docs/eval.md). Each breakpoint whose prefix reaches
// MinTokens writes a cache entry, or refreshes it. A request reads the
// longest alive entry it can reach: an entry the previous request left
// (Alive), whose messages this request still starts with, at most
// Lookback content blocks before one of this request's breakpoints
// (Anthropic looks back from each breakpoint block by block). It writes
// everything after what it read, up to its end. A request shorter than
// MinTokens is neither read from nor written to the cache. Entries of
// requests before the previous one are assumed expired unless the
// previous request refreshed them (its breakpoints).
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
			read = r.read(q)
		}
		u.CacheRead = read
		u.CacheWrite = q.Tokens - read
	}
	u.Input = q.Tokens + q.Priming - u.CacheRead - u.CacheWrite
	return u
}

// read is the tokens a breakpoint request reads from the cache.
func (r Rules) read(q Request) int {
	cum := make([]int, len(q.Messages)+1)
	blocks := make([]int, len(q.Messages)+1)
	for i, n := range q.Messages {
		cum[i+1] = cum[i] + n
		b := 1
		if i < len(q.Blocks) {
			b = q.Blocks[i]
		}
		blocks[i+1] = blocks[i] + b
	}
	best := 0
	for _, e := range q.Alive {
		if e <= 0 || e > q.PrefixMessages || e > len(q.Messages) || cum[e] < r.MinTokens {
			continue
		}
		for _, b := range q.Breakpoints {
			if b >= e && b <= len(q.Messages) && blocks[b]-blocks[e] <= Lookback {
				best = max(best, cum[e])
				break
			}
		}
	}
	return best
}

// Entries returns the cache entries a breakpoint request leaves for the
// next one: its breakpoints (prefix lengths in messages) whose prefix
// reaches MinTokens. Other modes leave none (automatic caches need no
// entries: Prefix says it all).
func (r Rules) Entries(q Request) []int {
	if r.Mode != CacheBreakpoints || q.Tokens < r.MinTokens {
		return nil
	}
	var out []int
	sum, i := 0, 0
	for _, b := range q.Breakpoints {
		for ; i < b && i < len(q.Messages); i++ {
			sum += q.Messages[i]
		}
		if sum >= r.MinTokens && sum > 0 {
			out = append(out, b)
		}
	}
	return out
}

// Blocks is how many content blocks a message is on Anthropic's side:
// one per text (a non-empty string, or each element of an array) and one
// per tool call; a tool result is one block; at least one.
func Blocks(m *abi.Message) int {
	n := len(m.ToolCalls)
	switch {
	case m.Role == abi.RoleTool:
		n = 1
	case m.Content.IsString():
		if string(m.Content.Raw()) != `""` {
			n++
		}
	case !m.Content.IsNull():
		var parts []json.RawMessage
		if json.Unmarshal(m.Content.Raw(), &parts) == nil {
			n += len(parts)
		}
	}
	return max(n, 1)
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
