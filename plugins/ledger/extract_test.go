package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/plugtest"
)

func TestExtract(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		numbers bool
		want    []item
	}{
		{"paths", "edit ./src/app/main.py and /testbed/setup.cfg, not http://x.org/a/b.html or a/b or np.zeros; x.py", false,
			[]item{{kindFile, "./src/app/main.py"}, {kindFile, "/testbed/setup.cfg"}, {kindFile, "x.py"}}},
		{"definitions and symbols", "def separability_matrix(transform):\n    return _cstack(m.Linear1D(1), np.zeros(3)) + len(x) + getUser()", false,
			[]item{{kindDef, "separability_matrix"}, {kindName, "_cstack"}, {kindName, "m.Linear1D"}, {kindName, "np.zeros"}, {kindName, "getUser"}}},
		{"class and func", "class CompoundModel(Model):\nfunc (p *Plugin) Close() {}\nfunc parseArgs(x int)", false,
			[]item{{kindDef, "CompoundModel"}, {kindDef, "parseArgs"}}},
		{"ids", "reservation ZFA04Y for mia_li_3668, commit a1b2c3d; not utf-16, 64-bit or ab12", false,
			[]item{{kindID, "ZFA04Y"}, {kindID, "mia_li_3668"}, {kindID, "a1b2c3d"}}},
		{"numbers only from observations", "line 1234 costs 56.78 and 4,500 items; v1.234, x_123 and 12", true,
			[]item{{kindNumber, "1234"}, {kindNumber, "56.78"}, {kindNumber, "4,500"}, {kindID, "x_123"}}},
		{"no numbers from the agent", "line 1234", false, nil},
		{"errors", "Traceback:\n  File \"x.py\"\nTypeError: unsupported operand type(s) for |: 'int'\nFAILED tests/test_a.py::test_b - assert 1\nerror: could not build\nno errors here, terror", true,
			[]item{{kindName, "TypeError"}, {kindName, "test_b"}, {kindError, "TypeError: unsupported operand type(s) for |: 'int'"}, {kindError, "FAILED tests/test_a.py::test_b - assert 1"}, {kindError, "error: could not build"}}},
		{"errors only from observations", "TypeError: x", false, []item{{kindName, "TypeError"}}},
		{"an exception named inside a line is a name, not an error", "raised KeyError and ValueError twice", true,
			[]item{{kindName, "KeyError"}, {kindName, "ValueError"}}},
		{"a bare exception ending its line is an error", "Traceback (most recent call last):\n  raise KeyError\nKeyError\n", true,
			[]item{{kindName, "KeyError"}, {kindName, "KeyError"}, {kindError, "KeyError"}}},
		{"listing line numbers become a range", "    10\tdef fold():\n    11\t    pass\n    12\t\n", true,
			[]item{{kindDef, "fold"}, {kindNumber, "10-12"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := extract(nil, tt.text, tt.numbers)
			var kept []item
			for _, it := range got {
				if it.kind != kindFile || strings.Contains(tt.name, "paths") {
					kept = append(kept, it)
				}
			}
			if strings.Contains(tt.name, "paths") {
				kept = filter(got, kindFile)
			}
			if !slices.Equal(kept, tt.want) {
				t.Fatalf("got  %v\nwant %v", kept, tt.want)
			}
		})
	}
}

func filter(items []item, kind int) []item {
	var out []item
	for _, it := range items {
		if it.kind == kind {
			out = append(out, it)
		}
	}
	return out
}

// TestExtractTerminates: hostile texts end (each scanner always moves
// forward).
func TestExtractTerminates(t *testing.T) {
	for _, s := range []string{"ErrorError", "xErrorException: a", "rrorrror", "FAILED FAILED ", strings.Repeat("Exception", 1000), "error: \nerror: ", "Error", "1,234,", "9,999.", "\\u12"} {
		extract(nil, s, true)
		unescapeJSON(s)
	}
}

func FuzzExtract(f *testing.F) {
	f.Add("TypeError: x at src/a.py line 1,234", true)
	f.Add(`{"command":"cd /t \u0026\u0026 grep -n \"def x(\" a/b.py"}`, false)
	f.Add("    10\tdef fold():\n    11\t    pass\n12-x\n", true)
	f.Fuzz(func(t *testing.T, s string, numbers bool) {
		for _, it := range extract(nil, s, numbers) {
			if it.text == "" || !strings.Contains(s, it.text) && !inRange(s, it) {
				t.Fatalf("item %v is not in the text %q", it, s)
			}
		}
		commandWords(unescapeJSON(s))
	})
}

// inRange reports whether it is a range of listed line numbers whose
// ends are both in s.
func inRange(s string, it item) bool {
	a, b, ok := strings.Cut(it.text, "-")
	return it.kind == kindNumber && ok && allDigits(a) && allDigits(b) && strings.Contains(s, a) && strings.Contains(s, b)
}

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

// TestPlainRunHoldsNothing checks extract's shortcut: a run plainRun
// passes holds no item classify would find, whatever the bytes around it
// (other than a '(' after it or a definer before it, which extract checks
// first). The runs are every run of the repository's conversations and a
// table of edge cases.
func TestPlainRunHoldsNothing(t *testing.T) {
	runs := []string{"", ".", "-", "--", "word", "word.", "word-", "-word", "The", "HTTP", "ALLCAPS", "Capital", "path/to/dir",
		"a-b-c", "getUser", "get.user", "x_y", "abc1", "1234", "2024-05-15", "a.py", "Word.", "wORD", "aB", "x/Y", "a-B"}
	for _, c := range plugtest.Load(t, false) {
		for i := range c.Messages {
			text := c.Messages[i].Text()
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
						if got := classify(nil, run, next, after, "x", observed, key); len(got) > 0 {
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
