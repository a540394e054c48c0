// Package host runs compaction policy plugins: WebAssembly modules that
// follow compactd's ABI (see package abi). It compiles each module once,
// serves calls from a pool of instances (one call per instance at a time),
// enforces per-plugin limits (memory, work, time, output size), provides
// the host functions (count_tokens, llm_complete), and checks every result
// before it reaches a caller: a plugin that traps, loops, allocates without
// bound or returns garbage yields a *PluginError naming it, never a crash
// and never a lost message.
//
// Plugins built with compactd's Go PDK take a fast path on wazero directly
// (cached function handles, requests written straight into the plugin's
// memory); every other plugin runs through the Extism Go SDK. Both paths
// pass the same tests.
package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host/internal/wasminstr"
	"github.com/compactd/compactd/policyconfig"
	extism "github.com/extism/go-sdk"
	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/zeebo/xxh3"
)

// Config configures an Engine. The zero value is usable: default limits,
// fast path on, in-memory compilation cache, no logging.
type Config struct {
	// Limits are the default limits of every plugin.
	Limits Limits
	// DisableFastPath runs every plugin through Extism.
	DisableFastPath bool
	// CacheDir, if set, keeps compiled modules on disk (wazero's
	// compilation cache) so a restart with unchanged plugins is fast,
	// and, in its "instrumented" directory, the modules as instrumented
	// for their work budgets (at most 256 MiB of them), which a restart
	// would otherwise instrument again.
	CacheDir string
	// Logger receives the engine's and the plugins' logs. Each plugin gets
	// a sub-logger named after it.
	Logger hclog.Logger
	// MaxTotalMemory is the memory budget of every plugin together, in
	// bytes: each instance holds its memory limit plus StackReserve of
	// it while it exists, each compile its estimated cost while it runs.
	// A new instance that does not fit waits up to AdmitWait for idle
	// instances to be closed or busy ones to end, then fails with
	// ErrMemoryBudget. Zero: DefaultMaxTotalMemory().
	MaxTotalMemory uint64
	// MaxCompileMemory is the compile budget of one module, in bytes: a
	// module whose compile is estimated (from its counts: functions,
	// code, locals, types, tables) to cost more is refused with
	// ErrCompileBudget before anything compiles it. Zero: half of
	// MaxTotalMemory, at most DefaultMaxCompileMemory.
	MaxCompileMemory uint64
	// AdmitWait is how long a new instance may wait for room in the
	// memory budget (default DefaultAdmitWait).
	AdmitWait time.Duration
}

// Memory budget defaults.
const (
	// DefaultMaxCompileMemory is the most the default compile budget
	// is: six times what compiling a built-in Go plugin is estimated to
	// take, which is 2.5 times what it takes (RATIONALE.md, "Compiling
	// within a budget"); its worst shapes compile in some 20 seconds.
	DefaultMaxCompileMemory = 1 << 30
	// DefaultAdmitWait is the default of Config.AdmitWait.
	DefaultAdmitWait = 2 * time.Second
)

// messageHash is a message's 128-bit hash (abi.Message.Hash): XXH3-128 of
// its bytes under the engine's random seed, never zero. (Two maphash sums
// under two seeds, before, read every byte twice at a quarter of XXH3's
// speed: on a long session, 20 µs of every request of a plugin that asks
// for hashes. RATIONALE.md, "Message hashes".)
func (e *Engine) messageHash(raw []byte) [2]uint64 {
	u := xxh3.Hash128Seed(raw, e.hashSeed)
	h := [2]uint64{u.Lo, u.Hi}
	if h == [2]uint64{} {
		h[0] = 1
	}
	return h
}

