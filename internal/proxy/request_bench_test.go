package proxy

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/tokens"
	"github.com/compactd/compactd/internal/wire/openaichat"
)

// BenchmarkParseRequest reads an OpenAI request of about 85 KB (200
// messages of tool output), as the request filter does for every proxied
// request: the fields it needs and each message's span.
func BenchmarkParseRequest(b *testing.B) {
	body := benchRequest()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := parseRequest(body, openaichat.Format{})
		if err != nil || len(r.messages) < 100 {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestMemory is the request filter's work with the
// conversation's memory for the request of BenchmarkParseRequest sent
// again, as an agent re-sends its history: the previous request looked
// up, every message's count taken from it by the hash of its bytes, and
// the request remembered for the next one.
func BenchmarkRequestMemory(b *testing.B) {
	body := benchRequest()
	r, err := parseRequest(body, openaichat.Format{})
	if err != nil {
		b.Fatal(err)
	}
	items, hasSystem := r.items()
	p := &Proxy{mem: chat.NewMemory(chat.MemoryOptions{})}
	tok := tokens.New(tokens.Options{}).ForModel(r.model)
	prov := openaichat.Format{}
	round := func() int {
		var prev *chat.LastRequest
		if last, ok := p.mem.LastRequest("bench"); ok && last.Model == r.model && last.Format == prov.Name() {
			prev = &last
		}
		hashes, counts, total, err := p.count(prov, tok, items, hasSystem, prev)
		if err != nil {
			b.Fatal(err)
		}
		p.mem.RememberRequest("bench", chat.LastRequest{Format: prov.Name(), Model: r.model, Body: body, Hashes: hashes, Counts: counts})
		return total
	}
	want := round() // the first request is counted; the rest reuse it
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if got := round(); got != want {
			b.Fatalf("counted %d, then %d", want, got)
		}
	}
}

// benchRequest is an OpenAI request of about 85 KB: 200 messages of tool
// output.
func benchRequest() []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"model":"gpt-4o","messages":[{"role":"system","content":"You are a coding agent."}`)
	for i := 0; buf.Len() < 85000; i++ {
		fmt.Fprintf(&buf, `,{"role":"user","content":"step %d: run the tests and show me \"the output\""},{"role":"assistant","content":"ok","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"shell","arguments":"{\"cmd\":\"go test ./...\"}"}}]},{"role":"tool","tool_call_id":"call_%d","content":"ok  \tpkg/a\t0.1s\nFAIL\tpkg/b\t0.2s\n--- FAIL: TestX (0.00s)\n    x_test.go:12: got 1, want 2"}`, i, i, i)
	}
	buf.WriteString(`],"stream":false,"temperature":0.2}`)
	return buf.Bytes()
}
