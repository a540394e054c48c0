// Package wasminstr makes a WebAssembly module interruptible at a low
// cost, so the host can run it without wazero's termination checks, and
// bounds the work it may do in each call.
//
// wazero makes a module interruptible (WithCloseOnContextDone) by calling
// out to Go at every loop header, to check whether the call's context is
// done. Go's compiler turns every function into a loop (so goroutines can
// resume in the middle), so a Go guest crosses loop headers all the time
// and pays for a call out to Go at each: guests ran 4-7 times slower with
// the checks on (RATIONALE.md, "Interruptible guests").
//
// Instrument rewrites the module instead: at every loop header (and at
// the entry of every function that calls and does not open with a loop,
// for recursion that loops nowhere) it decrements a fuel counter (a
// global of its own), and only when the counter reaches zero (every Fuel
// such steps) it calls an added function that refills it, takes one from
// a work budget (another global; the guest traps in a function of its
// own, OutOfWork, when the budget is used up), leaves the guest (a memory.grow of zero pages,
// which wazero serves in Go, so the Go runtime can preempt the goroutine
// there, e.g. for a garbage collection) and looks at a stop flag (a third
// global, exported as StopGlobal) that the host sets from a timer when
// the call must end: the guest then traps.
//
// The budget counts work, not time: the same call on the same input
// stops at the same step on any machine, however busy, compiled or
// interpreted. Every exported function is reached through an added
// wrapper that sets the budget (Options.CallBudget, or
// Options.StartBudget for _initialize and the like) when the host calls
// in, and only then: a call from inside the guest does not reset it. The
// module's start function runs under the budget's initial value,
// StartBudget. The start function, which would run inside instantiation
// where nothing but the budget can stop it, is exported as StartExport
// instead, for the host to call under the same guard, unless
// Options.KeepStart asks otherwise (the Extism SDK owns instantiation,
// and wazero's own checks guard it there).
//
// Nothing else changes: no index of any existing function, global,
// table, memory or type moves (what is added comes after), so the rest
// of the module is copied as it is. A module the instrumenter does not
// fully understand (an opcode it does not know, no memory to grow, code
// that names a function or global the module does not have, which would
// reach the added ones) is refused with an error, and the host keeps
// wazero's checks for it, with EntryLoops' empty loops at function
// entries so that those checks cover recursion too.
package wasminstr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Names the instrumented module exports.
const (
	// StopGlobal is the mutable i32 global the host sets to a non-zero
	// value to make the guest trap at its next check.
	StopGlobal = "compactd:stop"
	// BudgetGlobal is the mutable i64 global that holds what is left of
	// the running call's work budget, in refills of Fuel steps.
	BudgetGlobal = "compactd:budget"
	// StartExport is the module's start function, when it had one (and
	// Options.KeepStart was not set).
	StartExport = "compactd:start"
	// NopExport is a function that does nothing. Calling it makes the
	// Extism SDK run the guest's runtime initialization (_initialize),
	// which it does before a module's first call.
	NopExport = "compactd:nop"
)

// Fuel is the number of steps (loop iterations and entries of functions
// that call) between two checks of the stop flag and the work budget
// (and two visits to Go).
const Fuel = 1024

// initExports are the exports a runtime calls to initialize the guest
// (WASI reactors' _initialize; __wasm_call_ctors and hs_init, which the
// Extism SDK calls for WASI commands and Haskell): they run under
// Options.StartBudget.
var initExports = map[string]bool{"_initialize": true, "__wasm_call_ctors": true, "hs_init": true}

// ErrUnsupported wraps the reasons a module cannot be instrumented.
var ErrUnsupported = errors.New("wasminstr: module not supported")

