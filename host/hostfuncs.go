package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
	"unsafe"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"
)

// Completer sends a chat completion to an LLM provider. Implementations
// must be safe for concurrent use and honor ctx.
type Completer interface {
	Complete(ctx context.Context, req abi.LLMRequest) (abi.LLMResponse, error)
}

// CallEnv is what the host functions serve during one call.
type CallEnv struct {
	// CountTokens counts the tokens of a text with the request's tokenizer.
	// Nil counts one token per four bytes, rounded up.
	CountTokens func(text string) int
	// LLM answers llm_complete. Nil answers every call with a no_provider
	// error.
	LLM Completer
}

// callState travels in the context of one call, so host functions know
// whose call they serve.
type callState struct {
	env    CallEnv
	kernel *kernel // the fast path's kernel memory; nil on the Extism path
	// msgs are the call's request messages, for message_content (nil for
	// calls without a conversation).
	msgs []abi.Message
	// facts is the last extract_message_facts_into answer, for its
	// range (first, count, user_chars).
	facts struct {
		key    [3]uint64
		answer []byte
	}
}

type callStateKey struct{}

func withCallState(ctx context.Context, st *callState) context.Context {
	return context.WithValue(ctx, callStateKey{}, st)
}

func callStateFrom(ctx context.Context) *callState {
	if st, ok := ctx.Value(callStateKey{}).(*callState); ok {
		return st
	}
	return &callState{}
}

// hostFunc is one compactd host function (module abi.HostModule),
// declared once: its name, its Wasm signature and what it does. Both call
// paths register every entry of hostFuncs, the fast path on wazero
// (instantiateFastHostModules) and the Extism path (extismHostFunctions),
// and the fast path accepts a module's imports by the same table
// (fastImportsOK). The contract (abi/README.md, "Host functions"), the Go
// PDK's and the kits' import declarations are checked against it
// (TestHostFunctionDeclarations). docs/host-functions.md says how to add
// one.
type hostFunc struct {
	name            string
	params, results []api.ValueType
	// call reads its arguments from stack and writes its results there,
	// as wazero's and Extism's stack-based functions do. Blocks passed by
	// offset are in mem. A panic traps the plugin's call.
	call func(ctx context.Context, st *callState, mem hostMemory, stack []uint64)
}

// hostFuncs is the table of compactd's host functions.
func hostFuncs() []hostFunc {
	return []hostFunc{
		{abi.HostCountTokens, []api.ValueType{i64}, []api.ValueType{i64}, func(ctx context.Context, st *callState, mem hostMemory, s []uint64) {
			if mem.length(s[0]) > abi.MaxHostInputBytes {
				s[0] = abi.CountTokensRefused
				return
			}
			s[0] = countTokens(ctx, st, mem.read(s[0]))
		}},
		{abi.HostLLMComplete, []api.ValueType{i64}, []api.ValueType{i64}, func(ctx context.Context, st *callState, mem hostMemory, s []uint64) {
			var resp []byte
			if n := mem.length(s[0]); n > abi.MaxHostInputBytes {
				resp = llmTooLarge(n)
			} else {
				resp = llmComplete(ctx, st, mem.read(s[0]))
			}
			s[0] = mem.write(resp)
		}},
		{abi.HostMessageContent, []api.ValueType{i64}, []api.ValueType{i64}, func(_ context.Context, st *callState, mem hostMemory, s []uint64) {
			b, ok := messageContent(st, s[0])
			if !ok || len(b) == 0 {
				// No message, or an empty content: Extism's null block
				// (0) reads as empty.
				s[0] = 0
				return
			}
			s[0] = mem.write(b)
		}},
		{abi.HostMessageContentInto, []api.ValueType{i64, i64, i64}, []api.ValueType{i64}, func(_ context.Context, st *callState, mem hostMemory, s []uint64) {
			b, ok := messageContent(st, s[0])
			switch {
			case !ok:
				s[0] = abi.ContentNoMessage
				return
			case mem.guest == nil:
				// Through Extism the host cannot write to the plugin's
				// own memory: the plugin falls back to message_content.
				s[0] = abi.ContentUnsupported
				return
			}
			ptr, capacity := s[1], s[2]
			if uint64(len(b)) <= capacity && len(b) > 0 {
				if ptr > math.MaxUint32 || !mem.guest.Write(uint32(ptr), b) {
					panic(fmt.Sprintf("buffer of %d bytes at %d is outside the plugin's memory", capacity, ptr))
				}
			}
			s[0] = uint64(len(b))
		}},
		{abi.HostExtractIdentifiers, []api.ValueType{i64}, []api.ValueType{i64}, func(ctx context.Context, _ *callState, mem hostMemory, s []uint64) {
			// Only a plugin's bug sends a request over the limit or out
			// of format (the PDK splits a batch): the call traps.
			if n := mem.length(s[0]); n > abi.MaxHostInputBytes {
				panic(fmt.Sprintf("the request is %d bytes; the limit is %d", n, abi.MaxHostInputBytes))
			}
			s[0] = extractIdentifiers(ctx, mem, mem.read(s[0]))
		}},
		{abi.HostExtractIdentifiersFrom, []api.ValueType{i64, i64}, []api.ValueType{i64}, func(ctx context.Context, _ *callState, mem hostMemory, s []uint64) {
			if mem.guest == nil {
				// Through Extism the host cannot read the plugin's own
				// memory: the plugin falls back to extract_identifiers.
				s[0] = abi.ExtractUnsupported
				return
			}
			ptr, n := s[0], s[1]
			if n > abi.MaxHostInputBytes {
				panic(fmt.Sprintf("the request is %d bytes; the limit is %d", n, abi.MaxHostInputBytes))
			}
			req, ok := mem.guest.Read(uint32(ptr), uint32(n))
			if ptr > math.MaxUint32 || !ok {
				panic(fmt.Sprintf("the request of %d bytes at %d is outside the plugin's memory", n, ptr))
			}
			s[0] = extractIdentifiers(ctx, mem, req)
		}},
		{abi.HostExtractMessageFactsInto, []api.ValueType{i64, i64, i64, i64, i64}, []api.ValueType{i64}, func(ctx context.Context, st *callState, mem hostMemory, s []uint64) {
			if mem.guest == nil {
				// Through Extism the host cannot write to the plugin's
				// own memory: the plugin finds the facts itself.
				s[0] = abi.FactsUnsupported
				return
			}
			s[0] = messageFacts(ctx, st, mem.guest, s[0], s[1], s[2], s[3], s[4])
		}},
	}
}

