package host

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/policyconfig"
)

// Limits on the strings of a description, which end up in logs, errors
// and GET /v1/policies.
const (
	maxVersionBytes     = 64
	maxDescriptionBytes = 4 << 10
)

// parseDescription decodes and checks the output of describe: at most
// abi.MaxDescribeBytes of UTF-8 JSON, an ABI this host speaks, a valid
// name, a short printable version, and a config schema that compiles with
// defaults that satisfy it.
func parseDescription(out []byte) (abi.Description, *policyconfig.Schema, *PluginError) {
	var desc abi.Description
	fail := func(kind error, format string, args ...any) (abi.Description, *policyconfig.Schema, *PluginError) {
		return abi.Description{}, nil, &PluginError{Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}
	if len(out) > abi.MaxDescribeBytes {
		return fail(ErrOutputTooLarge, "a description is %d bytes; the limit is %d", len(out), abi.MaxDescribeBytes)
	}
	if at := invalidUTF8(out); at >= 0 {
		return fail(ErrInvalidOutput, "the description is not UTF-8 (byte %d)", at)
	}
	if err := json.Unmarshal(out, &desc); err != nil {
		return fail(ErrInvalidDescription, "not a JSON description: %v (output starts %q)", err, preview(out))
	}
	schema, pe := checkDescription(desc)
	if pe != nil {
		return abi.Description{}, nil, pe
	}
	return desc, schema, nil
}

// checkDescription checks a decoded description (what describe answered
// now, or what the same bytes answered before) and compiles its config
// schema.
func checkDescription(desc abi.Description) (*policyconfig.Schema, *PluginError) {
	fail := func(kind error, format string, args ...any) (*policyconfig.Schema, *PluginError) {
		return nil, &PluginError{Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}
	if !abi.Compatible(abi.Version, desc.ABI) {
		return fail(ErrABIMismatch, "plugin %q speaks ABI %s; this compactd speaks %d.x", clip(desc.Name, 80), desc.ABI, abi.Major)
	}
	if !abi.ValidName(desc.Name) {
		return fail(ErrInvalidDescription, "name %q: want 1-64 characters of a-z, 0-9, _ and -, starting with a letter", clip(desc.Name, 80))
	}
	switch {
	case desc.Version == "":
		return fail(ErrInvalidDescription, "plugin %q has no version", desc.Name)
	case len(desc.Version) > maxVersionBytes || !printable(desc.Version):
		return fail(ErrInvalidDescription, "plugin %q: version %q: want at most %d printable characters", desc.Name, clip(desc.Version, 80), maxVersionBytes)
	case len(desc.Description) > maxDescriptionBytes:
		return fail(ErrInvalidDescription, "plugin %q: description is %d bytes; the limit is %d", desc.Name, len(desc.Description), maxDescriptionBytes)
	}
	switch desc.View {
	case "", abi.ViewFull, abi.ViewHeaders:
	default:
		return fail(ErrInvalidDescription, "plugin %q: view %q: want %q or %q", desc.Name, clip(desc.View, 80), abi.ViewFull, abi.ViewHeaders)
	}
	schema, err := policyconfig.Compile(desc.Name, desc.ConfigSchema, desc.Defaults)
	if err != nil {
		return fail(ErrInvalidDescription, "%v", err)
	}
	return schema, nil
}

// invalidUTF8 returns the offset of the first byte of b that is not part of
// valid UTF-8, or -1. JSON text is UTF-8 (RFC 8259, section 8.1), and Go's
// decoder would quietly turn invalid bytes in strings into U+FFFD.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// printable reports whether s has no control characters.
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return false
		}
	}
	return true
}

// clip shortens s to at most n bytes (at a rune boundary) for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