// Options are Instrument's settings.
type Options struct {
	// CallBudget is the work budget of each call of an exported
	// function, in refills: a call traps after CallBudget×Fuel steps.
	// Zero means no budget (2^64 refills).
	CallBudget uint64
	// StartBudget is the work budget of the module's start function and
	// of _initialize, in refills. Zero means no budget.
	StartBudget uint64
	// KeepStart leaves the start section in place: the start function
	// runs during instantiation, under StartBudget, rather than being
	// exported as StartExport.
	KeepStart bool
}

// Result is an instrumented module.
type Result struct {
	// Module is the instrumented module.
	Module []byte
	// HasStart reports that the module had a start function, now
	// exported as StartExport (unless Options.KeepStart): call it once,
	// right after instantiation.
	HasStart bool
	// Loops is the number of loop headers instrumented.
	Loops int
	// OutOfWork is the index of the function in which the guest traps
	// (unreachable) when its work budget is used up: a trap whose
	// innermost frame is this function is the budget's doing.
	OutOfWork uint32
	// Options are the options the module was instrumented with.
	Options Options
}

// Section ids.
const (
	secCustom = iota
	secType
	secImport
	secFunction
	secTable
	secMemory
	secGlobal
	secExport
	secStart
	secElement
	secCode
	secData
	secDataCount
	secTag
)

// order is the position of each section id in a module (the tag section
// comes between memory and global).
var order = map[byte]int{secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6, secGlobal: 7,
	secExport: 8, secStart: 9, secElement: 10, secDataCount: 11, secCode: 12, secData: 13}

type section struct {
	id   byte
	body []byte
}

// layout is what Instrument learns of a module before it rewrites it:
// the sizes of its index spaces and the indices it adds.
type layout struct {
	types        []funcType // the type section's function types
	funcTypes    []uint32   // type index of each defined function
	importedFunc uint32
	funcs        uint32 // imported + defined functions
	globals      uint32 // imported + defined globals
	mems         uint32 // imported + defined memories
	startFunc    uint32
	hasStart     bool

	// Added: the globals (fuel, stop, budget, and whether a call from the
	// host is running), the type [] -> [] and the functions before the
	// wrappers.
	fuel, stop, budget, active       uint32
	voidType, outOfWork, nop, refill uint32
}

// funcType is a function type's parameter count (all a wrapper needs).
type funcType struct{ params uint32 }

// wrapper is an added function through which the host enters an
// exported one.
type wrapper struct {
	target, typ, params uint32
	budget              uint64
}

