//go:build wasip1

package pdk

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"unicode/utf8"
	"unsafe"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
)

// Extism kernel functions (namespace extism:host/env).

//go:wasmimport extism:host/env input_length
func extismInputLength() uint64

//go:wasmimport extism:host/env input_load_u64
func extismInputLoadU64(offset uint64) uint64

//go:wasmimport extism:host/env input_load_u8
func extismInputLoadU8(offset uint64) uint32

//go:wasmimport extism:host/env alloc
func extismAlloc(n uint64) uint64

//go:wasmimport extism:host/env free
func extismFree(offset uint64)

//go:wasmimport extism:host/env length
func extismLength(offset uint64) uint64

//go:wasmimport extism:host/env load_u64
func extismLoadU64(offset uint64) uint64

//go:wasmimport extism:host/env load_u8
func extismLoadU8(offset uint64) uint32

//go:wasmimport extism:host/env store_u64
func extismStoreU64(offset uint64, v uint64)

//go:wasmimport extism:host/env store_u8
func extismStoreU8(offset uint64, v uint32)

//go:wasmimport extism:host/env output_set
func extismOutputSet(offset uint64, n uint64)

//go:wasmimport extism:host/env error_set
func extismErrorSet(offset uint64)

//go:wasmimport extism:host/env log_debug
func extismLogDebug(offset uint64)

//go:wasmimport extism:host/env log_info
func extismLogInfo(offset uint64)

//go:wasmimport extism:host/env log_warn
func extismLogWarn(offset uint64)

//go:wasmimport extism:host/env log_error
func extismLogError(offset uint64)

// compactd host functions (namespace extism:host/user).

//go:wasmimport extism:host/user count_tokens
func hostCountTokens(offset uint64) uint64

//go:wasmimport extism:host/user llm_complete
func hostLLMComplete(offset uint64) uint64

//go:wasmimport extism:host/user message_content
func hostMessageContent(index uint64) uint64

//go:wasmimport extism:host/user message_content_into
func hostMessageContentInto(index, ptr, capacity uint64) uint64

//go:wasmimport extism:host/user extract_identifiers
func hostExtractIdentifiers(offset uint64) uint64

//go:wasmimport extism:host/user extract_identifiers_from
func hostExtractIdentifiersFrom(ptr, n uint64) uint64

//go:wasmimport extism:host/user extract_message_facts_into
func hostExtractMessageFactsInto(first, count, userChars, ptr, capacity uint64) uint64

// A guest's linear memory never shrinks, so its peak is what it costs the
// host for the rest of its life. Collect at 50% heap growth instead of Go's
// default 100%: a small live heap makes each collection cheap, and the peak
// stays within twice the guest's size after its first call (host tests check).
func init() { debug.SetGCPercent(50) }

// readInput copies the Extism input into Go memory, eight bytes per
// boundary crossing: the fewest the Extism ABI allows.
func readInput() []byte {
	n := extismInputLength()
	buf := make([]byte, n)
	i := uint64(0)
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], extismInputLoadU64(i))
	}
	for ; i < n; i++ {
		buf[i] = byte(extismInputLoadU8(i))
	}
	return buf
}

// toKernel copies b into a new block of Extism kernel memory.
func toKernel(b []byte) uint64 {
	n := uint64(len(b))
	offset := extismAlloc(n)
	i := uint64(0)
	for ; i+8 <= n; i += 8 {
		extismStoreU64(offset+i, binary.LittleEndian.Uint64(b[i:]))
	}
	for ; i < n; i++ {
		extismStoreU8(offset+i, uint32(b[i]))
	}
	return offset
}

// fromKernel copies a block of Extism kernel memory into Go memory.
func fromKernel(offset uint64) []byte {
	n := extismLength(offset)
	buf := make([]byte, n)
	i := uint64(0)
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], extismLoadU64(offset+i))
	}
	for ; i < n; i++ {
		buf[i] = byte(extismLoadU8(offset + i))
	}
	return buf
}

