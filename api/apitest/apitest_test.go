package apitest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// recorder collects what a Validator reports.
type recorder struct{ errs []string }

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestValidatorRejectsDrift: the validator is not vacuous: answers that
// differ from the document are reported, documented ones are not.
func TestValidatorRejectsDrift(t *testing.T) {
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	health := `{"status":"ok","policies":1}`
	tests := []struct {
		name, method, path, status, ctype, body, allow string
		bad                                            bool
	}{
		{"documented", "GET", "/healthz", "200", "application/json", health, "", false},
		{"undocumented field", "GET", "/healthz", "200", "application/json", `{"status":"ok","policies":1,"extra":true}`, "", true},
		{"wrong type", "GET", "/healthz", "200", "application/json", `{"status":"ok","policies":"1"}`, "", true},
		{"value outside the enum", "GET", "/healthz", "200", "application/json", `{"status":"fine","policies":1}`, "", true},
		{"undocumented status", "GET", "/healthz", "418", "application/json", `{"error":{"code":"internal","message":"x"}}`, "", true},
		{"undocumented endpoint", "GET", "/v1/secret", "200", "application/json", `{}`, "", true},
		{"unknown path, 404 not_found", "GET", "/v1/secret", "404", "application/json", `{"error":{"code":"not_found","message":"no"}}`, "", false},
		{"unknown path, wrong code", "GET", "/v1/secret", "404", "application/json", `{"error":{"code":"unknown_policy","message":"no"}}`, "", true},
		{"error code not for this response", "GET", "/v1/policies/x", "404", "application/json", `{"error":{"code":"not_found","message":"no"}}`, "", true},
		{"error code the document does not know", "GET", "/v1/status", "400", "application/json", `{"error":{"code":"oops","message":"no"}}`, "", true},
		{"405 with Allow", "DELETE", "/healthz", "405", "application/json", `{"error":{"code":"method_not_allowed","message":"no"}}`, "GET, HEAD", false},
		{"405 without Allow", "DELETE", "/healthz", "405", "application/json", `{"error":{"code":"method_not_allowed","message":"no"}}`, "", true},
		{"undocumented method", "DELETE", "/v1/policies/x", "200", "application/json", `{}`, "", true},
		{"undocumented media type", "GET", "/", "200", "text/plain", "hi", "", true},
		{"HTML page", "GET", "/", "200", "text/html; charset=utf-8", "<p>hi</p>", "", false},
		{"missing required field", "GET", "/healthz", "200", "application/json", `{"policies":1}`, "", true},
		{"not JSON", "GET", "/healthz", "200", "application/json", `{"status":`, "", true},
		{"undocumented JSON-like media type", "GET", "/healthz", "200", "application/yaml", "status: ok", "", true},
		{"media type parameters", "GET", "/healthz", "200", "application/json; charset=utf-8", health, "", false},
		{"keywords beside $ref", "POST", "/v1/compact", "404", "application/json", `{"error":{"code":"unknown_policy","message":"no"}}`, "", false},
		{"keywords beside $ref, outside their enum", "POST", "/v1/compact", "404", "application/json", `{"error":{"code":"internal","message":"no"}}`, "", true},
		{"component response", "POST", "/v1/compact", "500", "application/json", `{"error":{"code":"internal","message":"no"}}`, "", false},
		{"component response, extra field", "POST", "/v1/compact", "500", "application/json", `{"error":{"code":"internal","message":"no","x":1}}`, "", true},
		{"date-time", "GET", "/v1/requests", "200", "application/json", requestsPage("2026-11-27T08:00:00Z"), "", false},
		{"date-time, malformed", "GET", "/v1/requests", "200", "application/json", requestsPage("yesterday"), "", true},
		{"YAML body", "GET", "/v1/openapi.yaml", "200", "application/yaml", "openapi: 3.1.0\ninfo: {}\npaths: {}\n", "", false},
		{"YAML body, missing required field", "GET", "/v1/openapi.yaml", "200", "application/yaml", "openapi: 3.1.0\n", "", true},
		{"plain text body", "GET", "/metrics", "200", "text/plain; version=0.0.4", "up 1\n", "", false},
		{"unknown path, error with an extra field", "GET", "/v1/secret", "404", "application/json", `{"error":{"code":"not_found","message":"no","x":1}}`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {tt.ctype}}
			if tt.allow != "" {
				h.Set("Allow", tt.allow)
			}
			code := map[string]int{"200": 200, "404": 404, "405": 405, "418": 418, "400": 400, "500": 500}[tt.status]
			if errs := exchange(t, v, tt.method, tt.path, "", code, h, tt.body); (len(errs) > 0) != tt.bad {
				t.Errorf("reported %v, want a report: %v", errs, tt.bad)
			}
		})
	}
}

