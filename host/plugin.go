package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/policyconfig"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Plugin is a loaded plugin: its description and a pool of instances.
// It is safe for concurrent use; calls beyond Limits.MaxInstances wait.
type Plugin struct {
	desc             abi.Description
	schema           *policyconfig.Schema
	source, sha256   string
	exportNames      map[string]bool
	hasShouldCompact bool
	view             string // abi.ViewFull or abi.ViewHeaders
	limits           Limits
	logger           hclog.Logger
	logs             *logLimiter // shared by the versions of one file
	loadedAt         time.Time
	initialPages     uint32

	// loadModule compiles the module of a plugin loaded from its
	// description alone (LoadOptions.Described), on first use; nil
	// otherwise.
	loadModule func(ctx context.Context) (module, error)
	loadMu     sync.Mutex // held while loadModule runs
	lazyPath   string     // the path a lazy plugin will take, until it is loaded
	// fromDescription: loaded from LoadOptions.Described.
	fromDescription bool

	slots    chan struct{} // one token per instance allowed to run
	mu       sync.Mutex
	cur      *modRef // the module new instances come from; nil until loaded
	idle     []*pooled
	inflight int
	closed   bool
	done     chan struct{}

	calls, failures, discarded atomic.Uint64
	lastCall                   atomic.Int64 // UnixNano of the last call's end

	// engine admits the plugin's instances against the daemon's memory
	// budget and closes idle ones when others need the room; nil (no
	// budget) for plugins made by tests without an engine.
	engine *Engine
}

// modRef is a module and the instances made from it that are not closed
// yet. A module replaced by a compiled one (LoadOptions.Quick) is closed
// when its last instance is.
type modRef struct {
	mod  module
	live int
}

// pooled is an instance, the module it came from and what it holds of
// the daemon's memory budget.
type pooled struct {
	instance
	ref      *modRef
	reserved uint64
	// conv is the conversation the instance's last compaction served: a
	// policy's memo (the ledger's chunks) holds what that call saw, so
	// the conversation's next request prefers this instance.
	conv string
}

func newPlugin(mod module, limits Limits, logger hclog.Logger) *Plugin {
	p := &Plugin{
		limits:      limits,
		logger:      logger,
		loadedAt:    time.Now(),
		exportNames: map[string]bool{},
		logs:        newLogLimiter(),
		slots:       make(chan struct{}, limits.MaxInstances),
		done:        make(chan struct{}),
	}
	if mod != nil {
		p.cur = &modRef{mod: mod}
	}
	return p
}

// Tier says how the plugin's code runs now: TierLazy (not compiled yet),
// TierInterpreted or TierCompiled.
func (p *Plugin) Tier() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.cur == nil:
		return TierLazy
	case p.cur.mod.interpreted():
		return TierInterpreted
	}
	return TierCompiled
}

// Warm compiles a lazily loaded plugin's module now, rather than on its
// first call. It does nothing for a loaded one.
func (p *Plugin) Warm(ctx context.Context) error {
	if _, err := p.module(ctx); err != nil {
		return err
	}
	return nil // not module's nil *PluginError, which is a non-nil error
}

// module returns the current module, compiling it first for a lazily
// loaded plugin.
func (p *Plugin) module(ctx context.Context) (*modRef, *PluginError) {
	p.mu.Lock()
	ref := p.cur
	p.mu.Unlock()
	if ref != nil {
		return ref, nil
	}
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	p.mu.Lock()
	ref = p.cur
	closed := p.closed
	p.mu.Unlock()
	switch {
	case ref != nil:
		return ref, nil
	case closed:
		return nil, &PluginError{Kind: ErrClosed}
	}
	mod, err := p.loadModule(ctx)
	if err != nil {
		var pe *PluginError
		if !errors.As(err, &pe) {
			pe = &PluginError{Kind: ErrInvalidModule, Detail: err.Error(), Err: err}
		}
		return nil, pe
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = mod.close(ctx)
		return nil, &PluginError{Kind: ErrClosed}
	}
	p.cur = &modRef{mod: mod}
	return p.cur, nil
}

