package pdk

import (
	"encoding/binary"
	"encoding/json"
	"strconv"

	"github.com/compactd/compactd/abi"
)

// The result encoder. A Go guest runs encoding/json slowly: with the
// host's time limit on, wazero checks for cancellation at every Wasm loop
// header, and encoding/json's reflection and per-byte scanning cross many.
// Results are written here by hand instead: refs as {"ref":N}, strings with
// an escaper that skips eight safe bytes per step. Its output is the JSON
// encoding/json would produce (with SetEscapeHTML(false)); a test checks.

// StringContent returns a string content holding text and its JSON, made
// now. The result encoder copies that JSON as it is: a policy that returns
// the same text in many results (a memoized summary) keeps the Content and
// escapes the text once, not in every call.
func StringContent(text string) abi.Content {
	// Room for the quotes and an escape every eight bytes (a line break
	// in each short line): one allocation for most texts, where growing
	// from nothing took four.
	return abi.StringContent(appendString(make([]byte, 0, len(text)+len(text)/8+8), text), text)
}

// appendResult appends the JSON of res.
func appendResult(dst []byte, res *abi.CompactResult) ([]byte, error) {
	dst = append(dst, `{"messages":[`...)
	for i, it := range res.Messages {
		if i > 0 {
			dst = append(dst, ',')
		}
		if it.IsRef() {
			dst = append(dst, `{"ref":`...)
			dst = strconv.AppendInt(dst, int64(it.Ref), 10)
			dst = append(dst, '}')
			continue
		}
		dst = appendMessage(dst, it.Message)
	}
	dst = append(dst, `],"compacted":`...)
	dst = strconv.AppendBool(dst, res.Compacted)
	if res.Summary != "" {
		dst = append(dst, `,"summary":`...)
		dst = appendString(dst, res.Summary)
	}
	if res.EntriesSummarized != 0 {
		dst = append(dst, `,"entries_summarized":`...)
		dst = strconv.AppendInt(dst, int64(res.EntriesSummarized), 10)
	}
	if len(res.Rewritten) > 0 {
		dst = append(dst, `,"rewritten":[`...)
		for i, n := range res.Rewritten {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(n), 10)
		}
		dst = append(dst, ']')
	}
	if len(res.State) > 0 {
		if !json.Valid(res.State) {
			return nil, &abi.Error{Code: abi.CodeInternal, Message: "policy returned a state that is not valid JSON"}
		}
		dst = append(dst, `,"state":`...)
		dst = append(dst, res.State...)
	}
	if len(res.Warnings) > 0 {
		dst = append(dst, `,"warnings":[`...)
		for i, w := range res.Warnings {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, w)
		}
		dst = append(dst, ']')
	}
	if len(res.CacheBreakpoints) > 0 {
		dst = append(dst, `,"cache_breakpoints":[`...)
		for i, n := range res.CacheBreakpoints {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(n), 10)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

// appendMessage appends a new message's JSON (its known fields).
func appendMessage(dst []byte, m *abi.Message) []byte {
	dst = append(dst, `{"role":`...)
	dst = appendString(dst, m.Role)
	dst = append(dst, `,"content":`...)
	if raw, ok := m.Content.StringJSON(); ok {
		dst = append(dst, raw...)
	} else if m.Content.IsString() {
		dst = appendString(dst, m.Content.Text())
	} else {
		dst = append(dst, m.Content.Raw()...)
	}
	if m.Name != "" {
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, m.Name)
	}
	if len(m.ToolCalls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i, c := range m.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = appendString(dst, c.ID)
			dst = append(dst, `,"type":`...)
			dst = appendString(dst, c.Type)
			dst = append(dst, `,"function":{"name":`...)
			dst = appendString(dst, c.Function.Name)
			dst = append(dst, `,"arguments":`...)
			dst = appendString(dst, c.Function.Arguments)
			dst = append(dst, "}}"...)
		}
		dst = append(dst, ']')
	}
	if m.ToolCallID != "" {
		dst = append(dst, `,"tool_call_id":`...)
		dst = appendString(dst, m.ToolCallID)
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// without HTML escaping: ", \, control characters, invalid UTF-8 (as
// U+FFFD), and U+2028/U+2029.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Skip eight plain ASCII bytes at a time.
		if i+8 <= len(s) && safe8(binary.LittleEndian.Uint64([]byte(s[i:i+8]))) {
			i += 8
			continue
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < 0x80 {
			i++
			continue
		}
		if c < 0x80 {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := decodeRune(s[i:])
		switch {
		case r == 0xFFFD && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
		default:
			i += size
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// safe8 reports whether all eight bytes of w are printable ASCII other than
// '"' and '\\' (SWAR: no byte < 0x20, >= 0x80, == 0x22 or == 0x5c).
func safe8(w uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	hasLess := (w - lo*0x20) & ^w & hi
	hasQuote := hasZero(w ^ (lo * '"'))
	hasSlash := hasZero(w ^ (lo * '\\'))
	return (hasLess | hasQuote | hasSlash | w&hi) == 0
}

func hasZero(w uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	return (w - lo) & ^w & hi
}

// decodeRune is utf8.DecodeRuneInString, kept local so the encoder's hot
// path is visible in one place.
func decodeRune(s string) (rune, int) {
	c := s[0]
	var n int
	var r rune
	switch {
	case c&0xE0 == 0xC0:
		n, r = 2, rune(c&0x1F)
	case c&0xF0 == 0xE0:
		n, r = 3, rune(c&0x0F)
	case c&0xF8 == 0xF0:
		n, r = 4, rune(c&0x07)
	default:
		return 0xFFFD, 1
	}
	if len(s) < n {
		return 0xFFFD, 1
	}
	for k := 1; k < n; k++ {
		if s[k]&0xC0 != 0x80 {
			return 0xFFFD, 1
		}
		r = r<<6 | rune(s[k]&0x3F)
	}
	// Overlong encodings, surrogates and out-of-range runes are invalid.
	if n == 2 && r < 0x80 || n == 3 && r < 0x800 || n == 4 && (r < 0x10000 || r > 0x10FFFF) || r >= 0xD800 && r <= 0xDFFF {
		return 0xFFFD, 1
	}
	return r, n
}