// requestsPage is a GET /v1/requests answer with one record at time.
func requestsPage(time string) string {
	return `{"requests":[{"id":"d-1","time":"` + time + `","kind":"proxy","compacted":false,"compactd_ms":1}],"money":{"paid_usd":0,"full_usd":0,"priced":0,"unpriced":0}}`
}

// exchange sends a request (with a JSON body unless reqBody is "")
// through v's transport to a server that answers status, header and body,
// checks the body reaches the caller unchanged, and returns what v
// reported.
func exchange(t *testing.T, v *Validator, method, path, reqBody string, status int, header http.Header, body string) []string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, vs := range header {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	defer srv.Close()
	var rec recorder
	c := &http.Client{Transport: v.Transport(&rec, nil)}
	var rd io.Reader
	if reqBody != "" {
		rd = strings.NewReader(reqBody)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	if reqBody != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != body {
		t.Errorf("the body was not passed on: %q", b)
	}
	return rec.errs
}

// compactAnswer is a documented POST /v1/compact answer.
const compactAnswer = `{"messages":[],"compacted":false,"summary":"","conversation_id":"c","warnings":[],"stats":{"tokens_before":0,"tokens_after":0,"messages_before":0,"messages_after":0,"encoding":"o200k_base","duration_ns":1,"stages":[]}}`

// compactServer returns a validator and a server that answers every
// request with compactAnswer (closed when the test ends).
func compactServer(t *testing.T) (*Validator, *httptest.Server) {
	t.Helper()
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, compactAnswer)
	}))
	t.Cleanup(srv.Close)
	return v, srv
}