// ReleaseIdle unloads the plugin's compiled code and instances if it has
// had no call for idle (and none is running), so an unused plugin costs
// no memory; its next call compiles it again (from the compilation
// cache: tens of milliseconds). It reports whether it released anything.
// A plugin that cannot be compiled again (loaded from memory without its
// bytes) keeps its code.
func (p *Plugin) ReleaseIdle(ctx context.Context, idle time.Duration) bool {
	if p.loadModule == nil || time.Since(time.Unix(0, max(p.lastCall.Load(), p.loadedAt.UnixNano()))) < idle {
		return false
	}
	if !p.loadMu.TryLock() {
		return false // being loaded
	}
	defer p.loadMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.inflight > 0 || p.cur == nil || p.cur.mod.interpreted() {
		return false
	}
	for _, pi := range p.idle {
		p.closeInstance(ctx, pi)
		pi.ref.live--
	}
	p.idle = nil
	if p.cur.live == 0 {
		p.closeModule(ctx, p.cur.mod)
	}
	p.cur = nil
	return true
}

// upgrade makes mod (the same bytes, compiled) the module new instances
// come from. Idle instances of the old module are closed now, busy ones
// when their call returns, and the old module with its last instance. It
// reports false if the plugin was closed (the caller closes mod).
func (p *Plugin) upgrade(ctx context.Context, mod module) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	old := p.cur
	p.cur = &modRef{mod: mod}
	keep := p.idle[:0]
	for _, pi := range p.idle {
		if pi.ref == old {
			p.closeInstanceLocked(ctx, pi)
			continue
		}
		keep = append(keep, pi)
	}
	clear(p.idle[len(keep):]) // the array must not keep the closed ones alive
	p.idle = keep
	if old != nil && old.live == 0 {
		p.closeModule(ctx, old.mod)
	}
	return true
}

// closeInstanceLocked closes an instance, and its module if that was
// replaced and this was its last instance. The caller holds p.mu.
func (p *Plugin) closeInstanceLocked(ctx context.Context, pi *pooled) {
	p.closeInstance(ctx, pi)
	pi.ref.live--
	if pi.ref != p.cur && pi.ref.live == 0 {
		p.closeModule(ctx, pi.ref.mod)
	}
}

// loaded makes sure a lazily loaded plugin is compiled before its input
// is encoded for the path it takes.
func (p *Plugin) loaded(ctx context.Context, export string) error {
	if _, pe := p.module(ctx); pe != nil {
		p.calls.Add(1)
		p.failures.Add(1)
		return p.named(export, pe)
	}
	return nil
}

func (p *Plugin) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Description returns what the plugin's describe export said.
func (p *Plugin) Description() abi.Description { return p.desc }

// Name returns the policy name.
func (p *Plugin) Name() string { return p.desc.Name }

// Version returns the plugin's version.
func (p *Plugin) Version() string { return p.desc.Version }

// Schema returns the plugin's compiled config schema.
func (p *Plugin) Schema() *policyconfig.Schema { return p.schema }

// Source returns the path the plugin was loaded from ("" if from memory).
func (p *Plugin) Source() string { return p.source }

// SHA256 returns the hex SHA-256 of the module's bytes.
func (p *Plugin) SHA256() string { return p.sha256 }

// LoadedAt returns when the plugin was loaded.
func (p *Plugin) LoadedAt() time.Time { return p.loadedAt }

// Path returns "fast" or "extism": how the host calls the plugin.
func (p *Plugin) Path() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		return p.cur.mod.path()
	}
	return p.lazyPath
}

// View returns the view of the conversation the plugin reads:
// abi.ViewFull or abi.ViewHeaders.
func (p *Plugin) View() string { return p.view }

// Limits returns the plugin's limits.
func (p *Plugin) Limits() Limits { return p.limits }

// InitialMemoryBytes returns the linear memory the module declares it
// needs at start. A memory limit below it would refuse the module.
func (p *Plugin) InitialMemoryBytes() uint64 { return uint64(p.initialPages) << 16 }

// Stats are a plugin's counters.
type Stats struct {
	Calls, Failures uint64 // calls made, calls that failed
	Discarded       uint64 // instances discarded after a failure
	Idle            int    // instances waiting in the pool
	IdleMemoryBytes uint64 // linear memory held by idle instances
	// LogDropped and LogTruncated count the plugin file's log lines
	// dropped over the rate limit and cut to the line-length limit (every
	// version of the file together).
	LogDropped, LogTruncated uint64
}

// Stats returns the plugin's counters.
func (p *Plugin) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Calls: p.calls.Load(), Failures: p.failures.Load(), Discarded: p.discarded.Load(), Idle: len(p.idle),
		LogDropped: p.logs.dropped.Load(), LogTruncated: p.logs.truncated.Load()}
	for _, inst := range p.idle {
		s.IdleMemoryBytes += inst.memoryBytes()
	}
	return s
}

