package proxy

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/compactd/compactd/internal/wire/openaichat"
)

// BenchmarkParseRequest reads an OpenAI request of about 85 KB (200
// messages of tool output), as the request filter does for every proxied
// request: the fields it needs and each message's span.
func BenchmarkParseRequest(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"model":"gpt-4o","messages":[{"role":"system","content":"You are a coding agent."}`)
	for i := 0; buf.Len() < 85000; i++ {
		fmt.Fprintf(&buf, `,{"role":"user","content":"step %d: run the tests and show me \"the output\""},{"role":"assistant","content":"ok","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"shell","arguments":"{\"cmd\":\"go test ./...\"}"}}]},{"role":"tool","tool_call_id":"call_%d","content":"ok  \tpkg/a\t0.1s\nFAIL\tpkg/b\t0.2s\n--- FAIL: TestX (0.00s)\n    x_test.go:12: got 1, want 2"}`, i, i, i)
	}
	buf.WriteString(`],"stream":false,"temperature":0.2}`)
	body := buf.Bytes()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := parseRequest(body, openaichat.Format{})
		if err != nil || len(r.messages) < 100 {
			b.Fatal(err)
		}
	}
}
