package fingerprint

import (
	"testing"

	"github.com/compactd/compactd/abi"
)

func TestHash(t *testing.T) {
	sum := func(parts ...string) string {
		var h Hash
		for _, p := range parts {
			h.Str(p)
		}
		return h.Sum()
	}
	long := string(make([]byte, 200))
	cases := [][]string{{}, {""}, {"", ""}, {"a"}, {"ab"}, {"a", "b"}, {"ab", ""}, {long}, {long + "x"}, {"12345678"}, {"1234567", "8"}}
	seen := map[string]int{}
	for i, c := range cases {
		s := sum(c...)
		if len(s) != 32 {
			t.Fatalf("Sum = %q", s)
		}
		if j, ok := seen[s]; ok {
			t.Fatalf("cases %d and %d hash the same", i, j)
		}
		seen[s] = i
		if sum(c...) != s {
			t.Fatal("not deterministic")
		}
	}
	// A copy forks the hash.
	var h Hash
	h.Str("common")
	fork := h
	h.Str("a")
	fork.Str("b")
	if h.Sum() == fork.Sum() {
		t.Fatal("forks collide")
	}
	m := abi.Message{Role: "assistant", Content: abi.TextContent("x"), ToolCalls: []abi.ToolCall{{ID: "1", Function: abi.FunctionCall{Name: "f", Arguments: "{}"}}}}
	var a, b Hash
	a.Message(&m)
	m.ToolCalls[0].Function.Arguments = "{ }"
	b.Message(&m)
	if a.Sum() == b.Sum() {
		t.Fatal("tool call arguments are not hashed")
	}
}
