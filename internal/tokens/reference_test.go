package tokens

import (
	"encoding/json"
	"os"
	"testing"
)

// reference.json holds counts from js-tiktoken, an independent port of
// OpenAI's tiktoken (see testdata/reference.mjs, which regenerates it).
type reference struct {
	Generator string `json:"generator"`
	Strings   []struct {
		Text   string `json:"text"`
		O200k  int    `json:"o200k"`
		Cl100k int    `json:"cl100k"`
	} `json:"strings"`
	Conversations []struct {
		ID     string `json:"id"`
		O200k  []int  `json:"o200k"`
		Cl100k []int  `json:"cl100k"`
	} `json:"conversations"`
}

// knownDivergence pins what tiktoken-go v0.10.0 counts where it differs
// from tiktoken. Its generated split pattern does not backtrack into
// \s*[\r\n]+ as tiktoken's does, so a whitespace-only line between two
// newlines ("\n  \n") becomes two pieces instead of one. Over the shared
// data set (3.2M tokens) this overcounts by 0.007%. If a library upgrade
// fixes it, this test fails: delete the entry.
var knownDivergence = map[string][2]int{ // text → {o200k, cl100k}
	"a\n  \nb":       {4, 4},
	"x\n    \n    y": {5, 5},
}

func loadReference(t *testing.T) reference {
	t.Helper()
	b, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestReferenceStrings(t *testing.T) {
	ref := loadReference(t)
	c := New(Options{})
	o200k, cl100k := c.ForModel("gpt-4o"), c.ForModel("gpt-4")
	for _, s := range ref.Strings {
		t.Run(s.Text, func(t *testing.T) {
			wantO, wantC := s.O200k, s.Cl100k
			if d, ok := knownDivergence[s.Text]; ok {
				wantO, wantC = d[0], d[1]
				t.Logf("known divergence: %s counts %d/%d, tiktoken-go %d/%d", ref.Generator, s.O200k, s.Cl100k, wantO, wantC)
			}
			if got := o200k.Count(s.Text); got != wantO {
				t.Errorf("o200k_base Count = %d, want %d (%s: %d)", got, wantO, ref.Generator, s.O200k)
			}
			if got := cl100k.Count(s.Text); got != wantC {
				t.Errorf("cl100k_base Count = %d, want %d (%s: %d)", got, wantC, ref.Generator, s.Cl100k)
			}
		})
	}
}

// Whole-message counts on real conversations match the reference's
// implementation of the same formula message for message.
func TestReferenceConversations(t *testing.T) {
	ref := loadReference(t)
	convs := readConversations(t, "tau_bench_gpt4o_airline.jsonl", len(ref.Conversations))
	c := New(Options{})
	for i, cv := range convs {
		t.Run(cv.ID, func(t *testing.T) {
			r := ref.Conversations[i]
			if r.ID != cv.ID || len(r.O200k) != len(cv.Messages) || len(r.Cl100k) != len(cv.Messages) {
				t.Fatalf("reference is for %s with %d messages; data has %s with %d: regenerate it", r.ID, len(r.O200k), cv.ID, len(cv.Messages))
			}
			for _, enc := range []struct {
				model string
				want  []int
			}{{"gpt-4o", r.O200k}, {"gpt-4", r.Cl100k}} {
				tok := c.ForModel(enc.model)
				for j := range cv.Messages {
					if got := tok.CountMessage(&cv.Messages[j]); got != enc.want[j] {
						t.Errorf("%s message %d (%s): %d tokens, %s: %d", tok.Encoding(), j, cv.Messages[j].Role, got, ref.Generator, enc.want[j])
					}
				}
			}
		})
	}
}
