// Package pdk is compactd's plugin development kit for policies written in
// Go. A policy is a plain Go function over abi types; the PDK turns it into a
// WebAssembly plugin that speaks the Extism guest ABI (so the compactd host,
// or any Extism host, can call it) plus compactd's fast path.
//
// A plugin's main.go is a few lines:
//
//	package main
//
//	import "github.com/compactd/compactd/pdk"
//
//	func init() { pdk.Register(policy) }
//
//	func main() {}
//
// and it builds with the standard toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o mypolicy.wasm .
//
// The same policy code builds natively, so its logic is tested with plain
// `go test` and a TestHost, no Wasm needed.
//
// In a guest, the PDK holds the registered policy in a package variable: a
// Wasm instance runs one call at a time, so there is nothing to lock.
//
// A request is valid during its call only: on the fast path the next
// request is decoded into the same memory (abi.FastDecoder) and its
// strings point into the input buffer, which the next request overwrites.
// A policy that keeps something of a request across calls copies it.
package pdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
)

// Host is what a policy can ask of the compactd host during a call. In a
// plugin it is backed by the host functions; in native tests, by a TestHost.
type Host interface {
	// CountTokens returns the number of tokens in text under the request's
	// model tokenizer.
	CountTokens(text string) int
	// Complete runs a chat completion through the host's LLM provider. A
	// failed call returns an *abi.Error (code no_provider, budget_exceeded,
	// provider_error, ...).
	Complete(req abi.LLMRequest) (abi.LLMResponse, error)
	// Log writes a message to the plugin's logger on the host.
	Log(level Level, msg string)
	// ExtractIdentifiers returns the items package idents finds in each
	// text (idents.Extract), extracted natively by the host in one call
	// per batch (the extract_identifiers host function). A span's text
	// is a substring of its input's.
	ExtractIdentifiers(texts []idents.Input) ([][]idents.Item, error)
	// MessageFacts returns the facts of msgs, the request's messages
	// from index first on (facts.Collect: what the agent ran, the
	// identifiers, what the user asked, each once). The host finds them
	// in its own copy of the messages (the extract_message_facts_into
	// host function), so a header view's contents are not fetched; where
	// it cannot, the plugin does, with ExtractIdentifiers. The set and its
	// texts are valid until the next MessageFacts call (a plugin decodes
	// every answer into the same memory): copy what you keep.
	MessageFacts(msgs []abi.Message, first int, opts facts.Options) (*facts.Set, error)
}

// Level is a log level.
type Level int

// Log levels, as Extism defines them.
const (
	LevelDebug Level = iota
	LevelInfo
	LevelWarn
	LevelError
)

// CompactFunc is a policy's compact function. It returns the compacted
// conversation as refs to input messages and new messages. Returning an
// *abi.Error sets its code; any other error is reported as "internal".
type CompactFunc func(h Host, req *abi.CompactRequest) (*abi.CompactResult, error)

// ShouldCompactFunc is a cheap check the host may call before compact.
type ShouldCompactFunc func(h Host, req *abi.CompactRequest) (abi.ShouldCompactResult, error)

// Policy is a compaction policy: its description and its functions.
type Policy struct {
	// Name is the policy name callers use (see abi.ValidName).
	Name string
	// Version is the plugin's version, e.g. "1.2.0".
	Version string
	// Description is one or two sentences for humans.
	Description string
	// ConfigSchema is the JSON Schema of the config object (README.md of
	// package abi lists the supported subset).
	ConfigSchema string
	// Defaults is the default config; it is marshaled to JSON.
	Defaults any
	// Compact is required.
	Compact CompactFunc
	// ShouldCompact is optional.
	ShouldCompact ShouldCompactFunc
	// View is the view of the conversation the policy reads: abi.ViewFull
	// (the default, also "") sends every message with its content;
	// abi.ViewHeaders sends each message without it, and a content is
	// fetched from the host when the policy reads it (Content.Text, Raw):
	// much less to send and decode for a policy that reads few contents
	// (one that only looks at roles, tool calls and token counts reads
	// none). Content.Len and Omitted tell a left-out content's size and
	// kind without fetching it.
	View string
	// ContentHashes asks the host for each message's hash (abi.Message.Hash,
	// ABI 1.1) on the fast path: a policy that memoizes by its messages
	// compares those instead of hashing every text. Hashes are zero on the
	// Extism path and in native tests, so such a policy must work without
	// them.
	ContentHashes bool
}

// Describe returns the policy's description as the describe export sends it.
func (p *Policy) Describe() (abi.Description, error) {
	d := abi.Description{
		ABI:         abi.Version,
		Name:        p.Name,
		Version:     p.Version,
		Description: p.Description,
		// The PDK decodes the host's decision on both paths
		// (req.Context.Compact).
		Decision: true,
		Hashes:   p.ContentHashes,
	}
	if p.ConfigSchema != "" {
		if !json.Valid([]byte(p.ConfigSchema)) {
			return d, fmt.Errorf("policy %s: config schema is not valid JSON", p.Name)
		}
		d.ConfigSchema = json.RawMessage(p.ConfigSchema)
	}
	if p.Defaults != nil {
		b, err := json.Marshal(p.Defaults)
		if err != nil {
			return d, fmt.Errorf("policy %s: defaults: %w", p.Name, err)
		}
		d.Defaults = b
	}
	if p.ShouldCompact != nil {
		d.Exports = []string{abi.ExportShouldCompact}
	}
	switch p.View {
	case "", abi.ViewFull:
	case abi.ViewHeaders:
		d.View = abi.ViewHeaders
	default:
		return d, fmt.Errorf("policy %s: view %q: want %q or %q", p.Name, p.View, abi.ViewFull, abi.ViewHeaders)
	}
	return d, nil
}

