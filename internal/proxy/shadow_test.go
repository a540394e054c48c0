package proxy

import (
	"context"
	"fmt"
	"testing"
)

// TestShadowResultsBounded: the shadow results held are bounded in
// conversations; the newest conversation's are always kept.
func TestShadowResultsBounded(t *testing.T) {
	s := newShadower(1, 1, func(context.Context, shadowJob, shadowPrev) (shadowOutcome, error) {
		return shadowOutcome{pipelines: []pipelineMeasure{{shadowMeasure: shadowMeasure{figures: ShadowFigures{Requests: 1}}}}}, nil
	})
	defer s.close()
	s.maxConvs = 3
	p := &Proxy{shadow: s}
	for i := range 10 {
		s.inflight.Add(1)
		s.do(shadowJob{id: fmt.Sprint(i), pipelines: [][]string{{"p"}}})
		if n := len(s.byConv); n > 3 {
			t.Fatalf("after %d conversations %d are held", i+1, n)
		}
		if r, ok := p.ShadowResults(fmt.Sprint(i)); !ok || len(r.Pipelines) != 1 || r.Pipelines[0].Requests != 1 {
			t.Fatalf("conversation %d: %+v", i, r)
		}
	}
}
