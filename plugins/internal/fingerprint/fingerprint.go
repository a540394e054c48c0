// Package fingerprint is a fast 128-bit hash of strings and messages for
// policies that must recognise a history they have seen (a saved state, a
// memoized result). It is not cryptographic: it tells a conversation's
// own state from a state made for another history. A Go guest hashes with
// it ~10× faster than with crypto/sha256, whose per-round loops each cost
// a check of the host's time limit (see RATIONALE.md): it reads 128 bytes
// per loop iteration.
//
// It builds for the host and for wasip1 guests. A Hash is a value: copy
// it to fork a hash (h2 := h).
package fingerprint

import (
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"unsafe"

	"github.com/compactd/compactd/abi"
)

// Hash is a running hash; the zero value is ready to use.
type Hash struct{ a, b uint64 }

const (
	mul1 = 0x9E3779B97F4A7C15
	mul2 = 0xC2B2AE3D27D4EB4F
	// salt keeps a run of zero words from leaving the zero state as it is.
	salt = 0x243F6A8885A308D3
)

// Word hashes one 64-bit word.
func (h *Hash) Word(w uint64) {
	h.a = bits.RotateLeft64((h.a^w^salt)*mul1, 29)
	h.b = bits.RotateLeft64((h.b^w)*mul2, 31) + h.a
}

// Bool hashes b as a word.
func (h *Hash) Bool(b bool) {
	if b {
		h.Word(1)
	} else {
		h.Word(0)
	}
}

// Str hashes s's length and bytes, so no two sequences of strings hash
// the same way by construction.
func (h *Hash) Str(s string) {
	h.Word(uint64(len(s)))
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	// 128 bytes per loop iteration: in a guest every iteration costs a
	// check of the time limit, so fewer, longer iterations are faster. The
	// bytes are read in place (no copy of s).
	for ; len(b) >= 128; b = b[128:] {
		h.Word(binary.LittleEndian.Uint64(b[0:8]))
		h.Word(binary.LittleEndian.Uint64(b[8:16]))
		h.Word(binary.LittleEndian.Uint64(b[16:24]))
		h.Word(binary.LittleEndian.Uint64(b[24:32]))
		h.Word(binary.LittleEndian.Uint64(b[32:40]))
		h.Word(binary.LittleEndian.Uint64(b[40:48]))
		h.Word(binary.LittleEndian.Uint64(b[48:56]))
		h.Word(binary.LittleEndian.Uint64(b[56:64]))
		h.Word(binary.LittleEndian.Uint64(b[64:72]))
		h.Word(binary.LittleEndian.Uint64(b[72:80]))
		h.Word(binary.LittleEndian.Uint64(b[80:88]))
		h.Word(binary.LittleEndian.Uint64(b[88:96]))
		h.Word(binary.LittleEndian.Uint64(b[96:104]))
		h.Word(binary.LittleEndian.Uint64(b[104:112]))
		h.Word(binary.LittleEndian.Uint64(b[112:120]))
		h.Word(binary.LittleEndian.Uint64(b[120:128]))
	}
	if len(b) >= 64 {
		h.Word(binary.LittleEndian.Uint64(b[0:8]))
		h.Word(binary.LittleEndian.Uint64(b[8:16]))
		h.Word(binary.LittleEndian.Uint64(b[16:24]))
		h.Word(binary.LittleEndian.Uint64(b[24:32]))
		h.Word(binary.LittleEndian.Uint64(b[32:40]))
		h.Word(binary.LittleEndian.Uint64(b[40:48]))
		h.Word(binary.LittleEndian.Uint64(b[48:56]))
		h.Word(binary.LittleEndian.Uint64(b[56:64]))
		b = b[64:]
	}
	for ; len(b) >= 8; b = b[8:] {
		h.Word(binary.LittleEndian.Uint64(b))
	}
	switch {
	case len(b) == 0:
	case len(s) >= 8:
		// The last 8 bytes, overlapping what was hashed: no byte loop
		// (the length, hashed first, fixes where they start).
		h.Word(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[len(s)-8:]), 8)))
	default:
		var t uint64
		for i := 0; i < len(b); i++ {
			t |= uint64(b[i]) << (8 * i)
		}
		h.Word(t)
	}
}

// Message hashes what identifies a message: role, text, name,
// tool_call_id and tool calls.
func (h *Hash) Message(m *abi.Message) {
	h.Str(m.Role)
	h.Str(m.Text())
	h.Str(m.Name)
	h.Str(m.ToolCallID)
	h.Word(uint64(len(m.ToolCalls)))
	for _, c := range m.ToolCalls {
		h.Str(c.ID)
		h.Str(c.Function.Name)
		h.Str(c.Function.Arguments)
	}
}

// Sum128 returns the hash after a final avalanche.
func (h Hash) Sum128() [2]uint64 {
	mix := func(x uint64) uint64 {
		x ^= x >> 33
		x *= 0xFF51AFD7ED558CCD
		x ^= x >> 33
		x *= 0xC4CEB9FE1A85EC53
		return x ^ x>>33
	}
	return [2]uint64{mix(h.a ^ h.b>>1), mix(h.b + h.a)}
}

// Sum returns the hash as 32 hex digits.
func (h Hash) Sum() string {
	s := h.Sum128()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], s[0])
	binary.BigEndian.PutUint64(b[8:], s[1])
	return hex.EncodeToString(b[:])
}
