package host

import (
	"encoding/json"
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/jsonscan"
)

// parseResult reads a plugin's CompactResult JSON in one pass
// (package jsonscan): a result that keeps most of a long conversation is
// mostly {"ref":i} items, which encoding/json decoded one reflective
// Unmarshal at a time. It accepts what the ABI describes (abi/README.md,
// "Results and refs"): unknown fields are ignored, null reads as absent,
// an item with both "ref" and "role" (or neither) is an error. The result
// keeps slices of out (new messages' contents, state): out must not
// change while it is in use.
func parseResult(out []byte) (*abi.CompactResult, error) {
	s := jsonscan.New(out)
	if s.Peek() != jsonscan.Object {
		if _, _, _, err := s.Skip(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("want a JSON object, got %s", s.Data()[:min(len(out), 20)])
	}
	var res abi.CompactResult
	s.BeginObject()
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		switch string(jsonscan.Key(key, esc)) {
		case "messages":
			res.Messages, err = parseItems(s)
		case "compacted":
			res.Compacted, err = s.ReadBool("compacted")
		case "summary":
			res.Summary, err = s.ReadString("summary")
		case "entries_summarized":
			res.EntriesSummarized, err = s.ReadInt("entries_summarized")
		case "rewritten":
			res.Rewritten, err = s.ReadInts("rewritten")
		case "warnings":
			res.Warnings, err = s.ReadStrings("warnings")
		case "cache_breakpoints":
			res.CacheBreakpoints, err = s.ReadInts("cache_breakpoints")
		case "state":
			var start, end int
			if _, start, end, err = s.Skip(); err == nil {
				res.State = json.RawMessage(out[start:end:end])
			}
		default:
			_, _, _, err = s.Skip()
		}
		if err != nil {
			return nil, err
		}
	}
	if err := s.End(); err != nil {
		return nil, err
	}
	return &res, nil
}

// parseItems reads the messages array of a result.
func parseItems(s *jsonscan.Scanner) ([]abi.Item, error) {
	switch s.Peek() {
	case jsonscan.Null:
		_, err := s.Null()
		return nil, err
	case jsonscan.Array:
	default:
		return nil, s.WrongType("messages", "an array")
	}
	s.BeginArray()
	var items []abi.Item
	for first := true; ; first = false {
		more, err := s.NextElement(first)
		if err != nil {
			return nil, err
		}
		if !more {
			return items, nil
		}
		it, err := parseItem(s)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", len(items), err)
		}
		items = append(items, it)
	}
}

// parseItem reads {"ref": i} or a new message.
func parseItem(s *jsonscan.Scanner) (abi.Item, error) {
	if s.Peek() != jsonscan.Object {
		return abi.Item{}, s.WrongType("item", "an object")
	}
	s.BeginObject()
	var (
		m            abi.Message
		ref          int
		hasRef, role bool
	)
	for first := true; ; first = false {
		key, esc, more, err := s.NextMember(first)
		if err != nil {
			return abi.Item{}, err
		}
		if !more {
			break
		}
		name := jsonscan.Key(key, esc)
		if string(name) == "ref" {
			null, err := s.Null()
			if err != nil {
				return abi.Item{}, err
			}
			if !null {
				if ref, err = s.ReadInt("ref"); err != nil {
					return abi.Item{}, err
				}
				hasRef = true
			}
			continue
		}
		if string(name) == "role" && s.Peek() != jsonscan.Null {
			role = true
		}
		known, err := chat.ScanMessageField(s, name, &m)
		if err == nil && !known {
			_, _, _, err = s.Skip()
		}
		if err != nil {
			return abi.Item{}, err
		}
	}
	switch {
	case hasRef && role:
		return abi.Item{}, fmt.Errorf(`item has both "ref" and "role"`)
	case hasRef:
		return abi.Ref(ref), nil
	case role:
		return abi.New(m), nil
	}
	return abi.Item{}, fmt.Errorf(`item has neither "ref" nor "role"`)
}
