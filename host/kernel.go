package host

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// kernel is the fast path's implementation of Extism's kernel memory: the
// blocks a plugin allocates with alloc and fills with store_u64 to pass text
// to host functions and logs. It lives in Go memory, per instance, and is
// reset before every call.
type kernel struct {
	mem    []byte
	top    uint64
	blocks map[uint64]uint64 // offset → length
	limit  uint64
}

// kernelBase is the first offset handed out: 0 means "no block".
const kernelBase = 8

// kernelShrink is the arena size above which reset releases the arena.
const kernelShrink = 8 << 20

func newKernel(limit uint64) *kernel {
	return &kernel{top: kernelBase, blocks: map[uint64]uint64{}, limit: limit}
}

func (k *kernel) reset() {
	k.top = kernelBase
	clear(k.blocks)
	if len(k.mem) > kernelShrink {
		k.mem = nil
	}
}

func (k *kernel) alloc(n uint64) uint64 {
	off := (k.top + 7) &^ 7
	if n == 0 || off+n > k.limit || off+n < off {
		return 0
	}
	if end := off + n; end > uint64(len(k.mem)) {
		grown := make([]byte, min(max(end, 2*uint64(len(k.mem))), k.limit))
		copy(grown, k.mem)
		k.mem = grown
	}
	k.blocks[off] = n
	k.top = off + n
	return off
}

func (k *kernel) free(off uint64) {
	n, ok := k.blocks[off]
	if !ok {
		return
	}
	delete(k.blocks, off)
	if off+n == k.top {
		k.top = off
	}
}

func (k *kernel) length(off uint64) uint64 { return k.blocks[off] }

// check traps (panics inside a host function, which wazero turns into a
// failed call) on an access outside the allocated arena.
func (k *kernel) check(off, n uint64) {
	if off < kernelBase || off+n > k.top || off+n < off {
		panic(fmt.Sprintf("extism kernel: access of %d bytes at offset %d is out of bounds", n, off))
	}
}

// view returns the block at off, in place: valid until the next alloc.
func (k *kernel) view(off uint64) []byte {
	if off == 0 { // Extism's null block: empty
		return nil
	}
	n, ok := k.blocks[off]
	if !ok {
		panic(fmt.Sprintf("extism kernel: no block at offset %d", off))
	}
	return k.mem[off : off+n : off+n]
}