// The guest's one registered policy. See the package comment.
var registered *Policy

// Register makes p the plugin's policy. Call it once, from an init function
// of the plugin's main package. It panics if p is incomplete or a policy is
// already registered: both are programming errors found at build-test time.
func Register(p Policy) {
	if registered != nil {
		panic("pdk: Register called twice")
	}
	if !abi.ValidName(p.Name) {
		panic(fmt.Sprintf("pdk: invalid policy name %q", p.Name))
	}
	if p.Compact == nil {
		panic("pdk: policy " + p.Name + " has no Compact function")
	}
	if _, err := p.Describe(); err != nil {
		panic("pdk: " + err.Error())
	}
	registered = &p
}

// Call runs one export of p on its JSON input and returns the JSON output.
// It is what the Wasm exports do; tests use it to check a policy end to end
// through its JSON encoding without Wasm. A panic in the policy becomes an
// internal error.
func Call(p *Policy, h Host, export string, input []byte) (out []byte, err error) {
	return call(p, h, export, input, decodeRequest, nil)
}

// call runs an export; decode reads the request (JSON on the Extism path,
// the binary fast encoding on the fast path). A compact result is
// appended to dst (the fast path reuses its output buffer across calls);
// other outputs are new slices.
func call(p *Policy, h Host, export string, input []byte, decode func([]byte, abi.ContentSource) (*abi.CompactRequest, error), dst []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &abi.Error{Code: abi.CodeInternal, Message: fmt.Sprintf("policy %s panicked: %v\n%s", p.Name, r, debug.Stack())}
		}
	}()
	switch export {
	case abi.ExportDescribe:
		d, err := p.Describe()
		if err != nil {
			return nil, err
		}
		return json.Marshal(d)
	case abi.ExportCompact:
		req, err := decode(input, contentSource(h))
		if err != nil {
			return nil, err
		}
		res, err := p.Compact(h, req)
		if err != nil {
			return nil, err
		}
		if res == nil {
			return nil, &abi.Error{Code: abi.CodeInternal, Message: "policy returned no result"}
		}
		return appendResult(dst, res)
	case abi.ExportShouldCompact:
		if p.ShouldCompact == nil {
			return nil, &abi.Error{Code: abi.CodeInvalidRequest, Message: "policy " + p.Name + " has no should_compact"}
		}
		req, err := decode(input, contentSource(h))
		if err != nil {
			return nil, err
		}
		res, err := p.ShouldCompact(h, req)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	}
	return nil, &abi.Error{Code: abi.CodeInvalidRequest, Message: "unknown export " + export}
}

// CallFast is Call for the fast path's binary request encoding
// (abi.AppendFastRequest). Tests use it to check that both encodings give
// the same result.
func CallFast(p *Policy, h Host, export string, input []byte) ([]byte, error) {
	return call(p, h, export, input, decodeFastRequest, nil)
}

// contentSource returns the host's source of left-out contents, if it
// has one.
func contentSource(h Host) abi.ContentSource {
	src, _ := h.(abi.ContentSource)
	return src
}

func decodeFastRequest(input []byte, src abi.ContentSource) (*abi.CompactRequest, error) {
	return decodeFast(new(abi.FastDecoder), input, src)
}

// decodeFast decodes a fast-path request with d: what it returns is valid
// until d decodes the next one (see abi.FastDecoder).
func decodeFast(d *abi.FastDecoder, input []byte, src abi.ContentSource) (*abi.CompactRequest, error) {
	req, err := d.Decode(input, src)
	if err != nil {
		return nil, &abi.Error{Code: abi.CodeInvalidRequest, Message: err.Error()}
	}
	req.UseConfigCache(configCache)
	return req, nil
}

// configCache serves every call of this guest (see abi.ConfigCache): a
// plugin instance sees the same config on almost every call.
var configCache = abi.NewConfigCache(16)

func decodeRequest(input []byte, src abi.ContentSource) (*abi.CompactRequest, error) {
	var req abi.CompactRequest
	if err := json.Unmarshal(input, &req); err != nil {
		return nil, &abi.Error{Code: abi.CodeInvalidRequest, Message: "decoding request: " + err.Error()}
	}
	req.ConnectContents(src)
	if !abi.Compatible(abi.Version, req.ABI) {
		return nil, &abi.Error{Code: abi.CodeInvalidRequest, Message: fmt.Sprintf("host speaks ABI %s, plugin speaks %s", req.ABI, abi.Version)}
	}
	req.UseConfigCache(configCache)
	return &req, nil
}

// marshal encodes v without HTML escaping.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
