package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/compactor"
	"github.com/compactd/compactd/internal/wire"
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
	// spans are the messages' byte spans in body (nil when the list is
	// not an array), and reused how many leading ones were taken from the
	// previous request (parseRequestAfter).
	spans  [][2]int
	reused int
	// system is the conversation's top-level system prompt: Anthropic's
	// "system", the Responses API's "instructions" (nil when absent), and
	// systemSpan its span in body.
	system     json.RawMessage
	systemSpan [2]int
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
func parseRequest(body []byte, prov wire.Format) (*request, error) {
	return parseRequestAfter(body, prov, nil)
}

// parseRequestAfter is parseRequest for a request that may repeat the
// conversation's previous one, prev (in prov's format; nil: none): the
// leading elements of the list that are byte-identical to prev's, in
// place, from the start of the body, are taken from prev's spans and not
// scanned again — what an agent sends every turn is its last request plus
// what happened since. Nothing is trusted that was not compared: the
// scanner reads the same bytes in the same order up to there, so it would
// have found the same spans, and it reads on from the last of them. The
// result is parseRequest's.
func parseRequestAfter(body []byte, prov wire.Format, prev *chat.LastRequest) (*request, error) {
	list, system := prov.Fields()
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
			if r.messages, r.spans, r.reused, err = elements(s, sharedSpans(body, start, prev)); err != nil {
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
			r.messages, r.msgs, r.spans, r.reused, found = []json.RawMessage{v}, f, nil, 0, true
		case "model":
			if kind != jsonscan.String {
				return nil, fmt.Errorf("%w: \"model\" is not a string", errScan)
			}
			r.model = jsonscan.Unquote(v)
		case "stream":
			r.stream = kind == jsonscan.Bool && v[0] == 't'
		case system:
			if system != "" && kind != jsonscan.Null {
				r.system, r.systemSpan = v, [2]int{start, end}
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
// scanner's data) and their offsets, leaving s after it. The elements of
// known, the spans of its leading elements (sharedSpans), are taken as
// they are and the scan resumes after the last of them; reused is how
// many there were.
func elements(s *jsonscan.Scanner, known [][2]int) (out []json.RawMessage, spans [][2]int, reused int, err error) {
	if err := s.BeginArray(); err != nil {
		return nil, nil, 0, err
	}
	data := s.Data()
	n := max(16, len(known)+8)
	out, spans = make([]json.RawMessage, 0, n), make([][2]int, 0, n)
	first := true
	if len(known) > 0 {
		for _, sp := range known {
			out = append(out, data[sp[0]:sp[1]:sp[1]])
		}
		spans = append(spans, known...)
		s.Seek(known[len(known)-1][1])
		first = false
	}
	for ; ; first = false {
		more, err := s.NextElement(first)
		if err != nil {
			return nil, nil, 0, err
		}
		if !more {
			return out, spans, len(known), nil
		}
		_, start, end, err := s.Skip()
		if err != nil {
			return nil, nil, 0, err
		}
		out = append(out, data[start:end:end])
		spans = append(spans, [2]int{start, end})
	}
}

// sharedSpans returns the spans of prev's leading list elements that body
// holds too, byte for byte at the same offsets, with everything before
// them: the list opens at start in both, and body's first bytes up to
// the end of each equal prev's. nil when there are none.
func sharedSpans(body []byte, start int, prev *chat.LastRequest) [][2]int {
	if prev == nil || prev.Body == nil || len(prev.Spans) == 0 || prev.ListStart != start {
		return nil
	}
	same := commonPrefix(body, prev.Body)
	k := sort.Search(len(prev.Spans), func(i int) bool { return prev.Spans[i][1] > same })
	return prev.Spans[:k:k]
}

// likeliestPrevious returns the candidate (last requests of the same
// format, RequestsSharing) whose body shares the longest prefix with
// body, nil when there is none. Whichever it is, parseRequestAfter trusts
// only what it compares; the longest shared prefix is the one that saves
// the most scanning. Comparing a candidate stops at its first differing
// byte, so candidates that only open like body cost their shared
// opening.
func likeliestPrevious(body []byte, candidates []chat.LastRequest) *chat.LastRequest {
	if len(candidates) == 1 {
		return &candidates[0] // compared once, by the parse
	}
	var best *chat.LastRequest
	most := -1
	for i := range candidates {
		if n := commonPrefix(body, candidates[i].Body); n > most {
			best, most = &candidates[i], n
		}
	}
	return best
}

// commonPrefix returns how many leading bytes a and b share.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	const chunk = 2048
	i := 0
	for i+chunk <= n && bytes.Equal(a[i:i+chunk], b[i:i+chunk]) {
		i += chunk
	}
	for i+8 <= n && binary.LittleEndian.Uint64(a[i:]) == binary.LittleEndian.Uint64(b[i:]) {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// splice returns b with [start, end) replaced by repl, as parts: b's
// bytes are not copied.
func splice(b []byte, start, end int, repl []byte) net.Buffers {
	return net.Buffers{b[:start:start], repl, b[end:]}
}

// get returns the value of the top-level member key (nil when absent).
func (r *request) get(key string) json.RawMessage {
	for _, f := range r.fields {
		if f.key == key {
			return r.body[f.start:f.end]
		}
	}
	return nil
}

// items returns what is counted: the system prompt (when the format has
// one and the request sets it) and the list's elements. hasSystem says
// whether items[0] is the system prompt.
func (r *request) items() (items []json.RawMessage, hasSystem bool) {
	if len(r.system) == 0 {
		return r.messages, false
	}
	items = make([]json.RawMessage, 0, len(r.messages)+1)
	return append(append(items, r.system), r.messages...), true
}

// back writes a compaction's result back as the list's elements in the
// format: for a provider that caches only up to cache_control markers the
// policies' cache breakpoints become markers, within those the request's
// tools already hold.
func (r *request) back(f wire.Format, wc wire.Conversation, resp *compactor.Response) ([]json.RawMessage, error) {
	var marks []int
	reserved := 0
	if f.MarkedCache() {
		marks, reserved = resp.CacheBreakpoints, wire.CountCacheControls(r.get("tools"))
	}
	list, _, err := wc.Back(resp.Conversation, resp.Origin, marks, reserved)
	return list, err
}

// withList returns the body with the conversation's list replaced by
// the elements list, written in one copy.
func (r *request) withList(list []json.RawMessage) []byte {
	n := len(r.body) - (r.msgs.end - r.msgs.start) + 2
	for _, e := range list {
		n += len(e) + 1
	}
	out := make([]byte, 0, n)
	out = append(append(out, r.body[:r.msgs.start]...), '[')
	for i, e := range list {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(append(out, ']'), r.body[r.msgs.end:]...)
}

// withStreamUsage returns body (r's body, or one derived from it with the
// same fields before "messages") with stream_options.include_usage set to
// true: added to an existing stream_options object, or added as a member.
// The result is body's bytes in parts, around the new ones, not copied.
func (r *request) withStreamUsage(body []byte) (net.Buffers, error) {
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

// sameLead reports whether req leads as prev did, so that prev's derived
// conversation id is req's: prev's id was derived (not named by a
// header), the elements that decided it are among those req reused from
// prev (byte for byte, in place: parseRequestAfter compared them), and
// the system prompt is the same bytes.
func sameLead(req *request, prev *chat.LastRequest) bool {
	if prev == nil || prev.DerivedID == "" || prev.LeadElems < 1 || req.reused < prev.LeadElems {
		return false
	}
	lo, hi := prev.System[0], prev.System[1]
	if lo < 0 || hi < lo || hi > len(prev.Body) {
		return false
	}
	return bytes.Equal(req.system, prev.Body[lo:hi])
}
