// Package abi holds the JSON contract (ABI v1) between the compactd host and
// its policy plugins. It builds for the host and for GOOS=wasip1 guests, and
// depends only on the standard library.
//
// The prose contract, precise enough to write a plugin in any language, is in
// README.md next to this file. The Go types here are its executable form.
package abi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// The ABI version this package describes. A host speaks one major version and
// every minor version up to its own; see README.md, "Versioning".
const (
	Major = 1
	Minor = 1
)

// Version is the ABI version string the host sends and the plugins declare.
var Version = VersionString{Major: Major, Minor: Minor}

// Export names a plugin may define. Describe and Compact are required.
const (
	ExportDescribe      = "describe"
	ExportCompact       = "compact"
	ExportShouldCompact = "should_compact"
)

// Fast-path exports (optional). The Go PDK defines them; the host uses them
// instead of Extism's input/output functions when both are present.
const (
	ExportFastAlloc = "compactd_fast_v1_alloc"
	ExportFastCall  = "compactd_fast_v1_call"
)

// Function numbers passed as the first argument of compactd_fast_v1_call.
// FastPing does nothing and returns an empty output: it measures the
// boundary's fixed cost and checks that an instance is alive.
const (
	FastPing          = 0
	FastDescribe      = 1
	FastCompact       = 2
	FastShouldCompact = 3
)

// Fast-path status bytes: the first byte of a fast-path output buffer.
const (
	FastStatusOK    = 0
	FastStatusError = 1
)

// Host function names in the HostModule namespace.
const (
	HostModule        = "extism:host/user"
	HostCountTokens   = "count_tokens"
	HostLLMComplete   = "llm_complete"
	ExtismEnvModule   = "extism:host/env"
	MaxPolicyNameSize = 64
	// HostMessageContent and HostMessageContentInto read a content a
	// header view left out (ABI 1.1): the first into a block of kernel
	// memory, on both paths; the second straight into the plugin's
	// memory, on the fast path only.
	HostMessageContent     = "message_content"
	HostMessageContentInto = "message_content_into"
	// HostExtractIdentifiers extracts the identifiers of a batch of
	// texts natively (ABI 1.1): the file paths, names, ids, numbers and
	// error lines package idents finds, in its wire format.
	HostExtractIdentifiers = "extract_identifiers"
	// HostExtractIdentifiersFrom is extract_identifiers with its request
	// read straight from the plugin's memory (ABI 1.1, fast path only):
	// no boundary crossing per 8 bytes to fill a kernel block.
	HostExtractIdentifiersFrom = "extract_identifiers_from"
	// HostExtractMessageFactsInto finds the facts of a range of the
	// request's messages natively (ABI 1.1, fast path only): what the
	// agent ran, the identifiers, what the user asked (package facts),
	// each once, written straight into the plugin's memory. A plugin
	// reading a header view does not fetch the messages' contents.
	HostExtractMessageFactsInto = "extract_message_facts_into"
)

// Views a plugin may declare in its description (ABI 1.1). ViewFull, the
// default, sends every message with its content; ViewHeaders sends each
// message without it ({"omitted": "text"|"parts", "size": N} in its
// place), for a policy that reads few or no contents: it reads them
// through message_content when it needs them.
const (
	ViewFull    = "full"
	ViewHeaders = "headers"
)

// Results of message_content_into besides a length.
const (
	// ContentNoMessage: there is no message at that index.
	ContentNoMessage = ^uint64(0)
	// ContentUnsupported: the call is not on the fast path (the host
	// cannot write to the plugin's memory); use message_content.
	ContentUnsupported = ^uint64(0) - 1
)

// ExtractUnsupported is what extract_identifiers_from returns when the
// call is not on the fast path (the host cannot read the plugin's memory):
// use extract_identifiers.
const ExtractUnsupported = ^uint64(0) - 1

// FactsUnsupported is what extract_message_facts_into returns when the
// call is not on the fast path (the host cannot write to the plugin's
// memory): fetch the contents and find the facts in the plugin
// (facts.Collect, with extract_identifiers).
const FactsUnsupported = ^uint64(0) - 1

// VersionString is an ABI version "MAJOR.MINOR". In JSON it is a string
// ("1.0"); a bare integer (1) is accepted as "1.0".
type VersionString struct {
	Major, Minor int
}

// String returns "MAJOR.MINOR".
func (v VersionString) String() string {
	return strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor)
}

// MarshalJSON encodes the version as a JSON string.
func (v VersionString) MarshalJSON() ([]byte, error) {
	return []byte(`"` + v.String() + `"`), nil
}

// UnmarshalJSON accepts "1.0", "1" or 1.
func (v *VersionString) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) > 0 && s[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	parsed, err := ParseVersion(s)
	if err != nil {
		return err
	}
	*v = parsed
	return nil
}

