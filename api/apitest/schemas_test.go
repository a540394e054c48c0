package apitest

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// compactExchange returns a POST /v1/compact request and a 200 answer,
// the request valid or not, as a validating client sees them.
func compactExchange(validRequest bool) (*http.Request, []byte, *http.Response, []byte) {
	reqBody := []byte(`{"policy":"x","messages":[{"role":"user","content":"hi"}]}`)
	if !validRequest {
		reqBody = []byte(`{"policy":"x","messages":[{"role":"robot","content":"hi"}]}`)
	}
	req := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/v1/compact"},
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(reqBody))}
	body := []byte(compactAnswer)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(body))}
	return req, reqBody, resp, body
}

// TestSchemasCompileOnce: a schema is compiled for the first exchange
// that needs it and reused by every later one, so a validated exchange
// costs a validation, not a compilation.
func TestSchemasCompileOnce(t *testing.T) {
	t.Parallel()
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		if err := v.Check(compactExchange(true)); err != nil {
			t.Fatal(err)
		}
	}
	check()
	v.schemas.mu.Lock()
	first := len(v.schemas.compiled)
	v.schemas.mu.Unlock()
	if first != 2 {
		t.Fatalf("compiled %d schemas for a POST /v1/compact exchange, want 2 (its request's and its answer's)", first)
	}
	for range 5 {
		check()
	}
	v.schemas.mu.Lock()
	defer v.schemas.mu.Unlock()
	if n := len(v.schemas.compiled); n != first {
		t.Fatalf("%d compiled schemas after the same exchange again, want %d", n, first)
	}
}

// TestSchemasConcurrentUse: tests validate from many goroutines at once
// (run with -race); each exchange gets its own verdict.
func TestSchemasConcurrentUse(t *testing.T) {
	t.Parallel()
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() { errs[i] = v.Check(compactExchange(i%2 == 0)) })
	}
	wg.Wait()
	for i, err := range errs {
		if valid := i%2 == 0; valid != (err == nil) {
			t.Errorf("exchange %d (valid request: %v): %v", i, valid, err)
		}
	}
}

// TestSchemasReportsTheSchema: a body that does not match names the
// schema it was checked against and what failed.
func TestSchemasReportsTheSchema(t *testing.T) {
	t.Parallel()
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	err = v.Check(compactExchange(false))
	if err == nil {
		t.Fatal("a request with an undocumented role passed")
	}
	for _, want := range []string{"request body", "/paths/~1v1~1compact/post/requestBody/content/application~1json/schema", "/messages/0/role"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the report does not mention %q: %v", want, err)
		}
	}
}

// BenchmarkCheck is one validated POST /v1/compact exchange (request and
// answer), as the server's validating test clients make them.
func BenchmarkCheck(b *testing.B) {
	v, err := New()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := v.Check(compactExchange(true)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckProxy is one validated proxied exchange with compactd's
// request and answer headers, whose schemas openapi3filter checks.
func BenchmarkCheckProxy(b *testing.B) {
	v, err := New()
	if err != nil {
		b.Fatal(err)
	}
	reqBody := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	body := []byte(`{"id":"x","choices":[]}`)
	for b.Loop() {
		req := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/v1/chat/completions"},
			Header: http.Header{"Content-Type": {"application/json"}, "X-Compactd-Conversation": {"c"}, "X-Compactd-Title": {"t"}},
			Body:   io.NopCloser(bytes.NewReader(reqBody))}
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"},
			"X-Compactd-Upstream": {"openai"}, "X-Compactd-Conversation": {"c"}, "X-Compactd-Compacted": {"true"}},
			Body: io.NopCloser(bytes.NewReader(body))}
		if err := v.Check(req, reqBody, resp, body); err != nil {
			b.Fatal(err)
		}
	}
}
