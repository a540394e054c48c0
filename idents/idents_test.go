package idents

import (
	"slices"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/dataset"
)

func TestExtract(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		numbers bool
		want    []Item
	}{
		{"paths", "edit ./src/app/main.py and /testbed/setup.cfg, not http://x.org/a/b.html or a/b or np.zeros; x.py", false,
			[]Item{{KindFile, "./src/app/main.py"}, {KindFile, "/testbed/setup.cfg"}, {KindFile, "x.py"}}},
		{"definitions and symbols", "def separability_matrix(transform):\n    return _cstack(m.Linear1D(1), np.zeros(3)) + len(x) + getUser()", false,
			[]Item{{KindDef, "separability_matrix"}, {KindName, "_cstack"}, {KindName, "m.Linear1D"}, {KindName, "np.zeros"}, {KindName, "getUser"}}},
		{"class and func", "class CompoundModel(Model):\nfunc (p *Plugin) Close() {}\nfunc parseArgs(x int)", false,
			[]Item{{KindDef, "CompoundModel"}, {KindDef, "parseArgs"}}},
		{"ids", "reservation ZFA04Y for mia_li_3668, commit a1b2c3d; not utf-16, 64-bit or ab12", false,
			[]Item{{KindID, "ZFA04Y"}, {KindID, "mia_li_3668"}, {KindID, "a1b2c3d"}}},
		{"numbers only from observations", "line 1234 costs 56.78 and 4,500 items; v1.234, x_123 and 12", true,
			[]Item{{KindNumber, "1234"}, {KindNumber, "56.78"}, {KindNumber, "4,500"}, {KindID, "x_123"}}},
		{"no numbers from the agent", "line 1234", false, nil},
		{"errors", "Traceback:\n  File \"x.py\"\nTypeError: unsupported operand type(s) for |: 'int'\nFAILED tests/test_a.py::test_b - assert 1\nerror: could not build\nno errors here, terror", true,
			[]Item{{KindName, "TypeError"}, {KindName, "test_b"}, {KindError, "TypeError: unsupported operand type(s) for |: 'int'"}, {KindError, "FAILED tests/test_a.py::test_b - assert 1"}, {KindError, "error: could not build"}}},
		{"errors only from observations", "TypeError: x", false, []Item{{KindName, "TypeError"}}},
		{"an exception named inside a line is a name, not an error", "raised KeyError and ValueError twice", true,
			[]Item{{KindName, "KeyError"}, {KindName, "ValueError"}}},
		{"a bare exception ending its line is an error", "Traceback (most recent call last):\n  raise KeyError\nKeyError\n", true,
			[]Item{{KindName, "KeyError"}, {KindName, "KeyError"}, {KindError, "KeyError"}}},
		{"listing line numbers become a range", "    10\tdef fold():\n    11\t    pass\n    12\t\n", true,
			[]Item{{KindDef, "fold"}, {KindNumber, "10-12"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Extract(nil, tt.text, tt.numbers)
			var kept []Item
			for _, it := range got {
				if it.Kind != KindFile || strings.Contains(tt.name, "paths") {
					kept = append(kept, it)
				}
			}
			if strings.Contains(tt.name, "paths") {
				kept = filter(got, KindFile)
			}
			if !slices.Equal(kept, tt.want) {
				t.Fatalf("got  %v\nwant %v", kept, tt.want)
			}
		})
	}
}

func filter(items []Item, kind Kind) []Item {
	var out []Item
	for _, it := range items {
		if it.Kind == kind {
			out = append(out, it)
		}
	}
	return out
}

// TestExtractTerminates: hostile texts end (each scanner always moves
// forward).
func TestExtractTerminates(t *testing.T) {
	for _, s := range []string{"ErrorError", "xErrorException: a", "rrorrror", "FAILED FAILED ", strings.Repeat("Exception", 1000), "error: \nerror: ", "Error", "1,234,", "9,999.", "\\u12"} {
		Extract(nil, s, true)
	}
}

