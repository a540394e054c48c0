package server

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/compactor"
)

// TestAnswerBuffersReused writes answers of falling and rising sizes
// through one pool: each is whole, its own, and as a fresh buffer writes
// it (a reused buffer must not leak an earlier, longer answer's bytes).
func TestAnswerBuffersReused(t *testing.T) {
	t.Parallel()
	msgs := func(n int, text string) []json.RawMessage {
		out := make([]json.RawMessage, n)
		for i := range out {
			out[i] = json.RawMessage(`{"role":"user","content":"` + text + `"}`)
		}
		return out
	}
	answers := []struct {
		msgs    []json.RawMessage
		summary string
	}{
		{msgs(40, strings.Repeat("long ", 200)), "first"},
		{msgs(1, "short"), "second"},
		{msgs(3, "middle"), ""},
		{msgs(2, strings.Repeat("x", maxPooledAnswer)), "too large to keep"},
		{msgs(1, "after"), "last"},
	}
	var shared answerBuffers
	for i, a := range answers {
		resp := &compactor.Response{Compacted: true, Summary: a.summary, ConversationID: "c"}
		pooled, fresh := httptest.NewRecorder(), httptest.NewRecorder()
		if err := writeCompacted(pooled, &shared, a.msgs, resp, "", nil, []int{0}, nil); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if err := writeCompacted(fresh, new(answerBuffers), a.msgs, resp, "", nil, []int{0}, nil); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if got, want := pooled.Body.String(), fresh.Body.String(); got != want {
			t.Fatalf("answer %d through a reused buffer differs from a fresh one:\n%.200s\nwant\n%.200s", i, got, want)
		}
		var decoded struct {
			Messages []json.RawMessage `json:"messages"`
			Summary  string            `json:"summary"`
		}
		if err := json.Unmarshal(pooled.Body.Bytes(), &decoded); err != nil {
			t.Fatalf("answer %d is not JSON: %v", i, err)
		}
		if len(decoded.Messages) != len(a.msgs) || decoded.Summary != a.summary {
			t.Fatalf("answer %d: %d messages, summary %q; want %d, %q", i, len(decoded.Messages), decoded.Summary, len(a.msgs), a.summary)
		}
		if n := pooled.Header().Get("Content-Length"); n != strings.TrimSpace(n) || n == "" {
			t.Fatalf("answer %d: Content-Length %q", i, n)
		}
	}
}
