package server

import (
	"bytes"
	"context"
	"flag"
	"html"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/dataset"
)

var screenshots = flag.String("screenshots", "", "write the status page's screenshots to this directory (docs/, for docs/operations.md)")

const pluginToolresult = "plugins/toolresult"

// chromium returns Debian's headless Chromium, which `make deps` installs.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if testing.Short() {
			t.Skip("chromium is not installed (make deps installs it)")
		}
		t.Fatal("chromium is not installed: run `make deps` (scripts/deps.sh installs Debian's chromium)")
	}
	return path
}

// browse runs headless Chromium on url with a fresh profile: with
// screenshot set it writes a PNG there, else it returns the DOM after the
// page's scripts ran.
func browse(t *testing.T, bin, url, screenshot string) string {
	t.Helper()
	profile := t.TempDir()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--user-data-dir=" + profile, "--window-size=1440,1200", "--virtual-time-budget=3000"}
	if screenshot != "" {
		args = append(args, "--screenshot="+screenshot)
	} else {
		args = append(args, "--dump-dom")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", url, err, stderr.Bytes())
	}
	return stdout.String()
}

// shown returns the text of every element with a data-k attribute.
func shown(dom string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`data-k="([^"]*)"[^>]*>([^<]*)<`).FindAllStringSubmatch(dom, -1) {
		out[html.UnescapeString(m[1])] = strings.TrimSpace(html.UnescapeString(m[2]))
	}
	return out
}

