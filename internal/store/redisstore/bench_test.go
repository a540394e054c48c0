package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/store/redisstore"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

// BenchmarkRequestTraffic is one compaction request's store traffic (a
// stateful policy's load and save, the status update, and the proxy's
// status read) on each backend, interleaved in one run so their ratio
// holds on a shared machine. It reports p50 and p99 per request.
//
//	go test -run XXX -bench RequestTraffic -benchtime 3000x ./internal/store/redisstore
func BenchmarkRequestTraffic(b *testing.B) {
	srv := redistest.Start(b)
	bolt, err := store.Open(store.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer bolt.Close()
	rs, err := redisstore.Open(redisstore.Options{URL: srv.URL(), Replica: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	state := json.RawMessage(fmt.Sprintf(`{"memo":"%01000d"}`, 1))
	ctx := context.Background()
	for _, be := range []struct {
		name string
		s    store.Backend
	}{{"bbolt", bolt}, {"redis", rs}} {
		b.Run(be.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("conv-%d", i%200)
				t0 := time.Now()
				if vs, ok := be.s.(store.VersionedState); ok {
					_, v, err := vs.LoadStateVersion(ctx, id, "p")
					if err != nil {
						b.Fatal(err)
					}
					if err := vs.SaveStateIf(ctx, id, "p", state, v); err != nil {
						b.Fatal(err)
					}
				} else {
					if _, err := be.s.LoadState(ctx, id, "p"); err != nil {
						b.Fatal(err)
					}
					if err := be.s.SaveState(ctx, id, "p", state); err != nil {
						b.Fatal(err)
					}
				}
				be.s.Conversation(id)
				be.s.Observe(store.Observation{ConversationID: id, Pipeline: []string{"p"}, TokensBefore: 1000, TokensAfter: 500, Compacted: true})
				lat = append(lat, time.Since(t0))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
