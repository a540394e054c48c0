package host

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/host/internal/wasminstr"
	"github.com/compactd/compactd/internal/hostilewasm"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// TestCompileBudgetRefusesHostileShapes loads modules whose shape would
// make wazero's compiler (or interpreter) take gigabytes or minutes: each
// is refused before anything compiles it, with a message naming the
// limit, fast (the 50M-locals module took 8 GiB and 146 s before).
func TestCompileBudgetRefusesHostileShapes(t *testing.T) {
	t.Parallel()
	e, err := NewEngine(Config{MaxTotalMemory: 1 << 30, MaxCompileMemory: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"50M locals", hostilewasm.Locals(50_000_000), "declares 50000000 locals in one function; the limit is 50000"},
		{"2M locals", hostilewasm.Locals(2_000_000), "declares 2000000 locals in one function; the limit is 50000"},
		{"1M+1 empty functions", hostilewasm.EmptyFunctions(1_000_001), "declares 1000001 functions; the limit is 1000000"},
		{"600k empty functions", hostilewasm.EmptyFunctions(600_000), "the compile budget is 256 MiB (limits.max_compile_memory_mb)"},
		{"a 1 MB body of calls", hostilewasm.Calls(1 << 20), "the largest function 1048578 bytes"},
		{"a table of 20M entries", hostilewasm.Table(20_000_000), "declares 20000000 initial table entries; the limit is 10000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, quick := range []bool{false, true} {
				_, err := e.Load(context.Background(), tc.wasm, LoadOptions{Source: "hostile.wasm", Quick: quick})
				if !errors.Is(err, ErrCompileBudget) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("quick=%v: %v; want ErrCompileBudget saying %q", quick, err, tc.want)
				}
				if !strings.Contains(err.Error(), "plugin hostile.wasm: load:") {
					t.Errorf("the error does not name the file: %v", err)
				}
			}
		})
	}
	if mb := e.MemoryBudget(); mb.Used != 0 {
		t.Errorf("refused compiles left %d bytes of the memory budget taken", mb.Used)
	}
}

