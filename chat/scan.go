package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/jsonscan"
)

// The parser: one pass over the caller's bytes with jsonscan, which
// validates them completely (syntax and UTF-8). Each message keeps its
// original bytes (Raw, a slice of the input) and gets its parsed form
// (Messages) from the same pass: roles and ids as strings, content as a
// view of the input (abi.StringContent), so nothing is decoded twice and
// a content without escapes is never copied.

// ScanMessages parses the array of messages at s (the next value) and
// leaves s after it. The conversation keeps slices of s's data, which must
// not change afterwards.
func ScanMessages(s *jsonscan.Scanner) (*Conversation, error) {
	c := &Conversation{openAI: true}
	if err := c.scanFrom(s, 0, true); err != nil {
		return nil, err
	}
	return c, nil
}

// scanFrom appends the messages of the array at s to c. With first set,
// s is before the array's '['; otherwise s is after message n-1 (at the
// ',' or ']' that follows it) and c holds n messages.
func (c *Conversation) scanFrom(s *jsonscan.Scanner, n int, first bool) error {
	data := s.Data()
	if first {
		if k := s.Peek(); k != jsonscan.Array {
			if k == jsonscan.Invalid {
				_, _, _, err := s.Skip()
				return syntaxError(data, err)
			}
			return fmt.Errorf("%w: \"messages\" must be an array of message objects, got %s", ErrMalformed, k)
		}
		s.BeginArray()
	}
	for i := n; ; i++ {
		more, err := s.NextElement(first)
		first = false
		if err != nil {
			return syntaxError(data, err)
		}
		if !more {
			return nil
		}
		if err := c.scanMessageAt(s, i); err != nil {
			return err
		}
	}
}

// scanMessageAt parses message i (the next value of s) and appends it.
func (c *Conversation) scanMessageAt(s *jsonscan.Scanner, i int) error {
	data := s.Data()
	if k := s.Peek(); k != jsonscan.Object {
		if k == jsonscan.Invalid {
			_, _, _, err := s.Skip()
			return syntaxError(data, err)
		}
		return fmt.Errorf("%w: message %d is not a JSON object (got %s)", ErrMalformed, i, k)
	}
	start := s.Pos()
	c.Messages = append(c.Messages, abi.Message{})
	if err := scanMessage(s, &c.Messages[len(c.Messages)-1]); err != nil {
		var se *jsonscan.Error
		if errors.As(err, &se) {
			return syntaxError(data, err)
		}
		return fmt.Errorf("%w: message %d: %v", ErrMalformed, i, err)
	}
	if err := checkMessage(i, &c.Messages[len(c.Messages)-1]); err != nil {
		return err
	}
	c.Raw = append(c.Raw, json.RawMessage(data[start:s.Pos():s.Pos()]))
	return nil
}

// Role names, so parsing a role allocates nothing.
var roles = []string{abi.RoleSystem, abi.RoleDeveloper, abi.RoleUser, abi.RoleAssistant, abi.RoleTool}

// scanMessage parses one message object. Fields the ABI does not know
// are validated and skipped (their bytes stay in Raw); a caller's
// "tokens" is ignored (the host counts).
func scanMessage(s *jsonscan.Scanner, m *abi.Message) error {
	s.BeginObject()
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
		known, err := ScanMessageField(s, jsonscan.Key(key, esc), m)
		if err == nil && !known {
			_, _, _, err = s.Skip()
		}
		if err != nil {
			return err
		}
	}
}

// ScanMessageField reads the value of a message's member key (its key and
// ':' already consumed) into m. For a key the ABI does not know it
// returns false and leaves the value unread.
func ScanMessageField(s *jsonscan.Scanner, key []byte, m *abi.Message) (known bool, err error) {
	switch string(key) {
	case "role":
		m.Role, err = s.ReadString("role", roles...)
	case "content":
		m.Content, err = scanContent(s)
	case "name":
		m.Name, err = s.ReadString("name")
	case "tool_call_id":
		m.ToolCallID, err = s.ReadString("tool_call_id")
	case "tool_calls":
		m.ToolCalls, err = scanToolCalls(s)
	default:
		return false, nil
	}
	return true, err
}