// Engine compiles and loads plugins. It is safe for concurrent use.
type Engine struct {
	cfg   Config
	cache wazero.CompilationCache
	// instrumented keeps instrumented modules in CacheDir (nil without
	// one).
	instrumented *instrCache
	logger       hclog.Logger

	// Background compiles (LoadOptions.Quick): one at a time, none
	// while a hold is on (HoldCompiles); Close stops waiting ones and
	// waits for the running one.
	compileSlot chan struct{}
	background  sync.WaitGroup
	done        chan struct{}
	holdMu      sync.Mutex
	holds       int
	unheld      chan struct{} // closed when holds drops to 0
	pending     atomic.Int64  // background compiles not done
	logsMu      sync.Mutex
	logs        map[string]*logLimiter // per plugin file name
	// logClock, when set, is the clock of the log limiters made from
	// then on (tests hold it still; see TestHostileCalls).
	logClock func() time.Time
	// minStartTimeout is MinStartTimeout (tests shorten it to see the
	// wall-clock backstop at work).
	minStartTimeout time.Duration
	// hashSeed keys the messages' hashes (abi.Message.Hash) for the
	// engine's life.
	hashSeed uint64

	// The memory budget (Config.MaxTotalMemory) and the plugins whose
	// idle instances it may close.
	budget        *memoryBudget
	compileBudget uint64
	admitWait     time.Duration
	refused       atomic.Uint64
	pluginsMu     sync.Mutex
	plugins       map[*Plugin]struct{}

	closeOnce sync.Once
}

// NewEngine returns an engine. Close it to release the compilation cache.
// It fails if cfg.Limits are out of range.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("host limits: %w", err)
	}
	e := &Engine{cfg: cfg, logger: cfg.Logger, logs: map[string]*logLimiter{}, compileSlot: make(chan struct{}, 1), done: make(chan struct{}),
		minStartTimeout: MinStartTimeout, hashSeed: rand.Uint64()}
	if e.logger == nil {
		e.logger = hclog.NewNullLogger()
	}
	e.cfg.Limits = cfg.Limits.withDefaults()
	total := cfg.MaxTotalMemory
	if total == 0 {
		total = DefaultMaxTotalMemory()
	}
	e.compileBudget = cfg.MaxCompileMemory
	if e.compileBudget == 0 {
		e.compileBudget = min(total/2, DefaultMaxCompileMemory)
	}
	if e.compileBudget > total {
		return nil, fmt.Errorf("host: the compile budget (%s) is larger than the memory budget (%s)", mib(e.compileBudget), mib(total))
	}
	e.admitWait = cfg.AdmitWait
	if e.admitWait <= 0 {
		e.admitWait = DefaultAdmitWait
	}
	e.plugins = map[*Plugin]struct{}{}
	e.budget = newMemoryBudget(total)
	e.budget.reclaim = e.reclaim
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("compilation cache %s: %w", cfg.CacheDir, err)
		}
		e.cache = c
		e.instrumented = newInstrCache(filepath.Join(cfg.CacheDir, instrCacheSubdir), instrCacheBytes, e.logger)
	} else {
		e.cache = wazero.NewCompilationCache()
	}
	// Extism drops plugin logs unless a global level is set. Debug, not
	// trace: the SDK itself logs at trace level to the standard logger
	// before a plugin's logger is set. The plugin's hclog sub-logger does
	// the rest of the filtering.
	extism.SetLogLevel(extism.LogLevelDebug)
	return e, nil
}

// Close releases the compilation cache. Plugins loaded by the engine must
// be closed first. A second Close does nothing.
func (e *Engine) Close(ctx context.Context) error {
	var err error
	e.closeOnce.Do(func() {
		close(e.done)
		e.background.Wait()
		err = e.cache.Close(ctx)
	})
	return err
}

// Limits returns the engine's default limits (with defaults applied).
func (e *Engine) Limits() Limits { return e.cfg.Limits }

// MemoryBudget returns the state of the memory budget of every plugin
// together (Config.MaxTotalMemory).
func (e *Engine) MemoryBudget() MemoryBudget {
	return MemoryBudget{Total: e.budget.total, Used: e.budget.total - e.budget.free(), Refused: e.refused.Load(), Compile: e.compileBudget}
}

// adopt makes p's instances count against the engine's memory budget.
func (e *Engine) adopt(p *Plugin) {
	p.engine = e
	e.pluginsMu.Lock()
	e.plugins[p] = struct{}{}
	e.pluginsMu.Unlock()
}

