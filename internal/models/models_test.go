package models

import "testing"

func TestContextWindow(t *testing.T) {
	tests := []struct {
		model string
		want  int
	}{
		{"gpt-4o", 128_000},
		{"gpt-4o-mini-2024-07-18", 128_000},
		{"GPT-4", 8_192},
		{"gpt-4-turbo-preview", 128_000},
		{"gpt-4.1-mini", 1_047_576},
		{"openai/gpt-4o", 128_000},
		{"anthropic/claude-3.5-sonnet", 200_000},
		{"claude-sonnet-4-5", 200_000},
		{"deepseek-chat", 128_000},
		{"my-local-model", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := ContextWindow(tt.model); got != tt.want {
			t.Errorf("ContextWindow(%q) = %d, want %d", tt.model, got, tt.want)
		}
	}
}
