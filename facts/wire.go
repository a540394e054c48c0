package facts

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/idents"
)

// The answer of the extract_message_facts_into host function
// (abi/README.md): a plugin names a range of its request's messages, and
// the host answers their Set, found in its own copy of the messages (a
// plugin reading a header view never fetches their contents). Bytes and
// unsigned LEB128 varints (encoding/binary's Uvarint), no JSON:
//
//	count  uvarint: the number of facts
//	then, for each fact, in the Set's order:
//	  tag    byte: its idents.Kind in bits 0-6; bit 7 set = used
//	  length uvarint, then length bytes of text

const tagUsed = 1 << 7

// maxUserChars bounds the user_chars a plugin may ask for (any real
// setting is far below it).
const maxUserChars = math.MaxInt32

// ErrMalformed is wrapped by the errors of a request or an answer that
// does not follow the wire format.
var ErrMalformed = errors.New("malformed block")

// Answer appends to dst the answer for the count messages of msgs (the
// request's messages) from first, with Options{UserChars: userChars}. A
// range msgs does not hold, or a userChars over math.MaxInt32, is an
// error wrapping ErrMalformed; once ctx is done, Answer stops between
// texts with ctx's error. Its work is linear in the messages' texts.
func Answer(ctx context.Context, dst []byte, msgs []abi.Message, first, count, userChars uint64) ([]byte, error) {
	if userChars > maxUserChars {
		return dst, fmt.Errorf("%w: user_chars %d is over %d", ErrMalformed, userChars, maxUserChars)
	}
	if first > uint64(len(msgs)) || count > uint64(len(msgs))-first {
		return dst, fmt.Errorf("%w: messages %d to %d of a request of %d", ErrMalformed, first, first+count, len(msgs))
	}
	extract := func(texts []idents.Input) ([][]idents.Item, error) {
		out := make([][]idents.Item, len(texts))
		for i, in := range texts {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			out[i] = idents.Extract(nil, in.Text, in.Observed)
		}
		return out, nil
	}
	set, err := Collect(msgs[first:first+count], Options{UserChars: int(userChars)}, extract)
	if err != nil {
		return dst, err
	}
	return AppendAnswer(dst, set), nil
}

// AppendAnswer appends set in the answer's format to dst.
func AppendAnswer(dst []byte, set *Set) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(set.Items)))
	for i, it := range set.Items {
		tag := byte(it.Kind)
		if set.Used[i] {
			tag |= tagUsed
		}
		dst = append(dst, tag)
		dst = binary.AppendUvarint(dst, uint64(len(it.Text)))
		dst = append(dst, it.Text...)
	}
	return dst
}

// DecodeAnswer decodes an answer. The facts' texts share one copy of the
// answer (a single allocation). An answer that breaks the format or
// names a kind that is not one is an error wrapping ErrMalformed.
func DecodeAnswer(answer []byte) (*Set, error) {
	set := new(Set)
	if err := DecodeAnswerInto(set, string(answer)); err != nil {
		return nil, err
	}
	return set, nil
}

// DecodeAnswerInto decodes an answer into set, reusing its arrays; the
// facts' texts are substrings of answer. On an error set is emptied.
func DecodeAnswerInto(set *Set, s string) error {
	set.Items, set.Used = set.Items[:0], set.Used[:0]
	b := unsafe.Slice(unsafe.StringData(s), len(s)) // s's bytes, only read
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(s))/2 {
		return fmt.Errorf("%w: the count is cut or too large", ErrMalformed)
	}
	set.Items, set.Used = slices.Grow(set.Items, int(count)), slices.Grow(set.Used, int(count))
	at := k
	for i := range count {
		if at >= len(s) {
			return malformed(set, "%w: fact %d runs past the answer's end", ErrMalformed, i)
		}
		tag := s[at]
		at++
		kind := idents.Kind(tag &^ tagUsed)
		if kind >= idents.NumKinds {
			return malformed(set, "%w: fact %d has unknown kind %d", ErrMalformed, i, kind)
		}
		n, k := binary.Uvarint(b[at:])
		if k <= 0 || n > uint64(len(s)-at-k) {
			return malformed(set, "%w: fact %d's text is cut or runs past the answer's end", ErrMalformed, i)
		}
		at += k
		set.Items = append(set.Items, idents.Item{Kind: kind, Text: s[at : at+int(n)]})
		set.Used = append(set.Used, tag&tagUsed != 0)
		at += int(n)
	}
	if at != len(s) {
		return malformed(set, "%w: %d bytes after the last fact", ErrMalformed, len(s)-at)
	}
	return nil
}

// malformed empties set and returns the error format describes.
func malformed(set *Set, format string, args ...any) error {
	set.Items, set.Used = set.Items[:0], set.Used[:0]
	return fmt.Errorf(format, args...)
}
