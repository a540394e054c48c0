package requestlog_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store"
)

// BenchmarkStoreCopy measures the request log's copy into the bbolt
// store as the daemon makes it under load: each iteration is one batch
// of the store writer (what FlushInterval gathers), records spread over
// conversations whose stored lists are already full (PerConversation,
// 500). conversations=2 is two agents in conversation order, 50 many
// agents side by side (or one agent's requests shuffled). It reports the
// time per record, the writer's disk syncs included. A batch stays
// within the writer's queue (1024), as at a daemon's request rates.
//
//	go test -run '^$' -bench BenchmarkStoreCopy ./internal/requestlog
func BenchmarkStoreCopy(b *testing.B) {
	for _, c := range []struct{ convs, batch int }{{2, 1000}, {50, 1000}} {
		b.Run(fmt.Sprintf("conversations=%d", c.convs), func(b *testing.B) {
			s, err := store.Open(store.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l, err := requestlog.New(requestlog.Options{Store: s, FlushInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			cost := 0.0012
			rec := func(i int) requestlog.Record {
				return requestlog.Record{ConversationID: fmt.Sprintf("conversation-%02d", i%c.convs), Kind: requestlog.KindCompact,
					Format: "openai", Model: "gpt-4o", Pipeline: []string{"ledger"}, Status: 200, Compacted: true,
					TokensBefore: 3000 + i, TokensAfter: 1200, ContextWindow: 128000, CompactdMS: 0.7, CostUSD: &cost, FullCostUSD: &cost}
			}
			add := func(n int) {
				for i := range n {
					l.Add(rec(i))
				}
				l.Flush()
			}
			for range c.convs * requestlog.DefaultPerConversation / c.batch {
				add(c.batch) // full lists
			}
			b.ResetTimer()
			for range b.N {
				add(c.batch)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.batch), "ns/record")
			if st := l.Stats(); st.Failures != 0 || st.StoreDropped != 0 {
				b.Fatalf("store copy: %+v", st)
			}
		})
	}
}