// TestCompileBudgetAdmitsBuiltins checks that every built-in plugin (the
// Go ones are 3.5 MB, with 2,300 functions) is estimated at no more than
// a third of the default compile budget, so bigger real plugins have
// room; and that one loads under a budget just above its estimate.
func TestCompileBudgetAdmitsBuiltins(t *testing.T) {
	t.Parallel()
	var ledger []byte
	for _, rel := range []string{"plugins/lastn/lastn.c", "plugins/sliding", "plugins/ledger", "plugins/llm"} {
		wasm, err := os.ReadFile(wasmbuild.ForTest(t, rel))
		if err != nil {
			t.Fatal(err)
		}
		shape, err := wasminstr.Scan(wasm)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		cost, interp := compileCost(shape, false), compileCost(shape, true)
		t.Logf("%s: %d bytes, %d functions, %d bytes of code (largest %d), %d locals (most %d): estimated %s compiled, %s interpreted",
			rel, len(wasm), shape.Functions, shape.CodeBytes, shape.MaxBodyBytes, shape.Locals, shape.MaxLocals, mib(cost), mib(interp))
		if cost > DefaultMaxCompileMemory/3 {
			t.Errorf("%s is estimated at %s: less than three times that is the default compile budget (%s)", rel, mib(cost), mib(DefaultMaxCompileMemory))
		}
		if rel == "plugins/ledger" {
			ledger = wasm
		}
	}
	shape, _ := wasminstr.Scan(ledger)
	budget := compileCost(shape, false) + 1<<20
	e, err := NewEngine(Config{MaxTotalMemory: 1 << 30, MaxCompileMemory: budget, CacheDir: wasmbuild.TestCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	// Quick: the interpreter's estimate is over the budget, so the
	// compiler takes it.
	p, err := e.Load(context.Background(), ledger, LoadOptions{Source: "ledger.wasm", Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if p.Tier() != TierCompiled {
		t.Errorf("tier %s; want the compiler when the interpreter's estimate is over the budget", p.Tier())
	}
	_, err = NewEngine(Config{MaxTotalMemory: 256 << 20, MaxCompileMemory: 512 << 20})
	if err == nil || !strings.Contains(err.Error(), "larger than the memory budget") {
		t.Errorf("a compile budget over the memory budget: %v", err)
	}
}

// TestMemoryBudgetAdmitsInstances fills the daemon's memory budget with
// instances: the next one waits AdmitWait and fails with ErrMemoryBudget
// (naming the budget), while a call that has an idle instance serves; an
// idle instance of another plugin is closed to make room; and a call
// that ends gives its room to one waiting.
func TestMemoryBudgetAdmitsInstances(t *testing.T) {
	t.Parallel()
	limits := Limits{MaxMemoryPages: MinMemoryPages, MaxInstances: 4} // 16 MiB + the stack reserve
	per := uint64(MinMemoryPages)<<16 + StackReserve
	e, err := NewEngine(Config{MaxTotalMemory: 2*per + per/2, MaxCompileMemory: 64 << 20, AdmitWait: 50 * time.Millisecond,
		CacheDir: wasmbuild.TestCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	ctx := context.Background()
	a := loadTestPlugin(t, e, "plugins/lastn/lastn.c", limits)
	b := loadTestPlugin(t, e, "plugins/lastn/lastn.c", limits)

	// describe ran on one instance of each at load: both are idle now.
	if used := e.MemoryBudget().Used; used != 2*per {
		t.Fatalf("after two loads %d bytes are taken; want %d (two idle instances)", used, 2*per)
	}
	a1, err := a.acquire(ctx, "") // a's idle instance
	if err != nil {
		t.Fatal(err)
	}
	// A second instance of a: b's idle one is closed for it.
	a2, err := a.acquire(ctx, "")
	if err != nil {
		t.Fatalf("a second instance, with an idle one of b to close: %v", err)
	}
	if s := b.Stats(); s.Idle != 0 {
		t.Errorf("b keeps %d idle instances; want its idle one closed for a", s.Idle)
	}
	// A third: nothing idle, nothing ends in time.
	start := time.Now()
	_, err = b.acquire(ctx, "")
	if !errors.Is(err, ErrMemoryBudget) || !strings.Contains(err.Error(), "limits.max_total_memory_mb") {
		t.Fatalf("a third instance: %v; want ErrMemoryBudget naming limits.max_total_memory_mb", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("refused after %v; want it to wait AdmitWait first", waited)
	}
	if mb := e.MemoryBudget(); mb.Refused != 1 || mb.Used != 2*per {
		t.Errorf("budget %+v; want 1 refused, %d bytes used", mb, 2*per)
	}
	// One waits while a call ends: it gets the room.
	got := make(chan error, 1)
	e.admitWait = time.Minute
	go func() {
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		pi, err := b.acquire(bctx, "")
		if err == nil {
			b.release(ctx, pi, nil)
		}
		got <- err
	}()
	a.release(ctx, a2, &PluginError{Kind: ErrTrap}) // a poisoned instance is closed: its room is free
	if err := <-got; err != nil {
		t.Fatalf("waiting for the room of an instance closed meanwhile: %v", err)
	}
	a.release(ctx, a1, nil)
	// The real thing: calls through Compact on both plugins, concurrent,
	// all served or refused with ErrMemoryBudget, never beyond it.
	e.admitWait = 50 * time.Millisecond
	errs := make(chan error, 16)
	conv := testConversation(t)
	for i := range 16 {
		p := a
		if i%2 == 1 {
			p = b
		}
		go func() {
			_, err := p.Compact(ctx, &Request{Conversation: conv, Config: json.RawMessage(`{"n":2}`)})
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil && !errors.Is(err, ErrMemoryBudget) {
			t.Errorf("a concurrent call: %v", err)
		}
	}
	if mb := e.MemoryBudget(); mb.Used > mb.Total {
		t.Errorf("budget %+v: more used than there is", mb)
	}
}