// checkReported sends req through v's transport (redirects not followed)
// and checks that v reported a mismatch exactly when bad.
func checkReported(t *testing.T, v *Validator, req *http.Request, bad bool) {
	t.Helper()
	var rec recorder
	c := &http.Client{Transport: v.Transport(&rec, nil), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := len(rec.errs) > 0; got != bad {
		t.Errorf("reported %v, want a report: %v", rec.errs, bad)
	}
}

// TestValidatorChecksAcceptedRequests: a request the server accepted must
// match the document too.
func TestValidatorChecksAcceptedRequests(t *testing.T) {
	v, srv := compactServer(t)
	for body, bad := range map[string]bool{
		`{"policy":"x","messages":[{"role":"user","content":"hi"}]}`:                                       false,
		`{"policy":"x","messages":[{"role":"robot","content":"hi"}]}`:                                      true,
		`{"policy":"x","surprise":1,"messages":[]}`:                                                        true,
		`{"policy":"x","context_window":-5,"messages":[]}`:                                                 true,
		`{"policy":"x","context_window":2147483648,"messages":[]}`:                                         true,
		`{"pipeline":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"],"messages":[]}`: true,
		`{"policy":"x","messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"image_url","image_url":{"url":"u"}},{"type":"file","file":{"file_id":"f"}}]}]}`: false,
		`{"policy":"x","messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`:                                                                                                                        true,
		`{"policy":"x","messages":[{"role":"user","content":[{"type":"text"}]}]}`:                                                                                                                                     true,
		`{"policy":"x","messages":[{"role":"user","content":[{"type":"file","file":{}}]}]}`:                                                                                                                           true,
		`{"policy":"x","messages":[{"role":"user","content":["hi"]}]}`:                                                                                                                                                true,
		`{"policy":"x","format":"anthropic","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`:                                                                        false,
		`{"policy":"x","format":"openai","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`:                                                                           true,
	} {
		var rec recorder
		c := &http.Client{Transport: v.Transport(&rec, nil)}
		resp, err := c.Post(srv.URL+"/v1/compact", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := len(rec.errs) > 0; got != bad {
			t.Errorf("%s: reported %v, want a report: %v", body, rec.errs, bad)
		}
	}
}

// TestValidatorChecksRequestBodies: an accepted request's body must be
// there when the document requires one, of a documented media type, and
// decodable.
func TestValidatorChecksRequestBodies(t *testing.T) {
	v, srv := compactServer(t)
	const ok = `{"policy":"x","messages":[]}`
	tests := []struct {
		name, ctype, body string
		bad               bool
	}{
		{"documented", "application/json", ok, false},
		{"media type parameters", "application/json; charset=utf-8", ok, false},
		{"no body", "", "", true},
		{"undocumented media type", "text/plain", ok, true},
		{"not JSON", "application/json", `{"policy":`, true},
		{"wrong type", "application/json", `{"policy":1,"messages":[]}`, true},
		{"missing required field", "application/json", `{"policy":"x"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/compact", strings.NewReader(tt.body))
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			checkReported(t, v, req, tt.bad)
		})
	}
}

// TestValidatorProxyAnswers: on the proxy's routes an answer marked
// X-Compactd-Upstream is the provider's (only what compactd adds is
// checked), one without it is compactd's own and must match its documented
// response exactly; forwarded paths are the provider's too.
func TestValidatorProxyAnswers(t *testing.T) {
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	const chat = "/v1/chat/completions"
	proxyOff := `{"error":{"message":"compactd: off","type":"compactd_error","param":null,"code":"proxy_off"}}`
	tests := []struct {
		name, method, path, upstream string
		status                       int
		ctype, body                  string
		bad                          bool
	}{
		{"upstream success", "POST", chat, "openai", 200, "application/json", `{"id":"x","choices":[]}`, false},
		{"upstream success without the marker", "POST", chat, "", 200, "application/json", `{"id":"x"}`, true},
		{"upstream success that is not an object", "POST", chat, "openai", 200, "application/json", `[1]`, true},
		{"upstream error, its own body", "POST", chat, "openai", 404, "application/json", `{"error":{"message":"no model","type":"invalid_request_error","param":"model","code":"model_not_found"}}`, false},
		{"upstream error, not JSON", "POST", chat, "openai", 503, "text/html", `<h1>busy</h1>`, false},
		{"upstream, wrong provider name", "POST", chat, "gemini", 503, "text/plain", `busy`, true},
		{"compactd's own 404", "POST", chat, "", 404, "application/json", proxyOff, false},
		{"compactd's own 404, extra field", "POST", chat, "", 404, "application/json", strings.Replace(proxyOff, `"param":null`, `"param":null,"hint":1`, 1), true},
		{"compactd's own 404, wrong code", "POST", chat, "", 404, "application/json", strings.Replace(proxyOff, "proxy_off", "upstream_timeout", 1), true},
		{"compactd's own answer, undocumented status", "POST", chat, "", 503, "application/json", proxyOff, true},
		{"compactd's own Anthropic 504", "POST", "/v1/messages", "", 504, "application/json", `{"type":"error","error":{"type":"api_error","message":"compactd (upstream_timeout): slow"}}`, false},
		{"the marker on compactd's own endpoint", "GET", "/healthz", "openai", 200, "application/json", `{"status":"ok","policies":1}`, true},
		{"forwarded path", "GET", "/v1/models", "openai", 200, "application/json", `{"data":[]}`, false},
		{"forwarded path, deeper", "POST", "/v1/messages/count_tokens", "anthropic", 200, "application/json", `{"input_tokens":3}`, false},
		{"the marker outside /v1/", "GET", "/v2/models", "openai", 200, "application/json", `{}`, true},
		{"forwarded path's 401 in a provider's format", "GET", "/v1/models", "", 401, "application/json", `{"type":"error","error":{"type":"authentication_error","message":"compactd (unauthorized): token"}}`, false},
		{"a 401 in a provider's format elsewhere", "GET", "/v2/models", "", 401, "application/json", `{"type":"error","error":{"type":"authentication_error","message":"compactd (unauthorized): token"}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {tt.ctype}}
			if tt.upstream != "" {
				h.Set(HeaderUpstream, tt.upstream)
			}
			if errs := exchange(t, v, tt.method, tt.path, `{"model":"m","messages":[]}`, tt.status, h, tt.body); (len(errs) > 0) != tt.bad {
				t.Errorf("reported %v, want a report: %v", errs, tt.bad)
			}
		})
	}
}

// TestValidatorPassesStreamsOn: an event stream reaches the caller as it
// arrives; the validator does not wait for its end.
func TestValidatorPassesStreamsOn(t *testing.T) {
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set(HeaderUpstream, "openai")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	defer close(release)
	var rec recorder
	c := &http.Client{Transport: v.Transport(&rec, nil)}
	resp, err := c.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	if err != nil || string(buf[:n]) != "data: first\n\n" {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	if len(rec.errs) > 0 {
		t.Fatalf("reported %v", rec.errs)
	}
}

// TestValidatorChecksParametersAndHeaders: an accepted request's
// parameters (query, header) and an answer's headers must match the
// document: types, bounds, const and enum values, required ones present.
func TestValidatorChecksParametersAndHeaders(t *testing.T) {
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	page := requestsPage("2026-11-27T08:00:00Z")
	long := strings.Repeat("x", 257)
	const chat = "/v1/chat/completions"
	tests := []struct {
		name, method, path string
		reqHeader          http.Header
		status             int
		respHeader         http.Header
		body               string
		bad                bool
	}{
		{"query integer", "GET", "/v1/requests?limit=5", nil, 200, nil, page, false},
		{"query integer over its maximum", "GET", "/v1/requests?limit=1001", nil, 200, nil, page, true},
		{"query integer below its minimum", "GET", "/v1/requests?limit=0", nil, 200, nil, page, true},
		{"query integer that is not one", "GET", "/v1/requests?limit=five", nil, 200, nil, page, true},
		{"query integer, empty", "GET", "/v1/requests?limit=", nil, 200, nil, page, true},
		{"query string over its maxLength", "GET", "/v1/requests?conversation=" + long, nil, 200, nil, page, true},
		{"query string, repeated, the first non-empty counts", "GET", "/v1/requests?conversation=&conversation=" + long, nil, 200, nil, page, true},
		{"required query parameter", "GET", "/conversation?id=c", nil, 200, http.Header{"Content-Type": {"text/html"}}, "<p>c</p>", false},
		{"required query parameter missing", "GET", "/conversation", nil, 200, http.Header{"Content-Type": {"text/html"}}, "<p>c</p>", true},
		{"header parameter", "POST", chat, http.Header{"X-Compactd-Title": {"a title"}}, 200, http.Header{HeaderUpstream: {"openai"}}, `{}`, false},
		{"header parameter over its maxLength", "POST", chat, http.Header{"X-Compactd-Title": {long}}, 200, http.Header{HeaderUpstream: {"openai"}}, `{}`, true},
		{"answer header const", "POST", chat, nil, 200, http.Header{HeaderUpstream: {"openai"}, "X-Compactd-Compacted": {"true"}}, `{}`, false},
		{"answer header other than its const", "POST", chat, nil, 200, http.Header{HeaderUpstream: {"openai"}, "X-Compactd-Compacted": {"yes"}}, `{}`, true},
		{"answer header outside its enum", "POST", chat, nil, 200, http.Header{HeaderUpstream: {"gemini"}}, `{}`, true},
		{"required answer header", "POST", "/v1/compact", nil, 401, http.Header{"WWW-Authenticate": {"Bearer"}}, `{"error":{"code":"unauthorized","message":"no"}}`, false},
		{"required answer header missing", "POST", "/v1/compact", nil, 401, nil, `{"error":{"code":"unauthorized","message":"no"}}`, true},
		{"required header of a redirect", "GET", "/conversation?id=c&token=t", nil, 303, http.Header{"Location": {"/conversation?id=c"}}, "", false},
		{"required header of a redirect missing", "GET", "/conversation?id=c&token=t", nil, 303, nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				for k, vs := range tt.respHeader {
					w.Header()[k] = vs
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			var rd io.Reader
			if tt.method == "POST" {
				rd = strings.NewReader(`{"policy":"x","model":"m","messages":[]}`)
			}
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, rd)
			if rd != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			for k, vs := range tt.reqHeader {
				req.Header[k] = vs
			}
			checkReported(t, v, req, tt.bad)
		})
	}
}
