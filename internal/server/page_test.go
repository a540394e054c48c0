package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
)

// rowKinds returns the kinds of a detail's rows, one letter each:
// k(ept) m(asked) s(ummarized) d(ropped) a(dded) e(lided).
func rowKinds(d *client.CompactionDetail) string {
	var b strings.Builder
	for _, r := range d.Rows {
		b.WriteByte(r.Kind[0])
	}
	return b.String()
}

func TestLastCompactionDetail(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "", pluginLastn, pluginSliding)
	msgs := chatMessages(3) // system, 3 × (user, assistant), user: 8 messages
	tests := []struct {
		name  string
		req   client.CompactRequest
		kinds string
	}{
		// lastn keeps the system message, the task and the last n: the
		// rest is dropped.
		{"dropped", client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 2, "step": 1}}, "kkdkk"},
		// sliding keeps the task (the first user message) and puts a
		// marker where it cut: the cut entries are folded into it.
		{"summarized", client.CompactRequest{Policy: "sliding", Config: map[string]any{"window_size": 2, "step": 1}}, "kkskk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			req.Messages, req.ConversationID, req.Model = msgs, "detail-"+tt.name, "gpt-4o"
			resp, err := td.c.Compact(bg, &req)
			if err != nil || !resp.Compacted {
				t.Fatalf("compact: %v (compacted %v)", err, resp != nil && resp.Compacted)
			}
			c, err := td.c.Conversation(bg, req.ConversationID)
			if err != nil {
				t.Fatal(err)
			}
			d := c.LastCompaction
			if d == nil {
				t.Fatal("no last_compaction")
			}
			if got := rowKinds(d); got != tt.kinds {
				t.Errorf("rows %s, want %s: %s", got, tt.kinds, mustJSON(t, d.Rows))
			}
			// Every input message is on the left once, every output
			// message on the right once, in order.
			var before, after []int
			for _, r := range d.Rows {
				for _, m := range r.Before {
					before = append(before, m.Index)
				}
				for _, m := range r.After {
					after = append(after, m.Index)
				}
			}
			if len(before) != len(msgs) || len(after) != len(resp.Messages) {
				t.Errorf("%d messages on the left (want %d), %d on the right (want %d)", len(before), len(msgs), len(after), len(resp.Messages))
			}
			for i := range before {
				if before[i] != i {
					t.Fatalf("left side out of order: %v", before)
				}
			}
			if d.TokensBefore != resp.Stats.TokensBefore || d.TokensAfter != resp.Stats.TokensAfter || d.MessagesAfter != len(resp.Messages) ||
				len(d.Stages) != 1 || d.Pipeline[0] != req.Policy || d.Model != "gpt-4o" || d.At.IsZero() {
				t.Errorf("detail = %+v", d)
			}
			last := d.Rows[len(d.Rows)-1]
			if last.Kind != client.RowKept || last.Before[0].Text != "last question" || last.Before[0].Tokens == 0 {
				t.Errorf("last row = %+v", last)
			}
		})
	}
	// A request that compacts nothing keeps the previous record.
	td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 50, "step": 1}, ConversationID: "detail-dropped", Messages: msgs})
	if c, _ := td.c.Conversation(bg, "detail-dropped"); c.LastCompaction == nil || rowKinds(c.LastCompaction) != "kkdkk" || c.Requests != 2 {
		t.Errorf("after an unchanged request: %+v", c)
	}
	// The list leaves the records out.
	st, _ := td.c.Status(bg, 0)
	for _, c := range st.Conversations {
		if c.LastCompaction != nil {
			t.Errorf("GET /v1/status lists %s with its record", c.ID)
		}
	}
}

// TestLastCompactionBounded: a long conversation's record stays small:
// runs of kept messages are elided and previews are cut.
func TestLastCompactionBounded(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "", pluginLastn)
	msgs := tauConversation(t, 60000)
	big := json.RawMessage(`{"role":"user","content":"` + strings.Repeat("long text ", 2000) + `"}`)
	msgs = append(append([]json.RawMessage{}, msgs...), big)
	if _, err := td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 30, "step": 1}, ConversationID: "big", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	c, err := td.c.Conversation(bg, "big")
	if err != nil || c.LastCompaction == nil {
		t.Fatalf("%+v, %v", c, err)
	}
	d := c.LastCompaction
	kinds := rowKinds(d)
	if !strings.Contains(kinds, "e") || !strings.Contains(kinds, "d") {
		t.Errorf("rows %s: want a dropped row and an elided run", kinds)
	}
	lastRow := d.Rows[len(d.Rows)-1].Before[0]
	if !lastRow.Cut || lastRow.Bytes < len(strings.Repeat("long text ", 2000)) || len(lastRow.Text) > keptPreview+len("…") || !strings.HasPrefix(lastRow.Text, "long text long") {
		t.Errorf("the long message's preview: %d bytes of %d", len(lastRow.Text), lastRow.Bytes)
	}
	if n := len(mustJSON(t, d)); n > maxDetailBytes {
		t.Errorf("record of %d bytes", n)
	}
}

