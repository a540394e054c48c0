package cachemark

import (
	"fmt"
	"testing"
)

func TestMarks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefixes []int
		want     []int
	}{
		{nil, []int{}},
		{[]int{0}, []int{}},
		{[]int{2}, []int{1}},
		{[]int{5, 2, 2, 0, -1}, []int{1, 4}},
		{[]int{2, 4, 6, 8}, []int{1, 5, 7}}, // the shortest and the longest kept
	}
	for _, c := range cases {
		if got := Marks(c.prefixes...); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Marks(%v) = %v, want %v", c.prefixes, got, c.want)
		}
	}
}

func TestUnchanged(t *testing.T) {
	t.Parallel()
	res := Unchanged(4, "kept", 2, 9)
	if len(res.Messages) != 4 || res.Compacted || fmt.Sprint(res.CacheBreakpoints) != "[1]" {
		t.Fatalf("got %+v", res)
	}
	if res := Unchanged(3, "kept", 0); res.CacheBreakpoints != nil {
		t.Fatalf("marks %v for an empty prefix", res.CacheBreakpoints)
	}
}
