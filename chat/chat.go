// Package chat reads a caller's conversation in one pass (package jsonscan):
// it keeps each message's original JSON bytes (so preserved messages go
// back byte for byte) next to its parsed form (so the host can count,
// validate and describe it), the parsed form viewing the same bytes rather
// than copying them.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/jsonscan"
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

	// counted leading messages have Tokens counted by the tokenizer named
	// countedBy (see Counted).
	counted   int
	countedBy string
	// memo is set when a Memory parsed the conversation (see Remember).
	memo *memo
	// openAI reports that every message's content is in OpenAI's format
	// (FromRaw checked it; see OpenAIContent).
	openAI bool
}

// Counted returns how many leading messages already have their Tokens
// counted by the tokenizer named tokName (a Memory fills them in for the
// messages it remembered).
func (c *Conversation) Counted(tokName string) int {
	if tokName == "" || c.countedBy != tokName {
		return 0
	}
	return c.counted
}

// SetCounted records that every message's Tokens is counted by the
// tokenizer named tokName.
func (c *Conversation) SetCounted(tokName string) { c.counted, c.countedBy = len(c.Messages), tokName }

// OpenAIContent reports whether the conversation is in OpenAI's message
// format: it was parsed by FromRaw (or Parse), which checked every
// message's content parts, or derived from one with WithMessages. A
// conversation converted from another format (Anthropic's) is not: its
// chat form stands for content blocks OpenAI's format does not have.
func (c *Conversation) OpenAIContent() bool { return c.openAI }

// Parse reads a conversation from a JSON array of messages, or from an
// object with a "messages" array (other keys are kept and written back by
// Encode). It does not validate the structure; call Validate. The
// conversation keeps slices of data (nothing is copied): data must not
// change afterwards.
func Parse(data []byte) (*Conversation, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrMalformed)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: the input is not UTF-8 (JSON text is UTF-8, RFC 8259)", ErrMalformed)
	}
	s := jsonscan.New(data)
	switch data[0] {
	case '[':
		c, err := ScanMessages(s)
		if err != nil {
			return nil, err
		}
		if err := s.End(); err != nil {
			return nil, syntaxError(data, err)
		}
		return c, nil
	case '{':
		return parseEnvelope(s)
	default:
		if _, _, _, err := s.Skip(); err != nil {
			return nil, syntaxError(data, err)
		}
		if err := s.End(); err != nil {
			return nil, syntaxError(data, err)
		}
		return nil, fmt.Errorf("%w: want a JSON array of messages or an object with \"messages\"", ErrMalformed)
	}
}

func parseEnvelope(s *jsonscan.Scanner) (*Conversation, error) {
	data := s.Data()
	var c *Conversation
	s.BeginObject()
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil {
			return nil, syntaxError(data, err)
		}
		if !more {
			break
		}
		if esc || string(key) != "messages" {
			if _, _, _, err := s.Skip(); err != nil {
				return nil, syntaxError(data, err)
			}
			continue
		}
		if c != nil {
			return nil, fmt.Errorf("%w: \"messages\" appears twice", ErrMalformed)
		}
		if k := s.Peek(); k != jsonscan.Array && k != jsonscan.Invalid {
			return nil, fmt.Errorf("%w: \"messages\" must be an array", ErrMalformed)
		}
		start := s.Pos()
		if c, err = ScanMessages(s); err != nil {
			return nil, err
		}
		c.msgStart, c.msgEnd = start, s.Pos()
	}
	if err := s.End(); err != nil {
		return nil, syntaxError(data, err)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: object has no \"messages\" array", ErrMalformed)
	}
	c.envelope = data
	return c, nil
}

// FromRaw parses each raw message and checks that its content is in
// OpenAI's format (a string, null, or content parts the role may carry):
// messages in Anthropic's format (tool_use and tool_result blocks, say) are
// an error wrapping ErrUnsupportedFormat. The slices are kept, not copied.
func FromRaw(raw []json.RawMessage) (*Conversation, error) {
	c := &Conversation{Raw: raw, Messages: make([]abi.Message, len(raw))}
	var s jsonscan.Scanner
	for i, r := range raw {
		s.Reset(r)
		if k := s.Peek(); k != jsonscan.Object {
			return nil, fmt.Errorf("%w: message %d is not a JSON object", ErrMalformed, i)
		}
		err := scanMessage(&s, &c.Messages[i])
		if err == nil {
			err = s.End()
		}
		if err != nil {
			return nil, fmt.Errorf("%w: message %d: %v", ErrMalformed, i, err)
		}
		if err := checkMessage(i, &c.Messages[i]); err != nil {
			return nil, err
		}
		c.Messages[i].Tokens = 0 // a caller's "tokens" field is not trusted
	}
	c.openAI = true
	return c, nil
}

// Validate checks the conversation with convo.Check. Its error wraps
// ErrInvalid and the *convo.StructureError.
func (c *Conversation) Validate() error {
	if err := convo.Check(c.Messages); err != nil {
		return invalidError{err}
	}
	return nil
}

// invalidError is ErrInvalid with convo's reason. convo's errors already
// say "invalid conversation: …", so it says so once.
type invalidError struct{ err error }

func (e invalidError) Error() string {
	if msg := e.err.Error(); strings.HasPrefix(msg, ErrInvalid.Error()+":") {
		return msg
	}
	return ErrInvalid.Error() + ": " + e.err.Error()
}

func (e invalidError) Unwrap() []error { return []error{ErrInvalid, e.err} }

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
