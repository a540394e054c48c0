// Package tokens counts tokens for the host: the per-message "tokens" the
// host adds to every message it hands a policy, and the count_tokens host
// function.
//
// A Counter owns everything: the model table, one lazily loaded tokenizer
// per encoding, and a bounded cache of per-message counts. A model name
// selects a Tokenizer (Counter.ForModel); OpenAI models are counted exactly
// with their own encoding (o200k_base or cl100k_base), models whose
// tokenizer is not public (Claude, Gemini, Llama, ...) get a calibrated
// estimate built on o200k_base, and an unknown model is counted with
// o200k_base. README.md in this directory has the table and the basis of
// each estimate.
//
// Messages are counted the way OpenAI's cookbook does it
// (num_tokens_from_messages); see Tokenizer.CountMessage. An agent re-sends
// its whole history before every model call, so message counts are cached
// by a hash of the message: re-sent history is never tokenized twice.
//
// Vocabularies are loaded on first use. There is no package-level state:
// two Counters share nothing but the vocabulary maps the tokenizer library
// builds once per process.
package tokens

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync/atomic"

	"github.com/tiktoken-go/tokenizer/codec"
)

// Encoding names accepted in Family.Encoding.
const (
	O200kBase  = "o200k_base"
	Cl100kBase = "cl100k_base"
)

// DefaultCacheEntries is the size of the per-message count cache when
// Options.CacheEntries is 0.
const DefaultCacheEntries = 200_000

// Errors Options.Validate reports, wrapped with the offending family.
var (
	ErrUnknownEncoding = errors.New("unknown encoding (want o200k_base or cl100k_base)")
	ErrBadScale        = errors.New("scale must be a finite number > 0")
	ErrNoPrefixes      = errors.New("family has no model-name prefixes")
)

// Options configures a Counter. The zero value gives the documented
// defaults: a 200,000-entry cache and the built-in model table.
type Options struct {
	// CacheEntries bounds the per-message count cache: 0 means
	// DefaultCacheEntries, a negative value disables the cache.
	CacheEntries int
	// Families are checked before the built-in ones, so they can add models
	// or override a built-in mapping. See Family for how names match.
	Families []Family
}

// Family maps model names to a base encoding and a scale factor.
//
// A model name matches a family when it starts with one of the prefixes,
// compared case-insensitively after trimming surrounding space. Among the
// families of Options.Families the longest matching prefix wins; only when
// none of them matches are the built-in families tried, the same way.
type Family struct {
	// Name is a short label shown in Tokenizer.Name, e.g. "claude". Empty
	// means the first prefix without a trailing '-' or '/'.
	Name string
	// Prefixes are model-name prefixes, e.g. "claude-", "anthropic/claude".
	// They are lower-cased by New. An empty prefix matches every model.
	Prefixes []string
	// Encoding is O200kBase or Cl100kBase; empty means O200kBase.
	Encoding string
	// Scale multiplies the base count; 0 means 1. Scaled counts are
	// estimates and round up: ceil(count × Scale).
	Scale float64
	// Estimate marks the family's counts as estimates even when Scale is 1:
	// the model's own tokenizer is not public, o200k_base stands in for it.
	Estimate bool
	// Note says why this encoding and factor were chosen (see
	// Tokenizer.Note).
	Note string
}

// Validate reports whether New accepts the options. A daemon that builds
// Families from a config file calls it at load time; New panics on what
// Validate rejects.
func (o Options) Validate() error {
	for i, f := range o.Families {
		if err := f.validate(); err != nil {
			return fmt.Errorf("tokens: family %d (%q): %w", i, f.label(), err)
		}
	}
	return nil
}

func (f Family) validate() error {
	switch {
	case len(f.Prefixes) == 0:
		return ErrNoPrefixes
	case f.Encoding != "" && f.Encoding != O200kBase && f.Encoding != Cl100kBase:
		return fmt.Errorf("%w: %q", ErrUnknownEncoding, f.Encoding)
	case math.IsNaN(f.Scale) || math.IsInf(f.Scale, 0) || f.Scale < 0:
		return fmt.Errorf("%w: %v", ErrBadScale, f.Scale)
	}
	return nil
}

// label returns the family's Name, or one derived from its first prefix.
func (f Family) label() string {
	if f.Name != "" || len(f.Prefixes) == 0 {
		return f.Name
	}
	return strings.TrimRight(strings.ToLower(f.Prefixes[0]), "-/")
}

