package host

import (
	"context"
	"testing"
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