// forget is called when p is shut down.
func (e *Engine) forget(p *Plugin) {
	e.pluginsMu.Lock()
	delete(e.plugins, p)
	e.pluginsMu.Unlock()
}

// reclaim closes idle instances of every plugin until need bytes of the
// memory budget are free, or none is left.
func (e *Engine) reclaim(ctx context.Context, need uint64) {
	e.pluginsMu.Lock()
	ps := make([]*Plugin, 0, len(e.plugins))
	for p := range e.plugins {
		ps = append(ps, p)
	}
	e.pluginsMu.Unlock()
	for _, p := range ps {
		if free := e.budget.free(); free >= need {
			return
		} else {
			p.closeIdle(ctx, need-free)
		}
	}
}

// LoadOptions are per-plugin load settings.
type LoadOptions struct {
	// Source names where the bytes came from (a file path), for messages.
	Source string
	// Limits override the engine's defaults field by field.
	Limits Limits
	// Described, if set, is what describe answered for the same bytes
	// before (the registry keeps it by SHA-256): Load then neither
	// compiles nor runs the module, which is compiled (from the
	// compilation cache, if it has it) when the plugin is first called or
	// warmed (Plugin.Warm). A restart with unchanged plugins serves at
	// once.
	Described *abi.Description
	// Quick compiles a module that takes the fast path with wazero's
	// interpreter, which takes a tenth of the compiler's time (and more
	// memory), so a new plugin serves sooner; the optimizing compiler
	// then runs in the background, and its module replaces the
	// interpreted one once ready (calls in flight finish on the one they
	// started on). Plugin.Tier tells which serves.
	Quick bool
	// Compiling, if set, is called before every compile of the module
	// after Load returns (a lazy plugin's first use, the background
	// compile of a Quick load, a compile after ReleaseIdle), and the
	// function it returns after the compile: the registry marks the file
	// as loading, so a crash while compiling is put down to it.
	Compiling func() (done func())
}

// Compilation tiers (Plugin.Tier).
const (
	TierLazy        = "lazy"        // described from a previous load; not compiled yet
	TierInterpreted = "interpreted" // wazero's interpreter, until the compiler is done
	TierCompiled    = "compiled"    // wazero's optimizing compiler
)