// Instrument returns the instrumented module.
func Instrument(module []byte, opts Options) (*Result, error) {
	if len(module) < 8 || !bytes.Equal(module[:4], []byte("\x00asm")) || binary.LittleEndian.Uint32(module[4:8]) != 1 {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary", ErrUnsupported)
	}
	var secs []section
	r := reader{b: module, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", ErrUnsupported, id, r.err)
		}
		secs = append(secs, section{id: id, body: body})
	}
	l, err := readLayout(secs)
	if err != nil {
		return nil, err
	}
	if l.mems == 0 {
		return nil, fmt.Errorf("%w: no memory (the check leaves the guest with memory.grow)", ErrUnsupported)
	}
	check := checkCode(l)

	res := &Result{HasStart: l.hasStart && !opts.KeepStart, OutOfWork: l.outOfWork, Options: opts}
	// The wrappers: one per export of a defined function, and one for
	// the start function when it is exported.
	var wrappers []wrapper
	exports, err := rewriteExports(secs, l, opts, &wrappers)
	if err != nil {
		return nil, err
	}
	var out []section
	var seen [secTag + 1]bool
	for _, s := range secs {
		if int(s.id) < len(seen) {
			seen[s.id] = true
		}
		switch s.id {
		case secType:
			out = append(out, section{id: secType, body: appendVec(s.body, 1, []byte{0x60, 0x00, 0x00})})
		case secFunction:
			out = append(out, section{id: secFunction, body: appendVec(s.body, added+len(wrappers), addedFuncTypes(l, wrappers))})
		case secGlobal:
			out = append(out, section{id: secGlobal, body: appendVec(s.body, 4, addedGlobals(opts))})
		case secExport:
			out = append(out, section{id: secExport, body: exports})
		case secStart:
			if opts.KeepStart {
				out = append(out, s)
			}
			// Otherwise dropped: exported as StartExport, called by the host.
		case secCode:
			body, loops, err := instrumentCode(s.body, check, l)
			if err != nil {
				return nil, err
			}
			res.Loops = loops
			out = append(out, section{id: secCode, body: appendVec(body, added+len(wrappers), addedCode(l, wrappers))})
		case secCustom:
			if isDebugSection(s.body) {
				continue // code offsets moved: DWARF would lie
			}
			out = append(out, s)
		default:
			out = append(out, s)
		}
	}
	// Sections the module lacks are created where they belong.
	empty := []byte{0}
	if !seen[secType] {
		out = insertSection(out, section{id: secType, body: appendVec(empty, 1, []byte{0x60, 0x00, 0x00})})
	}
	if !seen[secFunction] {
		out = insertSection(out, section{id: secFunction, body: appendVec(empty, added+len(wrappers), addedFuncTypes(l, wrappers))})
	}
	if !seen[secGlobal] {
		out = insertSection(out, section{id: secGlobal, body: appendVec(empty, 4, addedGlobals(opts))})
	}
	if !seen[secExport] {
		out = insertSection(out, section{id: secExport, body: exports})
	}
	if !seen[secCode] {
		out = insertSection(out, section{id: secCode, body: appendVec(empty, added+len(wrappers), addedCode(l, wrappers))})
	}
	// One buffer of the final size: a module is megabytes, and each
	// growth of a buffer would copy it (costly under the race detector).
	size := 8
	for _, s := range out {
		size += 1 + binary.MaxVarintLen32 + len(s.body)
	}
	var buf bytes.Buffer
	buf.Grow(size)
	buf.Write(module[:8])
	for _, s := range out {
		buf.WriteByte(s.id)
		buf.Write(appendU32(nil, uint32(len(s.body))))
		buf.Write(s.body)
	}
	res.Module = buf.Bytes()
	return res, nil
}

// readLayout reads the index spaces' sizes and the types of the defined
// functions.
func readLayout(secs []section) (*layout, error) {
	l := &layout{}
	var definedGlobals, definedMems, definedFuncs uint32
	haveFuncs, haveCode := false, false
	for _, s := range secs {
		rr := reader{b: s.body}
		switch s.id {
		case secType:
			n := rr.u32()
			for i := uint32(0); i < n && rr.err == nil; i++ {
				if form := rr.byte(); form != 0x60 {
					return nil, fmt.Errorf("%w: type %d is not a function type (form 0x%02x)", ErrUnsupported, i, form)
				}
				params := rr.u32()
				for j := uint32(0); j < params && rr.err == nil; j++ {
					rr.valtype()
				}
				results := rr.u32()
				for j := uint32(0); j < results && rr.err == nil; j++ {
					rr.valtype()
				}
				l.types = append(l.types, funcType{params: params})
			}
		case secImport:
			f, g, m, err := countImports(s.body)
			if err != nil {
				return nil, err
			}
			l.importedFunc, l.globals, l.mems = f, l.globals+g, l.mems+m
		case secFunction:
			definedFuncs = rr.u32()
			haveFuncs = true
			for i := uint32(0); i < definedFuncs && rr.err == nil; i++ {
				t := rr.u32()
				l.funcTypes = append(l.funcTypes, t)
			}
		case secGlobal:
			definedGlobals = rr.u32()
		case secMemory:
			definedMems = rr.u32()
		case secStart:
			l.startFunc, l.hasStart = rr.u32(), true
		case secCode:
			haveCode = true
			if n := rr.u32(); rr.err == nil && n != definedFuncs {
				return nil, fmt.Errorf("%w: %d function bodies for %d functions", ErrUnsupported, n, definedFuncs)
			}
		}
		if rr.err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", ErrUnsupported, s.id, rr.err)
		}
	}
	if haveFuncs != haveCode && definedFuncs > 0 {
		return nil, fmt.Errorf("%w: a function section without code, or code without functions", ErrUnsupported)
	}
	for i, t := range l.funcTypes {
		if int(t) >= len(l.types) {
			return nil, fmt.Errorf("%w: function %d has type %d of %d", ErrUnsupported, i, t, len(l.types))
		}
	}
	l.globals += definedGlobals
	l.mems += definedMems
	l.funcs = l.importedFunc + definedFuncs
	if l.hasStart && l.startFunc >= l.funcs {
		return nil, fmt.Errorf("%w: start function %d of %d", ErrUnsupported, l.startFunc, l.funcs)
	}
	l.fuel, l.stop, l.budget, l.active = l.globals, l.globals+1, l.globals+2, l.globals+3
	l.voidType = uint32(len(l.types))
	l.outOfWork, l.nop, l.refill = l.funcs, l.funcs+1, l.funcs+2
	return l, nil
}