// TestStatusPageInBrowser serves real fixture conversations through
// several policies, loads the status page in headless Chromium over the
// TCP listener (token exchanged for a cookie) and checks that every
// number it shows is the one GET /v1/status reports, then the same for a
// conversation's page and its last compaction.
func TestStatusPageInBrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	const token = "browser-token"
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	td := setup(t, "tcp:\n  listen: 127.0.0.1:0\n  token_file: "+tokenFile+"\n", pluginSliding, pluginLastn, pluginToolresult)
	os.WriteFile(filepath.Join(td.plugins, "half-written.wasm"), []byte("\x00asm\x01\x00"), 0o644)
	td.opts.Version = "dev"
	td.start(t)
	// New plugins serve from wazero's interpreter until their compiled
	// module is ready; toolresult's truncation of large tool results can
	// run past the call limit there on a loaded machine, and the
	// showcase below needs it.
	waitCompiled(t, td.c)

	files, err := dataset.FixtureFiles()
	if err != nil || len(files) == 0 {
		t.Fatalf("fixture conversations: %v", err)
	}
	requests := []client.CompactRequest{
		{Policy: "sliding", Model: "gpt-4o", Config: map[string]any{"window_size": 8}},
		// toolresult shortens large tool results in place (without an LLM
		// provider, by truncation), then sliding cuts the oldest entries.
		{Pipeline: []string{"toolresult", "sliding"}, Model: "gpt-4o",
			Config: map[string]any{"toolresult": map[string]any{"single_result_threshold": 200}, "sliding": map[string]any{"window_size": 12, "step": 1}}},
		{Policy: "lastn", Model: "gpt-4o-mini", Config: map[string]any{"n": 12, "step": 1}},
		{Policy: "sliding", Config: map[string]any{"window_size": 40}}, // no model: the window is unknown
	}
	var showcase string // a conversation whose last compaction masked and summarized
	for i, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := convs[0].Chat // the longest: the one most worth compacting
		for _, x := range convs {
			if x.Chat.Len() > c.Len() {
				c = x.Chat
			}
		}
		req := requests[i%len(requests)]
		// Labels, as an agent sends them: some tagged for one user, one
		// titled; the others' titles are the first lines of their tasks.
		if i%len(requests) == 0 {
			req.Tags, req.User = []string{"nightly", "ci"}, "ana"
		}
		if i == 1 {
			req.Title = "Ship the release notes"
		}
		// Two turns, as an agent sends them: a prefix, then the whole.
		for _, n := range dataset.SamplePrefixes(c, 2) {
			r := req
			r.Messages = dataset.Prefix(c, n).Raw
			resp, err := td.c.Compact(bg, &r)
			if err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
			if len(r.Pipeline) > 0 && resp.Compacted && n == c.Len() {
				showcase = resp.ConversationID
			}
		}
	}
	if showcase == "" {
		t.Fatal("the toolresult → sliding pipeline compacted nothing")
	}

	st, err := td.c.Status(bg, 0)
	if err != nil {
		t.Fatal(err)
	}
	policies, err := td.c.Policies(bg)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + td.TCPAddr()
	statusDOM := browse(t, bin, base+"/?token="+token, "")
	dom := statusDOM
	got := shown(dom)
	want := map[string]string{
		"version":              st.Version,
		"policies.serving":     formatInt(st.Policies.Serving),
		"policies.failed":      formatInt(st.Policies.Failed),
		"totals.conversations": formatInt(st.Totals.Conversations),
		"totals.requests":      formatInt(st.Totals.Requests),
		"totals.compactions":   formatInt(st.Totals.Compactions),
		"totals.failures":      formatInt(st.Totals.Failures),
		"totals.tokens_saved":  formatInt(st.Totals.TokensSaved),
	}
	for _, p := range policies {
		if p.Serving {
			want["policy:"+p.Name+":version"] = p.Version
		}
		want["policy:"+p.Name+":calls"] = formatInt(p.Calls)
		want["policy:"+p.Name+":failures"] = formatInt(p.Failures)
	}
	unknownWindow := 0
	for _, c := range st.Conversations {
		for k, v := range conversationNumbers(c) {
			want["conv:"+c.ID+":"+k] = v
		}
		if c.ContextWindow == 0 {
			unknownWindow++
		}
	}
	if len(st.Conversations) != len(files) || st.Totals.Requests != int64(2*len(files)) || st.Totals.Compactions == 0 || st.Policies.Failed != 1 || unknownWindow == 0 {
		t.Errorf("status after the fixtures: %d conversations, %+v, %+v, %d without a window", len(st.Conversations), st.Totals, st.Policies, unknownWindow)
	}
	compare(t, "the status page", got, want)
	if !regexp.MustCompile(`<time datetime="[^"]+" title="[^"]+">\d+ (s|min) ago</time>`).MatchString(dom) {
		t.Error("the page's script did not run: times are not relative")
	}
	if !strings.Contains(dom, "half-written.wasm") || !strings.Contains(dom, "not a valid compactd plugin module") {
		t.Error("the page does not show the broken plugin file and its error")
	}
	if !strings.Contains(dom, "passes every check") || !strings.Contains(dom, `"max_messages": 10000`) {
		t.Error("the page does not show the config and its state")
	}

	// One conversation's page: its numbers and its last compaction.
	conv, err := td.c.Conversation(bg, showcase)
	if err != nil || conv.LastCompaction == nil {
		t.Fatalf("conversation %s: %v", showcase, err)
	}
	url := base + "/conversation?id=" + showcase + "&token=" + token
	dom = browse(t, bin, url, "")
	want = conversationNumbers(*conv)
	want["id"] = conv.ID
	compare(t, "the conversation page", shown(dom), want)
	kinds := map[string]int{}
	for _, r := range conv.LastCompaction.Rows {
		kinds[r.Kind]++
	}
	for kind, n := range kinds {
		if kind == client.RowElided {
			continue
		}
		if got := strings.Count(dom, `<tr class="`+kind+`">`); got != n {
			t.Errorf("the page shows %d %s rows, the API %d", got, kind, n)
		}
	}
	if kinds[client.RowMasked] == 0 || kinds[client.RowSummarized] == 0 {
		t.Errorf("the showcase compaction has rows %v: want masked and summarized ones", kinds)
	}

	// Titles and search: every conversation has a title (given, or its
	// task's first line), and the page's search box lists what the API's
	// search does.
	for _, c := range st.Conversations {
		if c.Title == "" {
			t.Errorf("conversation %s has no title", c.ID)
		}
	}
	// The status page as loaded above (a page load changes nothing: one
	// Chromium run fewer).
	dom = statusDOM
	if c, p := strings.Index(dom, `id="conversations"`), strings.Index(dom, `id="policies"`); c < 0 || p < 0 || c > p || !strings.Contains(dom, `<form method="get" action="/" id="search"`) {
		t.Error("the status page does not list the conversations, with their search box, before the policies")
	}
	for _, search := range []struct {
		query string
		opts  client.StatusOptions
		want  int
	}{
		{"tag=nightly&user=ana", client.StatusOptions{Tags: []string{"nightly"}, User: "ana"}, (len(files) + len(requests) - 1) / len(requests)},
		{"tag=ci,nightly", client.StatusOptions{Tags: []string{"ci", "nightly"}}, (len(files) + len(requests) - 1) / len(requests)},
		{"q=RELEASE+notes", client.StatusOptions{Q: "RELEASE notes"}, 1},
		{"user=nobody", client.StatusOptions{User: "nobody"}, 0},
	} {
		api, err := td.c.StatusWith(bg, search.opts)
		if err != nil {
			t.Fatal(err)
		}
		var wantIDs []string
		for _, c := range api.Conversations {
			wantIDs = append(wantIDs, c.ID)
		}
		dom := browse(t, bin, base+"/?"+search.query+"&token="+token, "")
		var gotIDs []string
		for _, m := range regexp.MustCompile(`data-k="conv:([^"]+):title"`).FindAllStringSubmatch(dom, -1) {
			gotIDs = append(gotIDs, html.UnescapeString(m[1]))
		}
		if len(wantIDs) != search.want || strings.Join(gotIDs, " ") != strings.Join(wantIDs, " ") {
			t.Errorf("search %s: the page lists %v, the API %v (want %d)", search.query, gotIDs, wantIDs, search.want)
		}
		if search.want == 0 && !strings.Contains(dom, "No conversation matches this search.") {
			t.Errorf("search %s: the page does not say nothing matched", search.query)
		}
	}

	out := *screenshots
	if out == "" {
		out = t.TempDir()
	}
	for name, u := range map[string]string{"status-page.png": base + "/?token=" + token, "status-page-conversation.png": url + "#changed",
		"status-page-search.png": base + "/?tag=nightly&token=" + token} {
		path := filepath.Join(out, name)
		browse(t, bin, u, path)
		checkScreenshot(t, path)
	}
}

