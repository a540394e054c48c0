package wasminstr

import (
	"errors"
	"fmt"
)

// reader reads the binary format. The first error sticks: later reads
// return zero values.
type reader struct {
	b   []byte
	off int
	err error
}

var errTruncated = errors.New("truncated")

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail(errTruncated)
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || len(r.b)-r.off < n {
		r.fail(errTruncated)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

// leb reads an unsigned LEB128 of at most maxBits bits.
func (r *reader) leb(maxBits uint) uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= maxBits+7 {
			r.fail(errors.New("LEB128 too long"))
			return 0
		}
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) u32() uint32 { return uint32(r.leb(32)) }

// sleb skips a signed LEB128 of at most maxBits bits.
func (r *reader) sleb(maxBits uint) { r.leb(maxBits) }

func (r *reader) limits() {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

func (r *reader) valtype() {
	switch t := r.byte(); t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
	default:
		r.fail(fmt.Errorf("value type 0x%02x", t))
	}
}

// blockType skips a block type: empty, a value type, or a type index
// (a signed 33-bit LEB128).
func (r *reader) blockType() {
	if r.off >= len(r.b) {
		r.fail(errTruncated)
		return
	}
	switch r.b[r.off] {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		r.off++
	default:
		r.sleb(33)
	}
}

func (r *reader) memarg() {
	align := r.u32()
	if align&0x40 != 0 { // multi-memory: a memory index follows
		r.u32()
	}
	r.leb(64)
}

// skipImmediates skips the immediates of the instruction whose opcode
// was just read. It fails on an opcode it does not know: the caller
// must not guess where the next instruction starts.
func (r *reader) skipImmediates(op byte) error {
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == 0x0a, op == 0x0b, op == 0x0f, op == 0x19, op == 0x1a, op == 0x1b,
		op == 0xd1, op == 0xd3, op == 0xd5:
		// unreachable nop else throw_ref end return catch_all drop select
		// ref.is_null ref.as_non_null ref.eq
	case op >= 0x45 && op <= 0xc4:
		// numeric instructions
	case op == 0x02, op == 0x03, op == 0x04, op == 0x06:
		r.blockType() // block loop if try
	case op == 0x07, op == 0x08, op == 0x09, op == 0x0c, op == 0x0d, op == 0x10, op == 0x12, op == 0x14, op == 0x15,
		op == 0x18, op == 0xd2, op == 0xd4, op == 0xd6:
		// catch throw rethrow br br_if call return_call call_ref
		// return_call_ref delegate ref.func br_on_null br_on_non_null
		r.u32()
	case op == 0x0e: // br_table
		n := r.u32()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
		r.u32()
		r.u32()
	case op == 0x1c: // select t*
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.valtype()
		}
	case op == 0x1f: // try_table blocktype vec(catch)
		r.blockType()
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			switch kind := r.byte(); kind {
			case 0x00, 0x01: // catch tag label, catch_ref tag label
				r.u32()
				r.u32()
			case 0x02, 0x03: // catch_all label, catch_all_ref label
				r.u32()
			default:
				return fmt.Errorf("try_table catch kind %d", kind)
			}
		}
	case op >= 0x20 && op <= 0x26:
		r.u32() // local.* global.* table.get table.set
	case op >= 0x28 && op <= 0x3e:
		r.memarg()
	case op == 0x3f, op == 0x40:
		r.u32() // memory.size, memory.grow: memory index
	case op == 0x41:
		r.sleb(32)
	case op == 0x42:
		r.sleb(64)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op == 0xd0:
		r.byte() // ref.null heap type
	case op == 0xfc:
		return r.skipFC(r.u32())
	case op == 0xfd:
		return r.skipSIMD(r.u32())
	case op == 0xfe:
		return r.skipAtomic(r.u32())
	default:
		return fmt.Errorf("opcode 0x%02x", op)
	}
	return nil
}

func (r *reader) skipFC(sub uint32) error {
	switch {
	case sub <= 7: // saturating truncations
	case sub == 8: // memory.init data mem
		r.u32()
		r.u32()
	case sub == 9, sub == 11, sub == 13, sub == 15, sub == 16, sub == 17:
		r.u32() // data.drop memory.fill elem.drop table.grow table.size table.fill
	case sub == 10, sub == 12, sub == 14:
		r.u32() // memory.copy table.init table.copy
		r.u32()
	default:
		return fmt.Errorf("opcode 0xfc %d", sub)
	}
	return nil
}

func (r *reader) skipSIMD(sub uint32) error {
	switch {
	case sub <= 11, sub == 92, sub == 93:
		r.memarg() // loads and stores
	case sub == 12, sub == 13:
		r.bytes(16) // v128.const, i8x16.shuffle
	case sub >= 21 && sub <= 34:
		r.byte() // extract/replace lane
	case sub >= 84 && sub <= 91:
		r.memarg() // lane loads and stores
		r.byte()
	case sub <= 0x113:
		// the rest of SIMD takes no immediate
	default:
		return fmt.Errorf("opcode 0xfd %d", sub)
	}
	return nil
}

func (r *reader) skipAtomic(sub uint32) error {
	switch {
	case sub == 0x03: // atomic.fence
		r.byte()
	case sub <= 0x02, sub >= 0x10 && sub <= 0x4e:
		r.memarg()
	default:
		return fmt.Errorf("opcode 0xfe %d", sub)
	}
	return nil
}

func appendU32(dst []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}

func appendS32(dst []byte, v int32) []byte { return appendS64(dst, int64(v)) }

// appendS64 appends a signed LEB128 (an i64.const's immediate: a budget
// above 2^63 is written as the negative number with the same bits).
func appendS64(dst []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}
