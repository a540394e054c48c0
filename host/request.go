package host

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/compactd/compactd/abi"
)

var tokensKey = []byte(`"tokens"`)

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
