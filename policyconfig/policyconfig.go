// Package policyconfig validates a policy's config: it compiles the JSON
// Schema a plugin declares in describe, checks the plugin's defaults against
// it, and merges config layers (defaults, environment, config file, request
// overrides) into the object a plugin receives.
package policyconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid policy config")

// Schema is a compiled config schema with the plugin's defaults. It is
// immutable and safe for concurrent use.
type Schema struct {
	policy     string
	compiled   *jsonschema.Schema
	properties map[string]bool
	openKeys   bool // additionalProperties allows keys outside properties
	defaults   map[string]any

	// valid remembers configs that validated: a daemon resolves the same
	// few on every request, and validating took tens of microseconds.
	validMu sync.Mutex
	valid   map[string]struct{}
	// intKeys are the properties whose type is integer: their values are
	// sent as integer literals (see integral).
	intKeys map[string]bool
	// plain is Resolve's answer without layers (the defaults alone),
	// kept once computed: a policy the config file and the request leave
	// alone resolves to it on every request.
	plain atomic.Pointer[json.RawMessage]
}

// maxValid bounds Schema.valid; when full it starts over.
const maxValid = 64

// Compile compiles a plugin's config schema and checks its defaults. An
// empty schema accepts any object. Only in-document $refs are resolved.
func Compile(policy string, schema, defaults json.RawMessage) (*Schema, error) {
	s := &Schema{policy: policy, defaults: map[string]any{}}
	if len(bytes.TrimSpace(defaults)) > 0 && string(bytes.TrimSpace(defaults)) != "null" {
		if err := decodeObject(defaults, &s.defaults); err != nil {
			return nil, fmt.Errorf("%w: policy %s: defaults: %v", ErrInvalid, policy, err)
		}
	}
	if len(bytes.TrimSpace(schema)) == 0 || string(bytes.TrimSpace(schema)) == "null" {
		s.openKeys = true
		return s, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("%w: policy %s: config_schema is not JSON: %v", ErrInvalid, policy, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: policy %s: config_schema must be an object", ErrInvalid, policy)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	const url = "compactd:///config_schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("%w: policy %s: config_schema: %v", ErrInvalid, policy, err)
	}
	if s.compiled, err = c.Compile(url); err != nil {
		return nil, fmt.Errorf("%w: policy %s: config_schema: %v", ErrInvalid, policy, err)
	}
	s.properties, s.intKeys = map[string]bool{}, map[string]bool{}
	if props, ok := obj["properties"].(map[string]any); ok {
		for k, v := range props {
			s.properties[k] = true
			if prop, ok := v.(map[string]any); ok && isIntegerType(prop["type"]) {
				s.intKeys[k] = true
			}
		}
	}
	switch ap := obj["additionalProperties"].(type) {
	case nil:
		s.openKeys = len(s.properties) == 0
	case bool:
		s.openKeys = ap
	default:
		s.openKeys = true
	}
	for k := range s.intKeys {
		if v, ok := s.defaults[k]; ok {
			iv, err := integral(v)
			if err != nil {
				return nil, fmt.Errorf("%w: policy %s: defaults: %s: %v", ErrInvalid, policy, k, err)
			}
			s.defaults[k] = iv
		}
	}
	if _, err := s.Resolve(); err != nil {
		return nil, fmt.Errorf("policy %s: defaults do not match config_schema: %w", policy, err)
	}
	return s, nil
}

// Defaults returns a copy of the plugin's defaults.
func (s *Schema) Defaults() map[string]any {
	out := make(map[string]any, len(s.defaults))
	for k, v := range s.defaults {
		out[k] = v
	}
	return out
}

// Keys returns the config keys the schema names, sorted.
func (s *Schema) Keys() []string {
	keys := make([]string, 0, len(s.properties))
	for k := range s.properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Layer is one source of config values, lowest precedence first in Resolve.
type Layer struct {
	// Source names the layer in errors, e.g. "config file" or "request".
	Source string
	Values map[string]any
}

// CheckKeys reports the first key of values that the schema does not know.
func (s *Schema) CheckKeys(source string, values map[string]any) error {
	if s.openKeys {
		return nil
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !s.properties[k] {
			return fmt.Errorf("%w: %s: unknown key %q for policy %s (known: %s)", ErrInvalid, source, k, s.policy, strings.Join(s.Keys(), ", "))
		}
	}
	return nil
}

// Resolve merges the defaults and the layers (later layers win, key by key),
// validates the result and returns it as JSON.
func (s *Schema) Resolve(layers ...Layer) (json.RawMessage, error) {
	if len(layers) == 0 {
		if p := s.plain.Load(); p != nil {
			return bytes.Clone(*p), nil
		}
	}
	merged := s.Defaults()
	for _, l := range layers {
		if err := s.CheckKeys(l.Source, l.Values); err != nil {
			return nil, err
		}
		for k, v := range l.Values {
			if s.intKeys[k] {
				iv, err := integral(v)
				if err != nil {
					return nil, fmt.Errorf("%w: %s: policy %s: %s: %v", ErrInvalid, l.Source, s.policy, k, err)
				}
				v = iv
			}
			merged[k] = v
		}
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return nil, fmt.Errorf("%w: policy %s: %v", ErrInvalid, s.policy, err)
	}
	if s.compiled != nil && !s.validated(b) {
		// Validate what the plugin will decode: the JSON, read back with
		// json.Number semantics as the schema library expects.
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%w: policy %s: %v", ErrInvalid, s.policy, err)
		}
		if err := s.compiled.Validate(doc); err != nil {
			return nil, fmt.Errorf("%w: policy %s: %s", ErrInvalid, s.policy, describe(err))
		}
		s.validMu.Lock()
		if len(s.valid) >= maxValid || s.valid == nil {
			s.valid = make(map[string]struct{}, maxValid)
		}
		s.valid[string(b)] = struct{}{}
		s.validMu.Unlock()
	}
	if len(layers) == 0 {
		p := json.RawMessage(bytes.Clone(b))
		s.plain.Store(&p)
	}
	return b, nil
}

// validated reports whether the config b validated before.
func (s *Schema) validated(b []byte) bool {
	s.validMu.Lock()
	defer s.validMu.Unlock()
	_, ok := s.valid[string(b)]
	return ok
}

// isIntegerType reports whether a JSON Schema "type" is integer (alone, or
// with null).
func isIntegerType(t any) bool {
	switch t := t.(type) {
	case string:
		return t == "integer"
	case []any:
		found := false
		for _, x := range t {
			switch x {
			case "integer":
				found = true
			case "null":
			default:
				return false
			}
		}
		return found
	}
	return false
}

// integral returns an integer-typed key's value as an int64 when it is a
// whole number written any way (8, 8.0, 1e3; from JSON, YAML or a flag),
// so the plugin receives an integer literal it can decode into an int. A
// whole number outside int64 (1e100) is an error: JSON Schema calls it an
// integer, but no plugin can read it as one. Anything else is returned as
// is, for the schema to judge.
func integral(v any) (any, error) {
	var f float64
	switch n := v.(type) {
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, nil
		}
		var err error
		if f, err = n.Float64(); err != nil && !errors.Is(err, strconv.ErrRange) {
			return v, nil
		}
	case float64:
		f = n
	case float32:
		f = float64(n)
	case uint64:
		if n > math.MaxInt64 {
			return nil, fmt.Errorf("%d is out of range (want an integer from %d to %d)", n, int64(math.MinInt64), int64(math.MaxInt64))
		}
		return int64(n), nil
	case uint:
		return integral(uint64(n))
	default:
		return v, nil
	}
	if f != math.Trunc(f) || math.IsNaN(f) {
		return v, nil // not a whole number: the schema says so
	}
	if f < math.MinInt64 || f >= math.MaxInt64 {
		return nil, fmt.Errorf("%v is out of range (want an integer from %d to %d)", v, int64(math.MinInt64), int64(math.MaxInt64))
	}
	return int64(f), nil
}

// describe flattens a schema validation error into one line that names the
// offending key.
func describe(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	printer := message.NewPrinter(language.English)
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := strings.Join(e.InstanceLocation, ".")
			if loc == "" {
				loc = "config"
			}
			parts = append(parts, loc+": "+e.ErrorKind.LocalizedString(printer))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(parts, "; ")
}

// ParseValue reads a command-line value: JSON when it parses as JSON
// (numbers, true/false/null, quoted strings, arrays, objects), otherwise the
// text itself as a string.
func ParseValue(text string) any {
	var v any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&v); err == nil && !dec.More() {
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				return i
			}
			f, _ := n.Float64()
			return f
		}
		return v
	}
	return text
}

func decodeObject(b json.RawMessage, into *map[string]any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("want a JSON object: %v", err)
	}
	if *into == nil {
		*into = map[string]any{}
	}
	return nil
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("config_schema may not load %s: only in-document $refs are resolved", url)
}
