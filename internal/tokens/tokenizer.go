package tokens

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/compactd/compactd/abi"
	"github.com/tiktoken-go/tokenizer/codec"
)

// Per-message overheads, as in OpenAI's cookbook (num_tokens_from_messages).
const (
	// TokensPerMessage frames every message (<|start|>role<|message|>...<|end|>).
	TokensPerMessage = 3
	// TokensPerName is added, with the name's own tokens, when Name is set.
	TokensPerName = 1
	// TokensPerToolCall approximates the framing of one tool call around its
	// function name and arguments. OpenAI does not document it; 3 mirrors
	// the per-message framing.
	TokensPerToolCall = 3
	// ReplyPrimingTokens is what a request adds once, after its last
	// message (<|start|>assistant<|message|>). CountMessages does not
	// include it: add it to compare with an API's prompt_tokens.
	ReplyPrimingTokens = 3
)

// Messages whose uncached content adds up to at least this many bytes are
// counted in parallel by CountMessages (~5 ms of tokenizing at ~3.4 MB/s).
const parallelMinBytes = 16 << 10

const (
	encO200k = iota
	encCl100k
	numEncodings
)

// encoding is one vocabulary, loaded on first use. Its codec is shared by
// every goroutine: a tiktoken-go Codec is read-only after construction (the
// vocabulary is a map that is never written, and the regexp2 matcher takes
// its per-match state from a sync.Pool), as long as nobody calls its
// SetErrorMode, which this package never does.
type encoding struct {
	id       uint8
	name     string
	newCodec func() *codec.Codec
	once     sync.Once
	codec    *codec.Codec
	// splitsCase: the split pattern ends a word before a capital that
	// follows a lower-case letter (o200k_base), so its segments are cut
	// there too (pieces.go).
	splitsCase bool
	// pieces remembers the counts of short pieces of text (pieces.go);
	// nil when the Counter caches nothing.
	pieces *pieceCache
	// codecBytes counts the bytes countWhole tokenized.
	codecBytes atomic.Uint64
}

// count returns the number of o200k_base/cl100k_base tokens in s, loading
// the vocabulary on first use. Special tokens such as <|endoftext|> are
// counted as ordinary text, as tiktoken's encode_ordinary does.
func (e *encoding) count(s string) int {
	if s == "" {
		return 0
	}
	if e.pieces != nil {
		return e.pieces.count(s, e)
	}
	return e.countWhole(s)
}

// countWhole counts s with the codec alone, loading it on first use.
func (e *encoding) countWhole(s string) int {
	e.once.Do(func() { e.codec = e.newCodec() })
	e.codecBytes.Add(uint64(len(s)))
	n, err := e.codec.Count(s)
	if err != nil {
		// The codec fails only if its regexp engine does, which it does
		// not without a match timeout. Should it happen, a rough estimate
		// beats a zero.
		return max(n, (len(s)+3)/4)
	}
	// tiktoken-go v0.10.0's generated split pattern leaves U+007F (DEL)
	// out of its character classes, so the codec skips every DEL: "\x7f"
	// counts 0. In both vocabularies DEL is a token of its own and part of
	// no other token, so tiktoken counts exactly one token per DEL and the
	// tokens around it are the ones the codec found.
	return n + strings.Count(s, "\x7f")
}

// Tokenizer counts tokens for one model family. It is safe for concurrent
// use; it is owned by the Counter that returned it and shares its cache.
type Tokenizer struct {
	c     *Counter
	enc   *encoding
	scale float64
	exact bool
	name  string
	note  string
}

func (c *Counter) newTokenizer(f Family) *Tokenizer {
	enc := &c.encs[encO200k]
	if f.Encoding == Cl100kBase {
		enc = &c.encs[encCl100k]
	}
	scale := f.Scale
	if scale == 0 {
		scale = 1
	}
	t := &Tokenizer{c: c, enc: enc, scale: scale, exact: scale == 1 && !f.Estimate, name: enc.name, note: f.Note}
	if !t.exact {
		t.name = fmt.Sprintf("%s×%.2f (%s estimate)", enc.name, scale, f.label())
	}
	return t
}

// Encoding returns the base encoding: "o200k_base" or "cl100k_base".
func (t *Tokenizer) Encoding() string { return t.enc.name }

// Exact reports whether counts are the model's own tokenizer's: false for
// a scaled count or a family marked Estimate.
func (t *Tokenizer) Exact() bool { return t.exact }

// Name describes the tokenizer: "o200k_base" when exact, otherwise e.g.
// "o200k_base×1.20 (claude estimate)".
func (t *Tokenizer) Name() string { return t.name }

// Note says why the family uses this encoding and factor.
func (t *Tokenizer) Note() string { return t.note }

// scaled applies the family's factor, rounding up. The tolerance keeps a
// product such as 10 × 1.2 = 12.000000000000002 from rounding up to 13.
func (t *Tokenizer) scaled(n int) int {
	if t.scale == 1 {
		return n
	}
	return int(math.Ceil(float64(n) * t.scale * (1 - 1e-12)))
}

// Count returns the number of tokens in text, with no per-message
// overhead. It is not cached.
func (t *Tokenizer) Count(text string) int {
	t.c.bytesTokenized.Add(uint64(len(text)))
	return t.scaled(t.enc.count(text))
}

