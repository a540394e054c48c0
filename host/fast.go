package host

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host/internal/wasminstr"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

const wasiModule = "wasi_snapshot_preview1"

// stderrTail is how much of a plugin's stderr an error message quotes.
const stderrTail = 2048

// fastModule runs plugins that export compactd's fast path directly on
// wazero: function handles are looked up once per instance, and requests
// and results move through the plugin's own linear memory.
type fastModule struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	limits   Limits
	// startLimit is the wall-clock limit of an instantiation.
	startLimit time.Duration
	seq        atomic.Uint64
	// guard is set when the module was instrumented (package wasminstr):
	// it counts its work against its budget, and, compiled without
	// wazero's termination checks, it is stopped through its stop global
	// when a wall-clock limit passes.
	guard *wasminstr.Result
	work  *workBudget // guard's budget; nil without one
	// interp: compiled by wazero's interpreter (LoadOptions.Quick), which
	// keeps wazero's checks for the wall clock (the stop global is never
	// set: the interpreter reads globals in Go, where a write from the
	// timer's goroutine would be a data race).
	interp bool
}

func (m *fastModule) path() string { return "fast" }

func (m *fastModule) interpreted() bool { return m.interp }

// close releases the module. The compiled module must be closed on its
// own: a runtime with a compilation cache keeps its compiled modules in
// the cache's engine (memory) when it is closed.
func (m *fastModule) close(ctx context.Context) error {
	err := m.compiled.Close(ctx)
	if cerr := m.rt.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

func (m *fastModule) newInstance(ctx context.Context) (instance, error) {
	tracker := newMemoryTracker(m.limits.MaxMemoryPages)
	stderr := newStderrBuffer(stderrTail)
	cfg := wazero.NewModuleConfig().
		WithName(fmt.Sprintf("plugin-%d", m.seq.Add(1))).
		WithStartFunctions("_initialize").
		WithStderr(stderr)
	if m.guard != nil {
		// The start function and _initialize run below, under the guard.
		cfg = cfg.WithStartFunctions()
	}
	// _initialize runs Go package initializers, which may call host
	// functions: give them a kernel.
	st := &callState{kernel: newKernel(uint64(m.limits.MaxMemoryPages) << 16)}
	limit := m.startLimit
	initCtx, cancel := context.WithTimeout(withCallState(experimental.WithMemoryAllocator(ctx, tracker), st), limit)
	defer cancel()
	mod, err := m.rt.InstantiateModule(initCtx, m.compiled, cfg)
	if err != nil {
		return nil, instantiateError(initCtx, err, tracker, stderr, m.work, limit)
	}
	var stop api.MutableGlobal
	if m.guard != nil {
		stop, _ = mod.ExportedGlobal(wasminstr.StopGlobal).(api.MutableGlobal)
		if stop == nil {
			_ = mod.Close(ctx)
			return nil, &PluginError{Kind: ErrInvalidModule, Detail: "instrumented module without its stop global"}
		}
		if m.interp {
			stop = nil // wazero's checks stop it
		}
		for _, name := range []string{wasminstr.StartExport, "_initialize"} {
			fn := mod.ExportedFunction(name)
			if fn == nil {
				continue
			}
			if err := guardedCall(initCtx, stop, func() error { _, err := fn.Call(initCtx); return err }); err != nil {
				_ = mod.Close(ctx)
				return nil, instantiateError(initCtx, err, tracker, stderr, m.work, limit)
			}
		}
	}
	inst := &fastInstance{
		work:      m.work,
		stop:      stop,
		mod:       mod,
		allocFn:   mod.ExportedFunction(abi.ExportFastAlloc),
		callFn:    mod.ExportedFunction(abi.ExportFastCall),
		mem:       mod.Memory(),
		kernel:    st.kernel,
		tracker:   tracker,
		stderr:    stderr,
		maxOutput: m.limits.MaxOutputBytes,
	}
	if inst.allocFn == nil || inst.callFn == nil || inst.mem == nil {
		_ = mod.Close(ctx)
		return nil, &PluginError{Kind: ErrInvalidModule, Detail: "fast-path exports or memory missing"}
	}
	return inst, nil
}

type fastInstance struct {
	work *workBudget
	// stop is the instrumented module's stop global (nil when wazero's
	// checks guard the module).
	stop            api.MutableGlobal
	mod             api.Module
	allocFn, callFn api.Function
	mem             api.Memory
	kernel          *kernel
	tracker         *memoryTracker
	stderr          *stderrBuffer
	maxOutput       int
	stack           [3]uint64
	// buf and bufCap are the guest's input buffer from the last
	// compactd_fast_v1_alloc: requests that fit skip that call.
	buf, bufCap uint32
}

// fastShrinkBytes: a buffer above this size is given back (by asking for a
// new, smaller one) when a request needs less than a quarter of it.
const fastShrinkBytes = 4 << 20

// exportPing is the fast path's no-op (abi.FastPing); the Extism path has
// no equivalent.
const exportPing = "compactd:ping"

func fastFunction(export string) uint64 {
	switch export {
	case exportPing:
		return abi.FastPing
	case abi.ExportDescribe:
		return abi.FastDescribe
	case abi.ExportCompact:
		return abi.FastCompact
	case abi.ExportShouldCompact:
		return abi.FastShouldCompact
	}
	return 0
}

func (f *fastInstance) call(ctx context.Context, st *callState, export string, input []byte) ([]byte, *PluginError) {
	if len(input) > math.MaxUint32 {
		return nil, &PluginError{Kind: ErrMemoryLimit, Detail: "input larger than 4 GiB"}
	}
	f.stderr.Reset()
	f.kernel.reset()
	f.tracker.takeRefused()
	st.kernel = f.kernel
	ctx = withCallState(ctx, st)

	n := uint32(len(input))
	if f.buf == 0 || n > f.bufCap || f.bufCap > fastShrinkBytes && n < f.bufCap/4 {
		f.stack[0] = uint64(n)
		if err := f.guardedCall(ctx, f.allocFn, f.stack[:1]); err != nil {
			f.buf = 0
			return nil, classify(ctx, err, f.tracker, f.stderr, f.work)
		}
		f.buf, f.bufCap = uint32(f.stack[0]), max(n, 1)
	}
	ptr := f.buf
	if !f.mem.Write(ptr, input) {
		return nil, &PluginError{Kind: ErrInvalidOutput, Detail: fmt.Sprintf("%s returned an address outside memory", abi.ExportFastAlloc)}
	}
	f.stack[0], f.stack[1], f.stack[2] = fastFunction(export), uint64(ptr), uint64(len(input))
	if err := f.guardedCall(ctx, f.callFn, f.stack[:3]); err != nil {
		return nil, classify(ctx, err, f.tracker, f.stderr, f.work)
	}
	outPtr, outLen := uint32(f.stack[0]>>32), uint32(f.stack[0])
	if int64(outLen) > int64(f.maxOutput)+1 {
		return nil, &PluginError{Kind: ErrOutputTooLarge, Detail: fmt.Sprintf("%d bytes, limit %d", outLen-1, f.maxOutput)}
	}
	out, ok := f.mem.Read(outPtr, outLen)
	if !ok || outLen == 0 {
		return nil, &PluginError{Kind: ErrInvalidOutput, Detail: "fast-path output is outside memory or empty"}
	}
	switch out[0] {
	case abi.FastStatusOK:
		return out[1:], nil
	case abi.FastStatusError:
		return nil, reported(out[1:])
	}
	return nil, &PluginError{Kind: ErrInvalidOutput, Detail: fmt.Sprintf("fast-path status byte %d", out[0])}
}

func (f *fastInstance) memoryBytes() uint64 { return f.tracker.bytes() }

func (f *fastInstance) close(ctx context.Context) { _ = f.mod.Close(ctx) }

// reported turns an error body into an ErrReported failure.
func reported(body []byte) *PluginError {
	ae := abi.ParseError(body)
	return &PluginError{Kind: ErrReported, Code: ae.Code, Detail: ae.Error(), Err: ae}
}

// guardedCall calls fn, stopping an instrumented module through its stop
// global when ctx ends (wazero's own checks stop the others).
func (f *fastInstance) guardedCall(ctx context.Context, fn api.Function, stack []uint64) error {
	if f.stop == nil {
		return fn.CallWithStack(ctx, stack)
	}
	return guarded(ctx, f.stop, func() error { return fn.CallWithStack(ctx, stack) })
}

// guardedCall runs call under guarded if stop is set, else as it is
// (wazero's own checks stop the module).
func guardedCall(ctx context.Context, stop api.MutableGlobal, call func() error) error {
	if stop == nil {
		return call()
	}
	return guarded(ctx, stop, call)
}

// guarded runs call (a call into an instrumented module) and, if ctx ends
// first, sets the module's stop global so the guest traps at its next
// check (within wasminstr.Fuel loop iterations). A stop that comes too
// late to matter (the call had returned) is undone, so the instance stays
// usable.
func guarded(ctx context.Context, stop api.MutableGlobal, call func() error) error {
	if ctx.Done() == nil {
		return call()
	}
	var mu sync.Mutex
	running, fired := true, false
	unwatch := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if running {
			stop.Set(1)
			fired = true
		}
	})
	err := call()
	if !unwatch() {
		mu.Lock()
		running = false
		if fired && err == nil {
			stop.Set(0) // the call finished before the guest saw the stop
		}
		mu.Unlock()
	}
	return err
}
