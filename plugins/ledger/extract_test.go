package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/plugtest"
)

func TestCommandWords(t *testing.T) {
	tests := []struct {
		args string
		want []string
	}{
		{`{"command": "cd /testbed && grep -n foo a.py | head -20"}`, []string{"grep", "head"}},
		{`{"command": "python reproduce.py"}`, []string{"python"}},
		{`{"command": "/usr/bin/python3 -c 'print(1)'; ls -la; cat x; sed y"}`, []string{"python3", "ls", "cat"}},
		{`{"query": "flights from SFO"}`, nil},
		{`{"n": 3}`, nil},
		{`{}`, nil},
	}
	for _, tt := range tests {
		if got := commandWords(unescapeJSON(tt.args)); !slices.Equal(got, tt.want) {
			t.Errorf("commandWords(%s) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

func TestUnescapeJSON(t *testing.T) {
	tests := map[string]string{
		`plain`:                   "plain",
		`a\nb\tc\"d\\e\/f`:        "a\nb\tc\"d\\e/f",
		`\u00e9\u0041`:            "éA",
		`bad \x and \u12 end \`:   `bad \x and \u12 end \`,
		`cat <<'EOF'\ndef f():\n`: "cat <<'EOF'\ndef f():\n",
	}
	for in, want := range tests {
		if got := unescapeJSON(in); got != want {
			t.Errorf("unescapeJSON(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSaidShortcuts checks saidItems' shortcuts against what they stand
// for: instruction's one-pass ASCII scan against the lowered search,
// oneLineRunes against counting oneLine's runes, on a table of edge cases
// and every line and message of the repository's conversations.
func TestSaidShortcuts(t *testing.T) {
	texts := []string{"", " ", "Please fix it.", "PLEASE", "xplease", "please_x", "do  not touch", "Do not", "don't", "DON'T!",
		"you MUST run it", "mustard", "at   least", "At least 3", "onlyx only", "\u212Aeep make sure", "ma\u212Ae sure", "İnstead",
		"\tmust\n", "a\u00a0b  c", "\xff\xfe must", strings.Repeat("word ", 60), " lead and trail "}
	for _, c := range plugtest.Load(t, false) {
		for i := range c.Messages {
			text := c.Messages[i].Text()
			texts = append(texts, text)
			texts = append(texts, strings.Split(text, "\n")...)
		}
	}
	for _, s := range texts {
		if got, want := instruction(s), instructionLowered(strings.ToLower(s)); got != want {
			t.Fatalf("instruction(%q) = %v, the lowered search says %v", s, got, want)
		}
		want := len([]rune(oneLine(s)))
		for _, limit := range []int{0, 1, 5, 200} {
			got := oneLineRunes(s, limit)
			if want <= limit && got != want || want > limit && got != limit+1 {
				t.Fatalf("oneLineRunes(%q, %d) = %d; oneLine has %d runes", s, limit, got, want)
			}
		}
	}
}