// appendVec appends n encoded items (add) to a vector's body (its count
// and its items).
func appendVec(body []byte, n int, add []byte) []byte {
	r := reader{b: body}
	count := r.u32()
	out := appendU32(make([]byte, 0, len(body)+len(add)+5), count+uint32(n))
	out = append(out, body[r.off:]...)
	return append(out, add...)
}

// added is the number of functions Instrument adds besides the
// wrappers: OutOfWork, the nop and $refill.
const added = 3

// addedFuncTypes is the function section's entries for OutOfWork, the
// nop, $refill and the wrappers.
func addedFuncTypes(l *layout, wrappers []wrapper) []byte {
	b := appendU32(nil, l.voidType)
	b = appendU32(b, l.voidType)
	b = appendU32(b, l.voidType)
	for _, w := range wrappers {
		b = appendU32(b, w.typ)
	}
	return b
}

// addedGlobals is the global section's entries for the fuel counter,
// the stop flag, the budget and the flag that a call from the host is
// running (the wrappers set the budget only when it is not, so that no
// call from inside the guest resets it).
func addedGlobals(opts Options) []byte {
	// i32 mut = Fuel; i32 mut = 0; i64 mut = StartBudget; i32 mut = 0.
	b := []byte{0x7f, 0x01, 0x41}
	b = appendS32(b, Fuel)
	b = append(b, 0x0b)
	b = append(b, 0x7f, 0x01, 0x41, 0x00, 0x0b)
	b = append(b, 0x7e, 0x01, 0x42)
	b = appendS64(b, int64(opts.StartBudget))
	b = append(b, 0x0b)
	return append(b, 0x7f, 0x01, 0x41, 0x00, 0x0b)
}

// addedCode is the code section's bodies for OutOfWork, the nop, $refill
// and the wrappers.
func addedCode(l *layout, wrappers []wrapper) []byte {
	// OutOfWork: no locals; unreachable. The nop: no locals, nothing.
	b := []byte{0x03, 0x00, 0x00, 0x0b, 0x02, 0x00, 0x0b}
	refill := refillCode(l)
	b = appendU32(b, uint32(len(refill)))
	b = append(b, refill...)
	for _, w := range wrappers {
		fn := wrapperCode(l, w)
		b = appendU32(b, uint32(len(fn)))
		b = append(b, fn...)
	}
	return b
}

