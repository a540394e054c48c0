package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
)

// Content parts of OpenAI's Chat Completions messages, and the roles that
// may carry each. A message's content is a string, null, or an array of
// these; a part may carry other fields (such as cache_control), which are
// kept with the message's bytes.
var partRoles = map[string][]string{
	"text":        {abi.RoleSystem, abi.RoleDeveloper, abi.RoleUser, abi.RoleAssistant, abi.RoleTool},
	"image_url":   {abi.RoleUser},
	"input_audio": {abi.RoleUser},
	"file":        {abi.RoleUser},
	"refusal":     {abi.RoleAssistant},
}

// partTypesFor lists the part types a role may carry, for messages.
func partTypesFor(role string) string {
	var out []string
	for _, t := range []string{"text", "image_url", "input_audio", "file", "refusal"} {
		for _, r := range partRoles[t] {
			if r == role {
				out = append(out, t)
			}
		}
	}
	return strings.Join(out, ", ")
}

// CheckContent reports content that is not in OpenAI's message format: an
// array whose elements are not content parts of a type the role may carry,
// with the fields that type requires. Strings and null are always valid
// (the JSON decoder already refused anything else). Requests are checked
// with it when parsed, and the host checks the messages a plugin writes.
func CheckContent(role string, c abi.Content) error {
	if partTypesFor(role) == "" {
		return nil // an unknown role: Validate reports it
	}
	raw := bytes.TrimSpace(c.Raw())
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return fmt.Errorf("content: %v", err)
	}
	for i, p := range parts {
		if err := checkPart(role, p); err != nil {
			return fmt.Errorf("content part %d: %w", i, err)
		}
	}
	return nil
}

func checkPart(role string, raw json.RawMessage) error {
	var part map[string]json.RawMessage
	if err := json.Unmarshal(raw, &part); err != nil || part == nil {
		return fmt.Errorf("want an object such as {\"type\":\"text\",\"text\":\"…\"}, got %s", clip(raw))
	}
	var typ string
	if err := json.Unmarshal(part["type"], &typ); err != nil {
		return fmt.Errorf(`want a "type" string (%s)`, partTypesFor(role))
	}
	roles, known := partRoles[typ]
	allowed := false
	for _, r := range roles {
		allowed = allowed || r == role
	}
	if !known || !allowed {
		return fmt.Errorf("type %q is not a content part of %s messages in OpenAI's format (they take %s)", clip([]byte(typ)), role, partTypesFor(role))
	}
	str := func(obj map[string]json.RawMessage, key string) bool {
		var s string
		return json.Unmarshal(obj[key], &s) == nil && obj[key] != nil
	}
	object := func(key string) (map[string]json.RawMessage, error) {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(part[key], &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%s part: %q must be an object", typ, key)
		}
		return obj, nil
	}
	switch typ {
	case "text":
		if !str(part, "text") {
			return fmt.Errorf(`a text part needs a "text" string`)
		}
	case "refusal":
		if !str(part, "refusal") {
			return fmt.Errorf(`a refusal part needs a "refusal" string`)
		}
	case "image_url":
		obj, err := object("image_url")
		if err != nil {
			return err
		}
		if !str(obj, "url") {
			return fmt.Errorf(`an image_url part needs "image_url": {"url": "…"}`)
		}
	case "input_audio":
		obj, err := object("input_audio")
		if err != nil {
			return err
		}
		if !str(obj, "data") || !str(obj, "format") {
			return fmt.Errorf(`an input_audio part needs "input_audio": {"data": "…", "format": "wav"}`)
		}
	case "file":
		obj, err := object("file")
		if err != nil {
			return err
		}
		if !str(obj, "file_data") && !str(obj, "file_id") {
			return fmt.Errorf(`a file part needs "file": {"file_id": "…"} or {"file_data": "…"}`)
		}
	}
	return nil
}

// clip shortens b for an error message.
func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}