// extismExport runs one export through the Extism ABI: input from the
// kernel, output or error back to it, 0 on success and 1 on failure.
func extismExport(export string) int32 {
	defer runtime.Gosched() // let the guest GC run; see FACTS: memory grows without it
	clear(fetched)
	if registered == nil {
		extismErrorSet(toKernel(errorBody(&abi.Error{Code: abi.CodeInternal, Message: "no policy registered (call pdk.Register in init)"})))
		return 1
	}
	out, err := Call(registered, wasmHost{}, export, readInput())
	if err != nil {
		extismErrorSet(toKernel(errorBody(err)))
		return 1
	}
	extismOutputSet(toKernel(out), uint64(len(out)))
	return 0
}

//go:wasmexport describe
func exportDescribe() int32 { return extismExport(abi.ExportDescribe) }

//go:wasmexport compact
func exportCompact() int32 { return extismExport(abi.ExportCompact) }

//go:wasmexport should_compact
func exportShouldCompact() int32 { return extismExport(abi.ExportShouldCompact) }

// The fast path. The host asks for an input buffer in the guest's own linear
// memory, writes the request there directly, and reads the output from the
// address compactd_fast_v1_call returns. Both buffers stay referenced here
// until the next call, so the guest's GC cannot reclaim them while the host
// reads or writes. The input buffer stays valid across calls: the host
// reuses it and asks for a new one only when a request does not fit. The
// output buffer is reused too: a compact result is written into it
// directly (the host has read the previous output before it calls again),
// so a call leaves no garbage of its result's size behind.
var (
	fastInput  []byte
	fastOutput []byte
	// fastDecoder decodes every request into the same memory: a request
	// is valid during its call only (its strings alias fastInput, which
	// the next request overwrites, and so do its messages).
	fastDecoder abi.FastDecoder
)

// decodeGuestRequest decodes a fast-path request with fastDecoder.
func decodeGuestRequest(input []byte, src abi.ContentSource) (*abi.CompactRequest, error) {
	return decodeFast(&fastDecoder, input, src)
}

// fastBufferShrink is the capacity above which an input buffer is replaced
// when the next request needs less than a quarter of it.
const fastBufferShrink = 4 << 20

//go:wasmexport compactd_fast_v1_alloc
func fastAlloc(size uint32) uint32 {
	need := int(size)
	if need == 0 {
		need = 1
	}
	if cap(fastInput) < need || cap(fastInput) > fastBufferShrink && need < cap(fastInput)/4 {
		fastInput = make([]byte, need)
	}
	fastInput = fastInput[:size]
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(fastInput[:cap(fastInput)]))))
}

//go:wasmexport compactd_fast_v1_call
func fastCall(fn, ptr, size uint32) uint64 {
	if fn == abi.FastPing {
		fastOutput = append(fastOutput[:0], abi.FastStatusOK)
		return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(fastOutput))))<<32 | 1
	}
	defer runtime.Gosched() // let the guest GC run between calls
	clear(fetched)
	var export string
	switch fn {
	case abi.FastDescribe:
		export = abi.ExportDescribe
	case abi.FastCompact:
		export = abi.ExportCompact
	case abi.FastShouldCompact:
		export = abi.ExportShouldCompact
	}
	if cap(fastOutput) > fastBufferShrink {
		fastOutput = nil // a rare large result does not pin its buffer
	}
	out := append(fastOutput[:0], abi.FastStatusOK)
	var err error
	switch {
	case registered == nil:
		err = &abi.Error{Code: abi.CodeInternal, Message: "no policy registered (call pdk.Register in init)"}
	case export == "":
		err = &abi.Error{Code: abi.CodeInvalidRequest, Message: "unknown fast-path function"}
	case int(size) > cap(fastInput) || uint32(uintptr(unsafe.Pointer(unsafe.SliceData(fastInput[:cap(fastInput)])))) != ptr:
		err = &abi.Error{Code: abi.CodeInvalidRequest, Message: "fast-path input is not the buffer compactd_fast_v1_alloc returned"}
	default:
		out, err = call(registered, wasmHost{}, export, fastInput[:size], decodeGuestRequest, out)
	}
	switch {
	case err != nil:
		out = append(append(fastOutput[:0], abi.FastStatusError), errorBody(err)...)
	case export != abi.ExportCompact:
		// Describe and should_compact return their JSON alone.
		out = append(append(fastOutput[:0], abi.FastStatusOK), out...)
	}
	fastOutput = out
	fastInput = fastInput[:0]
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(fastOutput))))
	return addr<<32 | uint64(len(fastOutput))
}