// Load compiles wasm, instantiates it once and asks it to describe itself.
// It fails with a *PluginError of kind ErrInvalidModule, ErrMemoryLimit,
// ErrABIMismatch or ErrInvalidDescription (or whatever describe did wrong,
// ErrTimeout and ErrWorkLimit included) for a module that cannot serve.
// Everything it runs in the module runs under the plugin's work budgets,
// wall-clock limits and memory limit; a load that fails on the wall clock
// alone is tried once more, compiled, before it is reported. A panic
// anywhere in loading (in compactd or a library) is recovered, logged
// with its stack, and returned as ErrPanic: no module can take the
// process down.
func (e *Engine) Load(ctx context.Context, wasm []byte, opts LoadOptions) (p *Plugin, err error) {
	label := opts.Source
	if label == "" {
		label = "(memory)"
	} else {
		label = filepath.Base(label)
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("plugin %s: limits: %w", label, err)
	}
	limits := e.cfg.Limits.Over(opts.Limits)
	ctx = Patient(ctx) // describe waits for room in the memory budget
	sum := sha256.Sum256(wasm)
	pluginLogger := e.logger.Named(trimExt(label))
	logs := e.logLimiter(label)
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if p != nil {
			func() {
				defer func() { _ = recover() }()
				p.Close(ctx)
			}()
		}
		e.logger.Error("panic while loading a plugin; the plugin is refused", "plugin", label, "panic", r, "stack", string(debug.Stack()))
		p, err = nil, &PluginError{Plugin: label, Export: "load", Kind: ErrPanic, Detail: fmt.Sprint(r)}
	}()

	if opts.Described != nil {
		// Nothing is compiled yet, but a module that declares more
		// initial memory than its limit is refused now, as a compiled
		// one would be.
		pages, _, merr := wasminstr.MemoryMinPages(wasm)
		if merr == nil {
			if pe := checkInitialPages(pages, limits.MaxMemoryPages); pe != nil {
				pe.Plugin, pe.Export = label, "load"
				return nil, pe
			}
		}
		// A module over the structural limits or the compile budget is
		// refused now, as a compile would refuse it.
		if shape, err := wasminstr.Scan(wasm); err == nil {
			if pe := checkShape(shape, e.compileBudget); pe != nil {
				pe.Plugin, pe.Export = label, "load"
				return nil, pe
			}
		}
		p = newPlugin(nil, limits, pluginLogger)
		e.adopt(p)
		p.source, p.sha256, p.fromDescription = opts.Source, hex.EncodeToString(sum[:]), true
		p.initialPages, p.logs = pages, logs
		p.lazyPath = "extism"
		if fns, err := wasminstr.FunctionExports(wasm); err == nil && fns[abi.ExportFastAlloc] && fns[abi.ExportFastCall] && !e.cfg.DisableFastPath {
			p.lazyPath = "fast"
		}
		p.loadModule = e.reloader(opts.Source, wasm, len(wasm), sum, label, limits, pluginLogger, logs, opts.Compiling)
		if err := p.setDescription(*opts.Described); err != nil {
			return nil, err
		}
		p.logger = e.logger.Named(p.desc.Name)
		return p, nil
	}

	// A load that fails on the wall clock alone (a busy machine, or the
	// interpreter's slowness) is tried once more, compiled, before it is
	// reported; one that used up its work budget is not: it would do the
	// same again.
	quick := opts.Quick
	for attempt := 1; ; attempt++ {
		b, err := e.build(ctx, wasm, label, limits, pluginLogger, logs, quick)
		if err != nil {
			return nil, err
		}
		p = newPlugin(b.mod, limits, pluginLogger)
		e.adopt(p)
		p.source, p.sha256, p.initialPages, p.logs = opts.Source, hex.EncodeToString(sum[:]), b.initialPages, logs
		// After ReleaseIdle, the module is compiled again from its file.
		if opts.Source != "" {
			p.lazyPath = b.mod.path()
			p.loadModule = e.reloader(opts.Source, nil, len(wasm), sum, label, limits, pluginLogger, logs, opts.Compiling)
		}
		for name := range b.exports {
			p.exportNames[name] = true
		}
		p.desc.Name = label
		if err := p.describe(ctx); err != nil {
			p.Close(ctx)
			p = nil
			if attempt == 1 && errors.Is(err, ErrTimeout) && ctx.Err() == nil {
				e.logger.Warn("loading the plugin ran past a wall-clock limit; trying once more, compiled", "plugin", label, "tier", tierOf(b), "error", err)
				quick = false
				continue
			}
			return nil, err
		}
		p.logger = e.logger.Named(p.desc.Name)
		if b.interpreted {
			e.compileLater(p, wasm, label, limits, pluginLogger, logs, opts.Compiling)
		}
		return p, nil
	}
}

// tierOf names the tier a module was built for.
func tierOf(b *built) string {
	if b.interpreted {
		return TierInterpreted
	}
	return TierCompiled
}

// reloader returns a plugin's loadModule: it compiles the module from
// wasm or, when that is nil, from the file source, which must still hold
// the size bytes with hash sum (a file that changed is a new version,
// which the registry loads on its own; one that is no longer a regular
// file is refused without blocking, see ReadModuleFile). Keeping no copy
// of the bytes keeps an unloaded plugin's memory at nothing.
func (e *Engine) reloader(source string, wasm []byte, size int, sum [sha256.Size]byte, label string, limits Limits, logger hclog.Logger, logs *logLimiter, compiling func() func()) func(context.Context) (module, error) {
	if source != "" {
		wasm = nil
	}
	return func(ctx context.Context) (module, error) {
		code := wasm
		if code == nil {
			var err error
			code, err = ReadModuleFile(source, int64(size))
			if errors.Is(err, ErrFileTooLarge) || err == nil && sha256.Sum256(code) != sum {
				err = fmt.Errorf("%s changed since it was loaded", source)
			}
			if err != nil {
				return nil, &PluginError{Plugin: label, Export: "load", Kind: ErrInvalidModule, Detail: err.Error(), Err: err}
			}
		}
		done := marking(compiling)
		b, err := e.build(ctx, code, label, limits, logger, logs, false)
		done()
		if err != nil {
			return nil, err
		}
		return b.mod, nil
	}
}

