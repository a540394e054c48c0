// Package wire is what a provider's wire format is to compactd: one
// implementation of Format per format, each in its own package
// (internal/wire/openaichat, internal/wire/anthropic,
// internal/wire/responses), registered once in internal/wire/formats.
// Both ways in use the same Format: POST /v1/compact ("format") and the
// proxy (its routes, its request and response filters).
//
// A format converts its conversation to the chat form policies see through
// the ABI and writes a policy's result back byte-stably: what a policy kept
// goes back as the caller's bytes. Everything else that differs between
// providers is a method too: where the request's conversation and system
// prompt are, whose upstream serves it, how its usage and errors look, and
// whether its prompt cache needs markers.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
)

// ErrBreakpoints is wrapped by Conversation.Back when the cache breakpoints
// asked for could not be written: the caller may write the result without
// them.
var ErrBreakpoints = errors.New("cache breakpoints could not be written")

// Upstream providers: whose API serves a format (its config section
// proxy.<provider>, X-Compactd-Upstream).
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

// Format is one provider wire format. Implementations are stateless values,
// safe for concurrent use.
type Format interface {
	// Name is the format's name: /v1/compact's "format", a proxied
	// conversation's provider in the status, the metrics' label.
	Name() string
	// Route is the proxy's route for the format (POST).
	Route() string
	// Provider is whose upstream serves the format (ProviderOpenAI or
	// ProviderAnthropic).
	Provider() string
	// MessageUnit names, for people, what the format's conversation
	// list holds ("Anthropic messages", "Responses items"): the unit of a
	// proxied conversation's message counts.
	MessageUnit() string
	// Target returns the upstream URL for an inbound path under /v1/,
	// given the provider's configured base URL.
	Target(base, path string) string
	// Fields names the request's conversation member ("messages",
	// "input") and its top-level system prompt ("" when the format has
	// none).
	Fields() (list, system string)
	// Convert reads a conversation: the system prompt's value (nil when
	// absent) and the elements of the list (for a Responses string input,
	// the one string).
	Convert(system json.RawMessage, list []json.RawMessage) (Conversation, error)
	// ItemMessages converts one element of the list (or, system, the
	// system prompt) on its own to chat messages, for counting its tokens.
	ItemMessages(raw json.RawMessage, system bool) ([]abi.Message, error)
	// Leading returns the chat form of the system prompt and the list up
	// to and including the first user message, for a derived
	// conversation id, and settled: how many leading elements of the
	// list decided it (the first user message's position + 1), 0 when no
	// user message ended it (a longer list may lead otherwise). Any list
	// that holds those elements unchanged, under the same system prompt,
	// leads the same.
	Leading(system json.RawMessage, list []json.RawMessage) (lead []abi.Message, settled int, err error)
	// Uncompactable says why a request that parsed cannot be compacted
	// ("" when it can); get returns a top-level member's value (nil when
	// absent).
	Uncompactable(get func(key string) json.RawMessage) string
	// MarkedCache reports whether the provider caches only prefixes that
	// end at a cache_control marker (Anthropic): the proxy then writes the
	// policies' cache breakpoints into the request. Others cache the
	// longest repeated prefix by themselves.
	MarkedCache() bool
	// StreamUsageOption reports whether a streamed response reports its
	// usage only when the request asks for it
	// (stream_options.include_usage, Chat Completions).
	StreamUsageOption() bool
	// Usage reads a JSON response body's usage: ok when it has one to
	// record, and the counts it refused (name=value), if any.
	Usage(body []byte) (u Usage, ok bool, refused []string)
	// NewStream returns a parser for one streamed response; addedUsage
	// says the proxy asked for the usage the client did not.
	NewStream(addedUsage bool) Stream
	// ErrorBody renders an error compactd itself answers, in the format's
	// error shape.
	ErrorBody(status int, code, msg string) []byte
	// StreamError renders the event that ends a stream compactd cannot
	// complete, as the provider reports an error mid-stream.
	StreamError(status int, code, msg string) []byte
}

// Conversation is a request's conversation converted to chat form.
type Conversation interface {
	// Chat is the chat form: what policies see.
	Chat() *chat.Conversation
	// List is the request's list as elements in the format (a Responses
	// string input as the message item it is).
	List() []json.RawMessage
	// Back writes a policy's result back as the list's elements: out is
	// the compacted chat conversation and origin maps each of its messages
	// to the chat message of Chat it keeps, or -1 for a new one
	// (compactor.Response.Origin). Kept messages are the caller's bytes.
	// When marks (indices into out) are given and the format writes cache
	// markers, they are written, within the markers the request may still
	// carry (reserved are held elsewhere, in the request's tools); marked
	// returns the indices of the elements marked.
	Back(out *chat.Conversation, origin []int, marks []int, reserved int) (list []json.RawMessage, marked []int, err error)
}

// Usage is a response's token usage as compactd records it.
type Usage struct {
	// InputTokens counts every prompt token, cached ones included.
	InputTokens int
	// OutputTokens counts the completion's tokens.
	OutputTokens int
	// CacheReadTokens and CacheWriteTokens are the parts of InputTokens
	// read from and written to the provider's prompt cache.
	CacheReadTokens, CacheWriteTokens int
}

// Stream reads the events of one streamed response.
type Stream interface {
	// Event sees one event's type ("" if none) and data; drop removes the
	// event from what the client receives, and a non-nil replace replaces
	// the event's data.
	Event(typ string, data []byte) (replace []byte, drop bool)
	// Usage returns the usage seen so far (ok when there is one to record)
	// and the counts refused on the way.
	Usage() (u Usage, ok bool, refused []string)
}

// MaxRefused bounds the refused counts a stream parser keeps for its log
// line, however many usage events a stream holds.
const MaxRefused = 8

// NoteRefused appends more to dst within MaxRefused.
func NoteRefused(dst, more []string) []string {
	if room := MaxRefused - len(dst); room > 0 {
		dst = append(dst, more[:min(room, len(more))]...)
	}
	return dst
}

// SSEEvent writes one server-sent event: its type line if typ is set, its
// data line (data holds no newline: it is compact JSON) and the blank line.
func SSEEvent(typ string, data []byte) []byte {
	b := make([]byte, 0, len(typ)+len(data)+16)
	if typ != "" {
		b = append(append(append(b, "event: "...), typ...), '\n')
	}
	return append(append(append(b, "data: "...), data...), "\n\n"...)
}

// CountCacheControls counts the cache_control markers in a JSON value (a
// request's tools, system or messages), at any depth.
func CountCacheControls(raw json.RawMessage) int {
	if !bytes.Contains(raw, []byte(`"cache_control"`)) {
		return 0
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return 0
	}
	var count func(any) int
	count = func(v any) int {
		n := 0
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "cache_control" && x != nil {
					n++
				}
				n += count(x)
			}
		case []any:
			for _, x := range v {
				n += count(x)
			}
		}
		return n
	}
	return count(v)
}

// MarshalParts encodes content parts as a message's content (an empty
// array for none), without HTML escaping.
func MarshalParts(parts []abi.ContentPart) (abi.Content, error) {
	if parts == nil {
		parts = []abi.ContentPart{}
	}
	b, err := Marshal(parts)
	if err != nil {
		return abi.Content{}, err
	}
	return abi.RawContent(b), nil
}

// Marshal encodes v as JSON without HTML escaping (providers' bodies keep
// "<", ">" and "&" as they are) and without a trailing newline.
func Marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
