package tokens

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// fixtureTexts returns every text CountMessage tokenizes in the
// repository's fixture conversations: contents, names, tool-call names
// and arguments.
func fixtureTexts(t *testing.T) []string {
	t.Helper()
	var texts []string
	for _, name := range []string{
		"medagentbench_fhir_react.jsonl", "mini_swe_agent_deepseek_swebench.jsonl", "swe_agent_trajectories.jsonl",
		"tau_bench_gpt4o_airline.jsonl", "toolbench_dfsdt_examples.jsonl",
	} {
		for _, cv := range readConversations(t, name, -1) {
			for i := range cv.Messages {
				m := &cv.Messages[i]
				texts = append(texts, m.Role, m.Text(), m.Name)
				for _, tc := range m.ToolCalls {
					texts = append(texts, tc.Function.Name, tc.Function.Arguments)
				}
			}
		}
	}
	return texts
}

// TestPiecesExact counts every fixture text piece by piece, with the cache
// cold and then warm, and compares it with the codec's count of the whole
// text, in both encodings.
func TestPiecesExact(t *testing.T) {
	t.Parallel()
	texts := fixtureTexts(t)
	if len(texts) < 1000 {
		t.Fatalf("%d fixture texts: too few to mean anything", len(texts))
	}
	c := New(Options{})
	for i := range c.encs {
		e := &c.encs[i]
		t.Run(e.name, func(t *testing.T) {
			pieces, bytes := 0, 0
			for pass := range 2 {
				for _, s := range texts {
					if s == "" {
						continue
					}
					got := e.count(s)
					if want := e.countWhole(s); got != want {
						t.Fatalf("pass %d: %d tokens by pieces, %d whole, in %q", pass, got, want, s)
					}
					if pass == 0 {
						bytes += len(s)
					}
				}
				if pass == 0 {
					pieces = e.pieces.len()
				}
			}
			t.Logf("%d texts, %d bytes, %d pieces remembered", len(texts), bytes, pieces)
			if pieces == 0 {
				t.Fatal("no piece remembered")
			}
		})
	}
}

// TestSegmentsExact counts every fixture text segment by segment alone
// (no piece cache in front), cold and then warm, and compares it with the
// codec's count of the whole text, in both encodings: segments are cut
// inside pieces, but their rule holds on any text.
func TestSegmentsExact(t *testing.T) {
	t.Parallel()
	texts := fixtureTexts(t)
	c := New(Options{})
	for i := range c.encs {
		e := &c.encs[i]
		t.Run(e.name, func(t *testing.T) {
			segs := newSegmentCache(pieceSlots, e.splitsCase)
			for pass := range 2 {
				for _, s := range texts {
					if s == "" {
						continue
					}
					if got, want := segs.count(s, e), e.countWhole(s); got != want {
						t.Fatalf("pass %d: %d tokens by segments, %d whole, in %q", pass, got, want, s)
					}
				}
			}
			if segs.len() == 0 {
				t.Fatal("no segment remembered")
			}
		})
	}
}

// TestSegmentsFound checks that a new piece made of known parts is
// counted from remembered segments: the codec counts only the parts no
// earlier piece held.
func TestSegmentsFound(t *testing.T) {
	t.Parallel()
	c := New(Options{})
	e := &c.encs[encO200k]
	if got, want := e.count("x = np.zeros(n) + self.path"), e.countWhole("x = np.zeros(n) + self.path"); got != want {
		t.Fatalf("%d tokens by pieces, %d whole", got, want)
	}
	before := e.codecBytes.Load()
	s := "y = self.zeros(n) + np.path"
	if got, want := e.count(s), e.countWhole(s); got != want {
		t.Fatalf("%d tokens by pieces, %d whole", got, want)
	}
	// countWhole above counted len(s) bytes; of the pieces only "y" is
	// new: " self.zeros(n)" and " np.path" are new pieces, but their
	// segments (" self", ".zeros", "(n", ")", " np", ".path") are not.
	if n := e.codecBytes.Load() - before - uint64(len(s)); n != 1 {
		t.Fatalf("the codec counted %d bytes of the new pieces, want 1 (\"y\")", n)
	}
}

// TestPiecesCuts checks the places a text is cut on texts made to sit on
// the rule's edges: single and double spaces, spaces next to newlines,
// tabs, DEL, digits, punctuation, contractions, non-ASCII letters and
// invalid UTF-8.
func TestPiecesCuts(t *testing.T) {
	t.Parallel()
	words := []string{"a", "I", "don't", "it's", "HELLO", "Hello", "x1", "123", "1234567", "3.14", "_x", "__init__",
		"./a/b.py", "/usr/lib", "a/", "(", ")", "[1,", "2]", "{\"k\":", "\"v\"}", "—", "é", "naïve", "日本", "\x7f", "\xff",
		"!", "?", "...", "'s", "'", "-", "--flag", "=", "==", "+1", "#", "$HOME", "@", "\\n", "`x`", "«", "»", "\u00a0",
		"getUser", "HTTPServer", "aB", "iPhone", "xY's", "fooBAR", "a1B", "zZ9", "mIxEdCaSe", "x.yZ"}
	seps := []string{" ", "  ", "\n", " \n", "\n ", "\t", " \t", "", "\r\n", "   ", "\n\t", "\n\n  ", "\r\n  ", " \n\t ",
		"\n/", "\n /", "\n\v", "\n\v ", "\n \v", "\n\u0085 ", "\n\u00a0", "\n \u00a0x", "\r", "\r ", "\n\r ", "/\n  ",
		"\n  \n  ", "  \n  \n", "\n \n\t", "\n\t\n\t\t", " \n \n ", "\n    \n    \n    ", ")\n  \n  "}
	c := New(Options{})
	for i := range c.encs {
		e := &c.encs[i]
		segs := newSegmentCache(pieceSlots, e.splitsCase)
		for _, a := range words {
			for _, sep := range seps {
				for _, b := range words {
					s := a + sep + b + " " + a
					want := e.countWhole(s)
					if got := e.count(s); got != want {
						t.Errorf("%s: %q: %d tokens by pieces, %d whole", e.name, s, got, want)
					}
					if got := segs.count(s, e); got != want {
						t.Errorf("%s: %q: %d tokens by segments, %d whole", e.name, s, got, want)
					}
				}
			}
		}
	}
}

