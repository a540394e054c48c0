package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	// system is Anthropic's top-level "system" (nil when absent).
	system json.RawMessage
	// streamOptions is OpenAI's "stream_options" (nil when absent) and
	// clientUsage whether it asks for include_usage.
	streamOptions *field
	clientUsage   bool
}

// parseRequest reads the fields the proxy needs. It fails when the body is
// not an object with a "messages" array; the caller then forwards it
// unchanged.
func parseRequest(body []byte) (*request, error) {
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
		case "messages":
			if r.messages, err = arrayElements(v); err != nil {
				return nil, fmt.Errorf("\"messages\": %w", err)
			}
			r.msgs, found = *f, true
		case "system":
			r.system = v
		case "stream_options":
			r.streamOptions = f
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			r.clientUsage = json.Unmarshal(v, &so) == nil && so.IncludeUsage
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no \"messages\" array", errScan)
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
