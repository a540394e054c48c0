package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValid(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"object", `{"a": [1, -2.5e+3, true, false, null, "x\n\u00e9"], "b": {}}`, true},
		{"empty array", ` [ ] `, true},
		{"nested", `[[[[{"a":[{}]}]]]]`, true},
		{"string", `"plain"`, true},
		{"zero", `0`, true},
		{"utf8", `"héllo ✓ 😀"`, true},
		{"surrogate pair escape", `"\ud83d\ude00"`, true},
		{"lone surrogate escape", `"\ud83d"`, true},
		{"trailing comma array", `[1,]`, false},
		{"trailing comma object", `{"a":1,}`, false},
		{"missing colon", `{"a" 1}`, false},
		{"single quotes", `{'a':1}`, false},
		{"unquoted key", `{a:1}`, false},
		{"leading zero", `01`, false},
		{"bare minus", `-`, false},
		{"dot without digits", `1.`, false},
		{"exponent without digits", `1e`, false},
		{"control character", "\"a\tb\"", false},
		{"bad escape", `"\x"`, false},
		{"short unicode escape", `"\u12"`, false},
		{"invalid utf8", "\"a\xffb\"", false},
		{"invalid utf8 long", "\"abcdefghijklmnop\xc3\x28qrstuvwxyz\"", false},
		{"utf8 surrogate", "\"\xed\xa0\x80\"", false},
		{"unterminated string", `"abc`, false},
		{"unterminated array", `[1, 2`, false},
		{"two values", `1 2`, false},
		{"empty", ``, false},
		{"bad literal", `nul`, false},
		{"mismatched", `[1}`, false},
		{"bom", "\xef\xbb\xbf{}", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Valid([]byte(tt.in)); got != tt.ok {
				t.Errorf("Valid(%q) = %v, want %v", tt.in, got, tt.ok)
			}
		})
	}
}

func TestDepth(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if !Valid([]byte(deep)) {
		t.Error("nesting at the limit rejected")
	}
	deeper := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	s := New([]byte(deeper))
	_, _, _, err := s.Skip()
	var se *Error
	if !errors.As(err, &se) || !strings.Contains(se.Msg, "nested deeper") {
		t.Errorf("nesting over the limit: %v", err)
	}
}

func TestWalk(t *testing.T) {
	data := []byte(` {"role": "user", "content": "a\"b", "n": [1, {"x": null}], "k\u0065y": 2} `)
	s := New(data)
	if err := s.BeginObject(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
		k := string(key)
		if esc {
			k = Unquote([]byte(`"` + k + `"`))
		}
		keys = append(keys, k)
		switch k {
		case "content":
			raw, esc, err := s.String()
			if err != nil || !esc || string(raw) != `"a\"b"` || Unquote(raw) != `a"b` {
				t.Errorf("content: %q %v %v", raw, esc, err)
			}
		case "n":
			kind, start, end, err := s.Skip()
			if err != nil || kind != Array || string(data[start:end]) != `[1, {"x": null}]` {
				t.Errorf("n: %v %q %v", kind, data[start:end], err)
			}
		default:
			if _, _, _, err := s.Skip(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "role,content,n,key" {
		t.Errorf("keys %v", keys)
	}
}

func TestUnquote(t *testing.T) {
	for _, in := range []string{
		`""`, `"plain"`, `"a\nb\tc\\d\/e\"f"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83dx"`, `"\ude00"`,
		`"\ud83d\u0041"`, `"\b\f\r"`, `"mixed é \u00e9 😀"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if got := Unquote([]byte(in)); got != want {
			t.Errorf("Unquote(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestErrorsHaveOffsets(t *testing.T) {
	s := New([]byte(`{"a": [1, 2,, 3]}`))
	_, _, _, err := s.Skip()
	var se *Error
	if !errors.As(err, &se) || se.Offset != 12 {
		t.Errorf("error %v, want one at byte 12", err)
	}
}

// FuzzValid checks the scanner against encoding/json: the same texts are
// valid, except that the scanner also requires valid UTF-8; and strings
// decode to the same text.
func FuzzValid(f *testing.F) {
	for _, s := range []string{`{"a":[1,"b",null,true,{"c":-1.5e3}]}`, `"\u00e9\ud83d\ude00\n"`, `[]`, `"x\\y"`, "\"\xff\"", `{"a":}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := json.Valid(data) && utf8.Valid(data)
		if got := Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json (and UTF-8) says %v", data, got, want)
		}
		s := New(data)
		if s.Peek() == String {
			raw, _, err := s.String()
			if err == nil && s.End() == nil {
				var text string
				if err := json.Unmarshal(data, &text); err != nil {
					t.Fatalf("%q: scanner accepted, encoding/json: %v", data, err)
				}
				if got := Unquote(raw); got != text {
					t.Fatalf("Unquote(%q) = %q, encoding/json %q", raw, got, text)
				}
			}
		}
	})
}

func BenchmarkSkip(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	for i := 0; i < 200; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"role":"tool","tool_call_id":"call_1","content":"`)
		sb.WriteString(strings.Repeat(`total 48\ndrwxr-xr-x  5 user user 4096 Jan  1 00:00 src/module/file.py \"quoted\"\n`, 5))
		sb.WriteString(`"}`)
	}
	sb.WriteString(`]}`)
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.Run("jsonscan", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if !Valid(data) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding-json-valid", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if !json.Valid(data) {
				b.Fatal("invalid")
			}
		}
	})
}

// BenchmarkData validates the messages of the fixture data files.
func BenchmarkData(b *testing.B) {
	for _, name := range []string{"mini_swe_agent_deepseek_swebench.jsonl", "tau_bench_gpt4o_airline.jsonl"} {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "conversations", name))
		if err != nil {
			b.Fatal(err)
		}
		lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
		b.Run(name, func(b *testing.B) {
			b.Run("jsonscan", func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					for _, l := range lines {
						if !Valid(l) {
							b.Fatal("invalid")
						}
					}
				}
			})
			b.Run("encoding-json-valid", func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					for _, l := range lines {
						if !json.Valid(l) {
							b.Fatal("invalid")
						}
					}
				}
			})
		})
	}
}

// BenchmarkUnquote decodes every string of the fixture data files that
// holds an escape, as the host does when it parses a message or a
// plugin's new one.
func BenchmarkUnquote(b *testing.B) {
	var strs [][]byte
	size := 0
	for _, name := range []string{"mini_swe_agent_deepseek_swebench.jsonl", "tau_bench_gpt4o_airline.jsonl"} {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "conversations", name))
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			for i := 0; i < len(l); i++ {
				if l[i] != '"' {
					continue
				}
				s := Scanner{data: l[i:]}
				raw, esc, err := s.String()
				if err != nil {
					continue
				}
				if esc {
					strs = append(strs, raw)
					size += len(raw)
				}
				i += len(raw) - 1
			}
		}
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		for _, s := range strs {
			_ = Unquote(s)
		}
	}
}