// write copies b into a new block and returns its offset.
func (k *kernel) write(b []byte) uint64 {
	off := k.alloc(uint64(len(b)))
	if off == 0 && len(b) > 0 {
		panic(fmt.Sprintf("extism kernel: cannot allocate %d bytes", len(b)))
	}
	copy(k.mem[off:], b)
	return off
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// logSink is where a plugin's log lines go: its logger, through its
// file's limiter.
type logSink struct {
	logger hclog.Logger
	limits *logLimiter
}

type kernelFunc struct {
	name            string
	params, results []api.ValueType
	fn              func(ctx context.Context, st *callState, log logSink, stack []uint64)
}

// kernelFuncs are the extism:host/env functions the fast path provides,
// with Extism's signatures. A module whose env imports are all in this list
// can take the fast path.
func kernelFuncs() []kernelFunc {
	logFn := func(level hclog.Level) func(context.Context, *callState, logSink, []uint64) {
		return func(_ context.Context, st *callState, log logSink, stack []uint64) {
			// Only the part of the block that can be logged is read.
			msg := st.kernel.view(stack[0])
			size := len(msg)
			pluginLog(log.logger, log.limits, level, msg[:min(size, abi.MaxLogLineBytes)], size)
			st.kernel.free(stack[0])
		}
	}
	unsupported := func(what string) func(context.Context, *callState, logSink, []uint64) {
		return func(context.Context, *callState, logSink, []uint64) {
			panic("compactd plugins cannot use " + what)
		}
	}
	return []kernelFunc{
		{"alloc", []api.ValueType{i64}, []api.ValueType{i64}, func(_ context.Context, st *callState, _ logSink, s []uint64) { s[0] = st.kernel.alloc(s[0]) }},
		{"free", []api.ValueType{i64}, nil, func(_ context.Context, st *callState, _ logSink, s []uint64) { st.kernel.free(s[0]) }},
		{"length", []api.ValueType{i64}, []api.ValueType{i64}, func(_ context.Context, st *callState, _ logSink, s []uint64) { s[0] = st.kernel.length(s[0]) }},
		{"length_unsafe", []api.ValueType{i64}, []api.ValueType{i64}, func(_ context.Context, st *callState, _ logSink, s []uint64) { s[0] = st.kernel.length(s[0]) }},
		{"load_u8", []api.ValueType{i64}, []api.ValueType{i32}, func(_ context.Context, st *callState, _ logSink, s []uint64) {
			st.kernel.check(s[0], 1)
			s[0] = uint64(st.kernel.mem[s[0]])
		}},
		{"load_u64", []api.ValueType{i64}, []api.ValueType{i64}, func(_ context.Context, st *callState, _ logSink, s []uint64) {
			st.kernel.check(s[0], 8)
			s[0] = binary.LittleEndian.Uint64(st.kernel.mem[s[0]:])
		}},
		{"store_u8", []api.ValueType{i64, i32}, nil, func(_ context.Context, st *callState, _ logSink, s []uint64) {
			st.kernel.check(s[0], 1)
			st.kernel.mem[s[0]] = byte(s[1])
		}},
		{"store_u64", []api.ValueType{i64, i64}, nil, func(_ context.Context, st *callState, _ logSink, s []uint64) {
			st.kernel.check(s[0], 8)
			binary.LittleEndian.PutUint64(st.kernel.mem[s[0]:], s[1])
		}},
		// The fast path passes input and output through the plugin's own
		// memory, so the Extism input is empty and output_set is ignored.
		{"input_length", nil, []api.ValueType{i64}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"input_offset", nil, []api.ValueType{i64}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"input_load_u8", []api.ValueType{i64}, []api.ValueType{i32}, unsupported("Extism input on the fast path")},
		{"input_load_u64", []api.ValueType{i64}, []api.ValueType{i64}, unsupported("Extism input on the fast path")},
		{"input_set", []api.ValueType{i64, i64}, nil, func(context.Context, *callState, logSink, []uint64) {}},
		{"output_set", []api.ValueType{i64, i64}, nil, func(context.Context, *callState, logSink, []uint64) {}},
		{"output_length", nil, []api.ValueType{i64}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"output_offset", nil, []api.ValueType{i64}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"error_set", []api.ValueType{i64}, nil, func(context.Context, *callState, logSink, []uint64) {}},
		{"error_get", nil, []api.ValueType{i64}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"reset", nil, nil, func(_ context.Context, st *callState, _ logSink, _ []uint64) { st.kernel.reset() }},
		{"memory_bytes", nil, []api.ValueType{i64}, func(_ context.Context, st *callState, _ logSink, s []uint64) { s[0] = uint64(len(st.kernel.mem)) }},
		{"config_get", []api.ValueType{i64}, []api.ValueType{i64}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"var_get", []api.ValueType{i64}, []api.ValueType{i64}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"var_set", []api.ValueType{i64, i64}, nil, unsupported("Extism vars (keep state in the result's state field)")},
		{"http_request", []api.ValueType{i64, i64}, []api.ValueType{i64}, unsupported("HTTP (plugins have no network)")},
		{"http_status_code", nil, []api.ValueType{i32}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"http_headers", nil, []api.ValueType{i64}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"get_log_level", nil, []api.ValueType{i32}, func(_ context.Context, _ *callState, _ logSink, s []uint64) { s[0] = 0 }},
		{"log_trace", []api.ValueType{i64}, nil, logFn(hclog.Trace)},
		{"log_debug", []api.ValueType{i64}, nil, logFn(hclog.Debug)},
		{"log_info", []api.ValueType{i64}, nil, logFn(hclog.Info)},
		{"log_warn", []api.ValueType{i64}, nil, logFn(hclog.Warn)},
		{"log_error", []api.ValueType{i64}, nil, logFn(hclog.Error)},
	}
}

// instantiateFastHostModules defines extism:host/env (the kernel above) and
// extism:host/user (hostFuncs) in rt. Plugin log calls go to logger
// through limits.
func instantiateFastHostModules(ctx context.Context, rt wazero.Runtime, logger hclog.Logger, limits *logLimiter) error {
	sink := logSink{logger: logger, limits: limits}
	env := rt.NewHostModuleBuilder(abi.ExtismEnvModule)
	for _, f := range kernelFuncs() {
		fn := f.fn
		env.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
			st := callStateFrom(ctx)
			if st.kernel == nil {
				panic("extism kernel called outside a compactd call")
			}
			fn(ctx, st, sink, stack)
		}), f.params, f.results).Export(f.name)
	}
	if _, err := env.Instantiate(ctx); err != nil {
		return fmt.Errorf("instantiating %s: %w", abi.ExtismEnvModule, err)
	}
	user := rt.NewHostModuleBuilder(abi.HostModule)
	for _, f := range hostFuncs() {
		user.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			st := callStateFrom(ctx)
			if st.kernel == nil {
				panic(f.name + " called outside a compactd call")
			}
			f.run(ctx, st, hostMemory{kernel: st.kernel, guest: mod.Memory()}, stack)
		}), f.params, f.results).Export(f.name)
	}
	if _, err := user.Instantiate(ctx); err != nil {
		return fmt.Errorf("instantiating %s: %w", abi.HostModule, err)
	}
	return nil
}

// fastImportsOK reports whether every import of compiled is provided by the
// fast path with the same signature.
func fastImportsOK(compiled wazero.CompiledModule) bool {
	env := map[string]kernelFunc{}
	for _, f := range kernelFuncs() {
		env[f.name] = f
	}
	user := map[string]hostFunc{}
	for _, f := range hostFuncs() {
		user[f.name] = f
	}
	for _, imp := range compiled.ImportedFunctions() {
		mod, name, _ := imp.Import()
		var params, results []api.ValueType
		switch mod {
		case wasiModule:
			continue
		case abi.ExtismEnvModule:
			f, ok := env[name]
			if !ok {
				return false
			}
			params, results = f.params, f.results
		case abi.HostModule:
			f, ok := user[name]
			if !ok {
				return false
			}
			params, results = f.params, f.results
		default:
			return false
		}
		if !sameTypes(imp.ParamTypes(), params) || !sameTypes(imp.ResultTypes(), results) {
			return false
		}
	}
	return true
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
