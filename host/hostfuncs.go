package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"

	"github.com/compactd/compactd/abi"
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
