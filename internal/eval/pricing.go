package eval

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
)

// pricingFS holds the shipped pricing tables; --pricing NAME picks
// pricing/NAME.json.
//
//go:embed pricing/*.json
var pricingFS embed.FS

// ErrPricing is wrapped by every error about a pricing table.
var ErrPricing = errors.New("pricing table")

// Cache modes of a provider.
const (
	// CacheNone: the provider has no prompt cache; every input token is
	// billed at the input price.
	CacheNone = "none"
	// CacheAutomatic: the provider caches every request's prefix by itself
	// (OpenAI, DeepSeek). A request is served from the cache for the
	// longest prefix it shares with an earlier one, rounded down to
	// MinTokens + k×Increment; writing is free.
	CacheAutomatic = "automatic"
	// CacheBreakpoints: the request marks where the cache is written
	// (Anthropic's cache_control). Reads cost CachedInput, writes
	// CacheWrite. See Rules.Split for the breakpoints eval assumes.
	CacheBreakpoints = "breakpoints"
)

// Pricing is a pricing table: what each model's tokens cost and each
// provider's prompt-cache rules. It is read from JSON (pricing/default.json
// is the shipped one); prices are dollars per million tokens.
type Pricing struct {
	Name     string `json:"name"`
	AsOf     string `json:"as_of,omitempty"`
	Currency string `json:"currency,omitempty"`
	Unit     string `json:"unit,omitempty"`
	Note     string `json:"note,omitempty"`
	// Compare lists the models eval prices a session under when
	// --cost-models is not given.
	Compare   []string             `json:"compare,omitempty"`
	Providers map[string]*Provider `json:"providers"`
	Models    map[string]*Price    `json:"models"`
}

// Provider holds a provider's prompt-cache rules.
type Provider struct {
	Cache           string `json:"cache"`
	MinCachedTokens int    `json:"min_cached_tokens,omitempty"`
	CacheIncrement  int    `json:"cache_increment,omitempty"`
	Note            string `json:"note,omitempty"`
	Source          string `json:"source,omitempty"`
}

// Price is one model's row, in dollars per million tokens.
type Price struct {
	Provider string  `json:"provider"`
	Input    float64 `json:"input"`
	// CachedInput is the price of input served from the prompt cache
	// (OpenAI "cached input", Anthropic "cache hits & refreshes").
	// 0 means the input price.
	CachedInput float64 `json:"cached_input,omitempty"`
	// CacheWrite is the price of input written to the cache (Anthropic's
	// 5-minute cache writes). Required for a provider with breakpoints.
	CacheWrite float64 `json:"cache_write,omitempty"`
	Output     float64 `json:"output"`
	// MinCachedTokens overrides the provider's minimum cacheable prefix
	// (e.g. 2,048 for Claude 3.5 Haiku).
	MinCachedTokens int `json:"min_cached_tokens,omitempty"`
}

// PricedModel is a model name resolved against a table: its price and its
// provider's cache rules.
type PricedModel struct {
	// Name is the name asked for; Row the table's key that matched.
	Name, Row string
	Price     Price
	Rules     Rules
}

// LoadPricing reads a pricing table: the name of a shipped table
// ("default") or the path of a JSON file.
func LoadPricing(nameOrFile string) (*Pricing, error) {
	if nameOrFile == "" {
		nameOrFile = "default"
	}
	var data []byte
	var err error
	if !strings.ContainsAny(nameOrFile, `/\`) && !strings.HasSuffix(nameOrFile, ".json") {
		data, err = pricingFS.ReadFile(path.Join("pricing", nameOrFile+".json"))
		if err != nil {
			return nil, fmt.Errorf("%w %q: no such shipped table (shipped: %s; or give a .json file)", ErrPricing, nameOrFile, strings.Join(PricingNames(), ", "))
		}
	} else if data, err = os.ReadFile(nameOrFile); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPricing, err)
	}
	return ParsePricing(data)
}

// ShippedPricing returns the JSON of a shipped table, for users to copy.
func ShippedPricing(name string) ([]byte, error) {
	if name == "" {
		name = "default"
	}
	b, err := pricingFS.ReadFile(path.Join("pricing", name+".json"))
	if err != nil {
		return nil, fmt.Errorf("%w %q: no such shipped table", ErrPricing, name)
	}
	return b, nil
}

// PricingNames lists the shipped tables.
func PricingNames() []string {
	entries, _ := pricingFS.ReadDir("pricing")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names
}

// ParsePricing decodes and checks a pricing table. Unknown keys are
// errors, so a typo ("cached_imput") does not silently price at zero.
func ParsePricing(data []byte) (*Pricing, error) {
	var p Pricing
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPricing, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks that every model names a known provider, prices are not
// negative, and breakpoint providers' models have a cache-write price.
func (p *Pricing) Validate() error {
	if len(p.Models) == 0 {
		return fmt.Errorf("%w %q: no models", ErrPricing, p.Name)
	}
	for name, pr := range p.Providers {
		if pr == nil {
			return fmt.Errorf("%w: provider %q is null", ErrPricing, name)
		}
		switch pr.Cache {
		case CacheNone, CacheAutomatic, CacheBreakpoints:
		default:
			return fmt.Errorf("%w: provider %q: cache %q (want none, automatic or breakpoints)", ErrPricing, name, pr.Cache)
		}
		if pr.MinCachedTokens < 0 || pr.CacheIncrement < 0 {
			return fmt.Errorf("%w: provider %q: negative token counts", ErrPricing, name)
		}
	}
	for name, m := range p.Models {
		if m == nil {
			return fmt.Errorf("%w: model %q is null", ErrPricing, name)
		}
		prov, ok := p.Providers[m.Provider]
		if !ok {
			return fmt.Errorf("%w: model %q: unknown provider %q", ErrPricing, name, m.Provider)
		}
		if m.Input < 0 || m.CachedInput < 0 || m.CacheWrite < 0 || m.Output < 0 || m.MinCachedTokens < 0 {
			return fmt.Errorf("%w: model %q: negative price", ErrPricing, name)
		}
		if prov.Cache == CacheBreakpoints && m.CacheWrite == 0 {
			return fmt.Errorf("%w: model %q: provider %q caches at breakpoints, so cache_write is required", ErrPricing, name, m.Provider)
		}
	}
	for _, c := range p.Compare {
		if _, err := p.Lookup(c); err != nil {
			return fmt.Errorf("%w: compare: %w", ErrPricing, err)
		}
	}
	return nil
}

// Lookup resolves a model name: the table's longest key that is a prefix
// of the name, case-insensitively, after dropping a provider prefix such
// as "openai/".
func (p *Pricing) Lookup(model string) (PricedModel, error) {
	name := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	best := ""
	for k := range p.Models {
		lk := strings.ToLower(k)
		if strings.HasPrefix(name, lk) && len(lk) > len(best) {
			best = k
		}
	}
	if best == "" || name == "" {
		return PricedModel{}, fmt.Errorf("%w %q: no price for model %q", ErrPricing, p.Name, model)
	}
	m := p.Models[best]
	prov := p.Providers[m.Provider]
	rules := Rules{Mode: prov.Cache, MinTokens: prov.MinCachedTokens, Increment: prov.CacheIncrement}
	if m.MinCachedTokens > 0 {
		rules.MinTokens = m.MinCachedTokens
	}
	price := *m
	if price.CachedInput == 0 {
		price.CachedInput = price.Input
	}
	return PricedModel{Name: model, Row: best, Price: price, Rules: rules}, nil
}
