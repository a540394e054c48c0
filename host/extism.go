package host

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host/internal/wasminstr"
	extism "github.com/extism/go-sdk"
	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// extismModule runs plugins through the Extism Go SDK: any plugin that
// follows the Extism guest ABI, in any language.
type extismModule struct {
	compiled *extism.CompiledPlugin
	// cache is the module's own compilation cache object (on the
	// engine's directory, if it has one): the SDK closes only its
	// runtime, which leaves compiled modules in a shared cache's memory;
	// closing this cache releases them.
	cache  wazero.CompilationCache
	limits Limits
	// startLimit is the wall-clock limit of an instantiation.
	startLimit time.Duration
	logger     hclog.Logger
	logs       *logLimiter
	// work is the module's work budget (nil if the instrumenter refused
	// it: wazero's checks and the wall clock bound it then).
	work   *workBudget
	closed atomic.Bool
}

func (m *extismModule) path() string { return "extism" }

func (m *extismModule) interpreted() bool { return false }

func (m *extismModule) close(ctx context.Context) error {
	if m.closed.Swap(true) {
		return nil
	}
	err := m.compiled.Close(ctx)
	if cerr := m.cache.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

func newExtismModule(ctx context.Context, wasm []byte, rc wazero.RuntimeConfig, cacheDir string, limits Limits, startLimit time.Duration, logger hclog.Logger, logs *logLimiter, work *workBudget) (*extismModule, error) {
	cache := wazero.NewCompilationCache()
	if cacheDir != "" {
		var err error
		if cache, err = wazero.NewCompilationCacheWithDir(cacheDir); err != nil {
			return nil, err
		}
	}
	rc = rc.WithCompilationCache(cache)
	manifest := extism.Manifest{
		Wasm: []extism.Wasm{extism.WasmData{Data: wasm}},
		// The memory tracker enforces the limit (see Engine.Load).
		Memory: &extism.ManifestMemory{MaxPages: MaxMemoryPages, MaxVarBytes: 0, MaxHttpResponseBytes: 0},
	}
	compiled, err := extism.NewCompiledPlugin(ctx, manifest, extism.PluginConfig{
		RuntimeConfig: rc,
		EnableWasi:    true,
	}, extismHostFunctions())
	if err != nil {
		_ = cache.Close(ctx)
		return nil, err
	}
	return &extismModule{compiled: compiled, cache: cache, limits: limits, startLimit: startLimit, logger: logger, logs: logs, work: work}, nil
}

// extismHostFunctions are compactd's host functions (hostFuncs) for the
// Extism path.
func extismHostFunctions() []extism.HostFunction {
	var out []extism.HostFunction
	for _, f := range hostFuncs() {
		hf := extism.NewHostFunctionWithStack(f.name, func(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
			f.run(ctx, callStateFrom(ctx), hostMemory{plugin: p}, stack)
		}, f.params, f.results)
		hf.SetNamespace(abi.HostModule)
		out = append(out, hf)
	}
	return out
}

// newInstance instantiates the module, running its start section (if it
// has one) and then its runtime's initialization (_initialize), under the
// work budget and the instantiation's wall-clock limit. The SDK runs the
// initialization before a module's first call: the instrumented module's
// no-op export (wasminstr.NopExport) is that call. A module the
// instrumenter refused has no such export; its initialization runs in
// its first call, under that call's limits.
func (m *extismModule) newInstance(ctx context.Context) (instance, error) {
	tracker := newMemoryTracker(m.limits.MaxMemoryPages)
	stderr := newStderrBuffer(stderrTail)
	limit := m.startLimit
	ictx, cancel := context.WithTimeout(withCallState(ctx, &callState{}), limit)
	defer cancel()
	p, err := m.compiled.Instance(experimental.WithMemoryAllocator(ictx, tracker), extism.PluginInstanceConfig{
		ModuleConfig: wazero.NewModuleConfig().WithStderr(stderr),
	})
	if err != nil {
		return nil, instantiateError(ictx, err, tracker, stderr, m.work, limit)
	}
	logger, logs := m.logger, m.logs
	p.SetLogger(func(level extism.LogLevel, msg string) {
		var l hclog.Level
		switch level {
		case extism.LogLevelTrace:
			l = hclog.Trace
		case extism.LogLevelDebug:
			l = hclog.Debug
		case extism.LogLevelWarn:
			l = hclog.Warn
		case extism.LogLevelError:
			l = hclog.Error
		default:
			l = hclog.Info
		}
		pluginLog(logger, logs, l, []byte(msg[:min(len(msg), abi.MaxLogLineBytes)]), len(msg))
	})
	if m.work != nil {
		rc, _, err := p.CallWithContext(ictx, wasminstr.NopExport, nil)
		if err == nil && rc != 0 {
			err = fmt.Errorf("initializing the guest's runtime returned status %d", rc)
		}
		if err != nil {
			pe := instantiateError(ictx, err, tracker, stderr, m.work, limit)
			_ = p.Close(ctx)
			return nil, pe
		}
	}
	return &extismInstance{plugin: p, tracker: tracker, stderr: stderr, maxOutput: m.limits.MaxOutputBytes, work: m.work}, nil
}

type extismInstance struct {
	work      *workBudget
	plugin    *extism.Plugin
	tracker   *memoryTracker
	stderr    *stderrBuffer
	maxOutput int
}

func (e *extismInstance) call(ctx context.Context, st *callState, export string, input []byte) ([]byte, *PluginError) {
	e.stderr.Reset()
	e.tracker.takeRefused()
	ctx = withCallState(ctx, st)
	rc, out, err := e.plugin.CallWithContext(ctx, export, input)
	switch {
	case err != nil && ctx.Err() == nil && rc != 0:
		if msg := e.plugin.GetErrorWithContext(ctx); msg != "" {
			return nil, reported([]byte(msg))
		}
		return nil, classify(ctx, err, e.tracker, e.stderr, e.work)
	case err != nil:
		return nil, classify(ctx, err, e.tracker, e.stderr, e.work)
	case rc != 0:
		return nil, &PluginError{Kind: ErrReported, Code: abi.CodeInternal, Detail: fmt.Sprintf("returned status %d without an error", rc), Stderr: e.stderr.String()}
	case len(out) > e.maxOutput:
		return nil, &PluginError{Kind: ErrOutputTooLarge, Detail: fmt.Sprintf("%d bytes, limit %d", len(out), e.maxOutput)}
	}
	return out, nil
}

func (e *extismInstance) memoryBytes() uint64 { return e.tracker.bytes() }

func (e *extismInstance) close(ctx context.Context) { _ = e.plugin.Close(ctx) }
