package proxy

import (
	"context"
	"fmt"
	"testing"
)

// TestShadowResultsBounded: the shadow results held are bounded in
// conversations; the newest conversation's are always kept.
func TestShadowResultsBounded(t *testing.T) {
	s := newShadower(1, 1, func(context.Context, shadowJob) (int, bool, error) { return 0, false, nil })
	defer s.close()
	s.maxConvs = 3
	for i := range 10 {
		s.record(shadowJob{id: fmt.Sprint(i), pipeline: []string{"p"}}, func(r *ShadowResult) { r.Requests++ })
		if n := len(s.byConv); n > 3 {
			t.Fatalf("after %d conversations %d are held", i+1, n)
		}
		if r := s.results(fmt.Sprint(i)); len(r) != 1 || r[0].Requests != 1 {
			t.Fatalf("conversation %d: %+v", i, r)
		}
	}
}