func FuzzExtract(f *testing.F) {
	f.Add("TypeError: x at src/a.py line 1,234", true)
	f.Add(`{"command":"cd /t \u0026\u0026 grep -n \"def x(\" a/b.py"}`, false)
	f.Add("    10\tdef fold():\n    11\t    pass\n12-x\n", true)
	f.Fuzz(func(t *testing.T, s string, numbers bool) {
		for _, it := range Extract(nil, s, numbers) {
			if it.Text == "" || !strings.Contains(s, it.Text) && !inRange(s, it) {
				t.Fatalf("item %v is not in the text %q", it, s)
			}
		}
	})
}

// inRange reports whether it is a range of listed line numbers whose
// ends are both in s.
func inRange(s string, it Item) bool {
	a, b, ok := strings.Cut(it.Text, "-")
	return it.Kind == KindNumber && ok && allDigits(a) && allDigits(b) && strings.Contains(s, a) && strings.Contains(s, b)
}

// TestPlainRunHoldsNothing checks extract's shortcut: a run plainRun
// passes holds no item classify would find, whatever the bytes around it
// (other than a '(' after it or a definer before it, which extract checks
// first). The runs are every run of the repository's conversations and a
// table of edge cases.
func TestPlainRunHoldsNothing(t *testing.T) {
	runs := []string{"", ".", "-", "--", "word", "word.", "word-", "-word", "The", "HTTP", "ALLCAPS", "Capital", "path/to/dir",
		"a-b-c", "getUser", "get.user", "x_y", "abc1", "1234", "2024-05-15", "a.py", "Word.", "wORD", "aB", "x/Y", "a-B"}
	for _, text := range fixtureTexts(t) {
		for j := 0; j < len(text); {
			if class[text[j]]&cPath == 0 {
				j++
				continue
			}
			k := j
			for k < len(text) && class[text[k]]&cPath != 0 {
				k++
			}
			runs = append(runs, text[j:k])
			j = k
		}
	}
	plain := 0
	for _, run := range runs {
		if !plainRun(run) {
			continue
		}
		plain++
		for _, next := range []byte{0, ' ', '"', ':', '.', '\n'} {
			for _, after := range []byte{0, '(', ':', '{', '<', '['} {
				for _, observed := range []bool{false, true} {
					for _, key := range []bool{false, true} {
						if got := classify(nil, run, strings.Contains(run, "."), next, after, "x", observed, key); len(got) > 0 {
							t.Fatalf("plainRun(%q) = true, but classify finds %v (next %q, after %q, observed %v, key %v)", run, got, next, after, observed, key)
						}
					}
				}
			}
		}
	}
	if plain == 0 || plain == len(runs) {
		t.Fatalf("%d of %d runs plain: the test's runs do not exercise both sides", plain, len(runs))
	}
}

// fixtureTexts returns the text of every message of the repository's
// fixture conversations.
func fixtureTexts(tb testing.TB) []string {
	tb.Helper()
	files, err := dataset.FixtureFiles()
	if err != nil {
		tb.Fatal(err)
	}
	var texts []string
	for _, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, c := range convs {
			for i := range c.Chat.Messages {
				texts = append(texts, c.Chat.Messages[i].Text())
			}
		}
	}
	if len(texts) == 0 {
		tb.Fatal("no fixture texts")
	}
	return texts
}

// BenchmarkExtract is the host's extraction over every message of the
// fixture conversations (what ledger folds ask for, in bulk), in bytes of
// text per second. A fold's extraction runs natively in the host, so this
// benchmark is native too.
func BenchmarkExtract(b *testing.B) {
	texts := fixtureTexts(b)
	size := 0
	for _, t := range texts {
		size += len(t)
	}
	b.SetBytes(int64(size))
	var buf []Item
	for b.Loop() {
		for i, t := range texts {
			buf = Extract(buf[:0], t, i%2 == 0)
		}
	}
}
