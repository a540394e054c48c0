package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The proxy reads a request body once, structurally: it finds the
// top-level fields it needs and the byte span of each message, and leaves
// everything else as the caller's bytes. It does not validate the JSON
// (the upstream does, and answers the caller as it would without
// compactd); what it cannot follow it forwards unchanged.

var errScan = errors.New("not a JSON object the proxy can read")

// field is one top-level member of an object: its key and the byte span
// [start, end) of its value.
type field struct {
	key        string
	start, end int
}

// objectFields returns the members of the JSON object b, in order.
func objectFields(b []byte) ([]field, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, fmt.Errorf("%w: the body is not a JSON object", errScan)
	}
	var fields []field
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return fields, trailing(b, i+1)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, fmt.Errorf("%w: want a key at byte %d", errScan, i)
		}
		kend, err := skipString(b, i)
		if err != nil {
			return nil, err
		}
		key := string(b[i+1 : kend-1])
		if bytes.IndexByte(b[i:kend], '\\') >= 0 {
			if err := json.Unmarshal(b[i:kend], &key); err != nil {
				return nil, fmt.Errorf("%w: key at byte %d: %v", errScan, i, err)
			}
		}
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return nil, fmt.Errorf("%w: want ':' at byte %d", errScan, i)
		}
		start := skipSpace(b, i+1)
		end, err := skipValue(b, start)
		if err != nil {
			return nil, err
		}
		fields = append(fields, field{key: key, start: start, end: end})
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, fmt.Errorf("%w: the object ends early", errScan)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return fields, trailing(b, i+1)
		default:
			return nil, fmt.Errorf("%w: want ',' or '}' at byte %d", errScan, i)
		}
	}
}

// arrayElements returns the elements of the JSON array b as subslices.
func arrayElements(b []byte) ([]json.RawMessage, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, fmt.Errorf("%w: want an array", errScan)
	}
	out := []json.RawMessage{}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return out, trailing(b, i+1)
	}
	for {
		end, err := skipValue(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, b[i:end:end])
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, fmt.Errorf("%w: the array ends early", errScan)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return out, trailing(b, i+1)
		default:
			return nil, fmt.Errorf("%w: want ',' or ']' at byte %d", errScan, i)
		}
	}
}

func trailing(b []byte, i int) error {
	if skipSpace(b, i) != len(b) {
		return fmt.Errorf("%w: data after the value", errScan)
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, fmt.Errorf("%w: unterminated string at byte %d", errScan, i)
		}
		q := j + k
		bs := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("%w: a value is missing", errScan)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("%w: unbalanced brackets from byte %d", errScan, i)
	default: // number, true, false, null
		j := i
		for j < len(b) && !isDelimiter(b[j]) {
			j++
		}
		if j == i {
			return 0, fmt.Errorf("%w: unexpected %q at byte %d", errScan, b[i], i)
		}
		return j, nil
	}
}

func isDelimiter(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', ',', '}', ']', ':':
		return true
	}
	return false
}

// splice returns b with [start, end) replaced by repl, in a new slice.
func splice(b []byte, start, end int, repl []byte) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(repl))
	out = append(out, b[:start]...)
	out = append(out, repl...)
	return append(out, b[end:]...)
}