// messageFacts answers extract_message_facts_into: the facts of the count
// messages from first, written at ptr when they fit in capacity bytes;
// their length either way. The answer is kept for the call that follows
// with a larger buffer. A range the request does not hold, or a buffer
// outside the plugin's memory, is a plugin's bug: the call traps.
func messageFacts(ctx context.Context, st *callState, guest api.Memory, first, count, userChars, ptr, capacity uint64) uint64 {
	key := [3]uint64{first, count, userChars}
	if st.facts.answer == nil || st.facts.key != key {
		ans, err := facts.Answer(ctx, st.facts.answer[:0], st.msgs, first, count, userChars)
		if err != nil {
			panic(err)
		}
		st.facts.key, st.facts.answer = key, ans
	}
	ans := st.facts.answer
	if uint64(len(ans)) <= capacity {
		if ptr > math.MaxUint32 || !guest.Write(uint32(ptr), ans) {
			panic(fmt.Sprintf("the buffer of %d bytes at %d is outside the plugin's memory", capacity, ptr))
		}
	}
	return uint64(len(ans))
}

// extractIdentifiers answers an extract_identifiers request (req, in
// idents' wire format) with a block of its answer. A malformed request is
// a plugin's bug: the call traps.
func extractIdentifiers(ctx context.Context, mem hostMemory, req []byte) uint64 {
	ans, err := idents.Answer(ctx, nil, req)
	if err != nil {
		panic(err)
	}
	return mem.write(ans)
}

// run calls f for the call st, naming f in the trap a panic becomes.
func (f *hostFunc) run(ctx context.Context, st *callState, mem hostMemory, stack []uint64) {
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(error); ok {
				panic(fmt.Errorf("%s: %w", f.name, err))
			}
			panic(fmt.Sprintf("%s: %v", f.name, r))
		}
	}()
	f.call(ctx, st, mem, stack)
}

// hostMemory is where a host function finds the blocks it is passed and
// puts the blocks it returns: Extism's kernel memory, which the fast path
// implements itself (kernel) and the Extism path takes from the SDK
// (plugin). On the fast path the host may also write straight into the
// plugin's linear memory (guest). A failed access panics: the call traps.
type hostMemory struct {
	kernel *kernel               // the fast path's kernel; nil on the Extism path
	guest  api.Memory            // the plugin's own memory; nil on the Extism path
	plugin *extism.CurrentPlugin // the Extism path's kernel; nil on the fast path
}

// length returns the length of the block at off.
func (m hostMemory) length(off uint64) uint64 {
	if m.kernel != nil {
		return m.kernel.length(off)
	}
	n, err := m.plugin.Length(off)
	if err != nil {
		panic(fmt.Errorf("block at offset %d: %w", off, err))
	}
	return n
}