// CountMessage returns the tokens a message takes in a prompt:
//
//	TokensPerMessage + Count(role) + Count(text)
//	+ TokensPerName + Count(name)                          if the name is set
//	+ Count(function.name) + Count(arguments) + TokensPerToolCall   per tool call
//
// where text is m.Content.Text(): text parts are joined with "\n" and
// images, audio and other non-text parts are not counted. Tool call ids and
// tool_call_id are not counted. For an estimate the whole base count is
// scaled: ceil(base × scale).
//
// The base count is cached by the message's content (not its Tokens field),
// so a message counted before costs one hash of its bytes. CountMessage
// does not modify m.
func (t *Tokenizer) CountMessage(m *abi.Message) int {
	k := t.c.key(t.enc.id, m)
	if n, ok := t.c.lookup(k); ok {
		return t.scaled(n)
	}
	n := t.c.countBase(t.enc, m)
	t.c.store(k, n)
	return t.scaled(n)
}

// CountMessages sets msgs[i].Tokens to CountMessage(&msgs[i]) for every
// message and returns their sum (ReplyPrimingTokens not included).
//
// When the messages not yet cached hold at least 16 KiB between them,
// CountMessages tokenizes them on up to GOMAXPROCS goroutines, largest
// first, and waits for all of them before it returns. It writes to msgs, so
// the caller must not share that slice with another goroutine meanwhile.
func (t *Tokenizer) CountMessages(msgs []abi.Message) int {
	c := t.c
	var (
		missIdx  []int
		missKeys []key
		missSize int
	)
	for i := range msgs {
		k := c.key(t.enc.id, &msgs[i])
		if n, ok := c.lookup(k); ok {
			msgs[i].Tokens = t.scaled(n)
			continue
		}
		missIdx = append(missIdx, i)
		missKeys = append(missKeys, k)
		missSize += messageSize(&msgs[i])
	}

	if len(missIdx) > 0 {
		base := make([]int, len(missIdx))
		workers := min(runtime.GOMAXPROCS(0), len(missIdx))
		if workers < 2 || missSize < parallelMinBytes {
			for j, i := range missIdx {
				base[j] = c.countBase(t.enc, &msgs[i])
			}
		} else {
			c.countParallel(t.enc, msgs, missIdx, base, workers)
		}
		for j, i := range missIdx {
			c.store(missKeys[j], base[j])
			msgs[i].Tokens = t.scaled(base[j])
		}
	}

	total := 0
	for i := range msgs {
		total += msgs[i].Tokens
	}
	return total
}

// countParallel sets base[j] to the base count of msgs[missIdx[j]], on
// workers goroutines including the caller's. Messages are handed out
// largest first so one big tool result does not finish last.
func (c *Counter) countParallel(enc *encoding, msgs []abi.Message, missIdx []int, base []int, workers int) {
	order := make([]int, len(missIdx)) // positions in missIdx
	for j := range order {
		order[j] = j
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Compare(messageSize(&msgs[missIdx[b]]), messageSize(&msgs[missIdx[a]]))
	})

	var next atomic.Int64
	work := func() {
		for {
			o := int(next.Add(1) - 1)
			if o >= len(order) {
				return
			}
			j := order[o]
			base[j] = c.countBase(enc, &msgs[missIdx[j]])
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// countBase tokenizes a message (see CountMessage) without scaling or
// caching.
func (c *Counter) countBase(enc *encoding, m *abi.Message) int {
	text := m.Content.Text()
	bytes := len(m.Role) + len(text)
	n := TokensPerMessage + enc.count(m.Role) + enc.count(text)
	if m.Name != "" {
		n += TokensPerName + enc.count(m.Name)
		bytes += len(m.Name)
	}
	for i := range m.ToolCalls {
		f := &m.ToolCalls[i].Function
		n += enc.count(f.Name) + enc.count(f.Arguments) + TokensPerToolCall
		bytes += len(f.Name) + len(f.Arguments)
	}
	c.bytesTokenized.Add(uint64(bytes))
	return n
}

// messageSize is a cheap stand-in for the bytes countBase will tokenize.
func messageSize(m *abi.Message) int {
	n := m.Content.Len() + len(m.Name)
	for i := range m.ToolCalls {
		n += len(m.ToolCalls[i].Function.Name) + len(m.ToolCalls[i].Function.Arguments)
	}
	return n
}

// key identifies a message's base count: the encoding, a seeded 64-bit hash
// of everything countBase reads (role, name, raw content, tool-call names
// and arguments, each length-prefixed), and the content's length. Two
// different messages share a key only on a 64-bit hash collision.
func (c *Counter) key(enc uint8, m *abi.Message) key {
	var h maphash.Hash
	h.SetSeed(c.seed)
	raw := m.Content.Raw()
	writeString(&h, m.Role)
	writeString(&h, m.Name)
	writeLen(&h, len(raw))
	h.Write(raw)
	writeLen(&h, len(m.ToolCalls))
	for i := range m.ToolCalls {
		writeString(&h, m.ToolCalls[i].Function.Name)
		writeString(&h, m.ToolCalls[i].Function.Arguments)
	}
	return key{hash: h.Sum64(), size: len(raw), enc: enc}
}

func writeLen(h *maphash.Hash, n int) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

func writeString(h *maphash.Hash, s string) {
	writeLen(h, len(s))
	h.WriteString(s)
}

// lookup returns a cached base count and records the hit or miss.
func (c *Counter) lookup(k key) (int, bool) {
	if c.cache != nil {
		if n, ok := c.cache.get(k); ok {
			c.hits.Add(1)
			return n, true
		}
	}
	c.misses.Add(1)
	return 0, false
}

func (c *Counter) store(k key, n int) {
	if c.cache != nil {
		c.cache.put(k, n)
	}
}