// FuzzPieces compares counting by pieces, and by segments alone, with
// counting whole on any text.
func FuzzPieces(f *testing.F) {
	for _, s := range []string{"hello world", "a  b c", "x = f(a, b) + 1", "don't stop", "日本 語 x", "a\x7f b", "1 22 333 4444", "\xff \xfe",
		"def f(x):\n    return x\n\n\tpass\n", "a(\n/b", "x \n  y\r\n\tz", "ok\n\v w", "self.getUserName(xID) aB'S"} {
		f.Add(s)
	}
	c := New(Options{})
	var segs [numEncodings]*pieceCache
	for i := range segs {
		segs[i] = newSegmentCache(pieceSlots, c.encs[i].splitsCase)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := range c.encs {
			e := &c.encs[i]
			if s == "" {
				continue
			}
			want := e.countWhole(s)
			// Twice: the second time the pieces come from the cache.
			for range 2 {
				if got := e.count(s); got != want {
					t.Fatalf("%s: %q: %d tokens by pieces, %d whole", e.name, s, got, want)
				}
				if got := segs[i].count(s, e); got != want {
					t.Fatalf("%s: %q: %d tokens by segments alone, %d whole", e.name, s, got, want)
				}
			}
		}
	})
}

// TestPieceCacheBound fills a small piece cache past its size: it holds
// at most its slots, a long piece is never held, and counts stay right
// while counts are replaced, counting the same text again included.
func TestPieceCacheBound(t *testing.T) {
	t.Parallel()
	c := New(Options{})
	e := &c.encs[encO200k]
	e.pieces = newPieceCache(100, e.splitsCase)
	if got := len(e.pieces.slots); got != 128 {
		t.Fatalf("a table of about 100 slots has %d, want 128", got)
	}
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "w%d x_%d ", i, i%37)
	}
	s := b.String()
	want := e.countWhole(s)
	for pass := range 3 {
		if got := e.count(s); got != want {
			t.Fatalf("pass %d: %d tokens by pieces, %d whole", pass, got, want)
		}
	}
	segs := e.pieces.segs.len()
	if n := e.pieces.len() - segs; n > 128 || n < 64 {
		t.Fatalf("%d pieces held, want 64–128", n)
	}
	if segs > 128 || segs < 64 {
		t.Fatalf("%d segments held, want 64–128", segs)
	}
	long := strings.Repeat("x", maxCachedPiece+1)
	e.pieces = newPieceCache(100, e.splitsCase)
	e.count(long + " " + long)
	if n := e.pieces.len(); n != 0 {
		t.Fatalf("%d pieces held after two of %d bytes, want 0", n, len(long))
	}
}

// TestPieceCacheSlots checks the table itself: a count comes back under
// its hash and no other, a full bucket replaces the slot the hash names,
// and a hash whose upper 56 bits match another's is the same piece to it
// (the collision the design accepts).
func TestPieceCacheSlots(t *testing.T) {
	t.Parallel()
	p := newSegmentCache(8, false) // one bucket
	for i := range uint64(8) {
		p.put(i<<8|1<<40, uint32(i))
	}
	for i := range uint64(8) {
		if n, ok := p.get(i<<8 | 1<<40); !ok || n != uint32(i) {
			t.Fatalf("slot %d: got %d, %v", i, n, ok)
		}
	}
	if _, ok := p.get(9<<8 | 1<<40); ok {
		t.Fatal("a hash never put was found")
	}
	p.put(5<<61|1<<40, 42) // the bucket is full: replaces slot 5
	if n, ok := p.get(5<<61 | 1<<40); !ok || n != 42 {
		t.Fatalf("replacing count: got %d, %v", n, ok)
	}
	if _, ok := p.get(5<<8 | 1<<40); ok {
		t.Fatal("the replaced count is still found")
	}
	if n, ok := p.get(5<<61 | 1<<40 | 0x7F); !ok || n != 42 {
		t.Fatalf("a hash differing in its low byte: got %d, %v", n, ok)
	}
	if got := p.len(); got != 8 {
		t.Fatalf("%d slots held, want 8", got)
	}
}

// TestPiecesConcurrent counts the same and different texts from many
// goroutines (run with -race).
func TestPiecesConcurrent(t *testing.T) {
	t.Parallel()
	c := New(Options{})
	e := &c.encs[encCl100k]
	e.pieces = newPieceCache(64, e.splitsCase) // small: generations turn over while counting
	texts := []string{"the quick brown fox jumps over the lazy dog", "def f(x): return x + 1", "a b c d e f g h i j k l m n o p"}
	want := make([]int, len(texts))
	for i, s := range texts {
		want[i] = e.countWhole(s)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 200 {
				i := (g + k) % len(texts)
				if got := e.count(texts[i]); got != want[i] {
					t.Errorf("%q: %d tokens, want %d", texts[i], got, want[i])
					return
				}
				e.count(fmt.Sprintf("g%d k%d", g, k))
			}
		})
	}
	wg.Wait()
}