// compileLater compiles a plugin's module with the optimizing compiler in
// the background and swaps it in. One such compile runs at a time, so a
// cold start with many plugins does not starve the calls they serve.
func (e *Engine) compileLater(p *Plugin, wasm []byte, label string, limits Limits, logger hclog.Logger, logs *logLimiter, compiling func() func()) {
	e.background.Add(1)
	e.pending.Add(1)
	go func() {
		defer e.background.Done()
		defer e.compileDone()
		for {
			e.holdMu.Lock()
			unheld := e.unheld
			e.holdMu.Unlock()
			if unheld == nil {
				break
			}
			select {
			case <-unheld:
			case <-e.done:
				return
			case <-p.Done():
				return
			}
		}
		select {
		case e.compileSlot <- struct{}{}:
			defer func() { <-e.compileSlot }()
		case <-e.done:
			return
		case <-p.Done():
			return
		}
		if p.isClosed() {
			return
		}
		// Waiting for room in the memory budget ends with the engine.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-e.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		done := marking(compiling)
		b, err := e.build(ctx, wasm, label, limits, logger, logs, false)
		done()
		if err != nil {
			logger.Warn("compiling in the background failed; the interpreter keeps serving", "error", err)
			return
		}
		if !p.upgrade(ctx, b.mod) {
			_ = b.mod.close(ctx)
			return
		}
		logger.Debug("compiled module swapped in", "plugin", p.Name())
	}()
}

// marking calls compiling (LoadOptions.Compiling), if set, and returns
// the function to call when the compile is done.
func marking(compiling func() func()) (done func()) {
	if compiling == nil {
		return func() {}
	}
	if done = compiling(); done == nil {
		return func() {}
	}
	return done
}

// compileDone is called when a background compile ends; after the last
// pending one, the memory the interpreted modules held (several times
// their compiled size) goes back to the system at once rather than over
// minutes.
func (e *Engine) compileDone() {
	if e.pending.Add(-1) == 0 {
		debug.FreeOSMemory()
	}
}

// HoldCompiles keeps background compiles (LoadOptions.Quick) from
// starting until the returned release is called: a start with many
// plugins loads them all (quickly, interpreted) before the compiler takes
// a core. Holds nest; release may be called once.
func (e *Engine) HoldCompiles() (release func()) {
	e.holdMu.Lock()
	e.holds++
	if e.unheld == nil {
		e.unheld = make(chan struct{})
	}
	e.holdMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.holdMu.Lock()
			defer e.holdMu.Unlock()
			if e.holds--; e.holds == 0 {
				close(e.unheld)
				e.unheld = nil
			}
		})
	}
}

// built is a compiled module and what Load needs to know of it.
type built struct {
	mod          module
	exports      map[string]api.FunctionDefinition
	interpreted  bool
	initialPages uint32
}

