package server

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/hashicorp/go-hclog"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProxyUpstreamChangeAudit: whoever may update the config may move
// the proxy's upstreams (and the agents' provider keys with them), so
// every move is logged at warn level with the old and new hosts and how
// it was made, and listed in /v1/status and on the status page; with
// proxy.allow_upstream_change: false, PUT /v1/config (on the socket and
// on the TCP listener) answers 403 forbidden and SIGHUP keeps the running
// upstreams.
func TestProxyUpstreamChangeAudit(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	td := setup(t, "", pluginSliding)
	tokenFile := filepath.Join(td.dir, "token")
	os.WriteFile(tokenFile, []byte("audit-token\n"), 0o600)
	os.WriteFile(td.config, []byte(fmt.Sprintf("tcp: {listen: '127.0.0.1:0', token_file: %s}\nproxy: {openai: {upstream: 'https://api.openai.com/v1'}}\n", tokenFile)), 0o600)
	td.opts.Logger = hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Info})
	td.start(t)
	tcp := apiTCPClient(t, td.TCPAddr(), "audit-token")

	// On the socket.
	if _, err := td.c.UpdateConfig(bg, map[string]any{"proxy": map[string]any{"openai": map[string]any{"upstream": "http://127.0.0.1:9/v1"}}}); err != nil {
		t.Fatal(err)
	}
	// On the TCP listener, with the token.
	if _, err := tcp.UpdateConfig(bg, map[string]any{"proxy": map[string]any{"anthropic": map[string]any{"upstream": "http://elsewhere.example"}}}); err != nil {
		t.Fatal(err)
	}
	// By SIGHUP.
	b, _ := os.ReadFile(td.config)
	os.WriteFile(td.config, bytes.Replace(b, []byte("http://127.0.0.1:9/v1"), []byte("http://127.0.0.2:9/v1"), 1), 0o600)
	if _, err := td.Reload(); err != nil {
		t.Fatal(err)
	}
	st, err := td.c.Status(bg, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Proxy
	if p.Upstreams.OpenAI != "http://127.0.0.2:9/v1" || p.Upstreams.Anthropic != "http://elsewhere.example" || !p.AllowUpstreamChange || len(p.UpstreamChanges) != 3 {
		t.Fatalf("status: %+v", p)
	}
	for i, want := range []client.UpstreamChange{
		{Provider: proxy.OpenAI, Old: "https://api.openai.com/v1", New: "http://127.0.0.1:9/v1", By: "PUT /v1/config on the Unix socket"},
		{Provider: proxy.Anthropic, Old: "", New: "http://elsewhere.example", By: "PUT /v1/config on the TCP listener from 127.0.0.1:"},
		{Provider: proxy.OpenAI, Old: "http://127.0.0.1:9/v1", New: "http://127.0.0.2:9/v1", By: "SIGHUP"},
	} {
		got := p.UpstreamChanges[i]
		if got.Provider != want.Provider || got.Old != want.Old || got.New != want.New || !strings.HasPrefix(got.By, want.By) || got.At.IsZero() {
			t.Errorf("change %d: %+v, want %+v", i, got, want)
		}
	}
	logged := log.String()
	for _, want := range []string{
		`[WARN]  api: proxy upstream changed: this provider's requests, and the API keys they carry, now go to the new host: provider=openai old_host=api.openai.com new_host=127.0.0.1:9`,
		`provider=anthropic old_host="" new_host=elsewhere.example`,
		`new_host=127.0.0.2:9`,
	} {
		if !strings.Contains(logged, want) {
			t.Errorf("the log lacks %q:\n%s", want, logged)
		}
	}
	code, page, _ := td.raw(t, http.MethodGet, "/", "")
	if code != 200 || strings.Count(string(page), "upstream changed from") != 3 || !strings.Contains(string(page), "127.0.0.2:9") {
		t.Errorf("the status page does not list the changes (%d)", code)
	}

	// Locked: nobody moves the upstreams, nor unlocks them, until a start.
	if _, err := td.c.UpdateConfig(bg, map[string]any{"proxy": map[string]any{"allow_upstream_change": false}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{td.c, tcp} {
		for _, patch := range []map[string]any{
			{"proxy": map[string]any{"openai": map[string]any{"upstream": "https://evil.example/v1"}}},
			{"proxy": map[string]any{"allow_upstream_change": true}},
		} {
			_, err := c.UpdateConfig(bg, patch)
			var ae *client.Error
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || ae.Code != CodeForbidden || !strings.Contains(ae.Message, "proxy.allow_upstream_change is false") {
				t.Fatalf("a locked change: %v", err)
			}
		}
	}
	if !strings.Contains(log.String(), "config update refused: it would change the proxy's upstreams") {
		t.Error("a refused change is not logged")
	}
	b, _ = os.ReadFile(td.config)
	os.WriteFile(td.config, bytes.Replace(b, []byte("http://127.0.0.2:9/v1"), []byte("https://evil.example/v1"), 1), 0o600)
	if _, err := td.Reload(); err == nil || !strings.Contains(err.Error(), "proxy.openai.upstream") {
		t.Fatalf("a locked reload: %v", err)
	}
	doc, err := td.c.Config(bg)
	if err != nil || len(doc.Errors) != 1 || !strings.Contains(doc.Errors[0], "allow_upstream_change") {
		t.Fatalf("GET /v1/config after a refused reload: %v %+v", err, doc)
	}
	st, _ = td.c.Status(bg, 0)
	if st.Proxy.Upstreams.OpenAI != "http://127.0.0.2:9/v1" || st.Proxy.AllowUpstreamChange || len(st.Proxy.UpstreamChanges) != 3 {
		t.Fatalf("the locked upstreams moved: %+v", st.Proxy)
	}
}