// wrapperCode is a wrapper's body:
//
//	(local $was i32)
//	global.get $active; local.tee $was; i32.eqz
//	if
//	  i32.const 1; global.set $active
//	  i32.const Fuel; global.set $fuel
//	  i64.const budget; global.set $budget
//	end
//	local.get 0 … local.get n-1; call target
//	local.get $was; global.set $active
//
// The target's results stay on the stack under the last two
// instructions. A trap leaves $active set, so an instance that trapped
// must not be called again (the host discards it).
func wrapperCode(l *layout, w wrapper) []byte {
	n := w.params
	b := []byte{0x01, 0x01, 0x7f}
	b = append(b, 0x23)
	b = appendU32(b, l.active)
	b = append(b, 0x22)
	b = appendU32(b, n)
	b = append(b, 0x45, 0x04, 0x40)
	b = append(b, 0x41, 0x01, 0x24)
	b = appendU32(b, l.active)
	b = append(b, 0x41)
	b = appendS32(b, Fuel)
	b = append(b, 0x24)
	b = appendU32(b, l.fuel)
	b = append(b, 0x42)
	b = appendS64(b, int64(w.budget))
	b = append(b, 0x24)
	b = appendU32(b, l.budget)
	b = append(b, 0x0b)
	for i := uint32(0); i < n; i++ {
		b = append(b, 0x20)
		b = appendU32(b, i)
	}
	b = append(b, 0x10)
	b = appendU32(b, w.target)
	b = append(b, 0x20)
	b = appendU32(b, n)
	b = append(b, 0x24)
	b = appendU32(b, l.active)
	return append(b, 0x0b)
}

// rewriteExports returns the new export section: every export of a
// defined function goes through a wrapper (appended to wrappers), and
// the added names are exported.
func rewriteExports(secs []section, l *layout, opts Options, wrappers *[]wrapper) ([]byte, error) {
	body := []byte{0}
	for _, s := range secs {
		if s.id == secExport {
			body = s.body
		}
	}
	r := reader{b: body}
	n := r.u32()
	var out []byte
	wrap := func(w wrapper) uint32 {
		*wrappers = append(*wrappers, w)
		return l.refill + uint32(len(*wrappers))
	}
	for i := uint32(0); i < n; i++ {
		name := r.bytes(int(r.u32()))
		kind := r.byte()
		idx := r.u32()
		if r.err != nil {
			return nil, fmt.Errorf("%w: export section: %v", ErrUnsupported, r.err)
		}
		switch s := string(name); {
		case s == StopGlobal, s == BudgetGlobal, s == StartExport, s == NopExport:
			return nil, fmt.Errorf("%w: the module already exports %q", ErrUnsupported, name)
		case kind == 0x00 && idx >= l.funcs, kind == 0x03 && idx >= l.globals:
			return nil, fmt.Errorf("%w: export %q names index %d, which the module does not have", ErrUnsupported, name, idx)
		case kind == 0x00 && idx >= l.importedFunc:
			budget := opts.CallBudget
			if initExports[s] {
				budget = opts.StartBudget
			}
			typ := l.funcTypes[idx-l.importedFunc]
			idx = wrap(wrapper{target: idx, typ: typ, params: l.types[typ].params, budget: budget})
		}
		out = appendName(out, string(name))
		out = append(out, kind)
		out = appendU32(out, idx)
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("%w: %d bytes after the exports", ErrUnsupported, len(r.b)-r.off)
	}
	count := n + 3
	out = appendName(out, StopGlobal)
	out = append(out, 0x03)
	out = appendU32(out, l.stop)
	out = appendName(out, BudgetGlobal)
	out = append(out, 0x03)
	out = appendU32(out, l.budget)
	out = appendName(out, NopExport)
	out = append(out, 0x00)
	out = appendU32(out, l.nop)
	if l.hasStart && !opts.KeepStart {
		// A start function takes and returns nothing.
		count++
		out = appendName(out, StartExport)
		out = append(out, 0x00)
		out = appendU32(out, wrap(wrapper{target: l.startFunc, typ: l.voidType, budget: opts.StartBudget}))
	}
	return append(appendU32(nil, count), out...), nil
}

func appendName(dst []byte, s string) []byte {
	dst = appendU32(dst, uint32(len(s)))
	return append(dst, s...)
}