// build compiles wasm for the path it takes (quick: with the interpreter,
// for the fast path). It runs at load, on a lazy plugin's first call and
// in background compiles: a panic in it (in compactd or a library) is
// recovered, logged with its stack and returned as ErrPanic.
func (e *Engine) build(ctx context.Context, wasm []byte, label string, limits Limits, logger hclog.Logger, logs *logLimiter, quick bool) (b *built, err error) {
	loadErr := func(kind error, format string, args ...any) error {
		return &PluginError{Plugin: label, Export: "load", Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}
	defer func() {
		if r := recover(); r != nil {
			e.logger.Error("panic while compiling a plugin; the plugin is refused", "plugin", label, "panic", r, "stack", string(debug.Stack()))
			b, err = nil, &PluginError{Plugin: label, Export: "load", Kind: ErrPanic, Detail: fmt.Sprint(r)}
		}
	}()
	// What compiling the module will cost is checked before anything
	// compiles it (or instruments it): a module over a structural limit
	// or the compile budget is refused, and the rest hold their
	// estimate of the memory budget while they compile.
	shape, serr := wasminstr.Scan(wasm)
	if serr != nil {
		return nil, loadErr(ErrInvalidModule, "its sections cannot be read: %v", serr)
	}
	if pe := checkShape(shape, e.compileBudget); pe != nil {
		pe.Plugin, pe.Export = label, "load"
		return nil, pe
	}
	if quick && compileCost(shape, true) > e.compileBudget {
		// The interpreter would take more than the compiler: compile.
		quick = false
	}
	cost := compileCost(shape, quick)
	if pe := e.budget.take(ctx, cost, 0, "compiling the module"); pe != nil {
		e.refused.Add(1)
		pe.Plugin, pe.Export = label, "load"
		return nil, pe
	}
	defer e.budget.give(cost)
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(e.cache).
		WithCloseOnContextDone(true).
		// wazero's own limit is left at the Wasm maximum: the memory
		// tracker enforces ours, so that it sees (and can report) a
		// refused growth, which wazero's limit would refuse silently.
		WithMemoryLimitPages(MaxMemoryPages)
	// Every module is instrumented (package wasminstr) to count its work
	// against limits.WorkBudget, on both paths and both tiers. A module
	// for the fast path, compiled, is also made interruptible by the
	// instrumentation, much cheaper than wazero's checks; the others
	// (interpreted, Extism, and modules the instrumenter refuses) keep
	// wazero's checks for the wall clock. wazero's checks sit on loop
	// headers only: a module that keeps them gets an empty loop at each
	// function's entry, so that recursion which loops nowhere is
	// interrupted as well (wasminstr.EntryLoops).
	fast := false
	if !e.cfg.DisableFastPath {
		fns, err := wasminstr.FunctionExports(wasm)
		fast = err == nil && fns[abi.ExportFastAlloc] && fns[abi.ExportFastCall]
	}
	code, fastRC, interpreted := []byte(nil), rc, false
	var guard *wasminstr.Result
	switch {
	case fast && quick:
		// The interpreter reads globals in Go code, where the stop flag
		// the host sets from another goroutine would be a data race: the
		// few seconds it serves, wazero's own checks keep the guest
		// interruptible, and the budget counts its work.
		fastRC = wazero.NewRuntimeConfigInterpreter().
			WithCloseOnContextDone(true).
			WithMemoryLimitPages(MaxMemoryPages)
		interpreted = true
		guard, code = e.instrument(wasm, label, limits.instrumentOptions(false), true)
	case fast:
		if guard, code = e.instrument(wasm, label, limits.instrumentOptions(false), false); guard != nil {
			fastRC = rc.WithCloseOnContextDone(false)
		}
	default:
		guard, code = e.instrument(wasm, label, limits.instrumentOptions(true), true)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, fastRC)
	compiled, err := rt.CompileModule(ctx, code)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, loadErr(ErrInvalidModule, "%v", err)
	}
	kept := false
	defer func() {
		if !kept {
			// A runtime with a compilation cache leaves its compiled
			// modules in the cache's memory: close them too.
			_ = compiled.Close(ctx)
			_ = rt.Close(ctx)
		}
	}()
	for _, imp := range compiled.ImportedFunctions() {
		mod, name, _ := imp.Import()
		if mod != wasiModule && mod != abi.ExtismEnvModule && mod != abi.HostModule {
			return nil, loadErr(ErrInvalidModule, "imports %s.%s, which compactd does not provide", mod, name)
		}
	}
	exports := compiled.ExportedFunctions()
	for _, name := range []string{abi.ExportDescribe, abi.ExportCompact} {
		if _, ok := exports[name]; !ok {
			return nil, loadErr(ErrInvalidModule, "missing required export %q", name)
		}
	}
	initialPages, merr := checkMemory(compiled, limits.MaxMemoryPages)
	if merr != nil {
		merr.Plugin, merr.Export = label, "load"
		return nil, merr
	}
	if guard == nil {
		e.logger.Warn("the plugin cannot be instrumented: it has no work budget, only the wall clock bounds it (see the debug log for why)", "plugin", label)
	}
	_, hasAlloc := exports[abi.ExportFastAlloc]
	_, hasCall := exports[abi.ExportFastCall]

	if hasAlloc && hasCall && !e.cfg.DisableFastPath && fastImportsOK(compiled) {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			return nil, loadErr(ErrInvalidModule, "instantiating WASI: %v", err)
		}
		if err := instantiateFastHostModules(ctx, rt, logger, logs); err != nil {
			return nil, loadErr(ErrInvalidModule, "%v", err)
		}
		kept = true
		return &built{mod: &fastModule{rt: rt, compiled: compiled, limits: limits, startLimit: e.startLimit(limits), guard: guard, work: newWorkBudget(guard, limits), interp: interpreted},
			exports: exports, interpreted: interpreted, initialPages: initialPages}, nil
	}
	if fast {
		// Fast-path exports, but imports the fast path does not provide:
		// the Extism path runs it, with the start section in place.
		guard, code = e.instrument(wasm, label, limits.instrumentOptions(true), true)
	}
	em, err := newExtismModule(ctx, code, rc, e.cfg.CacheDir, limits, e.startLimit(limits), logger, logs, newWorkBudget(guard, limits))
	if err != nil {
		return nil, loadErr(ErrInvalidModule, "%v", err)
	}
	return &built{mod: em, exports: exports, initialPages: initialPages}, nil
}

