package apitest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
)

// Parameters and response headers: openapi3filter decodes a value by its
// schema's type and style, then validates it with a validator it compiles
// on every call, as it does bodies. A value whose schema is one primitive
// type in its location's default style (all of compactd's) is decoded here
// the way openapi3filter decodes it and validated with v.schemas; any
// other is left to openapi3filter, so nothing goes unchecked.

// checkRequest validates a request the server accepted, as
// openapi3filter.ValidateRequest does: its security requirements, its
// parameters and its body.
func (v *Validator) checkRequest(ctx context.Context, in *openapi3filter.RequestValidationInput, body []byte) error {
	route := in.Route
	op := route.Operation
	var errs []error
	security := op.Security
	if security == nil {
		security = &route.Spec.Security
	}
	if err := openapi3filter.ValidateSecurityRequirements(ctx, in, *security); err != nil {
		errs = append(errs, err)
	}
	method := strings.ToLower(route.Method)
	for i, ref := range route.PathItem.Parameters {
		p := ref.Value
		if op.Parameters != nil && op.Parameters.GetByInAndName(p.In, p.Name) != nil {
			continue // the operation's own parameter of that name
		}
		errs = append(errs, v.checkParameter(ctx, in, p, pointer("paths", route.Path, "parameters", strconv.Itoa(i))))
	}
	for i, ref := range op.Parameters {
		errs = append(errs, v.checkParameter(ctx, in, ref.Value, pointer("paths", route.Path, method, "parameters", strconv.Itoa(i))))
	}
	errs = append(errs, v.checkRequestBody(route, in.Request.Header, body))
	return errors.Join(errs...)
}

// checkParameter validates one parameter of the request, declared at ptr,
// as openapi3filter.ValidateParameter does.
func (v *Validator) checkParameter(ctx context.Context, in *openapi3filter.RequestValidationInput, p *openapi3.Parameter, ptr string) error {
	if p.Content != nil || p.Schema == nil || p.AllowEmptyValue || p.Style != "" || p.Explode != nil || !primitive(p.Schema.Value) {
		return openapi3filter.ValidateParameter(ctx, in, p)
	}
	var raw string
	found := false
	switch p.In {
	case openapi3.ParameterInPath:
		raw, found = in.PathParams[p.Name]
		found = found && raw != ""
	case openapi3.ParameterInQuery:
		values := in.GetQueryParams()[p.Name]
		if found = len(values) > 0; found {
			// openapi3filter takes the first non-empty value.
			raw = values[0]
			if i := slices.IndexFunc(values, func(s string) bool { return s != "" }); i >= 0 {
				raw = values[i]
			}
		}
	case openapi3.ParameterInHeader:
		values := in.Request.Header[http.CanonicalHeaderKey(p.Name)]
		if found = len(values) > 0; found {
			raw = values[0]
		}
	default:
		return openapi3filter.ValidateParameter(ctx, in, p)
	}
	if !found {
		if p.Required {
			return &openapi3filter.RequestError{Input: in, Parameter: p, Reason: openapi3filter.ErrInvalidRequired.Error(), Err: openapi3filter.ErrInvalidRequired}
		}
		return nil
	}
	value, err := parsePrimitive(raw, p.Schema.Value)
	if err != nil {
		return &openapi3filter.RequestError{Input: in, Parameter: p, Err: err}
	}
	if value == nil {
		return &openapi3filter.RequestError{Input: in, Parameter: p, Reason: openapi3filter.ErrInvalidEmptyValue.Error(), Err: openapi3filter.ErrInvalidEmptyValue}
	}
	ptr, _, err = v.schemas.resolve(ptr)
	if err != nil {
		return err
	}
	if err := v.schemas.validate(ptr+"/schema", value); err != nil {
		return &openapi3filter.RequestError{Input: in, Parameter: p, Err: err}
	}
	return nil
}