// insertSection puts s before the first known section that must follow
// it.
func insertSection(secs []section, s section) []section {
	for i, x := range secs {
		if x.id != secCustom && order[x.id] > order[s.id] {
			return append(secs[:i], append([]section{s}, secs[i:]...)...)
		}
	}
	return append(secs, s)
}

// countImports returns the number of imported functions, globals and
// memories.
func countImports(body []byte) (funcs, globals, mems uint32, err error) {
	r := reader{b: body}
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.bytes(int(r.u32())) // module
		r.bytes(int(r.u32())) // name
		switch kind := r.byte(); kind {
		case 0x00: // func: type index
			r.u32()
			funcs++
		case 0x01: // table: reftype, limits
			r.byte()
			r.limits()
		case 0x02: // memory
			r.limits()
			mems++
		case 0x03: // global: valtype, mutability
			r.valtype()
			r.byte()
			globals++
		case 0x04: // tag: attribute, type index
			r.byte()
			r.u32()
		default:
			return 0, 0, 0, fmt.Errorf("%w: import kind %d", ErrUnsupported, kind)
		}
	}
	if r.err != nil {
		return 0, 0, 0, fmt.Errorf("%w: import section: %v", ErrUnsupported, r.err)
	}
	return funcs, globals, mems, nil
}

func isDebugSection(body []byte) bool {
	r := reader{b: body}
	name := r.bytes(int(r.u32()))
	return r.err == nil && bytes.HasPrefix(name, []byte(".debug"))
}

// checkCode is the code inserted at every loop header (and at the entry
// of functions that call):
//
//	global.get $fuel; i32.const 1; i32.sub; global.set $fuel
//	global.get $fuel; i32.eqz
//	if call $refill end
//
// The rest, every Fuel steps, is in an added function (refillCode): it
// keeps the code inserted thousands of times small.
func checkCode(l *layout) []byte {
	getFuel := append([]byte{0x23}, appendU32(nil, l.fuel)...)
	b := append([]byte(nil), getFuel...)
	b = append(b, 0x41, 0x01, 0x6b, 0x24)
	b = appendU32(b, l.fuel)
	b = append(b, getFuel...)
	b = append(b, 0x45, 0x04, 0x40, 0x10)
	b = appendU32(b, l.refill)
	return append(b, 0x0b)
}

// refillCode is the body of the added function $refill:
//
//	i32.const Fuel; global.set $fuel
//	global.get $budget; i64.const 1; i64.sub; global.set $budget
//	global.get $budget; i64.eqz
//	if call $outOfWork end                 ;; traps
//	i32.const 0; memory.grow 0; drop       ;; a visit to Go
//	global.get $stop
//	if unreachable end
func refillCode(l *layout) []byte {
	getBudget := append([]byte{0x23}, appendU32(nil, l.budget)...)
	b := []byte{0x00, 0x41} // no locals
	b = appendS32(b, Fuel)
	b = append(b, 0x24)
	b = appendU32(b, l.fuel)
	b = append(b, getBudget...)
	b = append(b, 0x42, 0x01, 0x7d, 0x24)
	b = appendU32(b, l.budget)
	b = append(b, getBudget...)
	b = append(b, 0x50, 0x04, 0x40, 0x10)
	b = appendU32(b, l.outOfWork)
	b = append(b, 0x0b)
	b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a)
	b = append(b, 0x23)
	b = appendU32(b, l.stop)
	return append(b, 0x04, 0x40, 0x00, 0x0b, 0x0b)
}

