// Package apitest checks HTTP exchanges with compactd against its OpenAPI
// document (api/openapi.yaml), so that the document and the server cannot
// drift: tests route their HTTP clients through Validator.Transport, and
// every answer the server gives is validated against the operation, status
// and schema the document declares. An endpoint, a status or a field that
// is not documented fails the test that produced it.
//
// Rules beyond the document's operations (its description states them):
//
//   - A path the document does not declare must answer 404 with the error
//     code not_found (the server's catch-all), or 401 unauthorized on the
//     TCP listener. Anything else is an undocumented endpoint.
//   - A method a declared path does not take must answer 405
//     method_not_allowed with an Allow header (or 401). HEAD is checked
//     as the path's GET, without a body.
//   - A request is validated against the document only when the server
//     accepted it (2xx): the tests send invalid requests on purpose, and a
//     rejected request needs only a documented error answer.
//   - An event stream (text/event-stream) is passed on as it arrives, never
//     buffered (streaming is what such an answer promises): its status,
//     headers and media type are checked, not its events.
//   - The proxy's answers: an operation marked `x-compactd-upstream`
//     forwards to a provider, and an answer carrying the X-Compactd-Upstream
//     header is the provider's, passed through. Its body is the provider's
//     own, which the document does not describe, so it is validated only
//     for what compactd adds: the headers, the media type, and for 2xx
//     that a JSON body is an object; any other status is checked against
//     the operation's `default` response. An answer without the header is
//     compactd's own and must match the response documented for its
//     status exactly (closed error schemas in the provider's format).
//   - A path the document does not declare may also be a path the proxy
//     forwards (under /v1/, marked X-Compactd-Upstream: the provider's
//     API, not compactd's); on the TCP listener its 401 may be in a
//     provider's format (OpenAIError or AnthropicError), and so may
//     compactd's own 502 upstream_unreachable and 504 upstream_timeout
//     when the upstream fails the exchange.
//
// It uses github.com/getkin/kin-openapi to load the document and route
// requests, decodes bodies, parameters and headers as its openapi3filter
// does, and validates them against the document's schemas with
// github.com/santhosh-tekuri/jsonschema (JSON Schema 2020-12, as OpenAPI
// 3.1 specifies: type arrays, const, keywords beside $ref), compiling each
// schema once per Validator rather than once per value as openapi3filter's
// own validation does.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/compactd/compactd/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// HeaderUpstream marks an answer that came from the proxy's upstream (see
// internal/proxy.HeaderUpstream).
const HeaderUpstream = "X-Compactd-Upstream"

// upstreamExtension marks the operations whose answers may be an
// upstream's.
const upstreamExtension = "x-compactd-upstream"

// Validator validates exchanges against the OpenAPI document and counts
// which documented responses were seen. It is safe for concurrent use.
type Validator struct {
	doc     *openapi3.T
	router  routers.Router
	schemas *schemas // the bodies' schemas, each compiled once

	mu    sync.Mutex
	hits  map[string]int // response keys (see Documented) → times seen
	codes map[string]int // error codes → times seen
}