// conversationNumbers are the figures the pages show for c, as they
// show them.
func conversationNumbers(c client.Conversation) map[string]string {
	out := map[string]string{
		"messages": formatInt(c.Messages), "messages_after": formatInt(c.MessagesAfter), "unit": messageUnit(c.Provider),
		"tokens": formatInt(c.Tokens), "tokens_after": formatInt(c.TokensAfter),
		"requests": formatInt(c.Requests), "compactions": formatInt(c.Compactions),
		"failures": formatInt(c.Failures), "tokens_saved": formatInt(c.TokensSaved),
	}
	if c.Title != "" {
		out["title"] = c.Title
	}
	if c.User != "" {
		out["user"] = c.User
	}
	if w := float64(c.ContextWindow); w > 0 {
		pct := func(n int) string { return strconv.FormatFloat(float64(n)/w*100, 'f', 1, 64) + "%" }
		out["usage_before"], out["usage_after"], out["usage_peak"] = pct(c.Tokens), pct(c.TokensAfter), pct(c.PeakTokens)
	} else {
		out["usage_ratio"] = "unknown window"
	}
	return out
}

func compare(t *testing.T, page string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if k == "usage_ratio" && v == "unknown window" && got[k] == "–" { // the conversation page's card
			continue
		}
		if g, ok := got[k]; !ok {
			t.Errorf("%s does not show %s", page, k)
		} else if g != v {
			t.Errorf("%s shows %s = %q, the API says %q", page, k, g, v)
		}
	}
	if len(want) < 10 {
		t.Errorf("only %d figures compared on %s", len(want), page)
	}
}

// checkScreenshot checks path is a PNG of the window's size that is not
// blank.
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b := img.Bounds()
	colors := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	if b.Dx() < 1000 || b.Dy() < 700 || len(colors) < 20 {
		t.Errorf("%s: %dx%d with %d colors: not a rendered page", path, b.Dx(), b.Dy(), len(colors))
	}
	t.Logf("screenshot %s: %dx%d", path, b.Dx(), b.Dy())
}

// waitCompiled waits until every serving plugin of the daemon c talks to
// runs compiled code.
func waitCompiled(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		policies, err := c.Policies(bg)
		if err != nil {
			t.Fatal(err)
		}
		var waiting []string
		for _, p := range policies {
			if p.Serving && p.Tier == "interpreted" {
				waiting = append(waiting, p.Name)
			}
		}
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still interpreted after 3 minutes: %v", waiting)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