// instrumentCode rewrites the code section, inserting check after every
// loop opcode and its block type.
func instrumentCode(body, check []byte, lay *layout) ([]byte, int, error) {
	r := reader{b: body}
	n := r.u32()
	out := appendU32(make([]byte, 0, len(body)+len(body)/8), n)
	loops := 0
	var fn []byte
	for i := uint32(0); i < n; i++ {
		size := r.u32()
		code := r.bytes(int(size))
		if r.err != nil {
			return nil, 0, fmt.Errorf("%w: code section: %v", ErrUnsupported, r.err)
		}
		var err error
		var l int
		fn, l, err = instrumentFunc(fn[:0], code, check, lay)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: function %d: %v", ErrUnsupported, i, err)
		}
		loops += l
		out = appendU32(out, uint32(len(fn)))
		out = append(out, fn...)
	}
	if r.off != len(body) {
		return nil, 0, fmt.Errorf("%w: %d bytes after the code section's functions", ErrUnsupported, len(body)-r.off)
	}
	return out, loops, nil
}

// instrumentFunc copies one function body (locals and code) to dst with
// check after each loop header. Code that names a function or a global
// beyond the module's own (an invalid module, which the instrumentation
// would make valid) is refused: it would reach the added ones, and could
// reset its own budget or clear the stop flag.
func instrumentFunc(dst, code, check []byte, l *layout) ([]byte, int, error) {
	r := reader{b: code}
	groups := r.u32()
	for g := uint32(0); g < groups && r.err == nil; g++ {
		r.u32()
		r.valtype()
	}
	if r.err != nil {
		return nil, 0, r.err
	}
	dst = append(dst, code[:r.off]...)
	// A call is a way back as much as a loop is: a function that calls
	// itself twice (no loop anywhere) runs for 2^n calls. A function that
	// calls checks on entry too (every cycle of calls goes through such
	// functions only), unless its body opens with a loop, whose check
	// comes at once (Go's compiler starts most functions with one).
	entry, opensWithLoop, calls := len(dst), r.off < len(code) && code[r.off] == 0x03, false
	loops := 0
	start := r.off
	for r.off < len(code) {
		op := r.byte()
		switch op {
		case 0x10, 0x12, 0xd2: // call, return_call, ref.func
			if fn := r.u32(); r.err == nil && fn >= l.funcs {
				return nil, 0, fmt.Errorf("names function %d of %d", fn, l.funcs)
			}
		case 0x23, 0x24: // global.get, global.set
			if g := r.u32(); r.err == nil && g >= l.globals {
				return nil, 0, fmt.Errorf("names global %d of %d", g, l.globals)
			}
		default:
			if err := r.skipImmediates(op); err != nil {
				return nil, 0, err
			}
		}
		if r.err != nil {
			return nil, 0, r.err
		}
		if op >= 0x10 && op <= 0x15 { // call, call_indirect, return_call(_indirect), call_ref, return_call_ref
			calls = true
		}
		if op == 0x03 { // loop blocktype
			dst = append(dst, code[start:r.off]...)
			dst = append(dst, check...)
			start = r.off
			loops++
		}
	}
	dst = append(dst, code[start:]...)
	if calls && !opensWithLoop {
		dst = slices.Insert(dst, entry, check...)
	}
	return dst, loops, nil
}

// entryLoop is an empty loop, `loop end`: wazero puts its termination
// check at every loop header, so one at a function's entry makes wazero
// check there too.
var entryLoop = []byte{0x03, 0x40, 0x0b}

// EntryLoops returns the module with an empty loop at the entry of every
// function whose body does not open with a loop, for a module that keeps
// wazero's termination checks (WithCloseOnContextDone), which sit on loop
// headers only: without them, a function that calls itself twice and
// loops nowhere runs for 2^n calls where nothing can stop it. Only the
// code section changes (and DWARF sections, whose offsets would lie, are
// dropped); the instructions are not decoded, so any valid module is
// accepted.
func EntryLoops(module []byte) ([]byte, error) {
	if len(module) < 8 || !bytes.Equal(module[:4], []byte("\x00asm")) || binary.LittleEndian.Uint32(module[4:8]) != 1 {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary", ErrUnsupported)
	}
	var buf bytes.Buffer
	buf.Grow(len(module) + len(module)/64)
	buf.Write(module[:8])
	r := reader{b: module, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", ErrUnsupported, id, r.err)
		}
		switch {
		case id == secCode:
			var err error
			if body, err = entryLoopsCode(body); err != nil {
				return nil, err
			}
		case id == secCustom && isDebugSection(body):
			continue
		}
		buf.WriteByte(id)
		buf.Write(appendU32(nil, uint32(len(body))))
		buf.Write(body)
	}
	return buf.Bytes(), nil
}

