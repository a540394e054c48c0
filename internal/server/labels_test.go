package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/convlabel"
	"github.com/compactd/compactd/internal/proxy"
)

// TestProxyLabels: a proxied conversation takes its title, tags and user
// from the X-Compactd-* headers (never forwarded), keeps them on later
// requests that send none, and an Anthropic conversation's message counts
// agree between its status and its last compaction's record.
func TestProxyLabels(t *testing.T) {
	t.Parallel()
	raw, n := tauMessages(t, 12000)
	td, up := proxyDaemon(t, fmt.Sprintf("  context_window: %d\n", n), pluginSliding)
	body, msgs := anthropicBody(t, raw, "")
	labels := map[string]string{convlabel.HeaderTitle: "  Nightly triage ", convlabel.HeaderTags: "ci, night,,ci", convlabel.HeaderUser: "ana"}
	resp, got := td.post(t, proxy.RouteAnthropic, body, labels)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	for k := range labels {
		if up.Last().Header.Get(k) != "" {
			t.Errorf("%s was forwarded upstream", k)
		}
	}
	id := resp.Header.Get(proxy.HeaderConversation)
	st := td.status(t, id)
	if st.Title != "Nightly triage" || strings.Join(st.Tags, ",") != "ci,night" || st.User != "ana" {
		t.Fatalf("labels: %q %q %q", st.Title, st.Tags, st.User)
	}
	// The counts: the conversation's are Anthropic messages; the record
	// has the chat messages the policies saw, and the same Anthropic ones.
	var sent struct {
		Messages []json.RawMessage `json:"messages"`
	}
	json.Unmarshal(up.Last().Body, &sent)
	d := st.LastCompaction
	if d == nil || st.Messages != len(msgs) || st.MessagesAfter != len(sent.Messages) ||
		d.WireFormat != proxy.Anthropic || d.WireMessagesBefore != st.Messages || d.WireMessagesAfter != st.MessagesAfter {
		t.Fatalf("counts: status %d → %d, record %+v", st.Messages, st.MessagesAfter, d)
	}
	if d.MessagesBefore == d.WireMessagesBefore {
		t.Errorf("the fixture's chat and Anthropic counts are both %d: the test shows nothing", d.MessagesBefore)
	}
	if st.PeakTokens < st.Tokens || st.PeakTokens == 0 {
		t.Errorf("peak %d below the request's %d tokens", st.PeakTokens, st.Tokens)
	}
	code, page, _ := td.raw(t, http.MethodGet, "/conversation?id="+url.QueryEscape(id), "")
	for _, want := range []string{"Anthropic messages", `id="units"`, "Nightly triage"} {
		if code != http.StatusOK || !strings.Contains(string(page), want) {
			t.Errorf("the conversation page (%d) does not show %q", code, want)
		}
	}

	// A later request without headers keeps them.
	resp, got = td.post(t, proxy.RouteAnthropic, body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	if st := td.status(t, id); st.Title != "Nightly triage" || st.User != "ana" || st.Requests != 2 {
		t.Fatalf("labels after a request without them: %+v", st)
	}

	// Without X-Compactd-Title: the first line of the task.
	conv, err := chat.FromRaw(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := convlabel.Title(conv.Messages)
	if want == "" {
		t.Fatal("the fixture has no task to title")
	}
	// (Its own id: derived, it would be the Anthropic request's.)
	resp, got = td.post(t, proxy.RouteOpenAI, openAIBody(raw[:3], ""), map[string]string{proxy.HeaderConversation: "derived"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	if st := td.status(t, resp.Header.Get(proxy.HeaderConversation)); st.Title != want || st.Tags != nil || st.User != "" {
		t.Fatalf("derived title %q, want %q (tags %v, user %q)", st.Title, want, st.Tags, st.User)
	}

	// A bad label is refused in the provider's shape, and nothing is sent.
	sentBefore := len(up.Received())
	for _, h := range []map[string]string{
		{convlabel.HeaderTags: "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q"},
		{convlabel.HeaderTitle: strings.Repeat("t", convlabel.MaxTitle+1)},
	} {
		resp, got := td.post(t, proxy.RouteAnthropic, body, h)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), `"invalid_request_error"`) || !strings.Contains(string(got), "X-Compactd-") {
			t.Errorf("bad labels %v: %d %s", h, resp.StatusCode, got)
		}
	}
	if len(up.Received()) != sentBefore {
		t.Error("a request with bad labels reached the upstream")
	}

	// The search.
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"tag=night", []string{id}},
		{"tag=ci&tag=night&user=ana", []string{id}},
		{"q=TRIAGE", []string{id}},
		{"q=" + url.QueryEscape(strings.ToUpper(want[:8])), []string{resp.Header.Get(proxy.HeaderConversation)}},
		{"user=bob", nil},
	} {
		code, b, _ := td.raw(t, http.MethodGet, "/v1/status?"+tt.query, "")
		var s client.Status
		if code != http.StatusOK || json.Unmarshal(b, &s) != nil {
			t.Fatalf("%s: %d %s", tt.query, code, b)
		}
		var ids []string
		for _, c := range s.Conversations {
			ids = append(ids, c.ID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(tt.want) || s.Totals.Conversations != 2 {
			t.Errorf("%s: %v (totals %d), want %v", tt.query, ids, s.Totals.Conversations, tt.want)
		}
	}
	for _, q := range []string{"tag=" + strings.Repeat("x", convlabel.MaxTag+1), "q=" + strings.Repeat("x", maxQuery+1)} {
		if code, b, _ := td.raw(t, http.MethodGet, "/v1/status?"+q, ""); code != http.StatusBadRequest || !strings.Contains(string(b), "at most") {
			t.Errorf("%.20s…: %d %s", q, code, b)
		}
		if code, _, _ := td.raw(t, http.MethodGet, "/?"+q, ""); code != http.StatusBadRequest {
			t.Errorf("the page's search %.20s…: %d", q, code)
		}
	}
}

// TestCompactLabels: /v1/compact takes "title", "tags" and "user", checks
// them, and derives a title unless state.titles is false.
func TestCompactLabels(t *testing.T) {
	t.Parallel()
	td := setup(t, "state: {titles: false}\n", pluginSliding).start(t)
	msgs, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": "Secret task line\nmore"}}, "policy": "sliding"})
	body := strings.TrimSuffix(string(msgs), "}")
	code, b, _ := td.raw(t, http.MethodPost, "/v1/compact", body+`,"conversation_id":"c1"}`)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	if c := td.status(t, "c1"); c.Title != "" {
		t.Fatalf("state.titles false, and the title is %q", c.Title)
	}
	code, b, _ = td.raw(t, http.MethodPost, "/v1/compact", body+`,"conversation_id":"c1","title":"Given","tags":["x"," y "],"user":"ana"}`)
	if c := td.status(t, "c1"); code != http.StatusOK || c.Title != "Given" || fmt.Sprint(c.Tags) != "[x y]" || c.User != "ana" {
		t.Fatalf("%d %s: %+v", code, b, c)
	}
	for _, bad := range []string{`"title":"a\u0007b"`, `"tags":["` + strings.Repeat("x", 65) + `"]`, `"user":"` + strings.Repeat("u", 201) + `"`, `"tags":"x"`} {
		if code, b, _ := td.raw(t, http.MethodPost, "/v1/compact", body+","+bad+"}"); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", bad, code, b)
		}
	}
}