func TestStatusPage(t *testing.T) {
	t.Parallel()
	td := setup(t, "", pluginLastn)
	os.WriteFile(filepath.Join(td.plugins, "broken.wasm"), []byte("not wasm"), 0o644)
	td.start(t)
	if _, err := td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 1, "step": 1}, Model: "gpt-4o",
		ConversationID: "a <script>", Messages: chatMessages(4)}); err != nil {
		t.Fatal(err)
	}
	status, body, h := td.raw(t, "GET", "/", "")
	page := string(body)
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || h.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET / = %d %v", status, h)
	}
	for _, want := range []string{
		"not a valid compactd plugin module", // broken.wasm's load error
		"a &lt;script&gt;",                   // ids are escaped
		`href="/conversation?id=a&#43;%3Cscript%3E"`,
		`data-k="conv:a &lt;script&gt;:tokens_saved"`,
		"&#34;max_messages&#34;: 10000", // the config
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>\"") || strings.Count(page, "<script>") != 1 {
		t.Error("the page has an unescaped script tag")
	}

	status, body, _ = td.raw(t, "GET", "/conversation?id="+url.QueryEscape("a <script>"), "")
	if status != 200 || !strings.Contains(string(body), `<tr class="dropped">`) || !strings.Contains(string(body), "last question") {
		t.Errorf("conversation page = %d\n%s", status, body)
	}
	for _, tt := range []struct {
		query  string
		status int
	}{{"", 400}, {"?id=nope", 404}} {
		status, body, h := td.raw(t, "GET", "/conversation"+tt.query, "")
		if status != tt.status || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			t.Errorf("/conversation%s = %d %s", tt.query, status, body)
		}
	}

	// A failed SIGHUP reload shows on the page and in GET /v1/config
	// until a good one.
	os.WriteFile(td.config, []byte("bogus: 1\n"), 0o600)
	td.Reload()
	doc, err := td.c.Config(bg)
	if err != nil || len(doc.Errors) != 1 || !strings.Contains(doc.Errors[0], `unknown key "bogus"`) {
		t.Errorf("GET /v1/config after a failed reload: %+v, %v", doc, err)
	}
	if _, body, _ := td.raw(t, "GET", "/", ""); !strings.Contains(string(body), `id="config-errors"`) {
		t.Error("the page does not show the failed reload")
	}
	// A value out of range is the same kind of problem, found by the same
	// checks PUT /v1/config and a start make: named with its key, range
	// and line.
	os.WriteFile(td.config, []byte("# hand-edited\nlimits:\n  plugin:\n    max_instances: -3\n"), 0o600)
	td.Reload()
	const rangeErr = "line 4: limits.plugin.max_instances: -3 is out of range (allowed: 1 to 256"
	if doc, err := td.c.Config(bg); err != nil || len(doc.Errors) != 1 || !strings.Contains(doc.Errors[0], rangeErr) {
		t.Errorf("GET /v1/config after a reload of an out-of-range file: %+v, %v", doc, err)
	}
	if _, body, _ := td.raw(t, "GET", "/", ""); !strings.Contains(string(body), "limits.plugin.max_instances: -3 is out of range") {
		t.Error("the page does not show the out-of-range setting")
	}
	os.WriteFile(td.config, []byte("policies: {absent: {x: 1}}\n"), 0o600)
	if _, err := td.Reload(); err != nil {
		t.Fatal(err)
	}
	doc, _ = td.c.Config(bg)
	if len(doc.Errors) != 0 || len(doc.Warnings) != 1 || !strings.Contains(doc.Warnings[0], "absent") {
		t.Errorf("GET /v1/config after a good reload: errors %q, warnings %q", doc.Errors, doc.Warnings)
	}
}

