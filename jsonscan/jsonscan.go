// Package jsonscan is compactd's structural JSON scanner: one pass over a
// request body that validates it completely (RFC 8259 syntax, and UTF-8
// everywhere, which encoding/json does not check) and lets the caller
// walk its objects and arrays, taking the spans of the values it keeps
// instead of decoding them. Nothing is copied or allocated unless the
// caller asks for a decoded string.
//
// Why not encoding/json: decoding a conversation into Go values and
// re-encoding it was most of the daemon's time (RATIONALE.md, "Parse
// once"). The scanner reads string bodies eight bytes at a time and stops
// only at quotes, backslashes, control characters and non-ASCII bytes.
//
// A Scanner is not safe for concurrent use. The zero value scans nothing;
// use New.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Kind is the kind of a JSON value, from its first byte.
type Kind byte

// Kinds of values.
const (
	Invalid Kind = iota
	Null
	Bool
	Number
	String
	Array
	Object
)

func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "a boolean"
	case Number:
		return "a number"
	case String:
		return "a string"
	case Array:
		return "an array"
	case Object:
		return "an object"
	}
	return "invalid JSON"
}

// MaxDepth is the deepest nesting of arrays and objects accepted (as
// encoding/json).
const MaxDepth = 10000

// Error is a syntax error. Offset is the byte at which it was found.
type Error struct {
	Offset int
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("%s at byte %d", e.Msg, e.Offset) }

// Scanner walks one JSON text.
type Scanner struct {
	data []byte
	pos  int
}

// New returns a scanner over data.
func New(data []byte) *Scanner { return &Scanner{data: data} }

// Reset makes s scan data from the start.
func (s *Scanner) Reset(data []byte) { s.data, s.pos = data, 0 }

// Data returns the text being scanned.
func (s *Scanner) Data() []byte { return s.data }

// Pos returns the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// Seek moves to offset off. The caller must know that a value (or the
// separator after one) starts there, e.g. because an earlier scan of the
// same bytes ended there.
func (s *Scanner) Seek(off int) { s.pos = off }

func (s *Scanner) errorf(off int, format string, args ...any) error {
	return &Error{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// describe names the byte at off for an error message.
func (s *Scanner) describe(off int) string {
	if off >= len(s.data) {
		return "end of input"
	}
	c := s.data[off]
	if c < 0x20 || c >= 0x7f {
		return fmt.Sprintf("byte 0x%02x", c)
	}
	return strconv.QuoteRune(rune(c))
}

// skipSpace moves past JSON whitespace.
func (s *Scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// Peek skips whitespace and returns the kind of the next value without
// consuming it (Invalid at the end or before a byte no value starts with).
func (s *Scanner) Peek() Kind {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return Invalid
	}
	switch s.data[s.pos] {
	case '{':
		return Object
	case '[':
		return Array
	case '"':
		return String
	case 'n':
		return Null
	case 't', 'f':
		return Bool
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return Number
	}
	return Invalid
}

// End checks that only whitespace remains.
func (s *Scanner) End() error {
	s.skipSpace()
	if s.pos != len(s.data) {
		return s.errorf(s.pos, "invalid character %s after the top-level value", s.describe(s.pos))
	}
	return nil
}

// BeginObject consumes the '{' of an object.
func (s *Scanner) BeginObject() error { return s.begin('{', "an object") }

// BeginArray consumes the '[' of an array.
func (s *Scanner) BeginArray() error { return s.begin('[', "an array") }

func (s *Scanner) begin(c byte, what string) error {
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != c {
		return s.errorf(s.pos, "want %s, found %s", what, s.describe(s.pos))
	}
	s.pos++
	return nil
}

// NextMember moves to the next member of an object whose '{' was
// consumed: first is true for the first call. It returns the member's key
// (the raw bytes between the quotes; escaped reports a backslash in it)
// with the ':' consumed, so the value is next; or more=false after
// consuming the closing '}'.
func (s *Scanner) NextMember(first bool) (key []byte, escaped, more bool, err error) {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return nil, false, false, s.errorf(s.pos, "unexpected end of input in an object")
	}
	c := s.data[s.pos]
	if c == '}' {
		s.pos++
		return nil, false, false, nil
	}
	if !first {
		if c != ',' {
			return nil, false, false, s.errorf(s.pos, "invalid character %s after an object member (want ',' or '}')", s.describe(s.pos))
		}
		s.pos++
		s.skipSpace()
	}
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, false, false, s.errorf(s.pos, "invalid character %s looking for an object key", s.describe(s.pos))
	}
	start := s.pos
	end, esc, err := s.scanString(start)
	if err != nil {
		return nil, false, false, err
	}
	s.pos = end
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != ':' {
		return nil, false, false, s.errorf(s.pos, "invalid character %s after an object key (want ':')", s.describe(s.pos))
	}
	s.pos++
	return s.data[start+1 : end-1], esc, true, nil
}

