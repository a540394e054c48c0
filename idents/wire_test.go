package idents

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestWireRoundTrip: what a request's answer decodes to is what Extract
// finds, text by text, for every fixture text read both ways, edge cases
// and an empty batch.
func TestWireRoundTrip(t *testing.T) {
	t.Parallel()
	var in []Input
	for _, s := range append(fixtureTexts(t), "", "x", "    10\tdef fold():\n    11\t    pass\n", "\xff\xfe", strings.Repeat("a/b.py ", 300)) {
		in = append(in, Input{Text: s, Observed: true}, Input{Text: s})
	}
	for _, batch := range [][]Input{nil, in[:1], in} {
		ans, err := Answer(context.Background(), nil, AppendRequest(nil, batch))
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeAnswer(ans, batch, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(batch) {
			t.Fatalf("%d texts answered for %d", len(got), len(batch))
		}
		literals := 0
		for k, b := range batch {
			want := Extract(nil, b.Text, b.Observed)
			if !slices.Equal(got[k], want) {
				t.Fatalf("text %d: decoded %v, Extract finds %v", k, got[k], want)
			}
			for _, it := range got[k] {
				if _, ok := within(b.Text, it.Text); !ok {
					literals++
				}
			}
		}
		if len(batch) == len(in) && literals == 0 {
			t.Fatal("no literal item in the batch: the test does not exercise them")
		}
	}
}

func TestRequestSize(t *testing.T) {
	t.Parallel()
	in := []Input{{Text: strings.Repeat("x", 200), Observed: true}, {Text: ""}, {Text: strings.Repeat("y", 20000)}}
	size := 1
	for _, x := range in {
		size += RequestSize(x)
	}
	if got := len(AppendRequest(nil, in)); got != size {
		t.Fatalf("the request is %d bytes; RequestSize adds up to %d", got, size)
	}
}

// TestAnswerRefuses: a request out of format is an error naming what is
// wrong, and a done context stops the extraction.
func TestAnswerRefuses(t *testing.T) {
	t.Parallel()
	tests := map[string][]byte{
		"empty":           nil,
		"unknown version": {2, 0, 1, 'x'},
		"unknown flags":   {RequestVersion, 0x02, 1, 'x'},
		"length cut":      {RequestVersion, 0, 0x80},
		"text cut":        {RequestVersion, 0, 5, 'a', 'b'},
		"huge length":     {RequestVersion, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"flags alone":     {RequestVersion, 0},
	}
	for name, req := range tests {
		if _, err := Answer(context.Background(), nil, req); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want an error wrapping ErrMalformed", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Answer(ctx, nil, AppendRequest(nil, []Input{{Text: "a/b.py"}})); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled context: got %v", err)
	}
}

// TestDecodeAnswerRefuses: an answer that breaks the format, or does not
// fit its request, is an error, never a panic or an item outside its text.
func TestDecodeAnswerRefuses(t *testing.T) {
	t.Parallel()
	in := []Input{{Text: "abc"}}
	tests := map[string][]byte{
		"no texts":           nil,
		"count too large":    {9},
		"unknown kind":       {1, byte(KindSaid), 0, 1},
		"kind ran":           {1, byte(KindRan), 0, 1},
		"span outside":       {1, byte(KindFile), 2, 5},
		"span offset past":   {1, byte(KindFile), 9, 0},
		"literal past end":   {1, byte(KindFile) | tagLiteral, 9, 'x'},
		"item cut":           {1, byte(KindFile)},
		"bytes left over":    {0, 0},
		"count cut":          {0x80},
		"span length cut":    {1, byte(KindFile), 0},
		"items past the end": {2, byte(KindFile), 0, 1},
	}
	for name, ans := range tests {
		if got, err := DecodeAnswer(ans, in, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, %v; want an error wrapping ErrMalformed", name, got, err)
		}
	}
	if got, err := DecodeAnswer([]byte{1, byte(KindFile), 1, 2}, in, nil); err != nil || len(got) != 1 || !slices.Equal(got[0], []Item{{KindFile, "bc"}}) {
		t.Fatalf("a well-formed span: got %v, %v", got, err)
	}
}

func FuzzAnswer(f *testing.F) {
	f.Add(AppendRequest(nil, []Input{{Text: "TypeError: x at src/a.py line 1,234", Observed: true}, {Text: "def f(x):"}}))
	f.Add([]byte{RequestVersion, 1, 3, 'a', 'b'})
	f.Fuzz(func(t *testing.T, req []byte) {
		ans, err := Answer(context.Background(), nil, req)
		if err != nil {
			return
		}
		// A request Answer accepts is one AppendRequest makes: decode it
		// the same way and check the answer fits it.
		var in []Input
		all := req[1:]
		for len(all) > 0 {
			n, k := uvarintString(string(all[1:]))
			in = append(in, Input{Text: string(all[1+k : 1+k+int(n)]), Observed: all[0] == 1})
			all = all[1+k+int(n):]
		}
		got, err := DecodeAnswer(ans, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, x := range in {
			if want := Extract(nil, x.Text, x.Observed); !slices.Equal(got[k], want) {
				t.Fatalf("text %d: %v, want %v", k, got[k], want)
			}
		}
	})
}