// Close unloads the plugin. Calls in flight finish on it; the module is
// released when the last one returns (Done is closed then). New calls fail
// with ErrClosed. A second Close does nothing.
func (p *Plugin) Close(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if p.inflight == 0 {
		p.shutdownLocked(ctx)
	}
}

// Done is closed when a closed plugin has released its module.
func (p *Plugin) Done() <-chan struct{} { return p.done }

func (p *Plugin) shutdownLocked(ctx context.Context) {
	if p.engine != nil {
		p.engine.forget(p)
	}
	for _, pi := range p.idle {
		p.closeInstance(ctx, pi)
	}
	p.idle = nil
	if p.cur != nil {
		p.closeModule(ctx, p.cur.mod)
	}
	close(p.done)
}

// closeInstance closes an instance and gives its share of the memory
// budget back; a panic doing so is logged, not raised.
func (p *Plugin) closeInstance(ctx context.Context, pi *pooled) {
	p.recovering("closing an instance", func() { pi.close(ctx) })
	p.giveBack(pi.reserved)
	pi.reserved = 0
}

// reserve is what one instance holds of the daemon's memory budget: its
// linear memory at the limit, and the stack of the call it serves.
func (p *Plugin) reserve() uint64 {
	return uint64(p.limits.MaxMemoryPages)<<16 + StackReserve
}

// admit takes an instance's share of the daemon's memory budget, waiting
// for it as the engine allows. It returns what it took.
func (p *Plugin) admit(ctx context.Context) (uint64, *PluginError) {
	if p.engine == nil {
		return 0, nil
	}
	n, wait := p.reserve(), p.engine.admitWait
	if ctx.Value(patientKey{}) != nil {
		wait = 0 // as long as ctx lives
	}
	if pe := p.engine.budget.take(ctx, n, wait, "a new instance"); pe != nil {
		p.engine.refused.Add(1)
		pe.Export = "instantiate"
		return 0, pe
	}
	return n, nil
}

// giveBack returns n bytes to the daemon's memory budget.
func (p *Plugin) giveBack(n uint64) {
	if p.engine != nil {
		p.engine.budget.give(n)
	}
}

// closeIdle closes the plugin's idle instances, up to need bytes of the
// memory budget, and returns the bytes they gave back.
func (p *Plugin) closeIdle(ctx context.Context, need uint64) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var freed uint64
	for len(p.idle) > 0 && freed < need {
		n := len(p.idle)
		pi := p.idle[0] // the oldest first
		copy(p.idle, p.idle[1:])
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		freed += pi.reserved
		p.closeInstanceLocked(ctx, pi)
	}
	return freed
}

// closeModule closes a compiled module; an error or a panic doing so is
// logged, not raised.
func (p *Plugin) closeModule(ctx context.Context, mod module) {
	p.recovering("closing the module", func() {
		if err := mod.close(ctx); err != nil {
			p.logger.Warn("closing module", "error", err)
		}
	})
}

// recovering runs f and turns a panic into an error log with its stack.
// It reports whether f panicked, and with what.
func (p *Plugin) recovering(what string, f func()) (panicked any) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
			p.logger.Error("panic "+what+"; recovered", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	f()
	return nil
}

