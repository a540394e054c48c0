// Package chat reads a caller's conversation: it keeps each message's
// original JSON bytes (so preserved messages go back byte for byte) next to
// its parsed form (so the host can count, validate and describe it).
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
)

// Errors Parse returns, wrapped with detail. Test with errors.Is.
var (
	// ErrMalformed means the input is not JSON, or not the expected shape.
	ErrMalformed = errors.New("malformed conversation JSON")
	// ErrInvalid means the JSON is fine but the conversation breaks a rule
	// of convo.Check (the error also wraps a *convo.StructureError).
	ErrInvalid = errors.New("invalid conversation")
)

// Conversation is a list of chat messages with their original bytes.
// Raw[i] and Messages[i] describe the same message. A Conversation is not
// safe for concurrent mutation; the host only reads it during a call.
type Conversation struct {
	Raw      []json.RawMessage
	Messages []abi.Message

	// envelope is the caller's JSON object around the messages array when
	// the input was {"messages": [...], ...}; nil for a bare array.
	envelope []byte
	// msgStart and msgEnd are the byte range of the array in envelope.
	msgStart, msgEnd int
	// openAI reports that every message's content is in OpenAI's format
	// (FromRaw checked it; see OpenAIContent).
	openAI bool
}

// OpenAIContent reports whether the conversation is in OpenAI's message
// format: it was parsed by FromRaw (or Parse), which checked every
// message's content parts, or derived from one with WithMessages. A
// conversation converted from another format (Anthropic's) is not: its
// chat form stands for content blocks OpenAI's format does not have.
func (c *Conversation) OpenAIContent() bool { return c.openAI }

// Parse reads a conversation from a JSON array of messages, or from an
// object with a "messages" array (other keys are kept and written back by
// Encode). It does not validate the structure; call Validate.
func Parse(data []byte) (*Conversation, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrMalformed)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: the input is not UTF-8 (JSON text is UTF-8, RFC 8259)", ErrMalformed)
	}
	switch data[0] {
	case '[':
		var raw []json.RawMessage
		if err := json.Unmarshal(data, &raw); err != nil {
			return nil, syntaxError(data, err)
		}
		return FromRaw(raw)
	case '{':
		return parseEnvelope(data)
	default:
		if !json.Valid(data) {
			return nil, syntaxError(data, json.Unmarshal(data, new(any)))
		}
		return nil, fmt.Errorf("%w: want a JSON array of messages or an object with \"messages\"", ErrMalformed)
	}
}

func parseEnvelope(data []byte) (*Conversation, error) {
	if !json.Valid(data) {
		return nil, syntaxError(data, json.Unmarshal(data, new(any)))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // the opening brace
		return nil, syntaxError(data, err)
	}
	var c *Conversation
	start, end := 0, 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(data, err)
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, syntaxError(data, err)
		}
		if key != "messages" {
			continue
		}
		if c != nil {
			return nil, fmt.Errorf("%w: \"messages\" appears twice", ErrMalformed)
		}
		if len(value) == 0 || value[0] != '[' {
			return nil, fmt.Errorf("%w: \"messages\" must be an array", ErrMalformed)
		}
		var raw []json.RawMessage
		if err := json.Unmarshal(value, &raw); err != nil {
			return nil, syntaxError(value, err)
		}
		if c, err = FromRaw(raw); err != nil {
			return nil, err
		}
		end = int(dec.InputOffset())
		start = end - len(value)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: object has no \"messages\" array", ErrMalformed)
	}
	c.envelope, c.msgStart, c.msgEnd = data, start, end
	return c, nil
}

// FromRaw parses each raw message and checks that its content is in
// OpenAI's format (a string, null, or content parts the role may carry).
// The slices are kept, not copied.
func FromRaw(raw []json.RawMessage) (*Conversation, error) {
	c := &Conversation{Raw: raw, Messages: make([]abi.Message, len(raw))}
	for i, r := range raw {
		if len(r) == 0 || r[0] != '{' {
			return nil, fmt.Errorf("%w: message %d is not a JSON object", ErrMalformed, i)
		}
		if err := json.Unmarshal(r, &c.Messages[i]); err != nil {
			return nil, fmt.Errorf("%w: message %d: %v", ErrMalformed, i, err)
		}
		if err := CheckContent(c.Messages[i].Role, c.Messages[i].Content); err != nil {
			return nil, fmt.Errorf("%w: message %d (%s): %v", ErrMalformed, i, c.Messages[i].Role, err)
		}
		c.Messages[i].Tokens = 0 // a caller's "tokens" field is not trusted
	}
	c.openAI = true
	return c, nil
}

// Validate checks the conversation with convo.Check.
func (c *Conversation) Validate() error {
	if err := convo.Check(c.Messages); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Len returns the number of messages.
func (c *Conversation) Len() int { return len(c.Raw) }

// TotalTokens returns the sum of the messages' Tokens fields.
func (c *Conversation) TotalTokens() int {
	n := 0
	for i := range c.Messages {
		n += c.Messages[i].Tokens
	}
	return n
}

// WithMessages returns a conversation with other messages in the same
// envelope (used for results: the caller's other keys are kept).
func (c *Conversation) WithMessages(raw []json.RawMessage, msgs []abi.Message) *Conversation {
	return &Conversation{Raw: raw, Messages: msgs, envelope: c.envelope, msgStart: c.msgStart, msgEnd: c.msgEnd, openAI: c.openAI}
}

// WriteMessages writes the messages as a JSON array of their raw bytes.
func (c *Conversation) WriteMessages(w io.Writer) error {
	var buf bytes.Buffer
	c.appendMessages(&buf)
	_, err := w.Write(buf.Bytes())
	return err
}

// MessagesJSON returns the messages as a JSON array of their raw bytes.
func (c *Conversation) MessagesJSON() []byte {
	var buf bytes.Buffer
	c.appendMessages(&buf)
	return buf.Bytes()
}

func (c *Conversation) appendMessages(buf *bytes.Buffer) {
	size := 2
	for _, r := range c.Raw {
		size += len(r) + 1
	}
	buf.Grow(size)
	buf.WriteByte('[')
	for i, r := range c.Raw {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(r)
	}
	buf.WriteByte(']')
}

// Encode returns the conversation in the shape it was read: a bare array,
// or the caller's object with its "messages" array replaced.
func (c *Conversation) Encode() []byte {
	if c.envelope == nil {
		return c.MessagesJSON()
	}
	var buf bytes.Buffer
	buf.Write(c.envelope[:c.msgStart])
	c.appendMessages(&buf)
	buf.Write(c.envelope[c.msgEnd:])
	return buf.Bytes()
}

// syntaxError turns a JSON error into one that names the line and column.
func syntaxError(data []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line, col := position(data, se.Offset)
		return fmt.Errorf("%w: line %d, column %d: %v", ErrMalformed, line, col, se)
	case errors.As(err, &te):
		line, col := position(data, te.Offset)
		return fmt.Errorf("%w: line %d, column %d: %v", ErrMalformed, line, col, te)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: unexpected end of input", ErrMalformed)
	default:
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
}

func position(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	line = 1 + bytes.Count(data[:offset], []byte("\n"))
	col = int(offset) - bytes.LastIndexByte(data[:offset], '\n')
	return line, col
}
