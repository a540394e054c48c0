package abi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// The fast path's request encoding. Through Extism a request is JSON; on
// the fast path the host sends the same request in this binary form, which
// a guest decodes without scanning the messages' text: in a Go guest,
// decoding JSON is the dominant cost (README.md, "The fast path").
//
// All integers are little-endian u32; a string is a u32 length and its
// bytes. Layout:
//
//	"CDF1" (full view) or "CDF2" (header view, ABI 1.1)
//	string config      (JSON object)
//	context: string model, string encoding, u32 context_window,
//	         u32 total_tokens, string conversation_id, string state (JSON or empty)
//	u32    message count
//	per message:
//	  string role
//	  u32    tokens
//	  u8     content kind: 0 null, 1 text (the decoded string), 2 JSON (e.g. parts),
//	         and in CDF2 only: 3 text left out, 4 parts left out
//	  kinds 0-2: string content; kinds 3-4: u32 size (bytes of text, of JSON)
//	  string name
//	  string tool_call_id
//	  u32    tool call count, then per call: string id, type, name, arguments
//	optional, only to a plugin whose description sets "decision" (ABI 1.1):
//	u8     1 (the host's decision follows), string reason, u32 target_tokens
//	optional, only to a plugin whose description sets "hashes" (ABI 1.1):
//	u8     2 (the messages' hashes follow), u32 count (= message count),
//	       per message two u64 (Message.Hash)
const (
	fastMagic        = "CDF1"
	fastMagicHeaders = "CDF2"
)

// Content kinds in the fast encoding.
const (
	fastContentNull         = 0
	fastContentText         = 1
	fastContentJSON         = 2
	fastContentOmittedText  = 3
	fastContentOmittedParts = 4
)

// ErrFastRequest is wrapped by DecodeFastRequest's errors.
var ErrFastRequest = errors.New("malformed fast-path request")

// AppendFastRequest appends the fast encoding of a request with the given
// config JSON, context and messages (whose Tokens are sent), in the full
// view (CDF1).
func AppendFastRequest(dst []byte, config json.RawMessage, ctx *Context, msgs []Message) []byte {
	return AppendFastRequestView(dst, config, ctx, msgs, ViewFull)
}

// AppendFastRequestView is AppendFastRequest for a view: ViewHeaders
// leaves contents out (CDF2), anything else sends them (CDF1).
func AppendFastRequestView(dst []byte, config json.RawMessage, ctx *Context, msgs []Message, view string) []byte {
	headers := view == ViewHeaders
	if headers {
		dst = append(dst, fastMagicHeaders...)
	} else {
		dst = append(dst, fastMagic...)
	}
	dst = appendString(dst, config)
	dst = appendString(dst, ctx.Model)
	dst = appendString(dst, ctx.Encoding)
	dst = binary.LittleEndian.AppendUint32(dst, wireU32(ctx.ContextWindow))
	dst = binary.LittleEndian.AppendUint32(dst, wireU32(ctx.TotalTokens))
	dst = appendString(dst, ctx.ConversationID)
	dst = appendString(dst, ctx.State)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(msgs)))
	for i := range msgs {
		m := &msgs[i]
		dst = appendString(dst, m.Role)
		dst = binary.LittleEndian.AppendUint32(dst, wireU32(m.Tokens))
		switch {
		case m.Content.IsNull():
			dst = append(dst, fastContentNull)
			dst = appendString(dst, "")
		case headers && m.Content.IsString():
			dst = append(dst, fastContentOmittedText)
			dst = binary.LittleEndian.AppendUint32(dst, uint32(textSize(m.Content)))
		case headers:
			dst = append(dst, fastContentOmittedParts)
			dst = binary.LittleEndian.AppendUint32(dst, uint32(len(m.Content.Raw())))
		case m.Content.IsString():
			dst = append(dst, fastContentText)
			dst = appendString(dst, m.Content.Text())
		default:
			dst = append(dst, fastContentJSON)
			dst = appendString(dst, m.Content.Raw())
		}
		dst = appendString(dst, m.Name)
		dst = appendString(dst, m.ToolCallID)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(m.ToolCalls)))
		for _, c := range m.ToolCalls {
			dst = appendString(dst, c.ID)
			dst = appendString(dst, c.Type)
			dst = appendString(dst, c.Function.Name)
			dst = appendString(dst, c.Function.Arguments)
		}
	}
	return dst
}

// FastRequestSize returns the size of AppendFastRequestView's encoding
// of the same request: exact for the header view and, in the full view,
// for texts the host has decoded and for arrays of parts; a string
// content still in JSON counts its JSON, never shorter than its text.
// It encodes nothing. An encoder sizes its buffer with it once instead
// of growing it: a header view of a long session holds its tool calls'
// arguments, tens of kilobytes that a guess from the message count
// missed.
func FastRequestSize(config json.RawMessage, ctx *Context, msgs []Message, view string) int {
	headers := view == ViewHeaders
	n := len(fastMagic) + 4 + len(config) + 4 + len(ctx.Model) + 4 + len(ctx.Encoding) + 4 + 4 +
		4 + len(ctx.ConversationID) + 4 + len(ctx.State) + 4
	for i := range msgs {
		m := &msgs[i]
		n += 4 + len(m.Role) + 4 + 1
		switch {
		case m.Content.IsNull():
			n += 4
		case headers:
			n += 4
		default:
			n += 4 + m.Content.Len()
		}
		n += 4 + len(m.Name) + 4 + len(m.ToolCallID) + 4
		for _, c := range m.ToolCalls {
			n += 4 + len(c.ID) + 4 + len(c.Type) + 4 + len(c.Function.Name) + 4 + len(c.Function.Arguments)
		}
	}
	return n
}

