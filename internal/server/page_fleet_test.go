package server

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

// TestStatusPageFleet: two daemons share one real redis-server; a
// conversation's turns go to both. Each daemon's status page, in headless
// Chromium, shows the fleet's totals (from the shared store), names the
// replica that served each conversation last, and names itself; so does
// a conversation's page.
func TestStatusPageFleet(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	srv := redistest.Start(t)
	const token = "fleet-token"
	daemon := func(replica string) *testDaemon {
		td := setup(t, "", pluginSliding)
		tokenFile := filepath.Join(td.dir, "token")
		os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
		os.WriteFile(td.config, []byte("tcp:\n  listen: 127.0.0.1:0\n  token_file: "+tokenFile+"\n"), 0o600)
		td.opts.Getenv = func(k string) string {
			switch k {
			case "COMPACTD_STATE_URL":
				return srv.URL()
			case "COMPACTD_REPLICA":
				return replica
			}
			return ""
		}
		return td.start(t)
	}
	a, b := daemon("replica-a"), daemon("replica-b")
	compact := func(td *testDaemon, id string, turns int) {
		t.Helper()
		code, body, _ := td.raw(t, http.MethodPost, "/v1/compact",
			fmt.Sprintf(`{"policy":"sliding","model":"gpt-4o","conversation_id":%q,"config":{"window_size":6,"step":1},"messages":%s}`, id, mustJSON(t, chatMessages(turns))))
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", id, code, body)
		}
	}
	compact(a, "shared-conv", 6)
	compact(b, "shared-conv", 8) // served last by b
	compact(a, "only-a", 6)
	compact(b, "only-b", 6)
	compact(b, "only-b", 8)

	st, err := a.c.Status(bg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Requests != 5 || st.Totals.Conversations != 3 {
		t.Fatalf("replica a's status: %+v, want the fleet's 5 requests in 3 conversations", st.Totals)
	}
	dom := browse(t, bin, "http://"+a.TCPAddr()+"/?token="+token, "")
	got := shown(dom)
	want := map[string]string{
		"replica":                      "replica-a",
		"totals.requests":              "5",
		"totals.conversations":         "3",
		"conv:shared-conv:replica":     "replica-b",
		"conv:only-a:replica":          "replica-a",
		"conv:only-b:replica":          "replica-b",
		"conv:shared-conv:requests":    "2",
		"conv:only-b:requests":         "2",
		"conv:only-a:requests":         "1",
		"conv:shared-conv:compactions": formatInt(mustConversation(t, a, "shared-conv").Compactions),
	}
	compare(t, "replica a's status page", got, want)
	if !strings.Contains(dom, `id="fleet"`) || !strings.Contains(dom, "served last by") {
		t.Error("the status page does not say it shows a fleet")
	}

	dom = browse(t, bin, "http://"+a.TCPAddr()+"/conversation?id=shared-conv&token="+token, "")
	c := mustConversation(t, a, "shared-conv")
	want = conversationNumbers(*c)
	want["replica"] = "replica-b"
	compare(t, "the conversation page on replica a", shown(dom), want)

	// A daemon on its own store names no replica.
	solo := startDaemon(t, "", pluginSliding)
	compact(solo, "solo", 6)
	code, body, _ := solo.raw(t, http.MethodGet, "/", "")
	if code != http.StatusOK || strings.Contains(string(body), "served last by") || strings.Contains(string(body), `id="fleet"`) {
		t.Errorf("a daemon on bbolt shows fleet columns (%d)", code)
	}
}

func mustConversation(t *testing.T, td *testDaemon, id string) *client.Conversation {
	t.Helper()
	c, err := td.c.Conversation(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
