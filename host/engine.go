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
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"sync"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/policyconfig"
	extism "github.com/extism/go-sdk"
	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
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

	logsMu sync.Mutex
	logs   map[string]*logLimiter // per plugin file name

	closeOnce sync.Once
}

// NewEngine returns an engine. Close it to release the compilation cache.
// It fails if cfg.Limits are out of range.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("host limits: %w", err)
	}
	e := &Engine{cfg: cfg, logger: cfg.Logger, logs: map[string]*logLimiter{}}
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
	e.closeOnce.Do(func() { err = e.cache.Close(ctx) })
	return err
}

// Limits returns the engine's default limits (with defaults applied).
func (e *Engine) Limits() Limits { return e.cfg.Limits }

// LoadOptions are per-plugin load settings.
type LoadOptions struct {
	// Source names where the bytes came from (a file path), for messages.
	Source string
	// Limits override the engine's defaults field by field.
	Limits Limits
}

// Load compiles wasm, instantiates it once and asks it to describe itself.
// It fails with a *PluginError of kind ErrInvalidModule, ErrMemoryLimit,
// ErrABIMismatch or ErrInvalidDescription (or whatever describe did wrong,
// ErrTimeout included) for a module that cannot serve. Everything it runs
// in the module runs under the plugin's call timeout and memory limit, and
// a panic anywhere in loading (in compactd or a library) is recovered,
// logged with its stack, and returned as ErrPanic: no module can take the
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
	sum := sha256.Sum256(wasm)
	loadErr := func(kind error, format string, args ...any) error {
		return &PluginError{Plugin: label, Export: "load", Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}

	var cleanup []func()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		for _, c := range cleanup {
			func() {
				defer func() { _ = recover() }()
				c()
			}()
		}
		e.logger.Error("panic while loading a plugin; the plugin is refused", "plugin", label, "panic", r, "stack", string(debug.Stack()))
		p, err = nil, &PluginError{Plugin: label, Export: "load", Kind: ErrPanic, Detail: fmt.Sprint(r)}
	}()

	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(e.cache).
		WithCloseOnContextDone(true).
		// wazero's own limit is left at the Wasm maximum: the memory
		// tracker enforces ours, so that it sees (and can report) a
		// refused growth, which wazero's limit would refuse silently.
		WithMemoryLimitPages(MaxMemoryPages)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	cleanup = append(cleanup, func() { _ = rt.Close(ctx) })
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, loadErr(ErrInvalidModule, "%v", err)
	}
	for _, imp := range compiled.ImportedFunctions() {
		mod, name, _ := imp.Import()
		if mod != wasiModule && mod != abi.ExtismEnvModule && mod != abi.HostModule {
			_ = rt.Close(ctx)
			return nil, loadErr(ErrInvalidModule, "imports %s.%s, which compactd does not provide", mod, name)
		}
	}
	exports := compiled.ExportedFunctions()
	for _, name := range []string{abi.ExportDescribe, abi.ExportCompact} {
		if _, ok := exports[name]; !ok {
			_ = rt.Close(ctx)
			return nil, loadErr(ErrInvalidModule, "missing required export %q", name)
		}
	}
	initialPages, merr := checkMemory(compiled, limits.MaxMemoryPages)
	if merr != nil {
		_ = rt.Close(ctx)
		merr.Plugin, merr.Export = label, "load"
		return nil, merr
	}
	_, hasAlloc := exports[abi.ExportFastAlloc]
	_, hasCall := exports[abi.ExportFastCall]

	pluginLogger := e.logger.Named(trimExt(label))
	logs := e.logLimiter(label)
	var mod module
	if hasAlloc && hasCall && !e.cfg.DisableFastPath && fastImportsOK(compiled) {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			_ = rt.Close(ctx)
			return nil, loadErr(ErrInvalidModule, "instantiating WASI: %v", err)
		}
		if err := instantiateFastHostModules(ctx, rt, pluginLogger, logs); err != nil {
			_ = rt.Close(ctx)
			return nil, loadErr(ErrInvalidModule, "%v", err)
		}
		mod = &fastModule{rt: rt, compiled: compiled, limits: limits}
	} else {
		_ = rt.Close(ctx)
		cleanup = cleanup[:0]
		em, err := newExtismModule(ctx, wasm, rc, limits, pluginLogger, logs)
		if err != nil {
			return nil, loadErr(ErrInvalidModule, "%v", err)
		}
		mod = em
	}
	cleanup = append(cleanup[:0], func() { _ = mod.close(ctx) })

	p = newPlugin(mod, limits, pluginLogger)
	p.source, p.sha256, p.initialPages, p.logs = opts.Source, hex.EncodeToString(sum[:]), initialPages, logs
	for name := range exports {
		p.exportNames[name] = true
	}
	p.desc.Name = label
	if err := p.describe(ctx); err != nil {
		p.Close(ctx)
		return nil, err
	}
	p.logger = e.logger.Named(p.desc.Name)
	return p, nil
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
	if mem.Min() > maxPages {
		return 0, &PluginError{Kind: ErrMemoryLimit, Detail: fmt.Sprintf("declares %d pages (%s) of initial memory; the limit is %d pages (%s)",
			mem.Min(), mib(uint64(mem.Min())<<16), maxPages, mib(uint64(maxPages)<<16))}
	}
	return mem.Min(), nil
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
	err := p.run(ctx, abi.ExportDescribe, nil, CallEnv{}, func(out []byte) *PluginError {
		var pe *PluginError
		desc, schema, pe = parseDescription(out)
		return pe
	})
	if err != nil {
		return err
	}
	p.desc, p.schema = desc, schema
	for _, ex := range desc.Exports {
		if ex == abi.ExportShouldCompact {
			p.hasShouldCompact = p.exportNames[abi.ExportShouldCompact]
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
