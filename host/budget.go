package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/compactd/compactd/host/internal/wasminstr"
)

// StackReserve is what the daemon's memory budget counts for the stack of
// one call besides the instance's linear memory: wazero's compiled engine
// doubles a recursing guest's stack, outside the linear memory, until it
// passes its ceiling of 50,000,000 bytes, so the last one is at most
// about 100 MB (a recursing guest measured ~50 MiB; RATIONALE.md, "One
// memory budget").
const StackReserve = 100 << 20

// Structural limits of a module, checked before anything compiles it.
// They are the implementation limits every web browser enforces (the
// WebAssembly JavaScript API, "Implementation-defined limits"), so no
// toolchain that targets the web emits more; compactd's built-in plugins
// stay far below them (RATIONALE.md, "Compiling within a budget").
const (
	MaxModuleTypes          = 1_000_000
	MaxModuleFunctions      = 1_000_000
	MaxModuleImports        = 100_000
	MaxModuleExports        = 100_000
	MaxModuleGlobals        = 1_000_000
	MaxModuleDataSegments   = 100_000
	MaxModuleTableEntries   = 10_000_000
	MaxFunctionLocals       = 50_000
	MaxFunctionBodyBytes    = 7_654_400
	MaxFunctionTypeValues   = 2_000 // 1,000 parameters and 1,000 results
	MaxModuleElementSegment = 10_000_000
)

// Cost model of compiling a module, in bytes of memory at the compile's
// peak, from wazero v1.12 measured on hostile shapes and on the built-in
// plugins (RATIONALE.md has the table). Each coefficient is the worst
// measured per unit, rounded up, so the estimate is above what a module of
// any shape costs: about 2.5 times what a Go plugin really takes.
const (
	costBase          = 8 << 20
	costPerFunction   = 400 // decoded function and its compiled code's bookkeeping
	costPerType       = 256
	costPerTypeValue  = 16
	costPerImport     = 256
	costPerExport     = 256
	costPerGlobal     = 64
	costPerSegment    = 64
	costPerTableEntry = 16 // a table's initial entries, allocated at instantiation
	// The optimizing compiler holds the whole module's code in memory
	// (decoded, and compiled), and compiles one function at a time: the
	// largest function's compile is the peak on top.
	costPerCodeByte     = 64
	costPerLargestByte  = 600 // one huge body of calls: 454-530 bytes per byte
	costPerLocal        = 32  // 25 measured
	costPerLargestLocal = 64
	// The interpreter keeps its own form of every function, several
	// times larger than the code, and a slot per local.
	interpPerCodeByte = 160
	interpPerLocal    = 320 // 270 measured
)

// compileCost estimates the memory, in bytes, that compiling a module of
// shape s takes (interpreted: for wazero's interpreter).
func compileCost(s wasminstr.Shape, interpreted bool) uint64 {
	c := uint64(costBase) +
		s.Functions*costPerFunction +
		s.Types*costPerType + s.TypeValues*costPerTypeValue +
		s.Imports*costPerImport + s.Exports*costPerExport + s.Globals*costPerGlobal +
		(s.DataSegments+s.ElementSegments)*costPerSegment +
		s.TableEntries*costPerTableEntry
	if interpreted {
		return c + s.CodeBytes*interpPerCodeByte + s.Locals*interpPerLocal
	}
	return c + s.CodeBytes*costPerCodeByte + s.MaxBodyBytes*costPerLargestByte +
		s.Locals*costPerLocal + s.MaxLocals*costPerLargestLocal
}

// checkShape refuses a module over a structural limit, or whose compile
// (compiled, not interpreted) would cost more than budget bytes.
func checkShape(s wasminstr.Shape, budget uint64) *PluginError {
	over := func(what string, n, limit uint64) *PluginError {
		return &PluginError{Kind: ErrCompileBudget, Detail: fmt.Sprintf("declares %d %s; the limit is %d (WebAssembly's implementation limits, as browsers enforce them)", n, what, limit)}
	}
	for _, c := range []struct {
		what     string
		n, limit uint64
	}{
		{"locals in one function", s.MaxLocals, MaxFunctionLocals},
		{"bytes of code in one function", s.MaxBodyBytes, MaxFunctionBodyBytes},
		{"functions", s.Functions, MaxModuleFunctions},
		{"function types", s.Types, MaxModuleTypes},
		{"parameters and results in one function type", s.MaxTypeValues, MaxFunctionTypeValues},
		{"imports", s.Imports, MaxModuleImports},
		{"exports", s.Exports, MaxModuleExports},
		{"globals", s.Globals, MaxModuleGlobals},
		{"data segments", s.DataSegments, MaxModuleDataSegments},
		{"element segments", s.ElementSegments, MaxModuleElementSegment},
		{"initial table entries", s.TableEntries, MaxModuleTableEntries},
	} {
		if c.n > c.limit {
			return over(c.what, c.n, c.limit)
		}
	}
	if cost := compileCost(s, false); cost > budget {
		return &PluginError{Kind: ErrCompileBudget, Detail: fmt.Sprintf(
			"compiling it would take an estimated %s (%d functions, %d bytes of code, the largest function %d bytes, %d locals); the compile budget is %s (limits.max_compile_memory_mb)",
			mib(cost), s.Functions, s.CodeBytes, s.MaxBodyBytes, s.Locals, mib(budget))}
	}
	return nil
}

