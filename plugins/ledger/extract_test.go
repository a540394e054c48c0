package main

import (
	"slices"
	"strings"
	"testing"

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

// TestDedupItems: each item once, in order of first appearance, used when
// any appearance is in an assistant message's range; items whose keys
// collide (here every key is the same) stay apart and give the same
// extraction as their real hashes.
func TestDedupItems(t *testing.T) {
	all := []item{
		{Kind: kindFile, Text: "a.go"}, {Kind: kindName, Text: "a.go"}, {Kind: kindFile, Text: "b.go"},
		{Kind: kindFile, Text: "a.go"}, {Kind: kindName, Text: "x"}, {Kind: kindFile, Text: "b.go"},
	}
	assistant := []int{2, 4} // all[2:4] are the agent's own
	real := make([]uint64, len(all))
	same := make([]uint64, len(all))
	for k, it := range all {
		real[k] = textHash(it.Text)
		same[k] = -uint64(it.Kind+1) * 0x9E3779B97F4A7C15 // every key 0
	}
	wantItems := []item{all[0], all[1], all[2], all[4]}
	wantUsed := []bool{true, false, true, false}
	dedups := map[string]func([]item, []uint64, []int) *extraction{"scanned": dedupScanned, "mapped": dedupMapped}
	for name, th := range map[string][]uint64{"real hashes": real, "colliding keys": same} {
		for how, dedup := range dedups {
			name := how + ", " + name
			x := dedup(all, th, assistant)
			if !slices.Equal(x.items, wantItems) || !slices.Equal(x.used, wantUsed) {
				t.Errorf("%s: items %v used %v; want %v %v", name, x.items, x.used, wantItems, wantUsed)
			}
			for i, it := range x.items {
				if k := slices.Index(all, it); x.hashes[i] != th[k] {
					t.Errorf("%s: item %d's hash %x, want %x", name, i, x.hashes[i], th[k])
				}
			}
		}
	}
}

// TestDedupScannedMapped: the scan dedupItems makes of a chunk's few items
// and the map it makes of more give the same extraction, on lists of
// every length around dedupScanMax with repeats, colliding hashes and
// assistant ranges.
func TestDedupScannedMapped(t *testing.T) {
	words := []string{"a.go", "b.go", "x", "y_z", "a.go", "42", "x"}
	for n := 0; n <= 2*dedupScanMax+3; n++ {
		all := make([]item, n)
		th := make([]uint64, n)
		for k := range all {
			all[k] = item{Kind: idents.Kind(k % 3), Text: words[(k*5)%len(words)]}
			th[k] = textHash(all[k].Text) & 3 // few hash values: many collisions
		}
		assistant := []int{n / 4, n / 2, 3 * n / 4, n}
		s, m := dedupScanned(all, th, assistant), dedupMapped(all, th, assistant)
		if !slices.Equal(s.items, m.items) || !slices.Equal(s.used, m.used) || !slices.Equal(s.hashes, m.hashes) {
			t.Fatalf("%d items: scanned %v %v, mapped %v %v", n, s.items, s.used, m.items, m.used)
		}
		if len(s.items) > 3*len(words) || n > 0 && len(s.items) == 0 {
			t.Fatalf("%d items: %d kept", n, len(s.items))
		}
	}
}
