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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ctype)
				if tt.allow != "" {
					w.Header().Set("Allow", tt.allow)
				}
				code := map[string]int{"200": 200, "404": 404, "405": 405, "418": 418, "400": 400}[tt.status]
				w.WriteHeader(code)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			var rec recorder
			c := &http.Client{Transport: v.Transport(&rec, nil)}
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != tt.body {
				t.Errorf("the body was not passed on: %q", b)
			}
			if got := len(rec.errs) > 0; got != tt.bad {
				t.Errorf("reported %v, want a report: %v", rec.errs, tt.bad)
			}
		})
	}
}

// TestValidatorChecksAcceptedRequests: a request the server accepted must
// match the document too.
func TestValidatorChecksAcceptedRequests(t *testing.T) {
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"messages":[],"compacted":false,"summary":"","conversation_id":"c","warnings":[],"stats":{"tokens_before":0,"tokens_after":0,"messages_before":0,"messages_after":0,"encoding":"o200k_base","duration_ns":1,"stages":[]}}`)
	}))
	defer srv.Close()
	for body, bad := range map[string]bool{
		`{"policy":"x","messages":[{"role":"user","content":"hi"}]}`:  false,
		`{"policy":"x","messages":[{"role":"robot","content":"hi"}]}`: true,
		`{"policy":"x","surprise":1,"messages":[]}`:                   true,
		`{"policy":"x","context_window":-5,"messages":[]}`:            true,
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