// entryLoopsCode rewrites a code section for EntryLoops.
func entryLoopsCode(body []byte) ([]byte, error) {
	r := reader{b: body}
	n := r.u32()
	out := appendU32(make([]byte, 0, len(body)+3*int(min(n, 1<<20))), n)
	var fn []byte
	for i := uint32(0); i < n; i++ {
		code := r.bytes(int(r.u32()))
		if r.err != nil {
			return nil, fmt.Errorf("%w: code section: %v", ErrUnsupported, r.err)
		}
		cr := reader{b: code}
		groups := cr.u32()
		for g := uint32(0); g < groups && cr.err == nil; g++ {
			cr.u32()
			cr.valtype()
		}
		if cr.err != nil {
			return nil, fmt.Errorf("%w: function %d: %v", ErrUnsupported, i, cr.err)
		}
		fn = append(fn[:0], code[:cr.off]...)
		if cr.off >= len(code) || code[cr.off] != 0x03 {
			fn = append(fn, entryLoop...)
		}
		fn = append(fn, code[cr.off:]...)
		out = appendU32(out, uint32(len(fn)))
		out = append(out, fn...)
	}
	if r.off != len(body) {
		return nil, fmt.Errorf("%w: %d bytes after the code section's functions", ErrUnsupported, len(body)-r.off)
	}
	return out, nil
}

// FunctionExports returns the names of the functions a module exports,
// reading only its export section (cheap: nothing is validated or
// compiled).
func FunctionExports(module []byte) (map[string]bool, error) {
	if len(module) < 8 || !bytes.Equal(module[:4], []byte("\x00asm")) {
		return nil, fmt.Errorf("%w: not a WebAssembly binary", ErrUnsupported)
	}
	r := reader{b: module, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		body := r.bytes(int(r.u32()))
		if r.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnsupported, r.err)
		}
		if id != secExport {
			continue
		}
		er := reader{b: body}
		n := er.u32()
		out := make(map[string]bool, min(n, uint32(len(body)))) // a count is not to be trusted
		for i := uint32(0); i < n && er.err == nil; i++ {
			name := er.bytes(int(er.u32()))
			kind := er.byte()
			er.u32()
			if kind == 0x00 {
				out[string(name)] = true
			}
		}
		if er.err != nil {
			return nil, fmt.Errorf("%w: export section: %v", ErrUnsupported, er.err)
		}
		return out, nil
	}
	return map[string]bool{}, nil
}

// MemoryMinPages returns the initial size, in 64 KiB pages, of the first
// memory a module defines, reading only its memory section (cheap: nothing
// is validated or compiled). ok is false when the module defines no
// memory.
func MemoryMinPages(module []byte) (pages uint32, ok bool, err error) {
	if len(module) < 8 || !bytes.Equal(module[:4], []byte("\x00asm")) {
		return 0, false, fmt.Errorf("%w: not a WebAssembly binary", ErrUnsupported)
	}
	r := reader{b: module, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		body := r.bytes(int(r.u32()))
		if r.err != nil {
			return 0, false, fmt.Errorf("%w: %v", ErrUnsupported, r.err)
		}
		if id != secMemory {
			continue
		}
		mr := reader{b: body}
		if n := mr.u32(); n == 0 || mr.err != nil {
			return 0, false, mr.err
		}
		mr.byte() // limits flags
		pages = mr.u32()
		if mr.err != nil {
			return 0, false, fmt.Errorf("%w: memory section: %v", ErrUnsupported, mr.err)
		}
		return pages, true, nil
	}
	return 0, false, nil
}
