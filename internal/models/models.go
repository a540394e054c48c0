// Package models knows facts about LLM models that compaction needs: their
// context windows. Names match by longest prefix, case-insensitively, with
// an optional provider prefix ("openai/", "anthropic/") ignored.
package models

import "strings"

// window is a model-name prefix and its context window in tokens.
type window struct {
	prefix string
	tokens int
}

// windows lists published context windows, longest prefixes first within a
// family (the lookup takes the longest match anyway).
var windows = []window{
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
	{"qwen", 128_000},
	{"mistral-large", 128_000},
}

// ContextWindow returns the context window of model in tokens, or 0 when
// the model is unknown.
func ContextWindow(model string) int {
	name := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	best, tokens := 0, 0
	for _, w := range windows {
		if strings.HasPrefix(name, w.prefix) && len(w.prefix) > best {
			best, tokens = len(w.prefix), w.tokens
		}
	}
	return tokens
}
