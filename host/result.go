package host

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/convo"
)

// decodeResult parses a CompactResult, checks it against the input and
// assembles the output conversation.
func decodeResult(in *chat.Conversation, out []byte) (*Response, *PluginError) {
	if at := invalidUTF8(out); at >= 0 {
		// Go's decoder would turn the bytes into U+FFFD: the caller would
		// get text the plugin never wrote.
		return nil, &PluginError{Kind: ErrInvalidOutput, Detail: fmt.Sprintf("the result is not UTF-8 (byte %d)", at)}
	}
	// out is the plugin's memory, reused by its next call; the result
	// keeps slices of it (new messages, state).
	out = bytes.Clone(out)
	parsed, err := parseResult(out)
	if err != nil {
		return nil, &PluginError{Kind: ErrInvalidOutput, Detail: fmt.Sprintf("not a JSON CompactResult: %v (output starts %q)", err, preview(out)), Err: err}
	}
	res := *parsed
	items := res.Messages
	res.Messages = nil
	if err := convo.CheckItems(in.Messages, items); err != nil {
		return nil, &PluginError{Kind: ErrInvalidResult, Detail: err.Error(), Err: err}
	}
	if err := convo.CheckBreakpoints(len(items), res.CacheBreakpoints); err != nil {
		return nil, &PluginError{Kind: ErrInvalidResult, Detail: err.Error(), Err: err}
	}

	n := in.Len()
	raw := make([]json.RawMessage, len(items))
	msgs := make([]abi.Message, len(items))
	resp := &Response{Result: res, Refs: make([]int, len(items))}
	kept := make([]bool, n)
	for i, it := range items {
		if it.IsRef() {
			raw[i], msgs[i] = in.Raw[it.Ref], in.Messages[it.Ref]
			kept[it.Ref] = true
			resp.Refs[i] = it.Ref
			continue
		}
		resp.Refs[i] = -1
		m := *it.Message
		m.Tokens = 0
		if in.OpenAIContent() {
			// Held to the format the caller's messages are in: the caller
			// would send the message on, and the provider refuse it. (A
			// conversation converted from Anthropic's format is converted
			// back, content blocks and all, by its own rules.)
			if err := chat.CheckContent(m.Role, m.Content); err != nil {
				return nil, &PluginError{Kind: ErrInvalidResult, Detail: fmt.Sprintf("message %d (%s): %v", i, m.Role, err)}
			}
		}
		b, err := encodeNewMessage(&m)
		if err != nil {
			return nil, &PluginError{Kind: ErrInvalidOutput, Detail: fmt.Sprintf("message %d: %v", i, err), Err: err}
		}
		raw[i], msgs[i] = b, m
		resp.NewMessages = append(resp.NewMessages, i)
	}
	if err := convo.Check(msgs); err != nil {
		return nil, &PluginError{Kind: ErrInvalidResult, Detail: err.Error(), Err: err}
	}
	for i, k := range kept {
		if !k {
			resp.Dropped = append(resp.Dropped, i)
		}
	}
	resp.Compacted = len(resp.Dropped) > 0 || len(resp.NewMessages) > 0
	resp.Result.Compacted = resp.Compacted
	resp.Conversation = in.WithMessages(raw, msgs)
	return resp, nil
}

// encodeNewMessage encodes a new message as marshalMessage does, byte for
// byte. The common one, a summary (a plain role and a string content the
// result held, nothing else), is written directly: its content's JSON is
// the result's own string token, which parseResult validated, and which
// encoding/json would only check and copy again (a ledger's is
// kilobytes, on every request).
func encodeNewMessage(m *abi.Message) (json.RawMessage, error) {
	raw, ok := m.Content.StringJSON()
	if !ok || m.Name != "" || m.ToolCallID != "" || len(m.ToolCalls) > 0 || m.Tokens != 0 || !plainRole(m.Role) {
		return marshalMessage(m)
	}
	b := make([]byte, 0, len(`{"role":"","content":}`)+len(m.Role)+len(raw))
	b = append(b, `{"role":"`...)
	b = append(b, m.Role...)
	b = append(b, `","content":`...)
	b = append(b, raw...)
	return append(b, '}'), nil
}

// plainRole reports whether role is lower-case ASCII letters, which JSON
// writes as they are.
func plainRole(role string) bool {
	if role == "" {
		return false
	}
	for i := 0; i < len(role); i++ {
		if role[i] < 'a' || role[i] > 'z' {
			return false
		}
	}
	return true
}

// marshalMessage encodes a new message from its known fields, without
// escaping <, > and & (summaries are full of them).
func marshalMessage(m *abi.Message) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func preview(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}
