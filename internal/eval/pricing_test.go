package eval

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultPricing(t *testing.T) {
	p, err := LoadPricing("default")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Compare) == 0 {
		t.Fatal("the default table compares no models")
	}
	tests := []struct {
		model, row string
		mode       string
		min        int
	}{
		{"gpt-4o", "gpt-4o", CacheAutomatic, 1024},
		{"gpt-4o-mini-2024-07-18", "gpt-4o-mini", CacheAutomatic, 1024},
		{"openai/gpt-4o", "gpt-4o", CacheAutomatic, 1024},
		{"GPT-4.1-mini", "gpt-4.1-mini", CacheAutomatic, 1024},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4", CacheBreakpoints, 1024},
		{"anthropic/claude-3-5-haiku-latest", "claude-3-5-haiku", CacheBreakpoints, 2048},
		{"claude-opus-4-1", "claude-opus-4", CacheBreakpoints, 1024},
		{"claude-opus-4-5", "claude-opus-4-5", CacheBreakpoints, 4096},
		{"deepseek-chat", "deepseek-chat", CacheAutomatic, 64},
	}
	for _, tt := range tests {
		pm, err := p.Lookup(tt.model)
		if err != nil {
			t.Errorf("Lookup(%q): %v", tt.model, err)
			continue
		}
		if pm.Row != tt.row || pm.Rules.Mode != tt.mode || pm.Rules.MinTokens != tt.min {
			t.Errorf("Lookup(%q) = row %q, %s min %d; want %q, %s min %d", tt.model, pm.Row, pm.Rules.Mode, pm.Rules.MinTokens, tt.row, tt.mode, tt.min)
		}
		if pm.Price.CachedInput <= 0 || pm.Price.CachedInput > pm.Price.Input {
			t.Errorf("%s: cached input %v not in (0, input %v]", tt.model, pm.Price.CachedInput, pm.Price.Input)
		}
	}
	if _, err := p.Lookup("llama-3-70b"); !errors.Is(err, ErrPricing) {
		t.Errorf("Lookup(unknown) = %v, want ErrPricing", err)
	}
	if _, err := p.Lookup(""); !errors.Is(err, ErrPricing) {
		t.Errorf("Lookup(\"\") = %v, want ErrPricing", err)
	}
}

func TestParsePricingErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"typo in a key", `{"name":"x","providers":{"p":{"cache":"none"}},"models":{"m":{"provider":"p","input":1,"cached_imput":1,"output":1}}}`, "unknown field"},
		{"unknown provider", `{"name":"x","providers":{},"models":{"m":{"provider":"p","input":1,"output":1}}}`, "unknown provider"},
		{"bad cache mode", `{"name":"x","providers":{"p":{"cache":"magic"}},"models":{"m":{"provider":"p","input":1,"output":1}}}`, "cache \"magic\""},
		{"breakpoints without a write price", `{"name":"x","providers":{"p":{"cache":"breakpoints"}},"models":{"m":{"provider":"p","input":1,"output":1}}}`, "cache_write is required"},
		{"negative price", `{"name":"x","providers":{"p":{"cache":"none"}},"models":{"m":{"provider":"p","input":-1,"output":1}}}`, "negative"},
		{"compare names an unpriced model", `{"name":"x","compare":["z"],"providers":{"p":{"cache":"none"}},"models":{"m":{"provider":"p","input":1,"output":1}}}`, "no price"},
		{"no models", `{"name":"x","providers":{}}`, "no models"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePricing([]byte(tt.json))
			if !errors.Is(err, ErrPricing) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParsePricing: %v, want ErrPricing mentioning %q", err, tt.want)
			}
		})
	}
}

func TestLoadPricingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mine.json")
	body := `{"name":"mine","providers":{"p":{"cache":"automatic","min_cached_tokens":10,"cache_increment":5}},"models":{"house-model":{"provider":"p","input":4,"output":8}}}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPricing(path)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := p.Lookup("house-model-v2")
	if err != nil {
		t.Fatal(err)
	}
	if pm.Price.CachedInput != 4 {
		t.Errorf("cached input defaults to %v, want the input price 4", pm.Price.CachedInput)
	}
	if pm.Rules != (Rules{Mode: CacheAutomatic, MinTokens: 10, Increment: 5}) {
		t.Errorf("rules = %+v", pm.Rules)
	}
	if _, err := LoadPricing("nosuchtable"); !errors.Is(err, ErrPricing) {
		t.Errorf("LoadPricing(unknown name) = %v", err)
	}
	if b, err := ShippedPricing("default"); err != nil || !strings.Contains(string(b), `"compare"`) {
		t.Errorf("ShippedPricing: %v", err)
	}
}
