package facts_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
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
		if got := facts.CommandWords(facts.UnescapeJSON(tt.args)); !slices.Equal(got, tt.want) {
			t.Errorf("facts.CommandWords(%s) = %v, want %v", tt.args, got, tt.want)
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
		if got := facts.UnescapeJSON(in); got != want {
			t.Errorf("facts.UnescapeJSON(%q) = %q, want %q", in, got, want)
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
		if got, want := facts.Instruction(s), facts.InstructionLowered(strings.ToLower(s)); got != want {
			t.Fatalf("instruction(%q) = %v, the lowered search says %v", s, got, want)
		}
		want := len([]rune(facts.OneLine(s)))
		for _, limit := range []int{0, 1, 5, 200} {
			got := facts.OneLineRunes(s, limit)
			if want <= limit && got != want || want > limit && got != limit+1 {
				t.Fatalf("facts.OneLineRunes(%q, %d) = %d; oneLine has %d runes", s, limit, got, want)
			}
		}
	}
}

// TestDedup: each fact once, in order of first appearance, used when any
// appearance is; the same whether deduper scans (few facts) or maps them
// (more), on lists of every length around dedupScanMax with repeats.
func TestDedup(t *testing.T) {
	words := []string{"a.go", "b.go", "x", "y_z", "a.go", "42", "x", "c.go", "d", "e", "f", "g"}
	for n := 0; n <= 4*facts.DedupScanMax+3; n++ {
		var items []idents.Item
		var used []bool
		var want facts.Set
		for k := range n {
			it := idents.Item{Kind: idents.Kind(k % 5), Text: words[(k*5)%len(words)] + strconv.Itoa(k%17)}
			items, used = append(items, it), append(used, k%3 == 0)
			if i := slices.Index(want.Items, it); i >= 0 {
				want.Used[i] = want.Used[i] || k%3 == 0
			} else {
				want.Items, want.Used = append(want.Items, it), append(want.Used, k%3 == 0)
			}
		}
		got := facts.Dedup(items, used)
		if !slices.Equal(got.Items, want.Items) || !slices.Equal(got.Used, want.Used) {
			t.Fatalf("%d items: %v %v, want %v %v", n, got.Items, got.Used, want.Items, want.Used)
		}
	}
}