// NextElement moves to the next element of an array whose '[' was
// consumed: first is true for the first call. It returns true with the
// element next, or false after consuming the closing ']'.
func (s *Scanner) NextElement(first bool) (bool, error) {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return false, s.errorf(s.pos, "unexpected end of input in an array")
	}
	c := s.data[s.pos]
	if c == ']' {
		s.pos++
		return false, nil
	}
	if !first {
		if c != ',' {
			return false, s.errorf(s.pos, "invalid character %s after an array element (want ',' or ']')", s.describe(s.pos))
		}
		s.pos++
	}
	return true, nil
}

// String consumes a string and returns its raw bytes, quotes included;
// escaped reports whether it holds a backslash escape (if not, the bytes
// between the quotes are the text itself).
func (s *Scanner) String() (raw []byte, escaped bool, err error) {
	s.skipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, false, s.errorf(s.pos, "want a string, found %s", s.describe(s.pos))
	}
	start := s.pos
	end, esc, err := s.scanString(start)
	if err != nil {
		return nil, false, err
	}
	s.pos = end
	return s.data[start:end], esc, nil
}

// Text consumes a string and returns its decoded text. A string without
// escapes costs one copy.
func (s *Scanner) Text() (string, error) {
	raw, esc, err := s.String()
	if err != nil {
		return "", err
	}
	if !esc {
		return string(raw[1 : len(raw)-1]), nil
	}
	return Unquote(raw), nil
}

// Skip consumes one value of any kind, validating it, and returns its
// kind and span [start, end).
func (s *Scanner) Skip() (kind Kind, start, end int, err error) {
	kind = s.Peek()
	start = s.pos
	switch kind {
	case String:
		end, _, err = s.scanString(start)
	case Number:
		end, err = s.scanNumber(start)
	case Null:
		end, err = s.scanLiteral(start, "null")
	case Bool:
		if s.data[start] == 't' {
			end, err = s.scanLiteral(start, "true")
		} else {
			end, err = s.scanLiteral(start, "false")
		}
	case Array, Object:
		end, err = s.scanContainer(start)
	default:
		return Invalid, start, start, s.errorf(start, "invalid character %s looking for the beginning of a value", s.describe(start))
	}
	if err != nil {
		return Invalid, start, start, err
	}
	s.pos = end
	return kind, start, end, nil
}

// Number consumes a number and returns its raw bytes.
func (s *Scanner) Number() ([]byte, error) {
	if s.Peek() != Number {
		return nil, s.errorf(s.pos, "want a number, found %s", s.describe(s.pos))
	}
	start := s.pos
	end, err := s.scanNumber(start)
	if err != nil {
		return nil, err
	}
	s.pos = end
	return s.data[start:end], nil
}

// Null consumes a null if one is next and reports whether it did.
func (s *Scanner) Null() (bool, error) {
	if s.Peek() != Null {
		return false, nil
	}
	end, err := s.scanLiteral(s.pos, "null")
	if err != nil {
		return false, err
	}
	s.pos = end
	return true, nil
}

