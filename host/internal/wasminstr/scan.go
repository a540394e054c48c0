package wasminstr

import (
	"bytes"
	"fmt"
)

// Shape is what a module asks of a compiler, counted without validating
// or compiling anything: the numbers that drive the memory and time a
// WebAssembly compiler spends on it, whatever the file's size.
type Shape struct {
	// Types is the number of function types, TypeValues the parameters
	// and results of all of them, MaxTypeValues those of the largest.
	Types, TypeValues, MaxTypeValues uint64
	// Imports is the number of imports, ImportedFuncs those of functions.
	Imports, ImportedFuncs uint64
	// Functions is the number of functions the module defines.
	Functions uint64
	// Locals is the number of locals the defined functions declare, all
	// together (parameters not included); MaxLocals those of the function
	// that declares the most.
	Locals, MaxLocals uint64
	// CodeBytes is the size of all function bodies, MaxBodyBytes that of
	// the largest.
	CodeBytes, MaxBodyBytes uint64
	// TableEntries is the initial size of the tables the module defines
	// or imports, all together.
	TableEntries uint64
	// Globals, Exports, ElementSegments and DataSegments count those
	// entries of the module's sections.
	Globals, Exports, ElementSegments, DataSegments uint64
}

// Scan reads a module's sections and counts its Shape. It reads each
// section's counts and each function body's local declarations, and
// skips everything else, so it costs little whatever the module declares:
// no allocation grows with a count the module states. A module whose
// sections it cannot read (truncated, or malformed) is
// refused with an error wrapping ErrUnsupported.
func Scan(module []byte) (Shape, error) {
	var s Shape
	if len(module) < 8 || !bytes.Equal(module[:4], []byte("\x00asm")) {
		return s, fmt.Errorf("%w: not a WebAssembly binary", ErrUnsupported)
	}
	r := reader{b: module, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		body := r.bytes(int(r.u32()))
		if r.err != nil {
			return s, fmt.Errorf("%w: %v", ErrUnsupported, r.err)
		}
		sr := reader{b: body}
		var err error
		switch id {
		case secType:
			err = s.scanTypes(&sr)
		case secImport:
			err = s.scanImports(&sr)
		case secFunction:
			s.Functions = uint64(sr.u32())
		case secTable:
			n := sr.u32()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				withInit := sr.off < len(sr.b) && sr.b[sr.off] == 0x40
				if withInit {
					sr.byte() // 0x40 0x00: a table with an initializer (function references)
					sr.byte()
				}
				sr.byte() // reftype
				s.TableEntries += s.tableLimits(&sr)
				if withInit {
					break // its initializer is an expression: the rest is the compiler's to read
				}
			}
		case secGlobal:
			s.Globals = uint64(sr.u32())
		case secExport:
			s.Exports = uint64(sr.u32())
		case secElement:
			s.ElementSegments = uint64(sr.u32())
		case secData:
			s.DataSegments = uint64(sr.u32())
		case secCode:
			err = s.scanCode(&sr)
		}
		if err == nil && sr.err != nil {
			err = sr.err
		}
		if err != nil {
			return s, fmt.Errorf("%w: section %d: %v", ErrUnsupported, id, err)
		}
	}
	return s, nil
}

func (s *Shape) scanTypes(r *reader) error {
	n := r.u32()
	s.Types = uint64(n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		if form := r.byte(); form != 0x60 {
			// Not a plain function type (GC proposal's recursive types):
			// the compiler refuses it; the count above is what matters.
			return nil
		}
		var values uint64
		for range 2 { // parameters, then results
			k := r.u32()
			for j := uint32(0); j < k && r.err == nil; j++ {
				r.valtype()
			}
			values += uint64(k)
		}
		s.TypeValues += values
		s.MaxTypeValues = max(s.MaxTypeValues, values)
	}
	return nil
}

func (s *Shape) scanImports(r *reader) error {
	n := r.u32()
	s.Imports = uint64(n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.bytes(int(r.u32())) // module
		r.bytes(int(r.u32())) // name
		switch kind := r.byte(); kind {
		case 0x00:
			r.u32()
			s.ImportedFuncs++
		case 0x01:
			r.byte()
			s.TableEntries += s.tableLimits(r)
		case 0x02:
			r.limits()
		case 0x03:
			r.valtype()
			r.byte()
		case 0x04:
			r.byte()
			r.u32()
		default:
			return fmt.Errorf("import kind %d", kind)
		}
	}
	return nil
}

// tableLimits reads a table's limits and returns its initial size.
func (s *Shape) tableLimits(r *reader) uint64 {
	flags := r.byte()
	minimum := r.leb(64)
	if flags&1 != 0 {
		r.leb(64)
	}
	return minimum
}

func (s *Shape) scanCode(r *reader) error {
	n := r.u32()
	if uint64(n) != s.Functions {
		return fmt.Errorf("%d function bodies for %d functions", n, s.Functions)
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			break
		}
		s.CodeBytes += uint64(size)
		s.MaxBodyBytes = max(s.MaxBodyBytes, uint64(size))
		br := reader{b: body}
		decls := br.u32()
		var locals uint64
		for j := uint32(0); j < decls && br.err == nil; j++ {
			locals += uint64(br.u32())
			br.valtype()
		}
		if br.err != nil {
			return fmt.Errorf("function %d: locals: %v", i, br.err)
		}
		s.Locals += locals
		s.MaxLocals = max(s.MaxLocals, locals)
	}
	return nil
}
