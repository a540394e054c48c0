package idents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// The wire format of the extract_identifiers host function
// (abi/README.md): a plugin sends a request block holding a batch of
// texts, the host answers a block holding each text's items. Both are
// plain bytes and unsigned LEB128 varints (encoding/binary's Uvarint), no
// JSON: the guest decodes the answer without a parser, and an item found
// in a text comes back as its place in that text, not as a copy.
//
// Request:
//
//	version  byte = RequestVersion
//	then, for each text:
//	  flags  byte: bit 0 set = observed (see Extract); other bits zero
//	  length uvarint
//	  text   length bytes
//
// Answer, for each text of the request in order:
//
//	count  uvarint: the number of its items
//	then, for each item:
//	  tag    byte: the item's Kind in bits 0-6; bit 7 set = a literal
//	  a span (bit 7 clear): offset uvarint, length uvarint, into the text
//	  a literal (bit 7 set): length uvarint, then length bytes of text
//
// A literal is an item that is not a substring of its text (a range of
// listed line numbers, "10-12").

// RequestVersion is the first byte of a request in this format.
const RequestVersion = 1

const (
	flagObserved = 1 << 0
	tagLiteral   = 1 << 7
)

// Input is one text to extract and how to read it.
type Input struct {
	Text string
	// Observed: the text came back to the agent (a tool result, a user
	// message), not the agent's own words. See Extract.
	Observed bool
}

// RequestSize returns how many bytes in takes in a request, beyond its
// version byte.
func RequestSize(in Input) int {
	return 1 + uvarintLen(uint64(len(in.Text))) + len(in.Text)
}

// AppendRequest appends a request for texts to dst.
func AppendRequest(dst []byte, texts []Input) []byte {
	dst = append(dst, RequestVersion)
	for _, in := range texts {
		var flags byte
		if in.Observed {
			flags |= flagObserved
		}
		dst = append(dst, flags)
		dst = binary.AppendUvarint(dst, uint64(len(in.Text)))
		dst = append(dst, in.Text...)
	}
	return dst
}

// ErrMalformed is wrapped by the errors of a request or an answer that
// does not follow the wire format.
var ErrMalformed = errors.New("malformed block")

// Answer extracts the items of every text of request and appends the
// answer to dst. It stops with ctx's error between texts once ctx is
// done, and with an error wrapping ErrMalformed on a request that breaks
// the format. Its work is linear in the request's length.
func Answer(ctx context.Context, dst, request []byte) ([]byte, error) {
	if len(request) == 0 || request[0] != RequestVersion {
		return dst, fmt.Errorf("%w: the request does not start with version byte %d", ErrMalformed, RequestVersion)
	}
	// One copy, so items are strings whose place in their text is known.
	all := string(request[1:])
	var items []Item
	for at, n := 0, 0; at < len(all); n++ {
		if err := ctx.Err(); err != nil {
			return dst, err
		}
		flags := all[at]
		if flags&^flagObserved != 0 {
			return dst, fmt.Errorf("%w: text %d has unknown flags %#x", ErrMalformed, n, flags)
		}
		size, k := uvarintString(all[at+1:])
		if k <= 0 || size > uint64(len(all)-at-1-k) {
			return dst, fmt.Errorf("%w: text %d's length is cut or runs past the request's end", ErrMalformed, n)
		}
		start := at + 1 + k
		text := all[start : start+int(size)]
		at = start + int(size)
		items = Extract(items[:0], text, flags&flagObserved != 0)
		dst = binary.AppendUvarint(dst, uint64(len(items)))
		for _, it := range items {
			if off, ok := within(text, it.Text); ok {
				dst = append(dst, byte(it.Kind))
				dst = binary.AppendUvarint(dst, uint64(off))
				dst = binary.AppendUvarint(dst, uint64(len(it.Text)))
				continue
			}
			dst = append(dst, byte(it.Kind)|tagLiteral)
			dst = binary.AppendUvarint(dst, uint64(len(it.Text)))
			dst = append(dst, it.Text...)
		}
	}
	return dst, nil
}

// within returns the offset of s in text when s is a substring of text's
// own bytes (a slice of it, not merely equal to one).
func within(text, s string) (int, bool) {
	if len(s) == 0 || len(text) == 0 {
		return 0, false
	}
	off := uintptr(unsafe.Pointer(unsafe.StringData(s))) - uintptr(unsafe.Pointer(unsafe.StringData(text)))
	if off > uintptr(len(text)-len(s)) {
		return 0, false
	}
	return int(off), true
}

// DecodeAnswer decodes the answer to a request for texts, appending every
// item to items and returning each text's items as a slice of it. A
// span's text is a substring of its Input's (no copy). An answer that
// breaks the format, names a kind Extract does not produce or does not
// hold exactly len(texts) texts is an error wrapping ErrMalformed.
func DecodeAnswer(answer []byte, texts []Input, items []Item) ([][]Item, error) {
	ends := make([]int, len(texts))
	at := 0
	for t, in := range texts {
		count, k := binary.Uvarint(answer[at:])
		if k <= 0 || count > uint64(len(answer)-at) {
			return nil, fmt.Errorf("%w: text %d's item count is cut or too large", ErrMalformed, t)
		}
		at += k
		for range count {
			if at >= len(answer) {
				return nil, fmt.Errorf("%w: text %d's items run past the answer's end", ErrMalformed, t)
			}
			tag := answer[at]
			at++
			kind := Kind(tag &^ tagLiteral)
			if kind < KindFile || kind > KindNumber {
				return nil, fmt.Errorf("%w: text %d has an item of unknown kind %d", ErrMalformed, t, kind)
			}
			a, k := binary.Uvarint(answer[at:])
			if k <= 0 {
				return nil, fmt.Errorf("%w: text %d's item is cut", ErrMalformed, t)
			}
			at += k
			if tag&tagLiteral != 0 {
				if a > uint64(len(answer)-at) {
					return nil, fmt.Errorf("%w: text %d's literal runs past the answer's end", ErrMalformed, t)
				}
				items = append(items, Item{kind, string(answer[at : at+int(a)])})
				at += int(a)
				continue
			}
			n, k := binary.Uvarint(answer[at:])
			if k <= 0 || a > uint64(len(in.Text)) || n > uint64(len(in.Text))-a {
				return nil, fmt.Errorf("%w: text %d's span is cut or outside its text", ErrMalformed, t)
			}
			at += k
			items = append(items, Item{kind, in.Text[a : a+n]})
		}
		ends[t] = len(items)
	}
	if at != len(answer) {
		return nil, fmt.Errorf("%w: %d bytes after the last text's items", ErrMalformed, len(answer)-at)
	}
	out := make([][]Item, len(texts))
	from := 0
	for t, end := range ends {
		out[t] = items[from:end:end]
		from = end
	}
	return out, nil
}

// uvarintString is binary.Uvarint over a string.
func uvarintString(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, -(i + 1)
			}
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
