// Package wasminstr makes a WebAssembly module interruptible at a low
// cost, so the host can run it without wazero's termination checks.
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
// for recursion that loops nowhere) it decrements a fuel counter (a global of its own), and only when the
// counter reaches zero (every Fuel loop iterations) it leaves the guest
// (a memory.grow of zero pages, which wazero serves in Go, so the Go
// runtime can preempt the goroutine there, e.g. for a garbage collection)
// and looks at a stop flag (another global, exported as StopGlobal) that
// the host sets from a timer when the call must end: the guest then
// traps. The module's start function, which would run inside
// instantiation where nothing can stop it, is exported as StartExport
// instead, for the host to call under the same guard.
//
// Nothing else changes: no index of any existing function, global,
// table or memory moves, so the rest of the module is copied as it is.
// A module the instrumenter does not fully understand (an opcode it does
// not know, no memory to grow) is refused with an error, and the host
// keeps wazero's checks for it, with EntryLoops' empty loops at function
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
	// StartExport is the module's start function, when it had one.
	StartExport = "compactd:start"
)

// Fuel is the number of loop iterations between two checks of the stop
// flag (and two visits to Go).
const Fuel = 1024

// ErrUnsupported wraps the reasons a module cannot be instrumented.
var ErrUnsupported = errors.New("wasminstr: module not supported")