// scanContent reads a content: a string, an array of parts or null.
func scanContent(s *jsonscan.Scanner) (abi.Content, error) {
	switch s.Peek() {
	case jsonscan.String:
		raw, esc, err := s.String()
		if err != nil {
			return abi.Content{}, err
		}
		if esc {
			return abi.StringContent(raw, jsonscan.Unquote(raw)), nil // decoded once, here
		}
		return abi.StringContent(raw, unsafe.String(unsafe.SliceData(raw[1:]), len(raw)-2)), nil
	case jsonscan.Array:
		_, start, end, err := s.Skip()
		if err != nil {
			return abi.Content{}, err
		}
		return abi.RawContent(s.Data()[start:end:end]), nil
	case jsonscan.Null:
		_, err := s.Null()
		return abi.Content{}, err
	}
	return abi.Content{}, s.WrongType("content", "a string, an array of parts or null")
}

// scanToolCalls reads tool_calls: an array of {"id", "type", "function":
// {"name", "arguments"}} (null means none).
func scanToolCalls(s *jsonscan.Scanner) ([]abi.ToolCall, error) {
	switch s.Peek() {
	case jsonscan.Null:
		_, err := s.Null()
		return nil, err
	case jsonscan.Array:
	default:
		return nil, s.WrongType("tool_calls", "an array")
	}
	s.BeginArray()
	var calls []abi.ToolCall
	for first := true; ; first = false {
		more, err := s.NextElement(first)
		if err != nil {
			return nil, err
		}
		if !more {
			return calls, nil
		}
		if s.Peek() != jsonscan.Object {
			return nil, s.WrongType(fmt.Sprintf("tool_calls[%d]", len(calls)), "an object")
		}
		calls = append(calls, abi.ToolCall{})
		if err := scanToolCall(s, &calls[len(calls)-1]); err != nil {
			var te *jsonscan.TypeError
			if errors.As(err, &te) {
				te.Field = fmt.Sprintf("tool_calls[%d].%s", len(calls)-1, te.Field)
			}
			return nil, err
		}
	}
}

var toolTypes = []string{"function"}

func scanToolCall(s *jsonscan.Scanner, c *abi.ToolCall) error {
	s.BeginObject()
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
		switch string(jsonscan.Key(key, esc)) {
		case "id":
			c.ID, err = s.ReadString("id")
		case "type":
			c.Type, err = s.ReadString("type", toolTypes...)
		case "function":
			err = scanFunction(s, &c.Function)
		default:
			_, _, _, err = s.Skip()
		}
		if err != nil {
			return err
		}
	}
}

func scanFunction(s *jsonscan.Scanner, f *abi.FunctionCall) error {
	switch s.Peek() {
	case jsonscan.Null:
		_, err := s.Null()
		return err
	case jsonscan.Object:
	default:
		return s.WrongType("function", "an object")
	}
	s.BeginObject()
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
		switch string(jsonscan.Key(key, esc)) {
		case "name":
			f.Name, err = s.ReadString("function.name")
		case "arguments":
			f.Arguments, err = s.ReadString("function.arguments")
		default:
			_, _, _, err = s.Skip()
		}
		if err != nil {
			return err
		}
	}
}

// SyntaxError is input that is not valid JSON (or not valid UTF-8). It
// wraps ErrMalformed and the scanner's *jsonscan.Error, which has the
// byte offset.
type SyntaxError struct {
	Line, Column int
	Err          *jsonscan.Error
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%v: line %d, column %d: %s", ErrMalformed, e.Line, e.Column, e.Err.Msg)
}

// Unwrap returns ErrMalformed and the scanner's error.
func (e *SyntaxError) Unwrap() []error { return []error{ErrMalformed, e.Err} }

// syntaxError turns a scanner error into one that names the line and
// column.
func syntaxError(data []byte, err error) error {
	var se *jsonscan.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	line, col := position(data, int64(se.Offset))
	return &SyntaxError{Line: line, Column: col, Err: se}
}

func position(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	line = 1 + bytes.Count(data[:offset], []byte("\n"))
	col = int(offset) - bytes.LastIndexByte(data[:offset], '\n')
	return line, col
}
