package host

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/compactd/compactd/abi"
)

var tokensKey = []byte(`"tokens"`)

// encode encodes req for the plugin's path and view.
func (p *Plugin) encode(req *Request) []byte {
	b := encodeFor(p.Path(), p.view, req)
	if p.Path() != "fast" {
		return b
	}
	if p.desc.Decision {
		b = abi.AppendFastDecision(b, req.Context.Compact)
	}
	if p.desc.Hashes && p.engine != nil {
		// The conversation may be shared with other calls: the hashes go
		// on the wire, not into its messages.
		raw := req.Conversation.Raw
		hashes := make([][2]uint64, len(raw))
		for i, r := range raw {
			hashes[i] = p.engine.messageHash(r)
		}
		b = abi.AppendFastHashes(b, hashes)
	}
	return b
}

// encodeFor encodes req for a path and a view: the binary fast encoding
// on the fast path (abi.AppendFastRequestView), JSON on the Extism path
// (which carries context.compact, the host's decision, to every plugin);
// a header view leaves contents out.
func encodeFor(path, view string, req *Request) []byte {
	if path != "fast" {
		if view == abi.ViewHeaders {
			return encodeHeaders(req)
		}
		return encodeRequest(req)
	}
	ctx := req.Context
	ctx.TotalTokens = req.Conversation.TotalTokens()
	cfg := req.Config
	if len(cfg) == 0 {
		cfg = json.RawMessage("{}")
	}
	// Room for the request and its trailers (request.encode), made once.
	msgs := req.Conversation.Messages
	reason := 0
	if ctx.Compact != nil {
		reason = len(ctx.Compact.Reason)
	}
	size := abi.FastRequestSize(cfg, &ctx, msgs, view) + abi.FastTrailersSize(len(msgs), reason)
	return abi.AppendFastRequestView(make([]byte, 0, size), cfg, &ctx, msgs, view)
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

// headerMessage is a message in a header view's JSON: its fields without
// the content, which {"omitted": kind, "size": n} replaces.
type headerMessage struct {
	Tokens     int             `json:"tokens"`
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []abi.ToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// encodeHeaders writes the CompactRequest JSON of a header view. Messages
// carry the ABI's fields only (the caller's other fields are restored by
// refs as always).
func encodeHeaders(req *Request) []byte {
	c := req.Conversation
	var buf bytes.Buffer
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
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	var omitted []byte
	for i := range c.Messages {
		m := &c.Messages[i]
		if i > 0 {
			buf.WriteByte(',')
		}
		h := headerMessage{Tokens: m.Tokens, Role: m.Role, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Content: json.RawMessage("null")}
		switch {
		case m.Content.IsNull():
		case m.Content.IsString():
			omitted = abi.AppendOmitted(omitted[:0], abi.OmittedText, len(m.Content.Text()))
			h.Content = omitted
		default:
			omitted = abi.AppendOmitted(omitted[:0], abi.OmittedParts, len(m.Content.Raw()))
			h.Content = omitted
		}
		_ = enc.Encode(&h)          // strings, ints and valid JSON: cannot fail
		buf.Truncate(buf.Len() - 1) // Encode's newline
	}
	buf.WriteString("]}")
	return buf.Bytes()
}
