package host

import (
	"context"
	"encoding/json"
	"errors"
	"unsafe"

	"github.com/compactd/compactd/abi"
	"github.com/hashicorp/go-hclog"
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

// countTokens implements count_tokens.
func countTokens(st *callState, text []byte) uint64 {
	if st.env.CountTokens == nil {
		return uint64((len(text) + 3) / 4)
	}
	return uint64(st.env.CountTokens(string(text)))
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

// logLevel maps Extism's log function names to hclog levels.
func logAt(logger hclog.Logger, level hclog.Level, msg string) {
	logger.Log(level, msg)
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