// Result is an instrumented module.
type Result struct {
	// Module is the instrumented module.
	Module []byte
	// HasStart reports that the module had a start function, now
	// exported as StartExport: call it once, right after instantiation.
	HasStart bool
	// Loops is the number of loop headers instrumented.
	Loops int
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

// Instrument returns the instrumented module.
func Instrument(module []byte) (*Result, error) {
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

	var (
		importedGlobals, importedMems, definedGlobals, definedMems uint32
		startFunc                                                  uint32
		hasStart                                                   bool
	)
	for _, s := range secs {
		switch s.id {
		case secImport:
			g, m, err := countImports(s.body)
			if err != nil {
				return nil, err
			}
			importedGlobals, importedMems = g, m
		case secGlobal:
			rr := reader{b: s.body}
			definedGlobals = rr.u32()
			if rr.err != nil {
				return nil, fmt.Errorf("%w: global section: %v", ErrUnsupported, rr.err)
			}
		case secMemory:
			rr := reader{b: s.body}
			definedMems = rr.u32()
		case secStart:
			rr := reader{b: s.body}
			startFunc, hasStart = rr.u32(), true
			if rr.err != nil {
				return nil, fmt.Errorf("%w: start section: %v", ErrUnsupported, rr.err)
			}
		}
	}
	if importedMems+definedMems == 0 {
		return nil, fmt.Errorf("%w: no memory (the check leaves the guest with memory.grow)", ErrUnsupported)
	}
	fuel := importedGlobals + definedGlobals
	stop := fuel + 1
	check := checkCode(fuel, stop)

	res := &Result{HasStart: hasStart}
	var out []section
	var haveGlobals, haveExports bool
	for _, s := range secs {
		switch s.id {
		case secGlobal:
			body, err := appendGlobals(s.body)
			if err != nil {
				return nil, err
			}
			out = append(out, section{id: secGlobal, body: body})
			haveGlobals = true
		case secExport:
			body, err := appendExports(s.body, stop, startFunc, hasStart)
			if err != nil {
				return nil, err
			}
			out = append(out, section{id: secExport, body: body})
			haveExports = true
		case secStart:
			// Dropped: exported as StartExport, called by the host.
		case secCode:
			body, loops, err := instrumentCode(s.body, check)
			if err != nil {
				return nil, err
			}
			res.Loops = loops
			out = append(out, section{id: secCode, body: body})
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
	if !haveGlobals {
		body, _ := appendGlobals([]byte{0})
		out = insertSection(out, section{id: secGlobal, body: body})
	}
	if !haveExports {
		body, _ := appendExports([]byte{0}, stop, startFunc, hasStart)
		out = insertSection(out, section{id: secExport, body: body})
	}
	var buf bytes.Buffer
	buf.Write(module[:8])
	for _, s := range out {
		buf.WriteByte(s.id)
		buf.Write(appendU32(nil, uint32(len(s.body))))
		buf.Write(s.body)
	}
	res.Module = buf.Bytes()
	return res, nil
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

// appendGlobals adds the fuel and stop globals to a global section.
func appendGlobals(body []byte) ([]byte, error) {
	r := reader{b: body}
	n := r.u32()
	if r.err != nil {
		return nil, fmt.Errorf("%w: global section: %v", ErrUnsupported, r.err)
	}
	out := appendU32(nil, n+2)
	out = append(out, body[r.off:]...)
	// i32, mutable, init i32.const Fuel / 0.
	out = append(out, 0x7f, 0x01, 0x41)
	out = appendS32(out, Fuel)
	out = append(out, 0x0b)
	out = append(out, 0x7f, 0x01, 0x41, 0x00, 0x0b)
	return out, nil
}

// appendExports exports the stop global (and the start function).
func appendExports(body []byte, stop, startFunc uint32, hasStart bool) ([]byte, error) {
	r := reader{b: body}
	n := r.u32()
	if r.err != nil {
		return nil, fmt.Errorf("%w: export section: %v", ErrUnsupported, r.err)
	}
	// Refuse a module that already uses our names.
	rest := r
	for i := uint32(0); i < n; i++ {
		name := rest.bytes(int(rest.u32()))
		rest.byte()
		rest.u32()
		if rest.err != nil {
			return nil, fmt.Errorf("%w: export section: %v", ErrUnsupported, rest.err)
		}
		if string(name) == StopGlobal || string(name) == StartExport {
			return nil, fmt.Errorf("%w: the module already exports %q", ErrUnsupported, name)
		}
	}
	add := uint32(1)
	if hasStart {
		add++
	}
	out := appendU32(nil, n+add)
	out = append(out, body[r.off:]...)
	out = appendName(out, StopGlobal)
	out = append(out, 0x03) // global
	out = appendU32(out, stop)
	if hasStart {
		out = appendName(out, StartExport)
		out = append(out, 0x00) // func
		out = appendU32(out, startFunc)
	}
	return out, nil
}

func appendName(dst []byte, s string) []byte {
	dst = appendU32(dst, uint32(len(s)))
	return append(dst, s...)
}

// countImports returns the number of imported globals and memories.
func countImports(body []byte) (globals, mems uint32, err error) {
	r := reader{b: body}
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.bytes(int(r.u32())) // module
		r.bytes(int(r.u32())) // name
		switch kind := r.byte(); kind {
		case 0x00: // func: type index
			r.u32()
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
			return 0, 0, fmt.Errorf("%w: import kind %d", ErrUnsupported, kind)
		}
	}
	if r.err != nil {
		return 0, 0, fmt.Errorf("%w: import section: %v", ErrUnsupported, r.err)
	}
	return globals, mems, nil
}

func isDebugSection(body []byte) bool {
	r := reader{b: body}
	name := r.bytes(int(r.u32()))
	return r.err == nil && bytes.HasPrefix(name, []byte(".debug"))
}

// checkCode is the code inserted at every loop header:
//
//	global.get $fuel; i32.const 1; i32.sub; global.set $fuel
//	global.get $fuel; i32.eqz
//	if
//	  i32.const Fuel; global.set $fuel
//	  i32.const 0; memory.grow 0; drop     ;; a visit to Go
//	  global.get $stop
//	  if unreachable end
//	end
func checkCode(fuel, stop uint32) []byte {
	var b []byte
	getFuel := append([]byte{0x23}, appendU32(nil, fuel)...)
	setFuel := append([]byte{0x24}, appendU32(nil, fuel)...)
	b = append(b, getFuel...)
	b = append(b, 0x41, 0x01, 0x6b)
	b = append(b, setFuel...)
	b = append(b, getFuel...)
	b = append(b, 0x45, 0x04, 0x40)
	b = append(b, 0x41)
	b = appendS32(b, Fuel)
	b = append(b, setFuel...)
	b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a)
	b = append(b, 0x23)
	b = appendU32(b, stop)
	b = append(b, 0x04, 0x40, 0x00, 0x0b, 0x0b)
	return b
}

// instrumentCode rewrites the code section, inserting check after every
// loop opcode and its block type.
func instrumentCode(body, check []byte) ([]byte, int, error) {
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
		fn, l, err = instrumentFunc(fn[:0], code, check)
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
// check after each loop header.
func instrumentFunc(dst, code, check []byte) ([]byte, int, error) {
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
		if err := r.skipImmediates(op); err != nil {
			return nil, 0, err
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
		out := make(map[string]bool, n)
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
