//go:build !unit

// `make test-unit` builds with -tags unit and leaves this file out: every
// test in it needs node and a daemon and skips in a unit run anyway
// (internal/testenv), and linking the test binary alone takes seconds.

package sdktest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/proxy/upstreamtest"
)

// hostile is an upstream whose streams misbehave as X-Hostile says: a
// line that never ends ("endless-line"), or silence after the first
// text ("stall"). Both start like the provider's real stream.
func hostile(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"+
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"partial\"}}\n\n")
	} else {
		io.WriteString(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"partial\"},\"finish_reason\":null}]}\n\n")
	}
	w.(http.Flusher).Flush()
	if r.Header.Get("X-Hostile") == "endless-line" {
		io.WriteString(w, `data: {"x":"`)
		chunk := strings.Repeat("a", 64<<10)
		for sent := 0; sent < 64<<20; sent += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}
	<-r.Context().Done()
}

// TestSDKsSeeStreamErrors: when compactd ends a stream for its upstream
// (an event past proxy.max_event_bytes, a stall past proxy.read_timeout),
// the official SDKs raise their ordinary API error with compactd's
// message, after the text they had read, rather than a broken
// connection or a hang.
func TestSDKsSeeStreamErrors(t *testing.T) {
	dir, node := sdks(t)
	up := httptest.NewServer(http.HandlerFunc(hostile))
	t.Cleanup(up.Close)
	d := startDaemon(t, fmt.Sprintf(`policy: sliding
tcp: {listen: '127.0.0.1:0', token_file: %s}
proxy:
  openai: {upstream: '%s/v1'}
  anthropic: {upstream: '%s'}
  read_timeout: 5s
  max_event_bytes: 1048576
`, writeFile(t, "token", token), up.URL, up.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "faults.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COMPACTD_URL=http://"+d.TCPAddr(), "COMPACTD_TOKEN="+token,
		"OPENAI_KEY="+upstreamtest.OpenAIKey, "ANTHROPIC_KEY="+upstreamtest.AnthropicKey, "FAULTS=endless-line,stall")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("faults.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	want := map[string]string{
		"endless-line": "upstream_event_too_large",
		"stall":        "upstream_timeout",
	}
	setting := map[string]string{"endless-line": "proxy.max_event_bytes", "stall": "proxy.read_timeout"}
	seen := 0
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r struct{ SDK, Fault, Error, Code, Message, Text string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		t.Logf("%s, %s: %s %q after %q", r.SDK, r.Fault, r.Error, r.Message, r.Text)
		seen++
		code := want[r.Fault]
		// OpenAI's SDK shows the error's message and code; Anthropic's
		// the error body, whose message names the code.
		if r.Error != "APIError" || r.Text != "partial" || !strings.Contains(r.Message, "compactd") || !strings.Contains(r.Message, setting[r.Fault]) ||
			r.SDK == "openai" && r.Code != code || r.SDK == "anthropic" && !strings.Contains(r.Message, code) {
			t.Errorf("%s, %s: want an APIError naming %s after the text read; got %s %q after %q", r.SDK, r.Fault, code, r.Error, r.Message, r.Text)
		}
	}
	if seen != 4 {
		t.Fatalf("%d results, want 4:\n%s", seen, stdout.String())
	}
}
