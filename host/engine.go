// Package host runs compaction policy plugins: WebAssembly modules that
// follow compactd's ABI (see package abi). It compiles each module once,
// serves calls from a pool of instances (one call per instance at a time),
// enforces per-plugin limits (memory, time, output size), provides the host
// functions (count_tokens, llm_complete), and checks every result before it
// reaches a caller: a plugin that traps, loops, allocates without bound or
// returns garbage yields a *PluginError naming it, never a crash and never
// a lost message.
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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/policyconfig"
	"github.com/compactd/compactd/internal/wasminstr"
	extism "github.com/extism/go-sdk"
	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Config configures an Engine. The zero value is usable: default limits,
// fast path on, in-memory compilation cache, no logging.
type Config struct {
	// Limits are the default limits of every plugin.
	Limits Limits
	// DisableFastPath runs every plugin through Extism.
	DisableFastPath bool
	// CacheDir, if set, keeps compiled modules on disk (wazero's
	// compilation cache) so a restart with unchanged plugins is fast.
	CacheDir string
	// Logger receives the engine's and the plugins' logs. Each plugin gets
	// a sub-logger named after it.
	Logger hclog.Logger
}

// Engine compiles and loads plugins. It is safe for concurrent use.
type Engine struct {
	cfg    Config
	cache  wazero.CompilationCache
	logger hclog.Logger

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

	closeOnce sync.Once
}

// NewEngine returns an engine. Close it to release the compilation cache.
func NewEngine(cfg Config) (*Engine, error) {
	e := &Engine{cfg: cfg, logger: cfg.Logger, compileSlot: make(chan struct{}, 1), done: make(chan struct{})}
	if e.logger == nil {
		e.logger = hclog.NewNullLogger()
	}
	e.cfg.Limits = cfg.Limits.withDefaults()
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("compilation cache %s: %w", cfg.CacheDir, err)
		}
		e.cache = c
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

// wasmMaxPages is the most pages a 32-bit Wasm memory can have (4 GiB).
const wasmMaxPages = 65536

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
}

// Compilation tiers (Plugin.Tier).
const (
	TierLazy        = "lazy"        // described from a previous load; not compiled yet
	TierInterpreted = "interpreted" // wazero's interpreter, until the compiler is done
	TierCompiled    = "compiled"    // wazero's optimizing compiler
)

// Load compiles wasm, instantiates it once and asks it to describe itself
// (or, with opts.Described, takes that description and compiles later).
// It fails with a *PluginError of kind ErrInvalidModule, ErrABIMismatch or
// ErrInvalidDescription (or whatever describe did wrong) for a module that
// cannot serve.
func (e *Engine) Load(ctx context.Context, wasm []byte, opts LoadOptions) (*Plugin, error) {
	limits := e.cfg.Limits.Over(opts.Limits)
	label := opts.Source
	if label == "" {
		label = "(memory)"
	} else {
		label = filepath.Base(label)
	}
	sum := sha256.Sum256(wasm)
	pluginLogger := e.logger.Named(trimExt(label))

	if opts.Described != nil {
		p := newPlugin(nil, limits, pluginLogger)
		p.source, p.sha256, p.fromDescription = opts.Source, hex.EncodeToString(sum[:]), true
		p.lazyPath = "extism"
		if fns, err := wasminstr.FunctionExports(wasm); err == nil && fns[abi.ExportFastAlloc] && fns[abi.ExportFastCall] && !e.cfg.DisableFastPath {
			p.lazyPath = "fast"
		}
		p.loadModule = e.reloader(opts.Source, wasm, sum, label, limits, pluginLogger)
		if err := p.setDescription(*opts.Described); err != nil {
			return nil, err
		}
		p.logger = e.logger.Named(p.desc.Name)
		return p, nil
	}

	b, err := e.build(ctx, wasm, label, limits, pluginLogger, opts.Quick)
	if err != nil {
		return nil, err
	}
	p := newPlugin(b.mod, limits, pluginLogger)
	p.source, p.sha256 = opts.Source, hex.EncodeToString(sum[:])
	// After ReleaseIdle, the module is compiled again from its file.
	if opts.Source != "" {
		p.lazyPath = b.mod.path()
		p.loadModule = e.reloader(opts.Source, nil, sum, label, limits, pluginLogger)
	}
	for name := range b.exports {
		p.exportNames[name] = true
	}
	p.desc.Name = label
	if err := p.describe(ctx); err != nil {
		p.Close(ctx)
		return nil, err
	}
	p.logger = e.logger.Named(p.desc.Name)
	if b.interpreted {
		e.compileLater(p, wasm, label, limits, pluginLogger)
	}
	return p, nil
}

// reloader returns a plugin's loadModule: it compiles the module from
// wasm or, when that is nil, from the file source, which must still hold
// the bytes with hash sum (a file that changed is a new version, which
// the registry loads on its own). Keeping no copy of the bytes keeps an
// unloaded plugin's memory at nothing.
func (e *Engine) reloader(source string, wasm []byte, sum [sha256.Size]byte, label string, limits Limits, logger hclog.Logger) func(context.Context) (module, error) {
	if source != "" {
		wasm = nil
	}
	return func(ctx context.Context) (module, error) {
		code := wasm
		if code == nil {
			var err error
			code, err = os.ReadFile(source)
			if err == nil && sha256.Sum256(code) != sum {
				err = fmt.Errorf("%s changed since it was loaded", source)
			}
			if err != nil {
				return nil, &PluginError{Plugin: label, Export: "load", Kind: ErrInvalidModule, Detail: err.Error(), Err: err}
			}
		}
		b, err := e.build(ctx, code, label, limits, logger, false)
		if err != nil {
			return nil, err
		}
		return b.mod, nil
	}
}

