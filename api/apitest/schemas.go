package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/compactd/compactd/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// docURL names openapi.yaml (as JSON) inside the schema compiler. It is
// never fetched: the document is added as a resource.
const docURL = "https://compactd.invalid/api/openapi.json"

// schemas validates values against the document's schemas with a JSON
// Schema 2020-12 validator, compiling each schema once, on first use, and
// keeping it for every later exchange. kin-openapi's own 3.1 body
// validation builds and compiles a new validator on every call, which made
// validation most of a validated exchange's cost.
//
// The compiler holds the whole document, so a schema's $ref to
// #/components/schemas/… resolves inside it, and a component is compiled
// once for all the schemas that use it. Formats are asserted with
// kin-openapi's format validators (date-time, …), as kin-openapi's
// validation asserts them. It is safe for concurrent use.
type schemas struct {
	doc any // openapi.yaml as JSON values

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema // JSON pointer into doc → schema
}

func newSchemas() (*schemas, error) {
	b, err := api.JSON()
	if err != nil {
		return nil, fmt.Errorf("apitest: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("apitest: openapi.yaml as JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	for _, f := range kinFormats() {
		c.RegisterFormat(f)
	}
	c.AssertFormat()
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, fmt.Errorf("apitest: adding openapi.yaml to the schema compiler: %w", err)
	}
	return &schemas{doc: doc, compiler: c, compiled: map[string]*jsonschema.Schema{}}, nil
}

// kinFormats returns kin-openapi's format validators (the formats its
// validation asserts) as jsonschema formats: a string is checked by the
// string format of that name, an integral number by the integer format,
// any other number by the number format, as kin-openapi checks them.
func kinFormats() []*jsonschema.Format {
	names := map[string]bool{}
	for name := range openapi3.SchemaStringFormats {
		names[name] = true
	}
	for name := range openapi3.SchemaIntegerFormats {
		names[name] = true
	}
	for name := range openapi3.SchemaNumberFormats {
		names[name] = true
	}
	out := make([]*jsonschema.Format, 0, len(names))
	for name := range names {
		str, integer, number := openapi3.SchemaStringFormats[name], openapi3.SchemaIntegerFormats[name], openapi3.SchemaNumberFormats[name]
		out = append(out, &jsonschema.Format{Name: name, Validate: func(v any) error {
			switch v := v.(type) {
			case string:
				if str != nil {
					return str.Validate(v)
				}
			case json.Number:
				if f, err := v.Float64(); err == nil {
					return validateNumber(integer, number, f)
				}
			case float64:
				return validateNumber(integer, number, v)
			}
			return nil
		}})
	}
	return out
}

// validateNumber checks f with the integer format when it is integral,
// else with the number format.
func validateNumber(integer openapi3.IntegerFormatValidator, number openapi3.NumberFormatValidator, f float64) error {
	if integer != nil && f == math.Trunc(f) && !math.IsInf(f, 0) {
		return integer.Validate(int64(f))
	}
	if number != nil {
		return number.Validate(f)
	}
	return nil
}

// at returns the compiled schema at ptr, a JSON pointer into the
// document, compiling it on first use.
func (s *schemas) at(ptr string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.compiled[ptr]; ok {
		return sch, nil
	}
	sch, err := s.compiler.Compile(docURL + "#" + url.PathEscape(ptr))
	if err != nil {
		return nil, fmt.Errorf("apitest: compiling the schema at %s: %w", ptr, err)
	}
	s.compiled[ptr] = sch
	return sch, nil
}

// validate validates value against the schema at ptr.
func (s *schemas) validate(ptr string, value any) error {
	sch, err := s.at(ptr)
	if err != nil {
		return err
	}
	return sch.Validate(value)
}

// resolve returns the pointer of the object at ptr, following the
// document's references to components (a response, a request body), and
// the object.
func (s *schemas) resolve(ptr string) (string, map[string]any, error) {
	for range 16 {
		obj, ok := lookup(s.doc, ptr).(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("apitest: openapi.yaml has no object at %s", ptr)
		}
		ref, isRef := obj["$ref"].(string)
		if !isRef {
			return ptr, obj, nil
		}
		if !strings.HasPrefix(ref, "#/") {
			return "", nil, fmt.Errorf("apitest: %s refers outside the document (%s)", ptr, ref)
		}
		p, err := url.PathUnescape(ref[1:])
		if err != nil {
			return "", nil, fmt.Errorf("apitest: %s: bad reference %q: %w", ptr, ref, err)
		}
		ptr = p
	}
	return "", nil, fmt.Errorf("apitest: %s: references nest too deep", ptr)
}

// lookup returns the value at ptr (a JSON pointer) in doc, or nil.
func lookup(doc any, ptr string) any {
	if ptr == "" {
		return doc
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			cur = c[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// pointer joins tokens into a JSON pointer, escaping each.
func pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// checkBody validates a body as the content documented in the object at
// ptr (a request body or a response, resolved) says, the way
// openapi3filter does for a body: a media type the content does not list
// is an error, a media type without a schema is not validated, and the body
// is decoded with openapi3filter's decoder for its media type.
func (s *schemas) checkBody(ptr string, content openapi3.Content, header http.Header, body []byte) error {
	if len(content) == 0 {
		return nil
	}
	ct := header.Get("Content-Type")
	mt := content.Get(ct)
	if mt == nil {
		return fmt.Errorf("Content-Type %q is not documented", ct)
	}
	if mt.Schema == nil {
		return nil
	}
	key := ""
	for k, m := range content {
		if m == mt {
			key = k
		}
	}
	ptr, _, err := s.resolve(ptr)
	if err != nil {
		return err
	}
	mediaType, _, _ := strings.Cut(ct, ";")
	mediaType = strings.ToLower(strings.TrimSpace(mediaType))
	decode := openapi3filter.RegisteredBodyDecoder(mediaType)
	if decode == nil && strings.HasSuffix(mediaType, "+json") {
		decode = openapi3filter.RegisteredBodyDecoder("application/json")
	}
	if decode == nil {
		return fmt.Errorf("no decoder for the documented media type %q", mediaType)
	}
	value, err := decode(bytes.NewReader(body), header, mt.Schema, func(name string) *openapi3.Encoding { return mt.Encoding[name] })
	if err != nil {
		return fmt.Errorf("the body is not %s: %w", mediaType, err)
	}
	schemaPtr := ptr + pointer("content", key, "schema")
	if err := s.validate(schemaPtr, value); err != nil {
		return fmt.Errorf("the body does not match the schema at %s: %w", schemaPtr, err)
	}
	return nil
}
