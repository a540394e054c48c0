package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

// TestStoreDownFirstRequestWarned: the first request after Redis goes
// away, on /v1/compact and through the proxy, is served and carries the
// store warning, whether it or the daemon's background work found the
// outage (before, only the requests after the one that found it did).
func TestStoreDownFirstRequestWarned(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/compact", proxy.RouteOpenAI} {
		t.Run(strings.Trim(path, "/"), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			td, _ := proxyDaemon(t, "state: {url: '"+srv.URL()+"'}\n", pluginSliding)
			send := func(id string) http.Header {
				t.Helper()
				var resp *http.Response
				var body []byte
				if path == "/v1/compact" {
					resp, body = td.post(t, path, fmt.Appendf(nil, `{"policy":"sliding","conversation_id":%q,"messages":%s}`, id, mustJSON(t, chatMessages(12))), nil)
				} else {
					resp, body = td.post(t, path, fmt.Appendf(nil, `{"model":"gpt-4o","messages":%s}`, mustJSON(t, chatMessages(12))), map[string]string{proxy.HeaderConversation: id})
				}
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %d %s", id, resp.StatusCode, body)
				}
				return resp.Header
			}
			if h := send("up"); len(h.Values(proxy.HeaderWarning)) != 0 {
				t.Fatalf("warning while Redis is up: %q", h.Values(proxy.HeaderWarning))
			}
			srv.Kill()
			for i, id := range []string{"first", "second"} {
				got := 0
				for _, v := range send(id).Values(proxy.HeaderWarning) {
					if strings.Contains(v, "state store unavailable") {
						got++
					}
				}
				if got != 1 {
					t.Errorf("request %d after Redis went away carries %d store warnings, want 1", i+1, got)
				}
			}
		})
	}
}
