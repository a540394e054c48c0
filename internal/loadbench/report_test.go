package loadbench

import (
	"strings"
	"testing"
	"time"
)

// TestWriteLoadTablesRounds: a run of one round reports each target as
// measured; a run of several reports the median over the rounds and
// compares each target with the json of its own round, with the range,
// and lists every round in the set's table.
func TestWriteLoadTablesRounds(t *testing.T) {
	t.Parallel()
	sets := []*Set{{Name: "tau-bench", File: "tau.jsonl", Requests: 10, MeanBytes: 1000}}
	result := func(target string, round int, rps float64) *Result {
		return &Result{Set: "tau-bench", Target: target, Round: round, Clients: 2, Requests: 100, ReqPerSec: rps, P99: time.Duration(rps) * time.Microsecond}
	}
	for _, tc := range []struct {
		name    string
		results []*Result
		want    []string
		notWant []string
	}{
		{
			name:    "one round",
			results: []*Result{result("json", 1, 1000), result("ledger", 1, 800)},
			want:    []string{"(one run; each target", "| compactd `/v1/compact` ledger | 800 req/s, p99 0.80 ms, **0.80×** json |", "| compactd `/v1/compact` ledger | 100 | 800 |"},
			notWant: []string{"round 1", "–"},
		},
		{
			// The json service drifts between rounds; each round's ledger
			// is compared with the json beside it: 0.80, 0.90, 1.00.
			name: "three rounds",
			results: []*Result{
				result("json", 1, 1000), result("ledger", 1, 800),
				result("json", 2, 500), result("ledger", 2, 450),
				result("json", 3, 900), result("ledger", 3, 900),
			},
			want: []string{
				"one run of 3 rounds",
				"| compactd `/v1/compact` ledger | 800 req/s, p99 0.80 ms, **0.90×** json (0.80–1.00) |",
				"| Go service: `encoding/json` decode + re-encode of the messages | 900 req/s |",
				"| compactd `/v1/compact` ledger, round 2 | 100 | 450 |",
				"| Go service: `encoding/json` decode + re-encode of the messages, round 3 | 100 | 900 |",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			WriteLoadTables(&b, sets, tc.results)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("missing %q in:\n%s", w, b.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(b.String(), w) {
					t.Errorf("unexpected %q in:\n%s", w, b.String())
				}
			}
		})
	}
}