// wasmHost implements Host with the host functions, and abi.ContentSource
// (the contents a header view leaves out) with message_content_into on
// the fast path, message_content on the Extism path.
type wasmHost struct{}

// fetched caches the contents read during the current call (a policy may
// read one several times); reset when a call starts.
var fetched map[int][]byte

// contentBuf is message_content_into's buffer, reused across calls.
var contentBuf []byte

func (wasmHost) Content(index int) ([]byte, bool) {
	if b, ok := fetched[index]; ok {
		return b, true
	}
	if index < 0 {
		return nil, false
	}
	var b []byte
	for {
		ptr := uint64(0)
		if cap(contentBuf) > 0 {
			ptr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(contentBuf[:cap(contentBuf)]))))
		}
		n := hostMessageContentInto(uint64(index), ptr, uint64(cap(contentBuf)))
		if n == abi.ContentNoMessage {
			return nil, false
		}
		if n == abi.ContentUnsupported {
			off := hostMessageContent(uint64(index))
			if off == 0 {
				return nil, false
			}
			b = fromKernel(off)
			extismFree(off)
			break
		}
		if n <= uint64(cap(contentBuf)) {
			b = append([]byte(nil), contentBuf[:n]...)
			break
		}
		contentBuf = make([]byte, n)
	}
	if fetched == nil {
		fetched = map[int][]byte{}
	}
	fetched[index] = b
	return b, true
}

// CountTokens counts text with the host's tokenizer. The host takes at
// most abi.MaxHostInputBytes at once, so a longer text is counted in
// pieces cut at UTF-8 boundaries (the sum may differ by a token or so per
// piece from a count in one go).
func (wasmHost) CountTokens(text string) int {
	total := 0
	for text != "" {
		piece := text
		if len(piece) > abi.MaxHostInputBytes {
			cut := abi.MaxHostInputBytes
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			piece = text[:cut]
		}
		text = text[len(piece):]
		offset := toKernel(unsafe.Slice(unsafe.StringData(piece), len(piece)))
		n := hostCountTokens(offset)
		extismFree(offset)
		if n == abi.CountTokensRefused {
			return -1 // cannot happen: every piece is within the limit
		}
		total += int(n)
	}
	return total
}

func (wasmHost) Complete(req abi.LLMRequest) (abi.LLMResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return abi.LLMResponse{}, &abi.Error{Code: abi.CodeInternal, Message: "encoding llm request: " + err.Error()}
	}
	in := toKernel(body)
	outOffset := hostLLMComplete(in)
	extismFree(in)
	var resp abi.LLMResponse
	if outOffset == 0 {
		return resp, &abi.Error{Code: abi.CodeProviderError, Message: "llm_complete returned no response"}
	}
	raw := fromKernel(outOffset)
	extismFree(outOffset)
	if err := json.Unmarshal(raw, &resp); err != nil {
		return resp, &abi.Error{Code: abi.CodeProviderError, Message: "decoding llm response: " + err.Error()}
	}
	if resp.Error != nil {
		return resp, resp.Error
	}
	return resp, nil
}

// extractRequest is extract_identifiers' request buffer, reused across
// calls.
var extractRequest []byte

