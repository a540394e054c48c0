package facts_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
	"github.com/compactd/compactd/internal/plugtest"
)

// TestAnswerRoundTrip: on every range of two turns of the repository's
// conversations, the answer decodes to what Collect finds, kinds, texts
// and used marks alike, and the ranges hold every kind of fact between
// them.
func TestAnswerRoundTrip(t *testing.T) {
	t.Parallel()
	kinds := map[idents.Kind]bool{}
	used := 0
	for _, c := range plugtest.Load(t, false) {
		for first := 0; first < len(c.Messages); first += 2 {
			count := min(4, len(c.Messages)-first)
			ans, err := facts.Answer(context.Background(), nil, c.Messages, uint64(first), uint64(count), 200)
			if err != nil {
				t.Fatal(err)
			}
			got, err := facts.DecodeAnswer(ans)
			if err != nil {
				t.Fatal(err)
			}
			want, err := facts.Collect(c.Messages[first:first+count], facts.Options{UserChars: 200}, facts.ExtractHere)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Items, want.Items) || !slices.Equal(got.Used, want.Used) {
				t.Fatalf("%s, messages %d+%d: decoded %v %v, collected %v %v", c.ID, first, count, got.Items, got.Used, want.Items, want.Used)
			}
			for i, it := range got.Items {
				kinds[it.Kind] = true
				if got.Used[i] {
					used++
				}
			}
		}
	}
	if len(kinds) != int(idents.NumKinds) || used == 0 {
		t.Fatalf("the fixtures exercise kinds %v and %d used facts; want all %d kinds and some used", kinds, used, idents.NumKinds)
	}
}

// TestAnswerRefuses: a range the request does not hold, a user_chars too
// large, or a done context is an error, not a panic.
func TestAnswerRefuses(t *testing.T) {
	t.Parallel()
	msgs := []abi.Message{{Role: abi.RoleUser, Content: abi.TextContent("fix a.go")}, {Role: abi.RoleAssistant, Content: abi.TextContent("ok")}}
	for _, tt := range []struct {
		name                    string
		first, count, userChars uint64
	}{
		{"past the end", 3, 0, 0},
		{"runs past the end", 1, 2, 0},
		{"count overflows", 1, math.MaxUint64, 0},
		{"user_chars", 0, 1, math.MaxInt32 + 1},
	} {
		if _, err := facts.Answer(context.Background(), nil, msgs, tt.first, tt.count, tt.userChars); !errors.Is(err, facts.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tt.name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := facts.Answer(ctx, nil, msgs, 0, 2, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("a done context: %v", err)
	}
	if ans, err := facts.Answer(context.Background(), nil, msgs, 2, 0, 0); err != nil || len(ans) != 1 {
		t.Errorf("an empty range at the end: %q, %v", ans, err)
	}
}

// TestDecodeAnswerRefuses: an answer out of format is an error wrapping
// ErrMalformed.
func TestDecodeAnswerRefuses(t *testing.T) {
	t.Parallel()
	for name, ans := range map[string][]byte{
		"empty":          {},
		"count too big":  {5, 1, 0},
		"cut tag":        {1},
		"unknown kind":   {1, 8, 0},
		"cut length":     {1, 1, 0x80},
		"text past end":  {1, 1, 5, 'a'},
		"trailing bytes": {1, 1, 1, 'a', 0},
	} {
		if _, err := facts.DecodeAnswer(ans); !errors.Is(err, facts.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	set, err := facts.DecodeAnswer([]byte{2, 0x81, 1, 'a', 7, 0})
	if err != nil || !slices.Equal(set.Items, []idents.Item{{Kind: idents.KindFile, Text: "a"}, {Kind: idents.KindSaid, Text: ""}}) || !slices.Equal(set.Used, []bool{true, false}) {
		t.Errorf("a good answer: %+v, %v", set, err)
	}
}

// FuzzDecodeAnswer: any bytes decode to an error or to facts that encode
// to an answer decoding to the same facts (a varint may be written longer
// than it needs: the bytes may differ).
func FuzzDecodeAnswer(f *testing.F) {
	f.Add([]byte{2, 0x81, 1, 'a', 7, 0})
	f.Add([]byte{0})
	f.Add([]byte{1, 3, 3, 'f', 'o', 'o'})
	f.Fuzz(func(t *testing.T, ans []byte) {
		set, err := facts.DecodeAnswer(ans)
		if err != nil {
			if !errors.Is(err, facts.ErrMalformed) {
				t.Fatalf("%v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := facts.DecodeAnswer(facts.AppendAnswer(nil, set))
		if err != nil || !slices.Equal(again.Items, set.Items) || !slices.Equal(again.Used, set.Used) {
			t.Fatalf("%q decodes to %v, which encodes to an answer of %v (%v)", ans, set, again, err)
		}
	})
}

// BenchmarkAnswer is the host's side of extract_message_facts_into as the
// ledger calls it: one answer per turn (an assistant message and what came
// back) of the repository's mini-swe-agent conversations, in bytes of
// text per second.
func BenchmarkAnswer(b *testing.B) {
	type turn struct {
		msgs  []abi.Message
		first uint64
	}
	var turns []turn
	size := 0
	for _, c := range plugtest.Load(b, false, "mini_swe_agent_deepseek_swebench.jsonl") {
		for i := 2; i+1 < len(c.Messages); i += 2 {
			turns = append(turns, turn{c.Messages, uint64(i)})
			size += c.Messages[i].Content.Len() + c.Messages[i+1].Content.Len()
		}
	}
	b.SetBytes(int64(size))
	ctx := context.Background()
	var dst []byte
	for b.Loop() {
		for _, t := range turns {
			var err error
			if dst, err = facts.Answer(ctx, dst[:0], t.msgs, t.first, 2, 200); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(turns)), "ns/answer")
}