func (s *Scanner) scanLiteral(start int, lit string) (int, error) {
	end := start + len(lit)
	if end > len(s.data) || string(s.data[start:end]) != lit {
		for i := 0; i < len(lit); i++ {
			if start+i >= len(s.data) || s.data[start+i] != lit[i] {
				return 0, s.errorf(start+i, "invalid character %s in literal %s", s.describe(start+i), lit)
			}
		}
	}
	return end, nil
}

// scanNumber returns the end of the number at start (RFC 8259 grammar).
func (s *Scanner) scanNumber(start int) (int, error) {
	d, i := s.data, start
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return 0, s.errorf(i, "invalid character %s in a number", s.describe(i))
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return 0, s.errorf(i, "invalid character %s after a decimal point", s.describe(i))
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return 0, s.errorf(i, "invalid character %s in an exponent", s.describe(i))
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	return i, nil
}

// scanString returns the end (after the closing quote) of the string
// whose opening quote is at start, and whether it holds an escape. It
// rejects control characters, bad escapes and invalid UTF-8.
func (s *Scanner) scanString(start int) (end int, escaped bool, err error) {
	d := s.data
	i := start + 1
	for {
		// Eight plain bytes at a time (printable ASCII other than '"'
		// and '\\'), then straight to the first byte that is not.
		for i+8 <= len(d) {
			if m := special8(binary.LittleEndian.Uint64(d[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(d) {
			return 0, false, s.errorf(start, "unterminated string")
		}
		c := d[i]
		switch {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 < len(d) && (d[i+1] == 'n' || d[i+1] == '"' || d[i+1] == '\\' || d[i+1] == 't') {
				i += 2 // the common escapes, inline
				continue
			}
			n, err := s.escapeLen(i)
			if err != nil {
				return 0, false, err
			}
			i += n
		case c < 0x20:
			return 0, false, s.errorf(i, "invalid control character 0x%02x in a string (escape it)", c)
		case c < 0x80:
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, false, s.errorf(i, "invalid UTF-8 in a string")
			}
			i += size
		}
	}
}

// escapeLen validates the escape at i (a backslash) and returns its
// length.
func (s *Scanner) escapeLen(i int) (int, error) {
	d := s.data
	if i+1 >= len(d) {
		return 0, s.errorf(i, "unterminated string")
	}
	switch d[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, nil
	case 'u':
		if i+6 > len(d) {
			return 0, s.errorf(i, "unterminated \\u escape")
		}
		for k := i + 2; k < i+6; k++ {
			if hexVal(d[k]) < 0 {
				return 0, s.errorf(k, "invalid character %s in a \\u escape", s.describe(k))
			}
		}
		return 6, nil
	}
	return 0, s.errorf(i+1, "invalid escape %s in a string", s.describe(i+1))
}

// scanContainer validates the array or object at start and returns its
// end. It keeps its own stack, so deep nesting cannot overflow Go's.
func (s *Scanner) scanContainer(start int) (int, error) {
	d := s.data
	var stackBuf [32]byte
	stack := stackBuf[:0] // '{' or '['
	i := start
	// state: what the next token may be.
	const (
		wantValue      = iota // a value (after '[' also ']')
		wantKey               // a key (after '{' also '}')
		wantColon             // ':' after a key
		wantSeparator         // ',' or the closing bracket
		wantFirstValue        // a value or ']'
		wantFirstKey          // a key or '}'
	)
	state := wantValue
	for {
		// Skip whitespace.
		for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
			i++
		}
		if i >= len(d) {
			return 0, s.errorf(i, "unexpected end of input")
		}
		c := d[i]
		switch state {
		case wantFirstKey, wantKey:
			if c == '}' && state == wantFirstKey {
				stack = stack[:len(stack)-1]
				i++
				state = wantSeparator
				break
			}
			if c != '"' {
				return 0, s.errorf(i, "invalid character %s looking for an object key", s.describe(i))
			}
			end, _, err := s.scanString(i)
			if err != nil {
				return 0, err
			}
			i = end
			state = wantColon
		case wantColon:
			if c != ':' {
				return 0, s.errorf(i, "invalid character %s after an object key (want ':')", s.describe(i))
			}
			i++
			state = wantValue
		case wantSeparator:
			top := stack[len(stack)-1]
			switch {
			case c == ',' && top == '{':
				i++
				state = wantKey
			case c == ',':
				i++
				state = wantValue
			case c == '}' && top == '{', c == ']' && top == '[':
				stack = stack[:len(stack)-1]
				i++
			default:
				return 0, s.errorf(i, "invalid character %s after a value in %s", s.describe(i), containerName(top))
			}
		case wantFirstValue, wantValue:
			if c == ']' && state == wantFirstValue {
				stack = stack[:len(stack)-1]
				i++
				state = wantSeparator
				break
			}
			switch {
			case c == '{' || c == '[':
				if len(stack) >= MaxDepth {
					return 0, s.errorf(i, "nested deeper than %d levels", MaxDepth)
				}
				stack = append(stack, c)
				i++
				if c == '{' {
					state = wantFirstKey
				} else {
					state = wantFirstValue
				}
				continue
			case c == '"':
				end, _, err := s.scanString(i)
				if err != nil {
					return 0, err
				}
				i = end
			case c == '-' || c >= '0' && c <= '9':
				end, err := s.scanNumber(i)
				if err != nil {
					return 0, err
				}
				i = end
			case c == 'n':
				end, err := s.scanLiteral(i, "null")
				if err != nil {
					return 0, err
				}
				i = end
			case c == 't':
				end, err := s.scanLiteral(i, "true")
				if err != nil {
					return 0, err
				}
				i = end
			case c == 'f':
				end, err := s.scanLiteral(i, "false")
				if err != nil {
					return 0, err
				}
				i = end
			default:
				return 0, s.errorf(i, "invalid character %s looking for the beginning of a value", s.describe(i))
			}
			state = wantSeparator
		}
		if state == wantSeparator && len(stack) == 0 {
			return i, nil
		}
	}
}

func containerName(c byte) string {
	if c == '{' {
		return "an object (want ',' or '}')"
	}
	return "an array (want ',' or ']')"
}

// special8 returns a mask with the high bit set in (at least) the first
// byte of w, in memory order, that is not printable ASCII other than '"'
// and '\\' (< 0x20, >= 0x80, '"' or '\\'); 0 when all eight are plain.
// Bytes after the first flagged one may be flagged wrongly (a borrow), so
// only the lowest flag is meaningful.
func special8(w uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	less := (w - lo*0x20) & ^w & hi
	quote := hasZero(w ^ (lo * '"'))
	slash := hasZero(w ^ (lo * '\\'))
	return less | quote | slash | w&hi
}

func hasZero(w uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	return (w - lo) & ^w & hi
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// Unquote decodes a string the scanner accepted (raw includes the
// quotes). Escaped surrogates that do not form a pair become U+FFFD, as
// encoding/json decodes them.
func Unquote(raw []byte) string {
	b := AppendUnquoted(make([]byte, 0, len(raw)-2), raw)
	// b is this call's own and never changes: the string views it
	// rather than copying it again.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// AppendUnquoted appends the decoded text of raw (a string the scanner
// accepted, quotes included) to dst.
func AppendUnquoted(dst, raw []byte) []byte {
	b := raw[1 : len(raw)-1]
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\\')
		if i < 0 {
			dst = append(dst, b...)
			break
		}
		dst = append(dst, b[:i]...)
		b = b[i:] // at a backslash
		switch b[1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := rune(hex4(b[2:6]))
			b = b[6:]
			if utf16.IsSurrogate(r) {
				if len(b) >= 6 && b[0] == '\\' && b[1] == 'u' {
					if r2 := utf16.DecodeRune(r, rune(hex4(b[2:6]))); r2 != utf8.RuneError {
						dst = utf8.AppendRune(dst, r2)
						b = b[6:]
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, b[1])
		}
		b = b[2:]
	}
	return dst
}

func hex4(b []byte) int {
	return hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3])
}

// Valid reports whether data is one valid JSON value (with optional
// surrounding whitespace) in valid UTF-8.
func Valid(data []byte) bool {
	s := Scanner{data: data}
	if _, _, _, err := s.Skip(); err != nil {
		return false
	}
	return s.End() == nil
}

// TypeError is a value of the wrong JSON type for a field.
type TypeError struct {
	Field string // the field's name, as the caller gave it
	Want  string // "a string", "an integer", ...
	Got   string // the JSON it found: "a number", "the number 1.5", ...
}

func (e *TypeError) Error() string { return fmt.Sprintf("%s: want %s, got %s", e.Field, e.Want, e.Got) }

// WrongType consumes the next value and returns a *TypeError for it (or
// the syntax error that stopped it).
func (s *Scanner) WrongType(field, want string) error {
	kind, _, _, err := s.Skip()
	if err != nil {
		return err
	}
	return &TypeError{Field: field, Want: want, Got: kind.String()}
}

// ReadString consumes a string (null reads as "") and returns its text; a
// text equal to one of known is returned as that string, without
// allocating.
func (s *Scanner) ReadString(field string, known ...string) (string, error) {
	switch s.Peek() {
	case String:
		raw, esc, err := s.String()
		if err != nil {
			return "", err
		}
		if esc {
			return Unquote(raw), nil
		}
		text := raw[1 : len(raw)-1]
		for _, k := range known {
			if string(text) == k {
				return k, nil
			}
		}
		return string(text), nil
	case Null:
		_, err := s.Null()
		return "", err
	}
	return "", s.WrongType(field, "a string")
}

// ReadInt consumes an integer that fits an int (null reads as 0).
func (s *Scanner) ReadInt(field string) (int, error) {
	switch s.Peek() {
	case Number:
		raw, err := s.Number()
		if err != nil {
			return 0, err
		}
		n, err := strconv.Atoi(string(raw))
		if err != nil {
			return 0, &TypeError{Field: field, Want: "an integer", Got: "the number " + string(raw)}
		}
		return n, nil
	case Null:
		_, err := s.Null()
		return 0, err
	}
	return 0, s.WrongType(field, "an integer")
}

// ReadBool consumes true or false (null reads as false).
func (s *Scanner) ReadBool(field string) (bool, error) {
	switch s.Peek() {
	case Bool:
		v := s.data[s.pos] == 't'
		_, _, _, err := s.Skip()
		return v, err
	case Null:
		_, err := s.Null()
		return false, err
	}
	return false, s.WrongType(field, "a boolean")
}

// ReadStrings consumes an array of strings (null reads as nil).
func (s *Scanner) ReadStrings(field string) ([]string, error) {
	var out []string
	err := s.readArray(field, "an array of strings", func() error {
		v, err := s.ReadString(field)
		out = append(out, v)
		return err
	})
	return out, err
}

// ReadInts consumes an array of integers (null reads as nil).
func (s *Scanner) ReadInts(field string) ([]int, error) {
	var out []int
	err := s.readArray(field, "an array of integers", func() error {
		v, err := s.ReadInt(field)
		out = append(out, v)
		return err
	})
	return out, err
}

func (s *Scanner) readArray(field, want string, elem func() error) error {
	switch s.Peek() {
	case Null:
		_, err := s.Null()
		return err
	case Array:
	default:
		return s.WrongType(field, want)
	}
	s.BeginArray()
	for first := true; ; first = false {
		more, err := s.NextElement(first)
		if err != nil || !more {
			return err
		}
		if err := elem(); err != nil {
			return err
		}
	}
}

// Key returns an object key that NextMember returned, decoded if it was
// escaped. Without an escape it is key itself (no copy), so
// `switch string(jsonscan.Key(k, esc))` allocates nothing.
func Key(key []byte, escaped bool) []byte {
	if !escaped {
		return key
	}
	quoted := make([]byte, 0, len(key)+2)
	quoted = append(append(append(quoted, '"'), key...), '"')
	return AppendUnquoted(nil, quoted)
}