// acquire reserves an instance: an idle one, or a new one.
// A conv other than "" prefers the idle instance that last served that
// conversation (see pooled.conv); any idle one serves otherwise.
func (p *Plugin) acquire(ctx context.Context, conv string) (*pooled, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, &PluginError{Kind: ErrClosed}
	}
	p.inflight++
	p.mu.Unlock()

	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		p.finish(context.WithoutCancel(ctx))
		return nil, &PluginError{Kind: ErrCanceled, Detail: "waiting for a free instance: " + ctx.Err().Error(), Err: ctx.Err()}
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		k := n - 1 // the most recently used, unless the conversation's own is idle
		for i := n - 1; conv != "" && i >= 0; i-- {
			if p.idle[i].conv == conv {
				k = i
				break
			}
		}
		pi := p.idle[k]
		p.idle[k] = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pi, nil
	}
	p.mu.Unlock()
	if _, pe := p.module(ctx); pe != nil {
		<-p.slots
		p.finish(context.WithoutCancel(ctx))
		return nil, pe
	}
	reserved, pe := p.admit(ctx)
	if pe != nil {
		<-p.slots
		p.finish(context.WithoutCancel(ctx))
		return nil, pe
	}
	p.mu.Lock()
	ref := p.cur
	ref.live++ // counted before the instance exists: an upgrade now must not close ref
	p.mu.Unlock()
	var inst instance
	var err error
	if r := p.recovering("instantiating the plugin", func() { inst, err = ref.mod.newInstance(ctx) }); r != nil {
		inst, err = nil, &PluginError{Kind: ErrPanic, Export: "instantiate", Detail: fmt.Sprint(r)}
	}
	if err != nil {
		p.giveBack(reserved)
		p.mu.Lock()
		ref.live--
		if ref != p.cur && ref.live == 0 {
			p.closeModule(ctx, ref.mod)
		}
		p.mu.Unlock()
		<-p.slots
		p.finish(context.WithoutCancel(ctx))
		var pe *PluginError
		if !errors.As(err, &pe) {
			pe = &PluginError{Kind: ErrInvalidModule, Detail: err.Error(), Err: err}
		}
		return nil, pe
	}
	return &pooled{instance: inst, ref: ref, reserved: reserved}, nil
}

// recycleFraction: an instance whose memory grew past this share of the
// limit is closed after its call instead of going back to the pool, so one
// huge request does not pin its memory for the daemon's lifetime.
const recycleFraction = 2

// release returns inst to the pool, or discards it if the call poisoned it.
func (p *Plugin) release(ctx context.Context, pi *pooled, failure *PluginError) {
	discard := failure != nil && poisons(failure.Kind) ||
		pi.memoryBytes() > (uint64(p.limits.MaxMemoryPages)<<16)/recycleFraction
	if discard && failure != nil {
		p.discarded.Add(1)
	}
	p.mu.Lock()
	if discard || pi.ref != p.cur || p.closed {
		p.closeInstanceLocked(ctx, pi)
	} else {
		p.idle = append(p.idle, pi)
		if p.engine != nil {
			defer p.engine.budget.wake() // a waiter may close it
		}
	}
	p.mu.Unlock()
	<-p.slots
	p.finish(ctx)
}

func (p *Plugin) finish(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	if p.closed && p.inflight == 0 {
		p.shutdownLocked(ctx)
	}
}