// compileLater compiles a plugin's module with the optimizing compiler in
// the background and swaps it in. One such compile runs at a time, so a
// cold start with many plugins does not starve the calls they serve.
func (e *Engine) compileLater(p *Plugin, wasm []byte, label string, limits Limits, logger hclog.Logger) {
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
		ctx := context.Background()
		b, err := e.build(ctx, wasm, label, limits, logger, false)
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
	mod         module
	exports     map[string]api.FunctionDefinition
	interpreted bool
}

// build compiles wasm for the path it takes (quick: with the interpreter,
// for the fast path).
func (e *Engine) build(ctx context.Context, wasm []byte, label string, limits Limits, logger hclog.Logger, quick bool) (*built, error) {
	loadErr := func(kind error, format string, args ...any) error {
		return &PluginError{Plugin: label, Export: "load", Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(e.cache).
		WithCloseOnContextDone(true).
		// wazero's own limit is left at the Wasm maximum: the memory
		// tracker enforces ours, so that it sees (and can report) a
		// refused growth, which wazero's limit would refuse silently.
		WithMemoryLimitPages(wasmMaxPages)
	// A module for the fast path is made interruptible by our own
	// instrumentation (package wasminstr), much cheaper than wazero's
	// checks; one the instrumenter refuses keeps wazero's checks.
	code, fastRC, interpreted := wasm, rc, false
	var guard *wasminstr.Result
	if !e.cfg.DisableFastPath {
		if fns, err := wasminstr.FunctionExports(wasm); err == nil && fns[abi.ExportFastAlloc] && fns[abi.ExportFastCall] {
			if res, err := wasminstr.Instrument(wasm); err == nil {
				guard, code = res, res.Module
				fastRC = rc.WithCloseOnContextDone(false)
			} else {
				e.logger.Debug("fast path keeps wazero's termination checks", "plugin", label, "reason", err)
			}
			if quick {
				fastRC = wazero.NewRuntimeConfigInterpreter().
					WithCloseOnContextDone(guard == nil).
					WithMemoryLimitPages(wasmMaxPages)
				interpreted = true
			}
		}
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
	_, hasAlloc := exports[abi.ExportFastAlloc]
	_, hasCall := exports[abi.ExportFastCall]

	if hasAlloc && hasCall && !e.cfg.DisableFastPath && fastImportsOK(compiled) {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			return nil, loadErr(ErrInvalidModule, "instantiating WASI: %v", err)
		}
		if err := instantiateFastHostModules(ctx, rt, logger); err != nil {
			return nil, loadErr(ErrInvalidModule, "%v", err)
		}
		kept = true
		return &built{mod: &fastModule{rt: rt, compiled: compiled, limits: limits, guard: guard, interp: interpreted},
			exports: exports, interpreted: interpreted}, nil
	}
	em, err := newExtismModule(ctx, wasm, rc, e.cfg.CacheDir, limits, logger)
	if err != nil {
		return nil, loadErr(ErrInvalidModule, "%v", err)
	}
	return &built{mod: em, exports: exports}, nil
}

// describe calls the describe export and validates its answer.
func (p *Plugin) describe(ctx context.Context) error {
	var desc abi.Description
	err := p.run(ctx, abi.ExportDescribe, nil, CallEnv{}, nil, func(out []byte) *PluginError {
		if err := json.Unmarshal(out, &desc); err != nil {
			return &PluginError{Kind: ErrInvalidDescription, Detail: "not a JSON description: " + err.Error()}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return p.setDescription(desc)
}

// setDescription validates a description and makes it the plugin's.
func (p *Plugin) setDescription(desc abi.Description) error {
	fail := func(kind error, format string, args ...any) error {
		return &PluginError{Plugin: p.desc.Name, Version: desc.Version, Export: abi.ExportDescribe, Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}
	if !abi.Compatible(abi.Version, desc.ABI) {
		return fail(ErrABIMismatch, "plugin %q speaks ABI %s; this compactd speaks %d.x", desc.Name, desc.ABI, abi.Major)
	}
	if !abi.ValidName(desc.Name) {
		return fail(ErrInvalidDescription, "name %q: want 1-64 characters of a-z, 0-9, _ and -, starting with a letter", desc.Name)
	}
	if desc.Version == "" {
		return fail(ErrInvalidDescription, "plugin %q has no version", desc.Name)
	}
	schema, err := policyconfig.Compile(desc.Name, desc.ConfigSchema, desc.Defaults)
	if err != nil {
		return fail(ErrInvalidDescription, "%v", err)
	}
	switch desc.View {
	case "", abi.ViewFull:
		p.view = abi.ViewFull
	case abi.ViewHeaders:
		p.view = abi.ViewHeaders
	default:
		return fail(ErrInvalidDescription, "view %q: want %q or %q", desc.View, abi.ViewFull, abi.ViewHeaders)
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
	return nil
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
