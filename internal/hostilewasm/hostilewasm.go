// Package hostilewasm writes WebAssembly modules whose shape is hostile to
// a compiler: tiny files that declare millions of locals, files of
// millions of empty functions, one function of a huge body. Each is a
// module with the exports a compactd plugin needs (memory, describe,
// compact), so that nothing but its shape can refuse it. Tests generate
// them rather than commit them: one is 62 MB.
package hostilewasm

import "encoding/binary"

// Locals returns a module of one function, exported as describe and
// compact, that declares n i64 locals (a few dozen bytes whatever n is).
func Locals(n uint32) []byte {
	body := []byte{1}
	body = binary.AppendUvarint(body, uint64(n))
	body = append(body, 0x7e, 0x0b) // i64; end
	return module(1, [][]byte{body}, nil)
}

// EmptyFunctions returns a module of n functions that do nothing: four
// bytes each, so a 62 MB file holds 15.5 million of them.
func EmptyFunctions(n int) []byte {
	return module(n, nil, []byte{0, 0x0b})
}

// Calls returns a module whose one function is about size bytes of calls
// to itself (never run): the body that costs wazero's optimizing
// compiler the most memory per byte.
func Calls(size int) []byte {
	body := []byte{0}
	for len(body) < size {
		body = append(body, 0x10, 0x00) // call 0
	}
	body = append(body, 0x0b)
	return module(1, [][]byte{body}, nil)
}

// Table returns a module with a table of n initial entries.
func Table(n uint32) []byte {
	m := module(1, nil, []byte{0, 0x0b})
	table := []byte{1, 0x70, 0x00}
	table = binary.AppendUvarint(table, uint64(n))
	return insertAfterFunctions(m, section(4, table))
}

// module writes a module of n functions of type [] -> [], function 0
// exported as describe and compact, with one page of memory exported as
// memory. bodies are the functions' bodies (locals and code); when nil,
// every function has the body same.
func module(n int, bodies [][]byte, same []byte) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(1, []byte{1, 0x60, 0, 0})...)
	funcs := binary.AppendUvarint(nil, uint64(n))
	funcs = append(funcs, make([]byte, n)...)
	m = append(m, section(3, funcs)...)
	m = append(m, section(5, []byte{1, 0, 1})...)
	exports := []byte{3}
	for _, name := range []string{"memory", "describe", "compact"} {
		exports = binary.AppendUvarint(exports, uint64(len(name)))
		exports = append(exports, name...)
		kind := byte(0)
		if name == "memory" {
			kind = 2
		}
		exports = append(exports, kind, 0)
	}
	m = append(m, section(7, exports)...)
	code := binary.AppendUvarint(make([]byte, 0, 8+n*(len(same)+1)), uint64(n))
	for i := 0; i < n; i++ {
		b := same
		if bodies != nil {
			b = bodies[i]
		}
		code = binary.AppendUvarint(code, uint64(len(b)))
		code = append(code, b...)
	}
	return append(m, section(10, code)...)
}

// insertAfterFunctions inserts a section right after the function
// section (id 3), where a table section belongs.
func insertAfterFunctions(m, sec []byte) []byte {
	off := 8
	for off < len(m) {
		id := m[off]
		size, n := binary.Uvarint(m[off+1:])
		next := off + 1 + n + int(size)
		if id == 3 {
			out := append([]byte{}, m[:next]...)
			out = append(out, sec...)
			return append(out, m[next:]...)
		}
		off = next
	}
	return m
}

func section(id byte, body []byte) []byte {
	out := []byte{id}
	out = binary.AppendUvarint(out, uint64(len(body)))
	return append(out, body...)
}
