package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
)

// TestPanicIsA500: a handler that panics answers 500 with the error
// shape, and the server keeps serving.
func TestPanicIsA500(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	s.route("/boom", "boom", map[string]handlerFunc{http.MethodGet: func(http.ResponseWriter, *http.Request) error { panic("boom") }})
	s.route("/fail", "fail", map[string]handlerFunc{http.MethodGet: func(http.ResponseWriter, *http.Request) error { return errors.New("disk on fire") }})
	for _, path := range []string{"/boom", "/fail"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		var body client.ErrorBody
		if rec.Code != 500 || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code != CodeInternal {
			t.Errorf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
}

func TestConfigBodyLimit(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "")
	status, body, _ := td.raw(t, "PUT", "/v1/config", `{"policies":{"x":{"k":"`+strings.Repeat("a", maxConfigBody)+`"}}}`)
	if code, _ := errorCode(t, body); status != 413 || code != CodeRequestTooLarge {
		t.Errorf("%d %s", status, code)
	}
}

// TestLongPipeline (F6): a pipeline of 100,000 names is refused at once,
// before any policy is looked up.
func TestLongPipeline(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "", pluginLastn)
	names := make([]string, 100000)
	for i := range names {
		names[i] = "lastn"
	}
	body := mustJSON(t, map[string]any{"pipeline": names, "messages": chatMessages(1)})
	status, resp, _ := td.raw(t, "POST", "/v1/compact", body)
	if code, msg := errorCode(t, resp); status != 400 || code != CodeBadRequest || !strings.Contains(msg, "pipeline has 100000 policies; the limit is 16") {
		t.Errorf("%d %s %q", status, code, msg)
	}
}

func FuzzDecodeCompactRequest(f *testing.F) {
	f.Add([]byte(`{"policy":"sliding","config":{"n":1},"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"pipeline":["a","b"],"conversation_id":"x","messages":[]}`))
	f.Add([]byte(`{"messages":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, conv, err := decodeCompactRequest(data, chat.NewMemory(chat.MemoryOptions{}))
		if err != nil {
			if ae := toAPIError(err); ae.Status != 400 || ae.Code == "" {
				t.Fatalf("error %v is not a 400 API error", err)
			}
			return
		}
		if conv == nil || (req.Policy != "" && len(req.Pipeline) > 0) || len(req.ConversationID) > maxConversationID ||
			strings.ContainsRune(req.ConversationID, 0) || !utf8.Valid(data) || len(req.Pipeline) > maxPipeline ||
			req.ContextWindow < 0 || req.ContextWindow > abi.MaxTokenCount || req.TargetTokens < 0 || req.TargetTokens > abi.MaxTokenCount {
			t.Fatalf("accepted an invalid request: %+v", req)
		}
		for _, m := range conv.Raw {
			if !json.Valid(m) {
				t.Fatalf("accepted an invalid message %q", m)
			}
		}
	})
}
