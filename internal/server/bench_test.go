package server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// BenchmarkServerCompact measures POST /v1/compact over the Unix socket:
// the sliding policy (default config) on the tau-bench conversation
// closest to the file's median size (13 KB of JSON: 18 messages, 2,896 tokens), sent by
// 1, 8 and 32 concurrent clients, each with its own connection. It reports
// requests per second and the p50/p99 latency seen by the clients
// (encoding, socket, decoding, token counting, the plugin call, the store
// update and the answer included).
//
//	go test -run '^$' -bench BenchmarkServerCompact -benchtime 4000x ./internal/server/
func BenchmarkServerCompact(b *testing.B) {
	td := setup(b, "", pluginSliding)
	td.opts.StoreFlush = 0 // state.flush_interval's default write-behind, as users run it
	td.start(b)
	msgs := tauConversation(b, 13258)
	req := &client.CompactRequest{Policy: "sliding", Model: "gpt-4o", Messages: msgs}
	resp, err := td.c.Compact(bg, req)
	if err != nil || !resp.Compacted || len(resp.Warnings) > 0 {
		b.Fatalf("warm-up: %+v %v", resp, err)
	}
	size := 0
	for _, m := range msgs {
		size += len(m)
	}
	b.Logf("conversation: %d messages, %d bytes, %d → %d tokens", len(msgs), size, resp.Stats.TokensBefore, resp.Stats.TokensAfter)
	for _, clients := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			next := make(chan int, b.N)
			for i := 0; i < b.N; i++ {
				next <- i
			}
			close(next)
			cs := make([]*client.Client, clients)
			for i := range cs {
				cs[i] = client.New(td.Socket())
				cs[i].Health(bg) // open the connection
				defer cs[i].Close()
			}
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < clients; g++ {
				wg.Add(1)
				go func(c *client.Client) {
					defer wg.Done()
					for i := range next {
						t0 := time.Now()
						resp, err := c.Compact(bg, req)
						lat[i] = time.Since(t0)
						if err != nil || len(resp.Warnings) > 0 {
							b.Errorf("request failed: %v %v", err, resp)
						}
					}
				}(cs[g])
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkReload measures the time from a plugin file being renamed into
// the plugins directory to its new version serving, with the daemon's
// default debounce (100ms): each iteration writes a version the daemon
// has never seen, so it is compiled, described and smoke-tested afresh.
//
//	go test -run '^$' -bench BenchmarkReload -benchtime 10x ./internal/server/
func BenchmarkReload(b *testing.B) {
	cases := []struct {
		name, rel, version string
	}{
		{"lastn-C", pluginLastn, "0.4.0"},
		{"sliding-Go", pluginSliding, "1.3.0"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			orig, err := os.ReadFile(wasmbuild.ForTest(b, tc.rel))
			if err != nil {
				b.Fatal(err)
			}
			if bytes.Count(orig, []byte(tc.version)) != 1 {
				b.Skipf("%s: want exactly one %q in the module to make versions of it", tc.rel, tc.version)
			}
			td := setup(b, "")
			td.opts.Debounce = 0 // the default
			path := filepath.Join(td.plugins, "p.wasm")
			os.WriteFile(path, orig, 0o644)
			td.start(b)
			name := filepath.Base(tc.rel)
			if name == "lastn.c" {
				name = "lastn"
			}
			stamp := time.Now().UnixNano() % 100000 // versions unseen by the compile cache
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				v := fmt.Sprintf("%05d", (stamp+int64(i))%100000)
				data := bytes.Replace(orig, []byte(tc.version), []byte(v), 1)
				start := time.Now()
				writeRename(b, path, data)
				for {
					p, err := td.c.Policy(bg, name)
					if err == nil && p.Version == v {
						break
					}
					if time.Since(start) > 60*time.Second {
						b.Fatalf("version %s never served", v)
					}
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
}
