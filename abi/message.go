package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// Roles a message may have.
const (
	RoleSystem    = "system"
	RoleDeveloper = "developer"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is an OpenAI chat message as it crosses the boundary. Fields the
// host does not know are not represented here; the host keeps them in the
// caller's original bytes and restores them for every {"ref": i} item.
type Message struct {
	Role       string     `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Tokens is the host's token count for the whole message (content,
	// tool calls and per-message overhead). Set on input; ignored on output.
	Tokens int `json:"tokens,omitempty"`
	// Hash is the host's 128-bit hash of the message's bytes as the caller
	// sent them, on the fast path to a plugin whose description sets
	// Hashes (ABI 1.1); zero otherwise. Two messages of one request, or of
	// requests to one plugin instance, with the same Hash are the same
	// message (role, content, name, tool calls and every other field).
	// The hash is keyed per daemon process: compare hashes only within
	// one instance's memory, never across restarts.
	Hash [2]uint64 `json:"-"`
}

// IsSystem reports whether the message is a system or developer message.
func (m *Message) IsSystem() bool { return m.Role == RoleSystem || m.Role == RoleDeveloper }

// Text returns the message's text content (see Content.Text).
func (m *Message) Text() string { return m.Content.Text() }

// ToolCall is one function call an assistant message makes.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function part of a ToolCall. Arguments is the JSON
// text the model produced, kept as a string.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Content is a message's content: a string, an array of content parts, or
// null. It holds either the JSON exactly as it was (decoded lazily: a
// policy that never reads a message's text never pays for unescaping it)
// or, for a string, the text itself (then the JSON is produced only if it
// is encoded). In a header view (see View) it holds neither: only its kind
// and size, and a ContentSource that fetches it when it is read.
type Content struct {
	raw     json.RawMessage
	text    string
	hasText bool

	// A content the host left out (a header view): omitted is
	// OmittedText or OmittedParts, size its size, index its message.
	omitted string
	size    int
	index   int
	src     ContentSource
}

// Kinds of omitted content, as the header view's JSON names them.
const (
	OmittedText  = "text"
	OmittedParts = "parts"
)

// ContentSource fetches the contents a header view leaves out. In a
// plugin the PDK's source calls the message_content host functions; it
// may cache what it fetched for the rest of the call.
type ContentSource interface {
	// Content returns message index's content: the text of a string
	// content, the JSON of an array of parts. ok is false when there is
	// no such message.
	Content(index int) (b []byte, ok bool)
}

var jsonNull = []byte("null")

// TextContent returns a string content.
func TextContent(s string) Content { return Content{text: s, hasText: true} }

// RawContent wraps JSON content (a string, an array of parts, or null).
// The bytes are not copied.
func RawContent(raw json.RawMessage) Content { return Content{raw: raw} }

// OmittedContent is a content a header view leaves out: message index's,
// of kind OmittedText or OmittedParts and size bytes (of text, or of
// JSON), read through src when asked.
func OmittedContent(kind string, size, index int, src ContentSource) Content {
	return Content{omitted: kind, size: size, index: index, src: src}
}

// StringContent is a string content whose JSON is raw (quotes included)
// and whose decoded text is text: the caller decoded it, and guarantees
// they agree. Text costs nothing and Raw returns raw. The host's request
// parser uses it, with a text that views raw's bytes when the string holds
// no escape (raw must then not change while the Content is in use); a
// plugin has no need to.
func StringContent(raw json.RawMessage, text string) Content {
	return Content{raw: raw, text: text, hasText: true}
}

// WithRaw returns c with its JSON replaced by raw, which must be the same
// bytes (the host moves a remembered message onto a new request's bytes).
// A text that viewed the old bytes views the new ones.
func (c Content) WithRaw(raw json.RawMessage) Content {
	if c.hasText && len(c.raw) >= 2 && len(c.text) == len(c.raw)-2 && unsafe.StringData(c.text) == unsafe.SliceData(c.raw[1:]) {
		c.text = unsafe.String(unsafe.SliceData(raw[1:]), len(raw)-2)
	}
	c.raw = raw
	return c
}

// Omitted returns the kind of a content a header view left out
// (OmittedText or OmittedParts), or "" for one that is present.
func (c Content) Omitted() string { return c.omitted }

// WithSource returns c reading from src, if it is a content a header view
// left out (the PDK connects the contents it decoded to the host).
func (c Content) WithSource(src ContentSource) Content {
	if c.omitted != "" {
		c.src = src
	}
	return c
}

// fetch returns an omitted content's bytes ("" without a source).
func (c Content) fetch() []byte {
	if c.src == nil {
		return nil
	}
	b, _ := c.src.Content(c.index)
	return b
}

// Raw returns the JSON of the content ("null" when absent). An omitted
// content is fetched.
func (c Content) Raw() json.RawMessage {
	switch {
	case len(c.raw) > 0:
		return c.raw
	case c.hasText:
		return encodeString(c.text)
	case c.omitted == OmittedText:
		return encodeString(string(c.fetch()))
	case c.omitted == OmittedParts:
		if b := c.fetch(); len(b) > 0 {
			return b
		}
	}
	return jsonNull
}

// StringJSON returns the JSON of a string content when c already holds
// it (a StringContent, or a string the host sent), without producing it;
// ok is false otherwise.
func (c Content) StringJSON() (raw json.RawMessage, ok bool) {
	if c.hasText && len(c.raw) >= 2 {
		return c.raw, true
	}
	return nil, false
}

// IsNull reports whether the content is null or absent.
func (c Content) IsNull() bool {
	return !c.hasText && c.omitted == "" && (len(c.raw) == 0 || bytes.Equal(c.raw, jsonNull))
}

// IsString reports whether the content is a string.
func (c Content) IsString() bool {
	return c.hasText || c.omitted == OmittedText || len(c.raw) > 0 && c.raw[0] == '"'
}

// Text returns the text of the content: the string itself, or the text parts
// of an array joined with "\n". Non-text parts (images, audio) are skipped.
// Malformed content yields "". An omitted content is fetched.
func (c Content) Text() string {
	switch {
	case c.hasText:
		return c.text
	case c.omitted == OmittedText:
		return string(c.fetch())
	case c.omitted == OmittedParts:
		return partsText(c.fetch())
	case c.IsNull():
		return ""
	case c.raw[0] == '"':
		var s string
		if err := json.Unmarshal(c.raw, &s); err != nil {
			return ""
		}
		return s
	case c.raw[0] == '[':
		return partsText(c.raw)
	}
	return ""
}

// partsText joins the text parts of an array of content parts.
func partsText(raw []byte) string {
	var parts []ContentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" && p.Type != "input_text" && p.Type != "output_text" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// Len returns a cheap measure of the content's size in bytes: the text's
// length, or the size of its JSON. An omitted content is not fetched: its
// size is what the header view said.
func (c Content) Len() int {
	switch {
	case c.hasText:
		return len(c.text)
	case c.omitted != "":
		return c.size
	case c.IsNull():
		return 0
	}
	return len(c.raw)
}

// MarshalJSON returns the content's JSON; a raw content is returned
// unchanged.
func (c Content) MarshalJSON() ([]byte, error) { return c.Raw(), nil }

// UnmarshalJSON keeps a copy of the JSON value. It accepts a string, an
// array, null, or the header view's {"omitted": "text"|"parts", "size": N}.
func (c *Content) UnmarshalJSON(b []byte) error {
	if len(b) == 0 {
		return errors.New("content: empty")
	}
	switch b[0] {
	case '"', '[', 'n':
	case '{':
		var o struct {
			Omitted string `json:"omitted"`
			Size    int    `json:"size"`
		}
		if err := json.Unmarshal(b, &o); err != nil || o.Omitted != OmittedText && o.Omitted != OmittedParts {
			return fmt.Errorf("content: want a string, an array of parts or null, got an object")
		}
		*c = Content{omitted: o.Omitted, size: o.Size, index: -1}
		return nil
	default:
		return fmt.Errorf("content: want a string, an array of parts or null, got %s", describeJSON(b))
	}
	*c = Content{raw: append(json.RawMessage(nil), b...)}
	return nil
}

// AppendOmitted appends the header view's JSON for a content of the given
// kind and size: {"omitted":"text","size":N}.
func AppendOmitted(dst []byte, kind string, size int) []byte {
	dst = append(dst, `{"omitted":"`...)
	dst = append(dst, kind...)
	dst = append(dst, `","size":`...)
	dst = strconv.AppendInt(dst, int64(size), 10)
	return append(dst, '}')
}

// encodeString returns s as a JSON string without HTML escaping (summaries
// hold <, > and & that should stay readable).
func encodeString(s string) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// ContentPart is one element of an array content.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

func describeJSON(b []byte) string {
	switch b[0] {
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// Item is one element of CompactResult.Messages: either a reference to an
// input message ({"ref": i}) or a new message.
type Item struct {
	// Ref is the index of the input message, when Message is nil.
	Ref int
	// Message is a new message, or nil for a ref.
	Message *Message
}

// Ref returns an item that keeps input message i byte for byte.
func Ref(i int) Item { return Item{Ref: i} }

// New returns an item holding a new message.
func New(m Message) Item { return Item{Message: &m} }

// IsRef reports whether the item refers to an input message.
func (it Item) IsRef() bool { return it.Message == nil }

// MarshalJSON encodes a ref as {"ref":i} and a message as itself.
func (it Item) MarshalJSON() ([]byte, error) {
	if it.Message == nil {
		return []byte(`{"ref":` + strconv.Itoa(it.Ref) + `}`), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(it.Message); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// UnmarshalJSON decodes either form. An object with both "ref" and "role"
// is an error.
func (it *Item) UnmarshalJSON(b []byte) error {
	var wire struct {
		Ref *int `json:"ref"`
		Message
		Role *string `json:"role"`
	}
	if err := json.Unmarshal(b, &wire); err != nil {
		return err
	}
	switch {
	case wire.Ref != nil && wire.Role != nil:
		return errors.New(`item has both "ref" and "role"`)
	case wire.Ref != nil:
		*it = Item{Ref: *wire.Ref}
	case wire.Role != nil:
		m := wire.Message
		m.Role = *wire.Role
		*it = Item{Message: &m}
	default:
		return errors.New(`item has neither "ref" nor "role"`)
	}
	return nil
}