// ParseVersion parses "MAJOR" or "MAJOR.MINOR".
func ParseVersion(s string) (VersionString, error) {
	majorText, minorText, hasMinor := strings.Cut(strings.TrimSpace(s), ".")
	major, err := strconv.Atoi(majorText)
	if err != nil || major < 0 {
		return VersionString{}, fmt.Errorf("abi version %q: want MAJOR.MINOR, e.g. %q", s, Version.String())
	}
	minor := 0
	if hasMinor {
		minor, err = strconv.Atoi(minorText)
		if err != nil || minor < 0 {
			return VersionString{}, fmt.Errorf("abi version %q: want MAJOR.MINOR, e.g. %q", s, Version.String())
		}
	}
	return VersionString{Major: major, Minor: minor}, nil
}

// Compatible reports whether a host speaking h can run a plugin declaring p:
// the majors must be equal. Minor versions only add optional fields.
func Compatible(h, p VersionString) bool { return h.Major == p.Major }

// Description is the output of the describe export.
type Description struct {
	// ABI is the ABI version the plugin was written against.
	ABI VersionString `json:"abi"`
	// Name is the policy name callers use: 1-64 characters of [a-z0-9_-],
	// starting with a letter.
	Name string `json:"name"`
	// Version is the plugin's own version, free-form (semver recommended).
	Version string `json:"version"`
	// Description is one or two sentences for humans.
	Description string `json:"description,omitempty"`
	// ConfigSchema is a JSON Schema (the subset in README.md) for the
	// plugin's config object.
	ConfigSchema json.RawMessage `json:"config_schema,omitempty"`
	// Defaults is the config the plugin uses when a key is not set.
	Defaults json.RawMessage `json:"defaults,omitempty"`
	// Exports lists the optional exports the plugin implements (e.g.
	// "should_compact"). The host calls an optional export only when it is
	// both listed here and exported.
	Exports []string `json:"exports,omitempty"`
	// View is the view of the conversation the plugin reads (ABI 1.1):
	// ViewFull (the default, also "") or ViewHeaders.
	View string `json:"view,omitempty"`
	// Decision says the plugin reads the host's decision to compact
	// (Context.Compact) on the fast path (ABI 1.1): the host then appends
	// it to the binary request (see AppendFastDecision). JSON requests
	// carry context.compact whether or not this is set.
	Decision bool `json:"decision,omitempty"`
	// Hashes asks for each message's Hash on the fast path (ABI 1.1): a
	// policy that recognises a history it has seen (a memo, a saved
	// state) compares the host's hashes instead of hashing every text.
	Hashes bool `json:"hashes,omitempty"`
}

// ValidName reports whether name is a valid policy name.
func ValidName(name string) bool {
	if name == "" || len(name) > MaxPolicyNameSize || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CompactRequest is the input of the compact and should_compact exports.
type CompactRequest struct {
	ABI      VersionString   `json:"abi"`
	Messages []Message       `json:"messages"`
	Config   json.RawMessage `json:"config,omitempty"`
	Context  Context         `json:"context"`

	configCache *ConfigCache
}

// ConnectContents makes the contents a header view left out read through
// src (the PDK calls it on every request it decodes).
func (r *CompactRequest) ConnectContents(src ContentSource) {
	for i := range r.Messages {
		c := &r.Messages[i].Content
		if c.omitted != "" {
			c.index, c.src = i, src
		}
	}
}

// DecodeConfig decodes the request's config into v (a pointer to a struct
// whose fields carry json tags). Unknown keys are an error: the host already
// validated the config against the plugin's schema, so an unknown key means
// the schema and the struct disagree.
//
// With a ConfigCache (UseConfigCache), a config already decoded into the
// same type from the same starting value is copied from the cache.
func (r *CompactRequest) DecodeConfig(v any) error {
	if len(r.Config) == 0 || string(r.Config) == "null" {
		return nil
	}
	var initial reflect.Value
	rv := reflect.ValueOf(v)
	useCache := r.configCache != nil && rv.Kind() == reflect.Pointer && !rv.IsNil() && cacheable(rv.Elem().Type())
	if useCache {
		if r.configCache.lookup(r.Config, rv.Elem()) {
			return nil
		}
		initial = reflect.New(rv.Elem().Type()).Elem()
		initial.Set(rv.Elem())
	}
	dec := json.NewDecoder(bytes.NewReader(r.Config))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &Error{Code: CodeInvalidConfig, Message: "config: " + err.Error()}
	}
	if useCache {
		r.configCache.store(r.Config, initial, rv.Elem())
	}
	return nil
}