// startLimit is the wall-clock limit of an instantiation with limits: a
// backstop behind the start work budget, never shorter than a minute.
func (e *Engine) startLimit(limits Limits) time.Duration {
	return max(limits.CallTimeout, e.minStartTimeout)
}

// instrument returns the module instrumented with opts and, if
// checked (it keeps wazero's termination checks), with an empty loop at
// each function's entry. A module the instrumenter refuses has no work
// budget (guard is nil): it keeps wazero's checks, and the wall clock
// alone bounds it.
//
// With a cache directory, what it returns for a module it instrumented
// before with the same options is read from the cache of instrumented
// modules (instrCache), which any change to the instrumenter empties.
func (e *Engine) instrument(wasm []byte, label string, opts wasminstr.Options, checked bool) (guard *wasminstr.Result, code []byte) {
	if e.instrumented == nil {
		return e.instrumentNow(wasm, label, opts, checked)
	}
	key := e.instrumented.key(sha256.Sum256(wasm), opts, checked)
	if guard, code, ok := e.instrumented.get(key, opts); ok {
		return guard, code
	}
	guard, code = e.instrumentNow(wasm, label, opts, checked)
	if guard != nil {
		e.instrumented.put(key, guard, code)
	}
	return guard, code
}

// instrumentNow is instrument without the cache.
func (e *Engine) instrumentNow(wasm []byte, label string, opts wasminstr.Options, checked bool) (guard *wasminstr.Result, code []byte) {
	code = wasm
	if res, err := wasminstr.Instrument(wasm, opts); err == nil {
		guard, code = res, res.Module
	} else {
		// Logged once the module compiles (bytes that are not Wasm at
		// all are refused with a better reason).
		e.logger.Debug("the plugin cannot be instrumented", "plugin", label, "reason", err)
		checked = true
	}
	if !checked {
		return guard, code
	}
	if w, err := wasminstr.EntryLoops(code); err == nil {
		code = w
	} else {
		e.logger.Debug("no termination checks at function entries", "plugin", label, "reason", err)
	}
	return guard, code
}

