package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/compactor"
)

// BenchmarkCompactionDetail measures what a compacted request pays for the
// status page: building its last-compaction record and encoding it (the
// store keeps it in memory and writes it behind). Compare with
// BenchmarkServerCompact's p50 for the 13 KB conversation.
//
//	go test -run '^$' -bench BenchmarkCompactionDetail ./internal/server/
func BenchmarkCompactionDetail(b *testing.B) {
	td := startDaemon(b, "", pluginSliding)
	for _, size := range []int{13258, 60000} {
		msgs := tauConversation(b, size)
		conv, err := chat.FromRaw(msgs)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := td.server.opts.Compactor.Compact(bg, compactor.Request{Conversation: conv, Pipeline: []string{"sliding"}, Model: "gpt-4o"})
		if err != nil || !resp.Compacted {
			b.Fatalf("compact: %v", err)
		}
		b.Run(itoa(len(msgs))+"msgs", func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for i := 0; i < b.N; i++ {
				out, _ := json.Marshal(compactionDetail(conv, resp, "gpt-4o", []string{"sliding"}, time.Now()))
				n = len(out)
			}
			b.ReportMetric(float64(n), "record-bytes")
		})
	}
}