// New loads and validates the document.
func New() (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.YAML())
	if err != nil {
		return nil, fmt.Errorf("apitest: loading openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("apitest: openapi.yaml is not a valid OpenAPI document: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("apitest: openapi.yaml is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	// Route by path alone: tests reach the daemon under any host name.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("apitest: %w", err)
	}
	s, err := newSchemas()
	if err != nil {
		return nil, err
	}
	return &Validator{doc: doc, router: router, schemas: s, hits: map[string]int{}, codes: map[string]int{}}, nil
}

// Reporter receives validation failures; *testing.T is one.
type Reporter interface {
	Errorf(format string, args ...any)
}

// Transport returns a RoundTripper that sends requests through next and
// reports every answer that does not match the document to r. The answer
// itself is passed on unchanged.
func (v *Validator) Transport(r Reporter, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper{v: v, r: r, next: next}
}

type roundTripper struct {
	v    *Validator
	r    Reporter
	next http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if isStream(resp.Header.Get("Content-Type")) {
		// Passed on unread: the caller reads the events as they come.
		if err := rt.v.Check(req, reqBody, resp, nil); err != nil {
			rt.r.Errorf("openapi: %s %s answered %d: %v", req.Method, req.URL.RequestURI(), resp.StatusCode, err)
		}
		return resp, nil
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		// A cut-off answer (a test stopping the daemon mid-request) has
		// nothing to validate; the caller sees the error.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{rerr}))
		return resp, nil
	}
	if err := rt.v.Check(req, reqBody, resp, body); err != nil {
		rt.r.Errorf("openapi: %s %s answered %d: %v", req.Method, req.URL.RequestURI(), resp.StatusCode, err)
	}
	return resp, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Check validates one exchange: the request (with its body) and the
// response (with its body, which Check does not consume).
func (v *Validator) Check(req *http.Request, reqBody []byte, resp *http.Response, body []byte) error {
	v.recordCode(resp, body)
	method := req.Method
	lookup := req.Clone(context.Background())
	if method == http.MethodHead {
		lookup.Method = http.MethodGet
	}
	route, params, err := v.router.FindRoute(lookup)
	if err != nil {
		var re *routers.RouteError
		if !errors.As(err, &re) {
			return err
		}
		return v.checkUnrouted(req, re.Reason == routers.ErrMethodNotAllowed.Error() || v.pathDeclared(lookup), resp, body)
	}
	status := fmt.Sprint(resp.StatusCode)
	respKey := responseKey(route.Operation.Responses, resp.StatusCode)
	if upstream := resp.Header.Get(HeaderUpstream) != ""; route.Operation.Extensions[upstreamExtension] == nil {
		if upstream {
			return fmt.Errorf("%s on an answer of %s %s, which does not forward to an upstream", HeaderUpstream, method, route.Path)
		}
	} else if !upstream && route.Operation.Responses.Status(resp.StatusCode) == nil {
		return fmt.Errorf("compactd's own answer (no %s) with status %d, which is not documented for %s %s", HeaderUpstream, resp.StatusCode, method, route.Path)
	} else if upstream && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		// The upstream's error: its own status and body, checked
		// against the operation's default response only.
		def := route.Operation.Responses.Default()
		if def == nil {
			return fmt.Errorf("%s %s has no default response for the upstream's answers", method, route.Path)
		}
		op := *route.Operation
		op.Responses = openapi3.NewResponses(openapi3.WithName("default", def.Value))
		r := *route
		r.Operation = &op
		route, status, respKey = &r, "default", "default"
	}
	v.hit(method, route.Path, status)
	if method == http.MethodHead {
		if route.Operation.Responses.Status(resp.StatusCode) == nil {
			return fmt.Errorf("status %d is not documented for GET %s", resp.StatusCode, route.Path)
		}
		return nil
	}
	if isStream(resp.Header.Get("Content-Type")) && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		return fmt.Errorf("an event stream with status %d", resp.StatusCode)
	}

	// Validated as openapi3filter.ValidateRequest and ValidateResponse
	// would, with each schema compiled once (see checkRequest and
	// checkResponse).
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		vreq := req.Clone(context.Background())
		vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
		vin := *in
		vin.Request = vreq
		if err := v.checkRequest(context.Background(), &vin, reqBody); err != nil {
			return fmt.Errorf("the server accepted a request the document rejects: %w", err)
		}
	}
	ct := resp.Header.Get("Content-Type")
	if !decodable(ct) {
		// Bodies kin-openapi cannot decode (HTML): check the media type
		// is documented, validate headers and status.
		if ref := route.Operation.Responses.Status(resp.StatusCode); ref != nil && ref.Value != nil && len(ref.Value.Content) > 0 && ref.Value.Content.Get(ct) == nil {
			return fmt.Errorf("Content-Type %q is not documented for status %d", ct, resp.StatusCode)
		}
	}
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: opts,
	}
	return v.checkResponse(context.Background(), rin, respKey, body, decodable(ct))
}

