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
	"path/filepath"
	"sync"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/policyconfig"
	"github.com/compactd/compactd/internal/wasminstr"
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

	closeOnce sync.Once
}

// NewEngine returns an engine. Close it to release the compilation cache.
func NewEngine(cfg Config) (*Engine, error) {
	e := &Engine{cfg: cfg, logger: cfg.Logger}
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

// wasmMaxPages is the most pages a 32-bit Wasm memory can have (4 GiB).
const wasmMaxPages = 65536

// LoadOptions are per-plugin load settings.
type LoadOptions struct {
	// Source names where the bytes came from (a file path), for messages.
	Source string
	// Limits override the engine's defaults field by field.
	Limits Limits
}

// Load compiles wasm, instantiates it once and asks it to describe itself.
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
	code, fastRC := wasm, rc
	var guard *wasminstr.Result
	if !e.cfg.DisableFastPath {
		if fns, err := wasminstr.FunctionExports(wasm); err == nil && fns[abi.ExportFastAlloc] && fns[abi.ExportFastCall] {
			if res, err := wasminstr.Instrument(wasm); err == nil {
				guard, code = res, res.Module
				fastRC = rc.WithCloseOnContextDone(false)
			} else {
				e.logger.Debug("fast path keeps wazero's termination checks", "plugin", label, "reason", err)
			}
		}
	}
	rt := wazero.NewRuntimeWithConfig(ctx, fastRC)
	compiled, err := rt.CompileModule(ctx, code)
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
	_, hasAlloc := exports[abi.ExportFastAlloc]
	_, hasCall := exports[abi.ExportFastCall]

	pluginLogger := e.logger.Named(trimExt(label))
	var mod module
	if hasAlloc && hasCall && !e.cfg.DisableFastPath && fastImportsOK(compiled) {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
			_ = rt.Close(ctx)
			return nil, loadErr(ErrInvalidModule, "instantiating WASI: %v", err)
		}
		if err := instantiateFastHostModules(ctx, rt, pluginLogger); err != nil {
			_ = rt.Close(ctx)
			return nil, loadErr(ErrInvalidModule, "%v", err)
		}
		mod = &fastModule{rt: rt, compiled: compiled, limits: limits, guard: guard}
	} else {
		_ = rt.Close(ctx)
		em, err := newExtismModule(ctx, wasm, rc, limits, pluginLogger)
		if err != nil {
			return nil, loadErr(ErrInvalidModule, "%v", err)
		}
		mod = em
	}

	p := newPlugin(mod, limits, pluginLogger)
	p.source, p.sha256 = opts.Source, hex.EncodeToString(sum[:])
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
