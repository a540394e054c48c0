package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactd/compactd/jsonscan"
)

// request is a proxied request body, read structurally (parseRequest).
type request struct {
	body   []byte
	fields []field
	model  string
	stream bool
	// messages are the elements of "messages", subslices of body; msgs is
	// the span of the array.
	messages []json.RawMessage
	msgs     field
	// system is the conversation's top-level system prompt: Anthropic's
	// "system", the Responses API's "instructions" (nil when absent).
	system json.RawMessage
	// previousResponseID is the Responses API's previous_response_id.
	previousResponseID string
	// streamOptions is OpenAI's "stream_options" (nil when absent) and
	// clientUsage whether it asks for include_usage.
	streamOptions *field
	clientUsage   bool
}

// The proxy reads a request body once, with the shared scanner
// (jsonscan, as /v1/compact does), which validates it completely: the
// top-level fields it needs and the byte span of each message or item,
// leaving everything else as the caller's bytes. What it cannot read it
// forwards unchanged, for the provider to judge.

var errScan = errors.New("not a JSON object the proxy can read")

// field is one top-level member of an object: its key and the byte span
// [start, end) of its value.
type field struct {
	key        string
	start, end int
}

// parseRequest reads the fields the proxy needs, for the wire format
// prov, in one pass. It fails when the body is not a JSON object with its
// conversation (a "messages" array; the Responses API's "input", an array
// or a string); the caller then forwards it unchanged.
func parseRequest(body []byte, prov provider) (*request, error) {
	list, system := prov.fields()
	s := jsonscan.New(body)
	if s.Peek() != jsonscan.Object {
		return nil, fmt.Errorf("%w: the body is not a JSON object", errScan)
	}
	s.BeginObject()
	r := &request{body: body}
	found := false
	for first := true; ; first = false {
		k, esc, more, err := s.NextMember(first)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errScan, err)
		}
		if !more {
			break
		}
		key := string(jsonscan.Key(k, esc))
		if key == list && s.Peek() == jsonscan.Array {
			start := s.Pos()
			if r.messages, err = elements(s); err != nil {
				return nil, fmt.Errorf("%w: %q: %v", errScan, list, err)
			}
			r.fields = append(r.fields, field{key: key, start: start, end: s.Pos()})
			r.msgs, found = r.fields[len(r.fields)-1], true
			continue
		}
		kind, start, end, err := s.Skip()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errScan, err)
		}
		f := field{key: key, start: start, end: end}
		r.fields = append(r.fields, f)
		v := body[start:end]
		switch key {
		case list:
			if list != "input" || kind != jsonscan.String {
				return nil, fmt.Errorf("%w: %q is %s, not an array", errScan, list, kind)
			}
			// A string input is one user message.
			r.messages, r.msgs, found = []json.RawMessage{v}, f, true
		case "model":
			if kind != jsonscan.String {
				return nil, fmt.Errorf("%w: \"model\" is not a string", errScan)
			}
			r.model = jsonscan.Unquote(v)
		case "stream":
			r.stream = kind == jsonscan.Bool && v[0] == 't'
		case system:
			if system != "" && kind != jsonscan.Null {
				r.system = v
			}
		case "previous_response_id":
			if kind == jsonscan.String {
				r.previousResponseID = jsonscan.Unquote(v)
			} else if kind != jsonscan.Null {
				return nil, fmt.Errorf("%w: \"previous_response_id\" is not a string", errScan)
			}
		case "stream_options":
			r.streamOptions = &f
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			r.clientUsage = json.Unmarshal(v, &so) == nil && so.IncludeUsage
		}
	}
	if err := s.End(); err != nil {
		return nil, fmt.Errorf("%w: %v", errScan, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: no %q", errScan, list)
	}
	return r, nil
}

// elements reads the array at s as its elements' spans (views of the
// scanner's data), leaving s after it.
func elements(s *jsonscan.Scanner) ([]json.RawMessage, error) {
	if err := s.BeginArray(); err != nil {
		return nil, err
	}
	data := s.Data()
	out := make([]json.RawMessage, 0, 16)
	for first := true; ; first = false {
		more, err := s.NextElement(first)
		if err != nil || !more {
			return out, err
		}
		_, start, end, err := s.Skip()
		if err != nil {
			return nil, err
		}
		out = append(out, data[start:end:end])
	}
}

// arrayElements returns the elements of the JSON array b as subslices.
func arrayElements(b []byte) ([]json.RawMessage, error) {
	s := jsonscan.New(b)
	out, err := elements(s)
	if err == nil {
		err = s.End()
	}
	return out, err
}

// splice returns b with [start, end) replaced by repl, in a new slice.
func splice(b []byte, start, end int, repl []byte) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(repl))
	out = append(out, b[:start]...)
	out = append(out, repl...)
	return append(out, b[end:]...)
}

// withMessages returns the body with the messages array replaced.
func (r *request) withMessages(array []byte) []byte {
	return splice(r.body, r.msgs.start, r.msgs.end, array)
}

// withStreamUsage returns body (r's body, or one derived from it with the
// same fields before "messages") with stream_options.include_usage set to
// true: added to an existing stream_options object, or added as a member.
func (r *request) withStreamUsage(body []byte) ([]byte, error) {
	shift := len(body) - len(r.body) // a replaced messages array moved what follows it
	at := func(i int) int {
		if i >= r.msgs.end {
			return i + shift
		}
		return i
	}
	if f := r.streamOptions; f != nil {
		var opts map[string]json.RawMessage
		if err := json.Unmarshal(r.body[f.start:f.end], &opts); err != nil || opts == nil {
			return nil, fmt.Errorf("%w: \"stream_options\" is not an object", errScan)
		}
		opts["include_usage"] = json.RawMessage("true")
		b, err := json.Marshal(opts)
		if err != nil {
			return nil, err
		}
		return splice(body, at(f.start), at(f.end), b), nil
	}
	end := bytes.LastIndexByte(body, '}')
	if end < 0 {
		return nil, errScan
	}
	return splice(body, end, end, []byte(`,"stream_options":{"include_usage":true}`)), nil
}

// arrayJSON writes raw elements as a JSON array.
func arrayJSON(elems []json.RawMessage) []byte {
	n := 2
	for _, e := range elems {
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

// withoutMember returns the JSON object data without its top-level member
// key (its value whatever it is, null included), and whether it had one.
func withoutMember(data []byte, key string) ([]byte, bool) {
	s := jsonscan.New(data)
	if s.Peek() != jsonscan.Object {
		return nil, false
	}
	s.BeginObject()
	prevEnd := -1 // where the previous member's value ends
	for first := true; ; first = false {
		before := s.Pos() // before the ',' (or the first key)
		k, esc, more, err := s.NextMember(first)
		if err != nil || !more {
			return nil, false
		}
		_, _, end, err := s.Skip()
		if err != nil {
			return nil, false
		}
		if string(jsonscan.Key(k, esc)) != key {
			prevEnd = end
			continue
		}
		if prevEnd >= 0 {
			// Cut from the end of the previous value through this one.
			return splice(data, prevEnd, end, nil), true
		}
		// The first member: cut it and the ',' after it, if any.
		rest := end
		for rest < len(data) && (data[rest] == ' ' || data[rest] == '\t' || data[rest] == '\n' || data[rest] == '\r') {
			rest++
		}
		if rest < len(data) && data[rest] == ',' {
			rest++
		}
		start := bytes.IndexByte(data[before:], '"') + before
		return splice(data, start, rest, nil), true
	}
}