// responseKey returns the key of the response documented for status in
// responses ("200", "2XX" or "default", as openapi3filter picks it), or ""
// when there is none.
func responseKey(responses *openapi3.Responses, status int) string {
	if responses == nil || responses.Len() == 0 {
		return ""
	}
	st := strconv.Itoa(status)
	if responses.Value(st) != nil {
		return st
	}
	if status > 99 && status < 600 {
		if rng := st[:1] + "XX"; responses.Value(rng) != nil {
			return rng
		}
	}
	if responses.Default() != nil {
		return "default"
	}
	return ""
}

// checkRequestBody validates the body of a request the server accepted
// against its operation's request body, as openapi3filter.ValidateRequest
// does: a required body must be there, and a body must be of a documented
// media type and match its schema.
func (v *Validator) checkRequestBody(route *routers.Route, header http.Header, body []byte) error {
	ref := route.Operation.RequestBody
	if ref == nil || ref.Value == nil {
		return nil
	}
	if len(body) == 0 {
		if ref.Value.Required {
			return errors.New("request body: required but missing")
		}
		return nil
	}
	ptr := pointer("paths", route.Path, strings.ToLower(route.Method), "requestBody")
	if err := v.schemas.checkBody(ptr, ref.Value.Content, header, body); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

// pathDeclared reports whether the document declares req's path for some
// method (the router reports a templated path with an undeclared method
// as not found).
func (v *Validator) pathDeclared(req *http.Request) bool {
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodPatch} {
		r := req.Clone(context.Background())
		r.Method = m
		if _, _, err := v.router.FindRoute(r); err == nil {
			return true
		}
	}
	return false
}

// isStream reports whether ct is an event stream, which is passed on as
// it arrives.
func isStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// decodable reports whether kin-openapi validates bodies of this media
// type (JSON, YAML, plain text).
func decodable(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch mt {
	case "application/json", "application/yaml", "text/plain":
		return true
	}
	return false
}

// checkUnrouted checks the answer to a request the document has no
// operation for.
func (v *Validator) checkUnrouted(req *http.Request, pathKnown bool, resp *http.Response, body []byte) error {
	underV1 := strings.HasPrefix(req.URL.Path, "/v1/")
	if resp.Header.Get(HeaderUpstream) != "" {
		if !underV1 || pathKnown {
			return fmt.Errorf("%s on an answer to %s %s, which compactd does not forward", HeaderUpstream, req.Method, req.URL.Path)
		}
		v.hit("*", "/v1/… (forwarded)", fmt.Sprint(resp.StatusCode))
		return nil
	}
	want, code := http.StatusNotFound, "not_found"
	if pathKnown {
		want, code = http.StatusMethodNotAllowed, "method_not_allowed"
	}
	if resp.StatusCode == http.StatusUnauthorized {
		want, code = http.StatusUnauthorized, "unauthorized"
	}
	if underV1 && !pathKnown && (resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout) {
		var value any
		if err := json.Unmarshal(body, &value); err != nil || !v.providerError(value, map[int]string{
			http.StatusBadGateway: "upstream_unreachable", http.StatusGatewayTimeout: "upstream_timeout"}[resp.StatusCode]) {
			return fmt.Errorf("%d on a forwarded path is not compactd's error in a provider's format: %.300s", resp.StatusCode, body)
		}
		v.hit("*", "/v1/… (forwarded)", fmt.Sprint(resp.StatusCode))
		return nil
	}
	if resp.StatusCode != want {
		if pathKnown {
			return fmt.Errorf("undocumented operation: %s is not in openapi.yaml for this path (the answer must be 405 method_not_allowed)", req.Method)
		}
		return fmt.Errorf("undocumented endpoint: %s is not in openapi.yaml (an unknown path must answer 404 not_found)", req.URL.Path)
	}
	if req.Method == http.MethodHead {
		return nil
	}
	if pathKnown && want == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
		return errors.New("405 without an Allow header")
	}
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		return fmt.Errorf("error body is not JSON: %v (%.200q)", err, body)
	}
	if want == http.StatusUnauthorized && underV1 && !pathKnown && v.providerUnauthorized(value) {
		v.hit("*", "(any path)", fmt.Sprint(resp.StatusCode))
		return nil
	}
	if req.Header.Get("anthropic-version") != "" || req.Header.Get("x-api-key") != "" {
		// compactd answers an Anthropic client in Anthropic's error shape.
		if !v.providerError(value, code) {
			return fmt.Errorf("compactd's %d to an Anthropic client is not its error in Anthropic's shape with code %s: %.300s", resp.StatusCode, code, body)
		}
		v.hit("*", "(any path)", fmt.Sprint(resp.StatusCode))
		return nil
	}
	if err := v.validateSchema("Error", value); err != nil {
		return fmt.Errorf("error body does not match the Error schema: %w", err)
	}
	if got := value.(map[string]any)["error"].(map[string]any)["code"]; got != code {
		return fmt.Errorf("error code %v, want %s", got, code)
	}
	v.hit("*", "(any path)", fmt.Sprint(resp.StatusCode))
	return nil
}

