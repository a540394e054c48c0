package tokens

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func TestForModel(t *testing.T) {
	c := New(Options{})
	tests := []struct {
		name     string
		model    string
		wantEnc  string
		wantExac bool
		wantName string // checked when set
	}{
		{name: "gpt-4o", model: "gpt-4o", wantEnc: O200kBase, wantExac: true, wantName: "o200k_base"},
		{name: "gpt-4o dated", model: "gpt-4o-2024-08-06", wantEnc: O200kBase, wantExac: true},
		{name: "gpt-4o-mini", model: "gpt-4o-mini", wantEnc: O200kBase, wantExac: true},
		{name: "upper case", model: "GPT-4O-MINI", wantEnc: O200kBase, wantExac: true},
		{name: "surrounding space", model: "  gpt-4o ", wantEnc: O200kBase, wantExac: true},
		{name: "openrouter gpt-4o", model: "openai/gpt-4o", wantEnc: O200kBase, wantExac: true},
		{name: "openrouter upper", model: "OpenAI/GPT-4.1-mini", wantEnc: O200kBase, wantExac: true},
		{name: "fine-tuned", model: "ft:gpt-4o-mini-2024-07-18:acme::abc123", wantEnc: O200kBase, wantExac: true},
		{name: "chatgpt-4o", model: "chatgpt-4o-latest", wantEnc: O200kBase, wantExac: true},
		{name: "gpt-4.1", model: "gpt-4.1-nano", wantEnc: O200kBase, wantExac: true},
		{name: "gpt-4.5", model: "gpt-4.5-preview", wantEnc: O200kBase, wantExac: true},
		{name: "gpt-5", model: "gpt-5-mini", wantEnc: O200kBase, wantExac: true},
		{name: "o1", model: "o1-preview", wantEnc: O200kBase, wantExac: true},
		{name: "o3", model: "o3-mini", wantEnc: O200kBase, wantExac: true},
		{name: "o4", model: "o4-mini", wantEnc: O200kBase, wantExac: true},
		{name: "gpt-4", model: "gpt-4", wantEnc: Cl100kBase, wantExac: true, wantName: "cl100k_base"},
		{name: "gpt-4 dated", model: "gpt-4-0613", wantEnc: Cl100kBase, wantExac: true},
		{name: "gpt-4-turbo", model: "gpt-4-turbo-2024-04-09", wantEnc: Cl100kBase, wantExac: true},
		{name: "gpt-4-32k", model: "gpt-4-32k", wantEnc: Cl100kBase, wantExac: true},
		{name: "gpt-3.5", model: "gpt-3.5-turbo", wantEnc: Cl100kBase, wantExac: true},
		{name: "azure gpt-35", model: "gpt-35-turbo", wantEnc: Cl100kBase, wantExac: true},
		{name: "openrouter gpt-4", model: "openai/gpt-4", wantEnc: Cl100kBase, wantExac: true},
		{name: "openrouter gpt-3.5", model: "openai/gpt-3.5-turbo", wantEnc: Cl100kBase, wantExac: true},
		{name: "embedding", model: "text-embedding-3-small", wantEnc: Cl100kBase, wantExac: true},
		{name: "embedding ada", model: "text-embedding-ada-002", wantEnc: Cl100kBase, wantExac: true},
		{name: "claude", model: "claude-3-5-sonnet-20241022", wantEnc: O200kBase, wantName: "o200k_base×1.20 (claude estimate)"},
		{name: "claude upper", model: "Claude-Opus-4-1", wantEnc: O200kBase, wantName: "o200k_base×1.20 (claude estimate)"},
		{name: "openrouter claude", model: "anthropic/claude-3.5-sonnet", wantEnc: O200kBase, wantName: "o200k_base×1.20 (claude estimate)"},
		{name: "gemini", model: "gemini-1.5-pro", wantEnc: O200kBase, wantName: "o200k_base×1.00 (gemini estimate)"},
		{name: "openrouter gemini", model: "google/gemini-2.0-flash-001", wantEnc: O200kBase, wantName: "o200k_base×1.00 (gemini estimate)"},
		{name: "llama", model: "meta-llama/llama-3.1-70b-instruct", wantEnc: O200kBase, wantName: "o200k_base×1.00 (llama estimate)"},
		{name: "llama bare", model: "llama3.2", wantEnc: O200kBase},
		{name: "mistral", model: "mistral-large-latest", wantEnc: O200kBase, wantName: "o200k_base×1.00 (mistral estimate)"},
		{name: "mixtral", model: "mistralai/mixtral-8x7b-instruct", wantEnc: O200kBase},
		{name: "deepseek", model: "deepseek-chat", wantEnc: O200kBase, wantName: "o200k_base×1.00 (deepseek estimate)"},
		{name: "openrouter deepseek", model: "deepseek/deepseek-r1", wantEnc: O200kBase},
		{name: "qwen", model: "Qwen2.5-Coder-32B-Instruct", wantEnc: O200kBase, wantName: "o200k_base×1.00 (qwen estimate)"},
		{name: "empty", model: "", wantEnc: O200kBase, wantExac: true, wantName: "o200k_base"},
		{name: "unknown", model: "my-local-model", wantEnc: O200kBase, wantExac: true, wantName: "o200k_base"},
		{name: "unknown openai", model: "openai/gpt-oss-120b", wantEnc: O200kBase, wantExac: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := c.ForModel(tt.model)
			if tok == nil {
				t.Fatal("ForModel returned nil")
			}
			if got := tok.Encoding(); got != tt.wantEnc {
				t.Errorf("Encoding() = %q, want %q", got, tt.wantEnc)
			}
			if got := tok.Exact(); got != tt.wantExac {
				t.Errorf("Exact() = %v, want %v", got, tt.wantExac)
			}
			if tt.wantName != "" && tok.Name() != tt.wantName {
				t.Errorf("Name() = %q, want %q", tok.Name(), tt.wantName)
			}
			if tok.Note() == "" {
				t.Error("Note() is empty")
			}
		})
	}
}