// ExtractIdentifiers extracts texts natively through extract_identifiers,
// in batches of at most abi.MaxHostInputBytes; a text too large for a
// batch of its own is extracted here, in the guest, with the same code.
// On the fast path the host reads each batch from the guest's memory
// (extract_identifiers_from); through Extism it is copied to a kernel
// block first.
func (wasmHost) ExtractIdentifiers(texts []idents.Input) ([][]idents.Item, error) {
	var out [][]idents.Item // made when the texts take more than one batch
	for from := 0; from < len(texts); {
		size, to := 1, from
		for to < len(texts) && size+idents.RequestSize(texts[to]) <= abi.MaxHostInputBytes {
			size += idents.RequestSize(texts[to])
			to++
		}
		if to == from {
			if out == nil {
				out = make([][]idents.Item, len(texts))
			}
			out[from] = idents.Extract(nil, texts[from].Text, texts[from].Observed)
			from++
			continue
		}
		extractRequest = idents.AppendRequest(extractRequest[:0], texts[from:to])
		ans := hostExtractIdentifiersFrom(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(extractRequest)))), uint64(len(extractRequest)))
		if ans == abi.ExtractUnsupported {
			in := toKernel(extractRequest)
			ans = hostExtractIdentifiers(in)
			extismFree(in)
		}
		var raw []byte
		if ans != 0 {
			raw = fromKernel(ans)
			extismFree(ans)
		}
		got, err := idents.DecodeAnswer(raw, texts[from:to], nil)
		if err != nil {
			return nil, fmt.Errorf("extract_identifiers: %w", err)
		}
		if from == 0 && to == len(texts) {
			out = got // one batch: its slices are the answer
		} else {
			if out == nil {
				out = make([][]idents.Item, len(texts))
			}
			copy(out[from:to], got)
		}
		from = to
	}
	if cap(extractRequest) > fastBufferShrink {
		extractRequest = nil
	}
	return out, nil
}

// factsBuf is extract_message_facts_into's buffer, and factsSet the facts
// decoded from it, both reused across calls.
var (
	factsBuf []byte
	factsSet facts.Set
)

// MessageFacts asks the host for the facts of msgs (the request's messages
// from first) with extract_message_facts_into, which writes them straight
// into factsBuf, and decodes them in place; through Extism it finds them
// here, fetching the contents and extracting with ExtractIdentifiers.
func (h wasmHost) MessageFacts(msgs []abi.Message, first int, opts facts.Options) (*facts.Set, error) {
	if cap(factsBuf) == 0 {
		factsBuf = make([]byte, 4096)
	}
	for {
		buf := factsBuf[:cap(factsBuf)]
		n := hostExtractMessageFactsInto(uint64(first), uint64(len(msgs)), uint64(max(opts.UserChars, 0)), uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), uint64(len(buf)))
		if n == abi.FactsUnsupported {
			return facts.Collect(msgs, opts, h.ExtractIdentifiers)
		}
		if n > uint64(len(buf)) {
			factsBuf = make([]byte, n)
			continue
		}
		if err := facts.DecodeAnswerInto(&factsSet, unsafe.String(unsafe.SliceData(buf), n)); err != nil {
			return nil, fmt.Errorf("extract_message_facts_into: %w", err)
		}
		if cap(factsBuf) > fastBufferShrink {
			factsBuf = nil // the set still holds it, until the next call
		}
		return &factsSet, nil
	}
}

func (wasmHost) Log(level Level, msg string) {
	// The host frees log messages itself.
	offset := toKernel([]byte(msg))
	switch level {
	case LevelDebug:
		extismLogDebug(offset)
	case LevelWarn:
		extismLogWarn(offset)
	case LevelError:
		extismLogError(offset)
	default:
		extismLogInfo(offset)
	}
}

// errorBody encodes err as the ABI's JSON error body.
func errorBody(err error) []byte {
	var ae *abi.Error
	if !errors.As(err, &ae) {
		ae = &abi.Error{Code: abi.CodeInternal, Message: err.Error()}
	}
	b, _ := json.Marshal(ae) // an Error of two strings always marshals
	return b
}
