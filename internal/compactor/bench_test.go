package compactor_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/compactd/compactd/host"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/hashicorp/go-hclog"
)

// BenchmarkReplay is `compactd eval`'s latency measure on the first 12
// mini-swe-agent conversations of the full data set: every turn, as the
// agent sent it, through the whole compaction path (validation, token
// counts, state, request encode, plugin, result checks, counting the new
// messages), for ledger and deterministic alternately, each with its own
// state store as the eval keeps one per replay. The metrics are each
// policy's p50 per request and their ratio (issue 23: ledger must cost no
// more than deterministic at p50), and, for each policy, the share of
// requests that summarized more entries than the conversation's previous
// one (for ledger: a fold, which extracts and renders a new chunk) with
// the p50 of those ("moved") and of the others ("still"). The overall p50
// is that of the kind of request that is more than half of them.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	path, err := dataset.File("mini_swe_agent_deepseek_swebench.jsonl")
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		b.Skipf("the benchmark uses the full data set: %v", err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	convs = convs[:min(12, len(convs))]
	counter := tokens.New(tokens.Options{})
	for _, c := range convs {
		counter.ForModel("gpt-4o").CountMessages(c.Chat.Messages)
	}
	e, err := host.NewEngine(host.Config{CacheDir: wasmbuild.TestCacheDir(b), Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	names := []string{"ledger", "deterministic"}
	wasm := map[string][]byte{}
	for _, name := range names {
		if wasm[name], err = os.ReadFile(wasmbuild.ForTest(b, "plugins/"+name)); err != nil {
			b.Fatal(err)
		}
	}
	// load loads fresh plugins: the ledger's memo starts empty, as in
	// `compactd eval`, which replays each conversation once.
	load := func(b *testing.B) source {
		src := source{}
		for _, name := range names {
			p, err := e.Load(ctx, wasm[name], host.LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			src[name] = p
		}
		return src
	}
	replay := func(b *testing.B, names []string) {
		lat := make([][]time.Duration, len(names))
		// moved[i] holds the latencies of policy i's requests whose
		// stage summarized more entries than the conversation's previous
		// request (a ledger fold), still[i] the others: the p50 of all
		// is the one of whichever holds more than half.
		moved := make([][]time.Duration, len(names))
		still := make([][]time.Duration, len(names))
		k := 0
		for b.Loop() {
			b.StopTimer()
			src := load(b)
			b.StartTimer()
			for _, c := range convs {
				cs := make([]*compactor.Compactor, len(names))
				summarized := make([]int, len(names))
				for i := range cs {
					cs[i] = compactor.New(compactor.Options{Policies: src, Tokens: counter, State: &memState{m: map[string]json.RawMessage{}}})
				}
				for _, n := range dataset.TurnPrefixes(c.Chat) {
					for j := range names {
						i := (j + k) % len(names)
						start := time.Now()
						resp, err := cs[i].Compact(ctx, compactor.Request{Conversation: dataset.Prefix(c.Chat, n),
							Pipeline: names[i : i+1], Model: "gpt-4o", ConversationID: c.ID})
						took := time.Since(start)
						lat[i] = append(lat[i], took)
						if err != nil {
							b.Fatal(err)
						}
						if es := resp.Stats.Stages[0].EntriesSummarized; es != summarized[i] {
							moved[i], summarized[i] = append(moved[i], took), es
						} else {
							still[i] = append(still[i], took)
						}
					}
					k++
				}
			}
			for _, p := range src {
				p.Close(ctx)
			}
		}
		p50 := make([]float64, len(names))
		for i, d := range lat {
			p50[i] = median(d)
			b.ReportMetric(p50[i], names[i]+"-p50-ns")
			b.ReportMetric(float64(len(moved[i]))/float64(len(d)), names[i]+"-moved-share")
			b.ReportMetric(median(moved[i]), names[i]+"-moved-p50-ns")
			b.ReportMetric(median(still[i]), names[i]+"-still-p50-ns")
		}
		if len(names) == 2 {
			b.ReportMetric(p50[0]/p50[1], names[0]+"/"+names[1]+"-p50")
		}
	}
	// Alternating, for the ratio; one policy at a time, for profiles.
	b.Run("both", func(b *testing.B) { replay(b, names) })
	for _, name := range names {
		b.Run(name, func(b *testing.B) { replay(b, []string{name}) })
	}
}

// median returns the median of d in nanoseconds (0 for none), sorting d.
func median(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[len(d)/2])
}