func TestForModelShared(t *testing.T) {
	c := New(Options{})
	if c.ForModel("gpt-4o") != c.ForModel("GPT-4o-mini") {
		t.Error("two models of one family got different Tokenizers")
	}
	if c.ForModel("x") != c.ForModel("") {
		t.Error("unknown models got different Tokenizers")
	}
}

func TestFamiliesOverride(t *testing.T) {
	c := New(Options{Families: []Family{
		{Name: "house", Prefixes: []string{"My-"}, Encoding: Cl100kBase, Note: "ours"},
		{Prefixes: []string{"claude-"}, Scale: 1.3, Note: "recalibrated"},
		{Prefixes: []string{"gpt"}, Encoding: Cl100kBase, Note: "everything gpt"},
		{Prefixes: []string{"gpt-4o-special"}, Note: "longer user prefix wins among user families"},
	}})
	tests := []struct {
		name     string
		model    string
		wantEnc  string
		wantExac bool
		wantName string
	}{
		{name: "new model, upper-case prefix", model: "my-local-model", wantEnc: Cl100kBase, wantExac: true, wantName: "cl100k_base"},
		{name: "claude rescaled, label from prefix", model: "claude-3-opus", wantEnc: O200kBase, wantName: "o200k_base×1.30 (claude estimate)"},
		{name: "claude form not overridden", model: "anthropic/claude-3-opus", wantEnc: O200kBase, wantName: "o200k_base×1.20 (claude estimate)"},
		{name: "short user prefix beats long built-in", model: "gpt-4o", wantEnc: Cl100kBase, wantExac: true},
		{name: "longest user prefix", model: "gpt-4o-special-1", wantEnc: O200kBase, wantExac: true},
		{name: "built-in still used", model: "gemini-pro", wantEnc: O200kBase, wantName: "o200k_base×1.00 (gemini estimate)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := c.ForModel(tt.model)
			if tok.Encoding() != tt.wantEnc || tok.Exact() != tt.wantExac {
				t.Errorf("ForModel(%q) = %s exact=%v, want %s exact=%v", tt.model, tok.Encoding(), tok.Exact(), tt.wantEnc, tt.wantExac)
			}
			if tt.wantName != "" && tok.Name() != tt.wantName {
				t.Errorf("Name() = %q, want %q", tok.Name(), tt.wantName)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		fam     Family
		wantErr error
	}{
		{name: "defaults", fam: Family{Prefixes: []string{"x"}}},
		{name: "full", fam: Family{Prefixes: []string{"x"}, Encoding: Cl100kBase, Scale: 1.1, Estimate: true}},
		{name: "catch-all prefix", fam: Family{Prefixes: []string{""}}},
		{name: "no prefixes", fam: Family{Encoding: O200kBase}, wantErr: ErrNoPrefixes},
		{name: "unknown encoding", fam: Family{Prefixes: []string{"x"}, Encoding: "p50k_base"}, wantErr: ErrUnknownEncoding},
		{name: "negative scale", fam: Family{Prefixes: []string{"x"}, Scale: -1}, wantErr: ErrBadScale},
		{name: "NaN scale", fam: Family{Prefixes: []string{"x"}, Scale: math.NaN()}, wantErr: ErrBadScale},
		{name: "infinite scale", fam: Family{Prefixes: []string{"x"}, Scale: math.Inf(1)}, wantErr: ErrBadScale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Families: []Family{tt.fam}}
			err := opts.Validate()
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Validate() = %v, want %v", err, tt.wantErr)
			}
			defer func() {
				if r := recover(); (r != nil) != (tt.wantErr != nil) {
					t.Errorf("New panicked with %v; want a panic: %v", r, tt.wantErr != nil)
				}
			}()
			New(opts)
		})
	}
}

func TestBuiltinFamiliesValid(t *testing.T) {
	if err := (Options{Families: BuiltinFamilies()}).Validate(); err != nil {
		t.Fatal(err)
	}
	a := BuiltinFamilies()
	a[0].Prefixes[0] = "changed"
	if BuiltinFamilies()[0].Prefixes[0] == "changed" {
		t.Error("BuiltinFamilies shares its slices between calls")
	}
}

// The README's model table must list every built-in prefix.
func TestREADMEListsFamilies(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, f := range BuiltinFamilies() {
		for _, p := range f.Prefixes {
			if strings.HasPrefix(p, "openai/") || strings.HasPrefix(p, "ft:") {
				continue
			}
			if !strings.Contains(readme, "`"+p) {
				t.Errorf("README.md does not list prefix %q (family %s)", p, f.Name)
			}
		}
	}
}