// run calls export with input on a pooled instance, under the call time
// limit, and hands the output to decode before the instance is released
// (the output lives in the instance's memory).
// conv names the conversation a compaction serves ("" for other calls):
// see acquire.
func (p *Plugin) run(ctx context.Context, export string, input []byte, env CallEnv, msgs []abi.Message, conv string, decode func(out []byte) *PluginError) (err error) {
	if parent := trace.SpanFromContext(ctx); parent.IsRecording() {
		// A span per call when the caller's trace records (OpenTelemetry
		// is on): named by the export, under the caller's span.
		var span trace.Span
		ctx, span = parent.TracerProvider().Tracer(tracerScope).Start(ctx, "compactd.plugin "+export, trace.WithAttributes(
			attribute.String("compactd.plugin", p.Name()), attribute.String("compactd.plugin.path", p.Path()),
			attribute.String("compactd.plugin.tier", p.Tier()), attribute.Int("compactd.plugin.input_bytes", len(input))))
		defer func() {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
	}
	p.calls.Add(1)
	defer p.lastCall.Store(time.Now().UnixNano())
	inst, err := p.acquire(ctx, conv)
	if err != nil {
		p.failures.Add(1)
		return p.named(export, err.(*PluginError))
	}
	if conv != "" {
		inst.conv = conv
	}
	callCtx, cancel := context.WithTimeout(ctx, p.limits.CallTimeout)
	var failure *PluginError
	if r := p.recovering("in a call to "+export, func() {
		var out []byte
		out, failure = inst.call(callCtx, &callState{env: env, msgs: msgs}, export, input)
		if failure == nil && decode != nil {
			failure = decode(out)
		}
	}); r != nil {
		failure = &PluginError{Kind: ErrPanic, Detail: fmt.Sprint(r)}
	}
	cancel()
	p.release(context.WithoutCancel(ctx), inst, failure)
	if failure != nil {
		p.failures.Add(1)
		if failure.Kind == ErrTimeout {
			if ctx.Err() != nil {
				// The caller's deadline (a request's, say) came first.
				failure.Detail = "stopped at its caller's deadline, before its own time limit of " + p.limits.CallTimeout.String() + " (call_timeout)"
			} else {
				failure.Detail = "ran past its wall-clock time limit of " + p.limits.CallTimeout.String() + " (call_timeout)"
			}
		}
		return p.named(export, failure)
	}
	return nil
}

// named fills in the plugin's name and version, and the export when the
// failure does not name a more precise one (such as "instantiate").
func (p *Plugin) named(export string, pe *PluginError) *PluginError {
	pe.Plugin, pe.Version = p.desc.Name, p.desc.Version
	if pe.Export == "" {
		pe.Export = export
	}
	return pe
}

// Request is one compaction call.
type Request struct {
	// Conversation is the valid input, with every message's Tokens set.
	Conversation *chat.Conversation
	// Config is the resolved config (see policyconfig.Schema.Resolve).
	Config json.RawMessage
	// Context is sent as is, except TotalTokens, which the host sets.
	Context abi.Context
	// Env serves the host functions during the call.
	Env CallEnv
}

// Response is a checked compaction result.
type Response struct {
	// Conversation is the output: refs carry the caller's original bytes
	// and their input token counts; new messages have Tokens 0.
	Conversation *chat.Conversation
	// Result is the plugin's metadata (its Messages field is cleared).
	Result abi.CompactResult
	// Compacted reports whether the output differs from the input.
	Compacted bool
	// Dropped lists the input indices not kept by a ref.
	Dropped []int
	// NewMessages lists the output indices of new messages.
	NewMessages []int
	// Refs maps each output index to the input message it keeps (-1 for
	// a new message).
	Refs []int
	// Duration is the time the call took, encoding and checks included.
	Duration time.Duration
}

// Compact runs the compact export and checks its result against the input.
// On failure it returns a *PluginError; the input is untouched.
func (p *Plugin) Compact(ctx context.Context, req *Request) (*Response, error) {
	start := time.Now()
	if err := p.loaded(ctx, abi.ExportCompact); err != nil {
		return nil, err
	}
	input := p.encode(req)
	var resp *Response
	err := p.run(ctx, abi.ExportCompact, input, req.Env, req.Conversation.Messages, req.Context.ConversationID, func(out []byte) *PluginError {
		var pe *PluginError
		resp, pe = decodeResult(req.Conversation, out)
		return pe
	})
	if err != nil {
		return nil, err
	}
	resp.Duration = time.Since(start)
	return resp, nil
}

// tracerScope names the plugin calls' spans' instrumentation scope.
const tracerScope = "github.com/compactd/compactd/host"

// HasShouldCompact reports whether the plugin implements should_compact.
func (p *Plugin) HasShouldCompact() bool { return p.hasShouldCompact }

// ShouldCompact runs the should_compact export. Plugins without it answer
// {Compact: true}.
func (p *Plugin) ShouldCompact(ctx context.Context, req *Request) (abi.ShouldCompactResult, error) {
	if !p.hasShouldCompact {
		return abi.ShouldCompactResult{Compact: true}, nil
	}
	var res abi.ShouldCompactResult
	if err := p.loaded(ctx, abi.ExportShouldCompact); err != nil {
		return res, err
	}
	err := p.run(ctx, abi.ExportShouldCompact, p.encode(req), req.Env, req.Conversation.Messages, req.Context.ConversationID, func(out []byte) *PluginError {
		if err := json.Unmarshal(out, &res); err != nil {
			return &PluginError{Kind: ErrInvalidOutput, Detail: "should_compact: " + err.Error()}
		}
		return nil
	})
	return res, err
}

// Call runs any export on raw input and returns a copy of its raw output,
// without interpreting it. Conformance checks and benchmarks use it.
func (p *Plugin) Call(ctx context.Context, export string, input []byte, env CallEnv) ([]byte, error) {
	var out []byte
	err := p.run(ctx, export, input, env, nil, "", func(o []byte) *PluginError {
		out = append([]byte(nil), o...)
		return nil
	})
	return out, err
}

// Ping makes a no-op call into a fast-path plugin (it measures the
// boundary's fixed cost). Extism-path plugins answer ErrInvalidModule.
func (p *Plugin) Ping(ctx context.Context) error {
	if p.Path() != "fast" {
		return p.named("ping", &PluginError{Kind: ErrInvalidModule, Detail: "ping needs the fast path"})
	}
	return p.run(ctx, exportPing, nil, CallEnv{}, nil, "", nil)
}