// Counter counts tokens for any model. It is safe for concurrent use by any
// number of goroutines; it starts no goroutines of its own and needs no
// Close.
type Counter struct {
	seed     maphash.Seed
	user     []family // from Options.Families, checked first
	builtin  []family
	fallback *Tokenizer // unknown models
	encs     [numEncodings]encoding
	cache    *cache // nil when disabled

	hits, misses   atomic.Uint64
	bytesTokenized atomic.Uint64
}

// family is a Family resolved to its shared Tokenizer.
type family struct {
	prefixes []string
	tok      *Tokenizer
}

// New returns a Counter. Vocabularies are loaded on first use, not here, so
// New is cheap. It panics if opts.Validate() reports an error.
func New(opts Options) *Counter {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	c := &Counter{seed: maphash.MakeSeed()}
	c.encs[encO200k] = encoding{id: encO200k, name: O200kBase, newCodec: codec.NewO200kBase, splitsCase: true}
	c.encs[encCl100k] = encoding{id: encCl100k, name: Cl100kBase, newCodec: codec.NewCl100kBase}

	switch n := opts.CacheEntries; {
	case n == 0:
		c.cache = newCache(DefaultCacheEntries)
	case n > 0:
		c.cache = newCache(n)
	}
	if opts.CacheEntries >= 0 {
		for i := range c.encs {
			c.encs[i].pieces = newPieceCache(pieceSlots, c.encs[i].splitsCase)
		}
	}

	c.user = c.resolve(opts.Families)
	c.builtin = c.resolve(BuiltinFamilies())
	c.fallback = c.newTokenizer(Family{Name: "default", Encoding: O200kBase, Scale: 1,
		Note: "unknown model: counted with o200k_base, the encoding of current OpenAI models"})
	return c
}

func (c *Counter) resolve(fams []Family) []family {
	out := make([]family, 0, len(fams))
	for _, f := range fams {
		prefixes := make([]string, len(f.Prefixes))
		for i, p := range f.Prefixes {
			prefixes[i] = strings.ToLower(strings.TrimSpace(p))
		}
		out = append(out, family{prefixes: prefixes, tok: c.newTokenizer(f)})
	}
	return out
}

// ForModel returns the Tokenizer for a model name such as "gpt-4o",
// "openai/gpt-4o" or "claude-3-5-sonnet-20241022". It never returns nil: an
// empty or unknown name gets o200k_base with scale 1, which Exact reports as
// exact (the count is exact o200k_base, whatever the model really uses).
// Tokenizers are shared: two calls for the same family return the same
// pointer.
func (c *Counter) ForModel(model string) *Tokenizer {
	m := strings.ToLower(strings.TrimSpace(model))
	if t := match(c.user, m); t != nil {
		return t
	}
	if t := match(c.builtin, m); t != nil {
		return t
	}
	return c.fallback
}

// match returns the Tokenizer of the family with the longest prefix of
// model, or nil.
func match(fams []family, model string) *Tokenizer {
	var best *Tokenizer
	bestLen := -1
	for i := range fams {
		for _, p := range fams[i].prefixes {
			if len(p) > bestLen && strings.HasPrefix(model, p) {
				best, bestLen = fams[i].tok, len(p)
			}
		}
	}
	return best
}

// Stats is a snapshot of a Counter's work.
type Stats struct {
	// Hits and Misses count per-message cache lookups. With the cache
	// disabled every counted message is a miss.
	Hits, Misses uint64
	// Entries is the number of message counts the cache holds now.
	Entries int
	// BytesTokenized is the number of bytes of text run through a
	// tokenizer, by Count and by every cache miss.
	BytesTokenized uint64
	// Pieces is the number of pieces and segments of text whose counts
	// the encodings remember now, and CodecBytes the bytes of text the
	// codec itself tokenized: the parts of BytesTokenized not remembered
	// (with the cache disabled, all of them).
	Pieces     int
	CodecBytes uint64
}

// Stats returns the counters' current values. It is safe to call at any
// time; the fields are read one after the other, not as one atomic
// snapshot.
func (c *Counter) Stats() Stats {
	s := Stats{
		Hits:           c.hits.Load(),
		Misses:         c.misses.Load(),
		BytesTokenized: c.bytesTokenized.Load(),
	}
	if c.cache != nil {
		s.Entries = c.cache.len()
	}
	for i := range c.encs {
		e := &c.encs[i]
		s.CodecBytes += e.codecBytes.Load()
		if e.pieces != nil {
			s.Pieces += e.pieces.len()
		}
	}
	return s
}