// Context is what the host knows about the conversation besides its messages.
type Context struct {
	// Model is the agent's model, e.g. "gpt-4o". May be empty.
	Model string `json:"model,omitempty"`
	// Encoding is the tokenizer the host counted with, e.g. "o200k_base".
	Encoding string `json:"encoding,omitempty"`
	// ContextWindow is the model's context window in tokens (the models.dev
	// catalog's, else its family's, else 8,192; 0 when no model is named).
	ContextWindow int `json:"context_window,omitempty"`
	// TotalTokens is the sum of the messages' tokens fields.
	TotalTokens int `json:"total_tokens"`
	// ConversationID identifies the conversation across calls.
	ConversationID string `json:"conversation_id,omitempty"`
	// State is the opaque JSON the plugin returned last time for this
	// conversation (absent on the first call).
	State json.RawMessage `json:"state,omitempty"`
	// Compact, when set, says the host has decided this conversation must
	// be compacted now: the policy compacts to fit Compact.TargetTokens
	// and its own thresholds do not apply. Absent, the policy decides.
	Compact *Decision `json:"compact,omitempty"`
}

// Reasons the host gives in Decision.Reason.
const (
	// ReasonUsage: the provider's reported usage of the last response
	// reached the threshold (the deferred trigger).
	ReasonUsage = "usage"
	// ReasonPreflight: the host's own count of the request reached the
	// threshold share of the context window.
	ReasonPreflight = "preflight"
	// ReasonTriggerTokens: the request reached proxy.trigger_tokens.
	ReasonTriggerTokens = "trigger_tokens"
	// ReasonOverflow: the upstream refused the request as too long; the
	// host compacts and retries.
	ReasonOverflow = "overflow"
	// ReasonPrepare: background preparation ahead of the trigger.
	ReasonPrepare = "prepare"
	// ReasonManual: an operator or client asked for a compaction.
	ReasonManual = "manual"
)

// Decision is the host's decision to compact, handed to the policy in
// Context.Compact.
type Decision struct {
	// Reason is why the host decided (one of the Reason constants).
	Reason string `json:"reason"`
	// TargetTokens is the token budget the result should fit (0: none
	// given; the policy compacts as it normally would when it compacts).
	TargetTokens int `json:"target_tokens,omitempty"`
}

// CompactResult is the output of the compact export.
type CompactResult struct {
	// Messages is the compacted conversation: each item is a reference to
	// an input message or a new message.
	Messages []Item `json:"messages"`
	// Compacted is false when the policy chose to leave the conversation as
	// it is (then Messages should be all refs, in order).
	Compacted bool `json:"compacted"`
	// Summary is a human-readable account of what was done.
	Summary string `json:"summary,omitempty"`
	// EntriesSummarized counts the input entries folded into summaries or
	// dropped.
	EntriesSummarized int `json:"entries_summarized,omitempty"`
	// Rewritten lists input indices whose content was replaced by a new
	// message in the output (for reports; the host computes dropped indices
	// itself from the refs).
	Rewritten []int `json:"rewritten,omitempty"`
	// State, when present and not null, replaces the conversation's stored
	// state. Absent or null leaves it unchanged.
	State json.RawMessage `json:"state,omitempty"`
	// Warnings are non-fatal problems (e.g. "LLM failed; used fallback").
	Warnings []string `json:"warnings,omitempty"`
	// CacheBreakpoints (ABI 1.1) are positions in Messages the policy
	// marks as prompt-cache breakpoints: at most MaxCacheBreakpoints
	// distinct indices, each in range. The host applies them only when
	// the caller asked for breakpoints (README.md, "Cache breakpoints").
	CacheBreakpoints []int `json:"cache_breakpoints,omitempty"`
}

// MaxCacheBreakpoints is how many messages a result may mark as cache
// breakpoints. Anthropic allows four per request; the fourth is the
// caller's (usually on the newest message).
const MaxCacheBreakpoints = 3

// ShouldCompactResult is the output of the optional should_compact export.
type ShouldCompactResult struct {
	Compact bool   `json:"compact"`
	Reason  string `json:"reason,omitempty"`
}

// Unchanged returns a result that keeps all n input messages.
func Unchanged(n int, summary string) *CompactResult {
	items := make([]Item, n)
	for i := range items {
		items[i] = Ref(i)
	}
	return &CompactResult{Messages: items, Summary: summary}
}

// Error is the JSON body a plugin sets with error_set (or a fast-path error
// status) when a call fails.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes plugins use. Others are allowed; the host treats unknown codes
// as CodeInternal.
const (
	CodeInvalidRequest = "invalid_request"
	CodeInvalidConfig  = "invalid_config"
	CodeLLMUnavailable = "llm_unavailable"
	CodeInternal       = "internal"
)

func (e *Error) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// ParseError reads an error body: JSON {"code","message"}, or any other text
// taken as the message of an internal error.
func ParseError(b []byte) *Error {
	var e Error
	if json.Unmarshal(b, &e) == nil && (e.Code != "" || e.Message != "") {
		return &e
	}
	return &Error{Code: CodeInternal, Message: strings.TrimSpace(string(b))}
}