// read returns the block at off, valid until the function's next write
// (in place on the fast path, a copy through Extism).
func (m hostMemory) read(off uint64) []byte {
	if m.kernel != nil {
		return m.kernel.view(off)
	}
	b, err := m.plugin.ReadBytes(off)
	if err != nil {
		panic(fmt.Errorf("reading the block at offset %d: %w", off, err))
	}
	return b
}

// write copies b into a new block and returns its offset.
func (m hostMemory) write(b []byte) uint64 {
	if m.kernel != nil {
		return m.kernel.write(b)
	}
	off, err := m.plugin.WriteBytes(b)
	if err != nil {
		panic(fmt.Errorf("writing a block of %d bytes: %w", len(b), err))
	}
	return off
}

// countChunk is the most text count_tokens hands the tokenizer at once.
// Byte-pair encoding a long run without word breaks takes time that grows
// faster than its length (256 KiB of "x" takes 7x as long as 64 KiB), and
// between chunks the call's deadline is checked.
const countChunk = 64 << 10

// countTokens implements count_tokens for a text within
// abi.MaxHostInputBytes. It counts chunk by chunk and stops the call (a
// trap that the host reports as the call's timeout) once the call's
// context is done: a host function is guest time too.
func countTokens(ctx context.Context, st *callState, text []byte) uint64 {
	if st.env.CountTokens == nil {
		return uint64((len(text) + 3) / 4)
	}
	var n uint64
	for len(text) > 0 {
		if err := ctx.Err(); err != nil {
			panic(fmt.Errorf("count_tokens: %w", err))
		}
		cut := chunkEnd(text, countChunk)
		n += uint64(st.env.CountTokens(string(text[:cut])))
		text = text[cut:]
	}
	return n
}

// chunkEnd returns where the first chunk of at most max bytes of text
// ends. It prefers a cut after a newline followed by an ASCII letter or
// digit: the tokenizers' pre-splitting always breaks there, so counting
// the pieces gives the same total as counting the whole. Without such a
// place in the second half of the window it cuts at a UTF-8 boundary.
func chunkEnd(text []byte, max int) int {
	if len(text) <= max {
		return len(text)
	}
	for i := max; i > max/2; i-- {
		if text[i-1] == '\n' && isAlnum(text[i]) {
			return i
		}
	}
	cut := max
	for cut > 1 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return cut
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// llmTooLarge is llm_complete's answer to a request block over
// abi.MaxHostInputBytes, which the host does not read.
func llmTooLarge(n uint64) []byte {
	b, _ := json.Marshal(abi.LLMResponse{Error: &abi.Error{Code: abi.CodeInvalidRequest,
		Message: fmt.Sprintf("llm_complete: the request is %d bytes; the limit is %d", n, abi.MaxHostInputBytes)}})
	return b
}

// llmComplete implements llm_complete: it never fails the call; failures
// are answered as an LLMResponse with an error.
func llmComplete(ctx context.Context, st *callState, reqJSON []byte) []byte {
	var resp abi.LLMResponse
	var req abi.LLMRequest
	switch err := json.Unmarshal(reqJSON, &req); {
	case err != nil:
		resp.Error = &abi.Error{Code: abi.CodeInvalidRequest, Message: "llm_complete: decoding request: " + err.Error()}
	case st.env.LLM == nil:
		resp.Error = &abi.Error{Code: abi.CodeNoProvider, Message: "no LLM provider configured (set llm in the daemon's config file)"}
	default:
		var cerr error
		resp, cerr = st.env.LLM.Complete(ctx, req)
		if cerr != nil {
			var ae *abi.Error
			if !errors.As(cerr, &ae) {
				ae = &abi.Error{Code: abi.CodeProviderError, Message: cerr.Error()}
			}
			resp.Text = ""
			resp.Error = ae
		}
	}
	b, err := json.Marshal(resp)
	if err != nil { // only strings and ints: cannot happen
		b = []byte(`{"error":{"code":"internal","message":"encoding llm response"}}`)
	}
	return b
}

// messageContent implements message_content: message i's content as a
// header view leaves it out (the text of a string, the JSON of parts,
// nothing for null). ok is false when there is no such message.
func messageContent(st *callState, i uint64) (b []byte, ok bool) {
	if i >= uint64(len(st.msgs)) {
		return nil, false
	}
	c := &st.msgs[i].Content
	switch {
	case c.IsNull():
		return nil, true
	case c.IsString():
		t := c.Text()
		return unsafe.Slice(unsafe.StringData(t), len(t)), true
	}
	return c.Raw(), true
}