// FastTrailersSize is the most the trailers add to a request of n
// messages: the decision (its reason's length is the caller's) and the
// hashes.
func FastTrailersSize(messages, reason int) int {
	return 1 + 4 + reason + 4 + 1 + 4 + 16*messages
}

// fastDecisionTag opens the decision trailer of a fast request.
const fastDecisionTag = 1

// AppendFastDecision appends the host's decision to a fast request made
// by AppendFastRequestView (nothing when d is nil). The host sends it
// only to a plugin whose description sets Decision; a decoder that does
// not know it would see trailing bytes.
func AppendFastDecision(dst []byte, d *Decision) []byte {
	if d == nil {
		return dst
	}
	dst = append(dst, fastDecisionTag)
	dst = appendString(dst, d.Reason)
	return binary.LittleEndian.AppendUint32(dst, wireU32(d.TargetTokens))
}

// fastHashesTag opens the message hashes' trailer of a fast request.
const fastHashesTag = 2

// AppendFastHashes appends the messages' hashes (Message.Hash, one per
// message, in order) to a fast request, after its decision if any. The
// host sends them only to a plugin whose description sets Hashes.
func AppendFastHashes(dst []byte, hashes [][2]uint64) []byte {
	dst = append(dst, fastHashesTag)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(hashes)))
	for _, h := range hashes {
		dst = binary.LittleEndian.AppendUint64(dst, h[0])
		dst = binary.LittleEndian.AppendUint64(dst, h[1])
	}
	return dst
}

// textSize returns the size of a string content's text without decoding
// it when it is known.
func textSize(c Content) int {
	if c.hasText || c.omitted != "" {
		return c.Len()
	}
	return len(c.Text())
}

// wireU32 is n as a wire u32. The host checks its integers' ranges before
// it encodes a request (see MaxTokenCount); should a value
// still be out of range, it saturates rather than wrapping, so a window of
// 2^32 never reaches a plugin as 0.
func wireU32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}

func appendString[T string | []byte | json.RawMessage](dst []byte, s T) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// DecodeFastRequest decodes a fast-path request. The strings of the
// messages alias b (no copies): b must not change while the request is in
// use. The contents a header view (CDF2) left out read through src (see
// ContentSource); src may be nil.
func DecodeFastRequest(b []byte, src ContentSource) (*CompactRequest, error) {
	var d FastDecoder
	return d.Decode(b, src)
}

// FastDecoder decodes fast-path requests into memory it keeps from one
// request to the next: the request, its messages and their tool calls.
// A guest that decodes a request per call with one decoder leaves none of
// that as garbage (in a Go guest, the garbage collector's work grows with
// what each call allocates). The zero value is ready to use.
//
// What Decode returns is valid until the next Decode: the next request
// is decoded into the same memory. (Its strings alias the request bytes,
// which a guest reuses across calls too.)
type FastDecoder struct {
	req   CompactRequest
	msgs  []Message
	calls []ToolCall
}

// fastDecoderShrink is the message (or tool call) count above which a
// decoder lets its array go rather than keep it for smaller requests.
const fastDecoderShrink = 4096

