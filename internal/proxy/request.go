package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/compactd/compactd/jsonscan"
)

// request is a proxied request body, read structurally (see scan.go).
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

// parseRequest reads the fields the proxy needs, for the wire format
// prov. It fails when the body is not an object with its conversation (a
// "messages" array; the Responses API's "input", an array or a string);
// the caller then forwards it unchanged.
func parseRequest(body []byte, prov provider) (*request, error) {
	list, system := prov.fields()
	fields, err := objectFields(body)
	if err != nil {
		return nil, err
	}
	r := &request{body: body, fields: fields}
	found := false
	for i := range fields {
		f := &fields[i]
		v := body[f.start:f.end]
		switch f.key {
		case "model":
			if err := json.Unmarshal(v, &r.model); err != nil {
				return nil, fmt.Errorf("%w: \"model\" is not a string", errScan)
			}
		case "stream":
			r.stream = bytes.Equal(v, []byte("true"))
		case list:
			if list == "input" && len(v) > 0 && v[0] == '"' {
				// A string input is one user message.
				r.messages = []json.RawMessage{v}
			} else if r.messages, err = arrayElements(v); err != nil {
				return nil, fmt.Errorf("%q: %w", list, err)
			}
			r.msgs, found = *f, true
		case system:
			if system != "" && !bytes.Equal(v, []byte("null")) {
				r.system = v
			}
		case "previous_response_id":
			if err := json.Unmarshal(v, &r.previousResponseID); err != nil {
				return nil, fmt.Errorf("%w: \"previous_response_id\" is not a string", errScan)
			}
		case "stream_options":
			r.streamOptions = f
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			r.clientUsage = json.Unmarshal(v, &so) == nil && so.IncludeUsage
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no %q", errScan, list)
	}
	return r, nil
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