// TestStatusPageTCP: a browser opens the TCP listener's page with
// ?token= once and gets a cookie that opens the pages, not the API.
func TestStatusPageTCP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("page-token\n"), 0o600)
	td := startDaemon(t, "tcp:\n  listen: 127.0.0.1:0\n  token_file: "+tokenFile+"\n", pluginLastn)
	base := "http://" + td.TCPAddr()
	c := tcpHTTP(t)
	get := func(path string, cookie *http.Cookie) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := get("/", nil); r.StatusCode != 401 {
		t.Errorf("no token: %d", r.StatusCode)
	}
	if r := get("/?token=wrong", nil); r.StatusCode != 401 {
		t.Errorf("wrong token: %d", r.StatusCode)
	}
	r := get("/conversation?id=x&token=page-token", nil)
	cookies := r.Cookies()
	if r.StatusCode != 303 || r.Header.Get("Location") != "/conversation?id=x" || len(cookies) != 1 {
		t.Fatalf("token exchange: %d %v", r.StatusCode, r.Header)
	}
	ck := cookies[0]
	_, port, _ := net.SplitHostPort(td.TCPAddr())
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || strings.Contains(ck.Value, "page-token") ||
		ck.Name != "compactd_page_"+port || ck.MaxAge != 12*60*60 || ck.Path != "/" {
		t.Errorf("cookie %+v", ck)
	}
	if r := get("/", ck); r.StatusCode != 200 {
		t.Errorf("with the cookie: %d", r.StatusCode)
	}
	if r := get("/?token=page-token", nil); r.StatusCode != 303 || r.Header.Get("Location") != "/" {
		t.Errorf("token exchange on /: %d %v", r.StatusCode, r.Header)
	}
	if r := get("/conversation?id=x", ck); r.StatusCode != 404 {
		t.Errorf("conversation page with the cookie: %d", r.StatusCode)
	}
	if r := get("/v1/status", ck); r.StatusCode != 401 {
		t.Errorf("the cookie opened the API: %d", r.StatusCode)
	}
	req, _ := http.NewRequest("POST", base+"/", nil)
	req.AddCookie(ck)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("POST / with the cookie: %v %v", resp.StatusCode, err)
	}
	forged := *ck
	forged.Value = strings.Repeat("0", len(ck.Value))
	if r := get("/", &forged); r.StatusCode != 401 {
		t.Errorf("forged cookie: %d", r.StatusCode)
	}
	exp, mac, _ := strings.Cut(ck.Value, ".")
	forged.Value = exp + "9." + mac // a later expiry under the same MAC
	if r := get("/", &forged); r.StatusCode != 401 {
		t.Errorf("cookie with its expiry moved: %d", r.StatusCode)
	}

	// A browser sends the cookie to every port of the host: another
	// daemon with the same token takes it neither under its name nor
	// under its own.
	td2 := startDaemon(t, "tcp:\n  listen: 127.0.0.1:0\n  token_file: "+tokenFile+"\n", pluginLastn)
	_, port2, _ := net.SplitHostPort(td2.TCPAddr())
	for _, name := range []string{ck.Name, "compactd_page_" + port2} {
		other := *ck
		other.Name = name
		req, _ := http.NewRequest("GET", "http://"+td2.TCPAddr()+"/", nil)
		req.AddCookie(&other)
		if resp, err := c.Do(req); err != nil || resp.StatusCode != 401 {
			t.Errorf("another port's daemon took the cookie as %s: %v %v", name, resp.StatusCode, err)
		}
	}

	// A restarted daemon on the same port does not take it either.
	addr := td.TCPAddr()
	if err := td.Shutdown(bg); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, "tcp:\n  listen: "+addr+"\n  token_file: "+tokenFile+"\n", pluginLastn)
	if r := get("/", ck); r.StatusCode != 401 {
		t.Errorf("a restarted daemon took the old cookie: %d", r.StatusCode)
	}
	r = get("/?token=page-token", nil)
	if r.StatusCode != 303 || len(r.Cookies()) != 1 {
		t.Fatalf("token exchange after the restart: %d", r.StatusCode)
	}
	if r := get("/", r.Cookies()[0]); r.StatusCode != 200 {
		t.Errorf("the new cookie: %d", r.StatusCode)
	}
}

// TestPageSessionsExpire: a page cookie opens the pages until its expiry,
// and not after.
func TestPageSessionsExpire(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	ps := newPageSessions("tok")
	ps.now = func() time.Time { return now }
	req := func(c *http.Cookie) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7077}))
		if c != nil {
			r.AddCookie(c)
		}
		return r
	}
	ck := ps.issue("127.0.0.1:7077")
	if !ps.valid(req(ck)) || ck.Name != "compactd_page_7077" || !ck.Expires.Equal(now.Add(pageSessionTTL)) {
		t.Fatalf("a fresh cookie: %+v", ck)
	}
	if ps.valid(req(nil)) {
		t.Fatal("no cookie opened the pages")
	}
	now = now.Add(pageSessionTTL - time.Second)
	if !ps.valid(req(ck)) {
		t.Fatal("the cookie expired early")
	}
	now = now.Add(time.Second)
	if ps.valid(req(ck)) {
		t.Fatal("an expired cookie opened the pages")
	}
	if other := ps.issue("127.0.0.1:7078"); ps.valid(req(&http.Cookie{Name: ck.Name, Value: other.Value})) {
		t.Fatal("another listener's cookie opened the pages")
	}
}