// Decode is DecodeFastRequest, into d's memory (see FastDecoder).
func (d *FastDecoder) Decode(b []byte, src ContentSource) (*CompactRequest, error) {
	r := fastReader{b: b}
	headers := false
	switch {
	case len(b) >= 4 && string(b[:4]) == fastMagic:
	case len(b) >= 4 && string(b[:4]) == fastMagicHeaders:
		headers = true
	default:
		return nil, fmt.Errorf("%w: bad magic", ErrFastRequest)
	}
	r.off = len(fastMagic)
	req := &d.req
	*req = CompactRequest{ABI: Version}
	req.Config = json.RawMessage(r.bytes())
	c := &req.Context
	c.Model, c.Encoding = r.str(), r.str()
	c.ContextWindow, c.TotalTokens = int(r.u32()), int(r.u32())
	c.ConversationID = r.str()
	if state := r.bytes(); len(state) > 0 {
		c.State = state
	}
	n := r.u32()
	if r.failed() {
		return nil, r.err
	}
	// Each message takes at least 25 bytes: bound n before allocating.
	if int(n) > (len(b)-r.off)/25+1 {
		return nil, fmt.Errorf("%w: %d messages cannot fit in %d bytes", ErrFastRequest, n, len(b))
	}
	if int(n) > cap(d.msgs) || cap(d.msgs) > fastDecoderShrink && int(n) < cap(d.msgs)/4 {
		d.msgs = make([]Message, n)
	} else {
		d.msgs = d.msgs[:n]
		clear(d.msgs)
	}
	if cap(d.calls) > fastDecoderShrink {
		d.calls = nil
	}
	d.calls = d.calls[:0]
	req.Messages = d.msgs[:n:n]
	for i := range req.Messages {
		m := &req.Messages[i]
		m.Role = r.str()
		m.Tokens = int(r.u32())
		kind := r.u8()
		if headers && (kind == fastContentOmittedText || kind == fastContentOmittedParts) {
			size := int(r.u32())
			omitted := OmittedText
			if kind == fastContentOmittedParts {
				omitted = OmittedParts
			}
			// Field by field: the message is zero, and a Content
			// literal costs a Go guest a copy of the whole struct.
			m.Content.omitted, m.Content.size, m.Content.index, m.Content.src = omitted, size, i, src
			kind = 0xff // read
		}
		var content []byte
		if kind != 0xff {
			content = r.bytes()
		}
		switch kind {
		case fastContentNull, 0xff:
		case fastContentText:
			m.Content.text, m.Content.hasText = unsafeString(content), true
		case fastContentJSON:
			m.Content.raw = content
		default:
			if !r.failed() {
				r.err = fmt.Errorf("%w: message %d: content kind %d", ErrFastRequest, i, kind)
			}
		}
		m.Name = r.str()
		m.ToolCallID = r.str()
		calls := r.u32()
		if r.failed() {
			return nil, r.err
		}
		if int(calls) > (len(b)-r.off)/16+1 {
			return nil, fmt.Errorf("%w: message %d: %d tool calls cannot fit", ErrFastRequest, i, calls)
		}
		if calls > 0 {
			// Every message's calls come from one array, replaced by a
			// larger one when full (earlier messages keep theirs); each
			// message's slice is full, so appending to it copies.
			if len(d.calls)+int(calls) > cap(d.calls) {
				d.calls = make([]ToolCall, 0, max(2*cap(d.calls), int(calls), 16))
			}
			from := len(d.calls)
			d.calls = d.calls[:from+int(calls)]
			m.ToolCalls = d.calls[from : from+int(calls) : from+int(calls)]
			for k := range m.ToolCalls {
				c := &m.ToolCalls[k]
				c.ID, c.Type, c.Function.Name, c.Function.Arguments = r.str(), r.str(), r.str(), r.str()
			}
		}
	}
	if !r.failed() && r.off < len(b) && b[r.off] == fastDecisionTag {
		r.off++
		d := &Decision{Reason: r.str(), TargetTokens: int(r.u32())}
		if !r.failed() {
			c.Compact = d
		}
	}
	if !r.failed() && r.off < len(b) && b[r.off] == fastHashesTag {
		r.off++
		if n := r.u32(); !r.failed() && int(n) != len(req.Messages) {
			r.err = fmt.Errorf("%w: %d hashes for %d messages", ErrFastRequest, n, len(req.Messages))
		}
		if r.need(16 * len(req.Messages)) {
			for i := range req.Messages {
				req.Messages[i].Hash = [2]uint64{binary.LittleEndian.Uint64(b[r.off:]), binary.LittleEndian.Uint64(b[r.off+8:])}
				r.off += 16
			}
		}
	}
	if !r.failed() && r.off != len(b) {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrFastRequest, len(b)-r.off)
	}
	if r.failed() {
		return nil, r.err
	}
	return req, nil
}

// fastReader reads the fast encoding. Its reads are small enough for
// the compiler to inline (in a Go guest a call costs more than the read):
// a read past the end sets bad and returns zero values, and failed makes
// the error once.
type fastReader struct {
	b     []byte
	off   int
	err   error
	bad   bool
	short int // where the first read past the end started
}

// truncated records a read past the end at byte off.
func (r *fastReader) truncated(off int) {
	if !r.bad {
		r.bad, r.short = true, off
	}
}

// failed reports whether a read failed, setting r.err for a read past
// the end.
func (r *fastReader) failed() bool {
	if r.bad && r.err == nil {
		r.err = fmt.Errorf("%w: truncated at byte %d", ErrFastRequest, r.short)
	}
	return r.err != nil
}

func (r *fastReader) u8() byte {
	if r.off >= len(r.b) {
		r.truncated(r.off)
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *fastReader) u32() uint32 {
	if len(r.b)-r.off < 4 {
		r.truncated(r.off)
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

// need reports whether n more bytes can be read.
func (r *fastReader) need(n int) bool {
	if n < 0 || len(r.b)-r.off < n {
		r.truncated(r.off)
		return false
	}
	return true
}

func (r *fastReader) bytes() []byte {
	off := r.off
	if len(r.b)-off < 4 {
		r.truncated(off)
		return nil
	}
	n := int(binary.LittleEndian.Uint32(r.b[off:]))
	off += 4
	if n > len(r.b)-off {
		r.truncated(r.off)
		return nil
	}
	r.off = off + n
	return r.b[off : off+n : off+n]
}

func (r *fastReader) str() string { return unsafeString(r.bytes()) }

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