// memoryBudget is the daemon's memory budget (Config.MaxTotalMemory):
// every instance holds its memory limit plus StackReserve from it while
// it exists, and every compile its estimated cost while it runs. What
// does not fit waits, or is refused.
type memoryBudget struct {
	total uint64

	mu      sync.Mutex
	used    uint64
	changed chan struct{} // closed (and replaced) when used drops, or an instance goes idle
	waiters int
	// reclaim asks the engine to close idle instances to free need
	// bytes; it is called without mu held.
	reclaim func(ctx context.Context, need uint64)
}

func newMemoryBudget(total uint64) *memoryBudget {
	return &memoryBudget{total: total, changed: make(chan struct{})}
}

// tryTake takes n bytes if they fit, and reports whether they did; if
// not, it returns the channel closed at the next change.
func (b *memoryBudget) tryTake(n uint64) (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n <= b.total {
		b.used += n
		return true, nil
	}
	return false, b.changed
}

// take takes n bytes from the budget: at once if they fit; else once
// idle instances are closed, or others give bytes back, within wait (no
// bound when wait is 0) and ctx. It fails with ErrMemoryBudget when n
// can never fit or nothing gave way in time.
func (b *memoryBudget) take(ctx context.Context, n uint64, wait time.Duration, what string) *PluginError {
	if n > b.total {
		return &PluginError{Kind: ErrMemoryBudget, Detail: fmt.Sprintf("%s needs %s; the daemon's memory budget is %s in all (limits.max_total_memory_mb)", what, mib(n), mib(b.total))}
	}
	if ok, _ := b.tryTake(n); ok {
		return nil
	}
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	b.mu.Lock()
	b.waiters++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
	}()
	for {
		// Instances that went idle since the last look give way too.
		if b.reclaim != nil {
			b.reclaim(ctx, n)
		}
		ok, changed := b.tryTake(n)
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-timer:
			return &PluginError{Kind: ErrMemoryBudget, Detail: fmt.Sprintf("%s needs %s and the daemon's memory budget of %s (limits.max_total_memory_mb) had %s free after waiting %v", what, mib(n), mib(b.total), mib(b.free()), wait)}
		case <-ctx.Done():
			return &PluginError{Kind: ErrMemoryBudget, Detail: fmt.Sprintf("%s was waiting for %s of the daemon's memory budget (limits.max_total_memory_mb): %v", what, mib(n), ctx.Err()), Err: ctx.Err()}
		}
	}
}

// wake tells those waiting for room that an instance went idle: closing
// it would make some.
func (b *memoryBudget) wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiters > 0 {
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// give returns n bytes to the budget.
func (b *memoryBudget) give(n uint64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= min(n, b.used)
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

func (b *memoryBudget) free() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total - b.used
}

// patientKey marks a context under which admission waits as long as the
// context lives (Patient).
type patientKey struct{}

// Patient returns a context under which a new instance waits for room in
// the memory budget as long as ctx lives, rather than Config.AdmitWait:
// for loading a plugin and checking it, which no client waits on, and
// which must not fail because requests held the budget for a while.
// Engine.Load runs describe under it.
func Patient(ctx context.Context) context.Context {
	return context.WithValue(ctx, patientKey{}, true)
}

// MemoryBudget is the state of the daemon's memory budget.
type MemoryBudget struct {
	Total uint64 // bytes (Config.MaxTotalMemory)
	Used  uint64 // held by instances and running compiles
	// Refused counts instances and compiles that did not fit in time.
	Refused uint64
	// Compile is the compile budget of one module (Config.MaxCompileMemory).
	Compile uint64
}