// validateSchema validates a decoded JSON value against a component
// schema, as a response.
func (v *Validator) validateSchema(name string, value any) error {
	ref := v.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("openapi.yaml has no schema %s", name)
	}
	return v.schemas.validate(pointer("components", "schemas", name), value)
}

// providerUnauthorized reports whether value is the proxy's 401 in a
// provider's format (the TCP listener's answer on a forwarded path).
func (v *Validator) providerUnauthorized(value any) bool {
	obj, _ := value.(map[string]any)
	inner, _ := obj["error"].(map[string]any)
	if v.validateSchema("OpenAIError", value) == nil {
		return inner["code"] == "unauthorized"
	}
	return v.validateSchema("AnthropicError", value) == nil && inner["type"] == "authentication_error"
}

// providerError reports whether value is one of compactd's own errors in
// a provider's format, with the ProxyErrorCode code (OpenAI's "code";
// Anthropic's message starts with "compactd (CODE)").
func (v *Validator) providerError(value any, code string) bool {
	obj, _ := value.(map[string]any)
	inner, _ := obj["error"].(map[string]any)
	if v.validateSchema("OpenAIError", value) == nil {
		return inner["code"] == code
	}
	msg, _ := inner["message"].(string)
	return v.validateSchema("AnthropicError", value) == nil && strings.HasPrefix(msg, "compactd ("+code+")")
}

func (v *Validator) hit(method, path, status string) {
	v.mu.Lock()
	v.hits[method+" "+path+" "+status]++
	v.mu.Unlock()
}

// Documented returns every documented response as "METHOD path status",
// sorted.
func (v *Validator) Documented() []string {
	var out []string
	for path, item := range v.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				out = append(out, fmt.Sprintf("%s %s %s", method, path, status))
			}
		}
	}
	sort.Strings(out)
	return out
}

// Seen returns the responses seen so far ("METHOD path status" → count),
// including HEAD requests and "(unrouted)" answers to undeclared paths.
func (v *Validator) Seen() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(v.hits))
	for k, n := range v.hits {
		out[k] = n
	}
	return out
}

// Unseen returns the documented responses not seen so far.
func (v *Validator) Unseen() []string {
	seen := v.Seen()
	var out []string
	for _, d := range v.Documented() {
		if seen[d] == 0 {
			out = append(out, d)
		}
	}
	return out
}

// CodesSeen returns the error codes seen in error answers so far (code →
// count).
func (v *Validator) CodesSeen() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(v.codes))
	for k, n := range v.codes {
		out[k] = n
	}
	return out
}

// recordCode notes the error code of an error answer.
func (v *Validator) recordCode(resp *http.Response, body []byte) {
	if resp.StatusCode < 400 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return
	}
	var eb struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		v.mu.Lock()
		v.codes[eb.Error.Code]++
		v.mu.Unlock()
	}
}
