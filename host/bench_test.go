package host

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/compactd/compactd/internal/wasmbuild"
)

// BenchmarkPing is the fixed cost of one call through the fast path: pool
// checkout, time limit, input transfer, the guest's export, output check.
func BenchmarkPing(b *testing.B) {
	e := newTestEngine(b, false, Limits{})
	p := loadTestPlugin(b, e, "host/testdata/gohostile", Limits{})
	ctx := context.Background()
	for b.Loop() {
		if err := p.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDescribe compares a small real export on both paths.
func BenchmarkDescribe(b *testing.B) {
	for _, path := range paths {
		b.Run(path.name, func(b *testing.B) {
			e := newTestEngine(b, path.disable, Limits{})
			p := loadTestPlugin(b, e, "host/testdata/gohostile", Limits{})
			ctx := context.Background()
			for b.Loop() {
				if _, err := p.Call(ctx, "describe", nil, CallEnv{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompactMinimal is a compact call on a one-message conversation
// with a two-key config: the per-call cost of the request and result
// encodings around a policy that does nothing.
func BenchmarkCompactMinimal(b *testing.B) {
	for _, path := range paths {
		b.Run(path.name, func(b *testing.B) {
			e := newTestEngine(b, path.disable, Limits{})
			p := loadTestPlugin(b, e, "host/testdata/gohostile", Limits{})
			c := testConversation(b)
			one := c.WithMessages(c.Raw[1:2], c.Messages[1:2])
			req := modeRequest(one, "ok")
			ctx := context.Background()
			for b.Loop() {
				if _, err := p.Compact(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTransferIn measures moving a request into the guest: on the
// fast path the host writes it into the guest's memory (ping ignores it);
// on the Extism path the PDK reads it back eight bytes per host call
// (describe reads its whole input before answering). ns/op divided by the
// size is the cost per byte.
func BenchmarkTransferIn(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		payload := make([]byte, size)
		for _, path := range paths {
			b.Run(fmt.Sprintf("%s/%dKiB", path.name, size>>10), func(b *testing.B) {
				e := newTestEngine(b, path.disable, Limits{})
				p := loadTestPlugin(b, e, "host/testdata/gohostile", Limits{})
				export := exportPing
				if path.disable {
					export = "describe"
				}
				ctx := context.Background()
				b.SetBytes(int64(size))
				for b.Loop() {
					if err := p.run(ctx, export, payload, CallEnv{}, nil, "", nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkPoolParallel is the instance pool's throughput with two callers
// and two instances, on a short real-sized conversation.
func BenchmarkPoolParallel(b *testing.B) {
	e := newTestEngine(b, false, Limits{MaxInstances: 2})
	p := loadTestPlugin(b, e, "plugins/sliding", Limits{})
	cfg, err := p.Schema().Resolve()
	if err != nil {
		b.Fatal(err)
	}
	c := testConversation(b)
	ctx := context.Background()
	b.SetParallelism(1) // GOMAXPROCS goroutines: 2 on the project's machines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.Compact(ctx, &Request{Conversation: c, Config: cfg}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLoad is the time to compile, instantiate and describe a Go
// plugin: cold (a fresh compilation cache every time) and from wazero's
// file cache (a daemon restart with unchanged plugins).
func BenchmarkLoad(b *testing.B) {
	wasm, err := os.ReadFile(wasmbuild.ForTest(b, "plugins/sliding"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			e, err := NewEngine(Config{})
			if err != nil {
				b.Fatal(err)
			}
			p, err := e.Load(ctx, wasm, LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			p.Close(ctx)
			e.Close(ctx)
		}
	})
	b.Run("file-cache", func(b *testing.B) {
		dir := b.TempDir()
		warm, _ := NewEngine(Config{CacheDir: dir})
		p, err := warm.Load(ctx, wasm, LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		p.Close(ctx)
		warm.Close(ctx)
		for b.Loop() {
			e, err := NewEngine(Config{CacheDir: dir})
			if err != nil {
				b.Fatal(err)
			}
			p, err := e.Load(ctx, wasm, LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			p.Close(ctx)
			e.Close(ctx)
		}
	})
}