// checkResponse validates a response's status, headers and (when decode)
// body against the response documented under key (see responseKey), as
// openapi3filter.ValidateResponse does with IncludeResponseStatus.
func (v *Validator) checkResponse(ctx context.Context, rin *openapi3filter.ResponseValidationInput, key string, body []byte, decode bool) error {
	route := rin.RequestValidationInput.Route
	switch rin.Status {
	case http.StatusNotModified, http.StatusPermanentRedirect, http.StatusTemporaryRedirect, http.StatusMovedPermanently:
		return nil // openapi3filter does not look at these
	}
	if route.Operation.Responses.Len() == 0 {
		return nil
	}
	if key == "" {
		return &openapi3filter.ResponseError{Input: rin, Reason: "status is not supported"}
	}
	ref := route.Operation.Responses.Value(key)
	if ref == nil || ref.Value == nil {
		return &openapi3filter.ResponseError{Input: rin, Reason: "response has not been resolved"}
	}
	respPtr, _, err := v.schemas.resolve(pointer("paths", route.Path, strings.ToLower(route.Method), "responses", key))
	if err != nil {
		return err
	}
	names := make([]string, 0, len(ref.Value.Headers))
	for name := range ref.Value.Headers {
		if name != "Content-Type" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if !slices.ContainsFunc(names, func(name string) bool { return !simpleHeader(ref.Value.Headers[name].Value) }) {
		for _, name := range names {
			if err := v.checkHeader(rin, respPtr, name, ref.Value.Headers[name].Value); err != nil {
				return err
			}
		}
	} else {
		// A header openapi3filter decodes otherwise: let it check the
		// status and headers (not the body).
		o := *rin.Options
		o.ExcludeResponseBody = true
		r := *rin
		r.Options = &o
		if err := openapi3filter.ValidateResponse(ctx, &r); err != nil {
			return err
		}
	}
	if !decode {
		return nil
	}
	if err := v.schemas.checkBody(respPtr, ref.Value.Content, rin.Header, body); err != nil {
		return fmt.Errorf("response body (status %d): %w", rin.Status, err)
	}
	return nil
}

// primitive reports whether s is a schema of one primitive type that
// openapi3filter decodes from a parameter's or header's text directly
// (parsePrimitive).
func primitive(s *openapi3.Schema) bool {
	if s == nil || s.Default != nil || len(s.AllOf) > 0 || len(s.AnyOf) > 0 || len(s.OneOf) > 0 || s.Not != nil {
		return false
	}
	types := s.Type.Slice()
	if len(types) != 1 {
		return false
	}
	switch types[0] {
	case openapi3.TypeString, openapi3.TypeInteger, openapi3.TypeNumber, openapi3.TypeBoolean:
		return true
	}
	return false
}

// parsePrimitive decodes raw as openapi3filter does for a schema of one
// primitive type: nil for an empty non-string.
func parsePrimitive(raw string, s *openapi3.Schema) (any, error) {
	typ := s.Type.Slice()[0]
	if raw == "" && typ != openapi3.TypeString {
		return nil, nil
	}
	bad := func(err error) error {
		return &openapi3filter.ParseError{Kind: openapi3filter.KindInvalidFormat, Value: raw, Reason: "an invalid " + typ, Cause: err}
	}
	switch typ {
	case openapi3.TypeInteger:
		bits := 64
		if s.Format == "int32" {
			bits = 32
		}
		n, err := strconv.ParseInt(raw, 10, bits)
		if err != nil {
			return nil, bad(err.(*strconv.NumError).Err)
		}
		return n, nil
	case openapi3.TypeNumber:
		if strings.ContainsFunc(raw, func(r rune) bool { return !strings.ContainsRune("+-.0123456789eE", r) }) {
			return nil, bad(strconv.ErrSyntax)
		}
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return nil, bad(err.(*strconv.NumError).Err)
		}
		return f, nil
	case openapi3.TypeBoolean:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return nil, bad(err.(*strconv.NumError).Err)
		}
		return b, nil
	}
	return raw, nil
}

// simpleHeader reports whether a response header is decoded as
// parsePrimitive decodes it.
func simpleHeader(h *openapi3.Header) bool {
	return h != nil && h.Content == nil && h.Style == "" && h.Explode == nil && h.Schema != nil && primitive(h.Schema.Value)
}

// checkHeader validates the response header name, declared in the
// response at respPtr, as openapi3filter does.
func (v *Validator) checkHeader(rin *openapi3filter.ResponseValidationInput, respPtr, name string, h *openapi3.Header) error {
	values := rin.Header[http.CanonicalHeaderKey(name)]
	if len(values) == 0 {
		if h.Required {
			return &openapi3filter.ResponseError{Input: rin, Reason: fmt.Sprintf("response header %q missing", name)}
		}
		return nil
	}
	value, err := parsePrimitive(values[0], h.Schema.Value)
	if err != nil {
		return &openapi3filter.ResponseError{Input: rin, Reason: fmt.Sprintf("unable to decode header %q value", name), Err: err}
	}
	ptr, _, err := v.schemas.resolve(respPtr + pointer("headers", name))
	if err != nil {
		return err
	}
	if err := v.schemas.validate(ptr+"/schema", value); err != nil {
		return &openapi3filter.ResponseError{Input: rin, Reason: fmt.Sprintf("response header %q doesn't match schema", name), Err: err}
	}
	return nil
}