// checkMemory checks the module's linear memory: defined by the module
// (not imported), exported as "memory" (the ABI's rule; wazero supports
// one memory per module, so that is all of it), and declaring no more
// initial pages than maxPages. A module asking for more at start is
// refused here: the memory allocator could only refuse it mid-way through
// instantiation. It returns the initial pages.
func checkMemory(compiled wazero.CompiledModule, maxPages uint32) (uint32, *PluginError) {
	if imported := compiled.ImportedMemories(); len(imported) > 0 {
		mod, name, _ := imported[0].Import()
		return 0, &PluginError{Kind: ErrInvalidModule, Detail: fmt.Sprintf("imports its linear memory (%s.%s); a plugin defines and exports its own", mod, name)}
	}
	mem, ok := compiled.ExportedMemories()["memory"]
	if !ok {
		return 0, &PluginError{Kind: ErrInvalidModule, Detail: `does not export its linear memory as "memory"`}
	}
	if pe := checkInitialPages(mem.Min(), maxPages); pe != nil {
		return 0, pe
	}
	return mem.Min(), nil
}

// checkInitialPages refuses a module whose memory declares more initial
// pages than maxPages.
func checkInitialPages(pages, maxPages uint32) *PluginError {
	if pages > maxPages {
		return &PluginError{Kind: ErrMemoryLimit, Detail: fmt.Sprintf("declares %d pages (%s) of initial memory; the limit is %d pages (%s)",
			pages, mib(uint64(pages)<<16), maxPages, mib(uint64(maxPages)<<16))}
	}
	return nil
}

// mib formats a byte count in MiB.
func mib(n uint64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// logLimiter returns the log limiter of the plugin file label, shared by
// every version loaded from it: rewriting a file does not reset its
// budget.
func (e *Engine) logLimiter(label string) *logLimiter {
	e.logsMu.Lock()
	defer e.logsMu.Unlock()
	l := e.logs[label]
	if l == nil {
		l = newLogLimiter()
		if e.logClock != nil {
			l.now = e.logClock
		}
		e.logs[label] = l
	}
	return l
}

// LogCounts returns how many log lines the plugin file named base (as in
// LoadOptions.Source, without its directory) had dropped over the rate
// limit and cut to the line-length limit, over every version loaded from
// it.
func (e *Engine) LogCounts(base string) (dropped, truncated uint64) {
	e.logsMu.Lock()
	l := e.logs[base]
	e.logsMu.Unlock()
	if l == nil {
		return 0, 0
	}
	return l.dropped.Load(), l.truncated.Load()
}

// describe calls the describe export and validates its answer.
func (p *Plugin) describe(ctx context.Context) error {
	var desc abi.Description
	var schema *policyconfig.Schema
	err := p.run(ctx, abi.ExportDescribe, nil, CallEnv{}, nil, "", func(out []byte) *PluginError {
		var pe *PluginError
		desc, schema, pe = parseDescription(out)
		return pe
	})
	if err != nil {
		return err
	}
	p.adopt(desc, schema)
	return nil
}

// setDescription checks a description the same bytes gave before and
// makes it the plugin's.
func (p *Plugin) setDescription(desc abi.Description) error {
	schema, pe := checkDescription(desc)
	if pe != nil {
		pe.Plugin, pe.Version, pe.Export = p.desc.Name, desc.Version, abi.ExportDescribe
		return pe
	}
	p.adopt(desc, schema)
	return nil
}

// adopt makes a checked description the plugin's.
func (p *Plugin) adopt(desc abi.Description, schema *policyconfig.Schema) {
	p.view = abi.ViewFull
	if desc.View == abi.ViewHeaders {
		p.view = abi.ViewHeaders
	}
	p.desc, p.schema = desc, schema
	p.hasShouldCompact = false
	for _, ex := range desc.Exports {
		if ex == abi.ExportShouldCompact {
			// A plugin loaded from its description lists what the same
			// bytes exported when they were checked.
			p.hasShouldCompact = p.exportNames[abi.ExportShouldCompact] || p.fromDescription
		}
	}
}

func trimExt(name string) string {
	return name[:len(name)-len(filepath.Ext(name))]
}

// IsPluginError reports whether err is (or wraps) a *PluginError, and
// returns it.
func IsPluginError(err error) (*PluginError, bool) {
	var pe *PluginError
	ok := errors.As(err, &pe)
	return pe, ok
}
