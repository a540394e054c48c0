package host

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/compactd/compactd/abi"
)

var tokensKey = []byte(`"tokens"`)

// encodeFor encodes req for a plugin's path: the binary fast encoding on
// the fast path (abi.AppendFastRequest), JSON on the Extism path.
func encodeFor(path string, req *Request) []byte {
	if path != "fast" {
		return encodeRequest(req)
	}
	ctx := req.Context
	ctx.TotalTokens = req.Conversation.TotalTokens()
	cfg := req.Config
	if len(cfg) == 0 {
		cfg = json.RawMessage("{}")
	}
	size := 128 + len(cfg) + len(ctx.State)
	for _, r := range req.Conversation.Raw {
		size += len(r)
	}
	return abi.AppendFastRequest(make([]byte, 0, size), cfg, &ctx, req.Conversation.Messages)
}

// encodeRequest writes the CompactRequest JSON. Each message is the
// caller's original bytes with "tokens" spliced in after the opening brace,
// so the host never re-encodes message contents.
func encodeRequest(req *Request) []byte {
	c := req.Conversation
	size := 256 + len(req.Config) + len(req.Context.State)
	for _, r := range c.Raw {
		size += len(r) + 24
	}
	var buf bytes.Buffer
	buf.Grow(size)
	buf.WriteString(`{"abi":"`)
	buf.WriteString(abi.Version.String())
	buf.WriteString(`","config":`)
	if len(req.Config) == 0 {
		buf.WriteString("{}")
	} else {
		buf.Write(req.Config)
	}
	ctx := req.Context
	ctx.TotalTokens = c.TotalTokens()
	buf.WriteString(`,"context":`)
	ctxJSON, _ := json.Marshal(ctx) // strings, ints and raw JSON: cannot fail
	buf.Write(ctxJSON)
	buf.WriteString(`,"messages":[`)
	var num []byte
	for i, raw := range c.Raw {
		if i > 0 {
			buf.WriteByte(',')
		}
		m := &c.Messages[i]
		if bytes.Contains(raw, tokensKey) {
			// The caller sent a field named tokens (or the text appears
			// in a string): re-encode so the host's count is the only one.
			b, _ := json.Marshal(m)
			buf.Write(b)
			continue
		}
		num = strconv.AppendInt(num[:0], int64(m.Tokens), 10)
		buf.WriteString(`{"tokens":`)
		buf.Write(num)
		rest := bytes.TrimLeft(raw[1:], " \t\r\n")
		if len(rest) > 0 && rest[0] != '}' {
			buf.WriteByte(',')
		}
		buf.Write(rest)
	}
	buf.WriteString("]}")
	return buf.Bytes()
}
