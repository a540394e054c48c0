package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// CacheControl is the marker MarkCacheBreakpoint adds: Anthropic's prompt
// cache breakpoint with the default (5-minute) lifetime.
const CacheControl = `"cache_control":{"type":"ephemeral"}`

// MarkCacheBreakpoint returns raw, one message's JSON, with a prompt-cache
// breakpoint: the member "cache_control":{"type":"ephemeral"} added as the
// last member of the message's last content block when its content is a
// non-empty array whose last element is an object (Anthropic content
// blocks, OpenAI content parts), else as the last member of the message
// object itself. Nothing else changes: the bytes before and after the
// insertion are raw's. A message (or last block) that already carries a
// cache_control member is returned unchanged, so the caller's own
// breakpoints win. raw is not modified.
func MarkCacheBreakpoint(raw json.RawMessage) (json.RawMessage, error) {
	members, err := objectMembers(raw, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: marking a cache breakpoint: %v", ErrMalformed, err)
	}
	target := members
	for _, m := range members.list {
		if m.key == "content" && len(m.value) > 0 && m.value[0] == '[' {
			last, ok, err := lastArrayElement(raw, m.start, m.value)
			if err != nil {
				return nil, fmt.Errorf("%w: marking a cache breakpoint: %v", ErrMalformed, err)
			}
			if ok && raw[last.start] == '{' {
				block, err := objectMembers(raw[:last.end], last.start)
				if err != nil {
					return nil, fmt.Errorf("%w: marking a cache breakpoint: %v", ErrMalformed, err)
				}
				target = block
			}
		}
	}
	if target.has("cache_control") {
		return raw, nil
	}
	out := make([]byte, 0, len(raw)+len(CacheControl)+1)
	out = append(out, raw[:target.insertAt]...)
	if len(target.list) > 0 {
		out = append(out, ',')
	}
	out = append(out, CacheControl...)
	return append(out, raw[target.insertAt:]...), nil
}

// member is one member of a JSON object: its key and the byte span of its
// value within the scanned buffer.
type member struct {
	key        string
	value      []byte
	start, end int
}

// members is a JSON object's members and where a new last member goes:
// right after the last member's value, or right after the opening brace.
type members struct {
	list     []member
	insertAt int
}

func (m members) has(key string) bool {
	return slices.ContainsFunc(m.list, func(x member) bool { return x.key == key })
}

// objectMembers scans the JSON object that starts at buf[from] (after
// optional white space) and ends at the end of buf (after optional white
// space).
func objectMembers(buf []byte, from int) (members, error) {
	var out members
	dec := json.NewDecoder(bytes.NewReader(buf[from:]))
	tok, err := dec.Token()
	if err != nil {
		return out, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return out, errors.New("not a JSON object")
	}
	out.insertAt = from + int(dec.InputOffset())
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return out, err
		}
		end := from + int(dec.InputOffset())
		out.list = append(out.list, member{key: key, value: v, start: end - len(v), end: end})
		out.insertAt = end
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return out, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return out, errors.New("data after the object")
	}
	return out, nil
}

// lastArrayElement returns the span of the last element of the array value
// that starts at buf[start]; ok is false for an empty array.
func lastArrayElement(buf []byte, start int, value []byte) (last member, ok bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(value))
	if _, err := dec.Token(); err != nil { // the opening bracket
		return last, false, err
	}
	for dec.More() {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return last, false, err
		}
		end := start + int(dec.InputOffset())
		last, ok = member{value: buf[end-len(v) : end], start: end - len(v), end: end}, true
	}
	return last, ok, nil
}

// WithCacheBreakpoints returns a conversation in the same envelope whose
// messages at the indices marks carry a cache breakpoint (see
// MarkCacheBreakpoint); the other messages are c's, byte for byte. c is
// not modified. An index out of range is an error.
func (c *Conversation) WithCacheBreakpoints(marks []int) (*Conversation, error) {
	if len(marks) == 0 {
		return c, nil
	}
	raw := slices.Clone(c.Raw)
	for _, i := range marks {
		if i < 0 || i >= len(raw) {
			return nil, fmt.Errorf("cache breakpoint %d: the conversation has %d messages", i, len(raw))
		}
		b, err := MarkCacheBreakpoint(c.Raw[i])
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		raw[i] = b
	}
	return c.WithMessages(raw, c.Messages), nil
}
