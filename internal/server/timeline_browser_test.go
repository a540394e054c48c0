package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
)

// TestTimelineInBrowser proxies a conversation turn by turn until it is
// compacted, then loads its page in headless Chromium: the timeline lists
// every request GET /v1/requests lists, the chart has a point per
// request before and after compaction, and the dollars are the API's.
func TestTimelineInBrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	msgs, n := tauMessages(t, 12000)
	td, _ := proxyDaemon(t, fmt.Sprintf("  context_window: %d\n", n), pluginSliding)
	const id = "timeline-showcase"
	turns := 0
	for _, k := range []int{len(msgs) / 4, len(msgs) / 2, 3 * len(msgs) / 4, len(msgs)} {
		// A turn ends where every tool call has its result.
		for k < len(msgs) && (strings.Contains(string(msgs[k-1]), `"tool_calls"`) || strings.Contains(string(msgs[k]), `"role":"tool"`)) {
			k++
		}
		resp, b := td.post(t, proxy.RouteOpenAI, openAIBody(msgs[:k], ""), map[string]string{proxy.HeaderConversation: id})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		turns++
	}
	p, _ := td.requests(t, url.Values{"conversation": {id}})
	compacted := 0
	for _, r := range p.Requests {
		if r.Compacted {
			compacted++
		}
	}
	if len(p.Requests) != turns || compacted == 0 || p.Money.Priced != turns || p.Money.FullUSD <= p.Money.PaidUSD {
		t.Fatalf("the API lists %d requests (%d compacted), money %+v; want %d, some compacted, full > paid", len(p.Requests), compacted, p.Money, turns)
	}

	base := "http://" + td.TCPAddr()
	page := base + "/conversation?id=" + id + "&token=" + proxyToken
	dom := browse(t, bin, page, "")
	want := conversationNumbers(td.status(t, id))
	want["id"] = id
	want["paid_usd"] = formatUSD(p.Money.PaidUSD)
	want["full_usd"] = formatUSD(p.Money.FullUSD)
	want["saved_usd"] = formatUSD(p.Money.FullUSD - p.Money.PaidUSD)
	compare(t, "the conversation page with its timeline", shown(dom), want)
	table := dom[strings.Index(dom, `id="requests"`):]
	if got := strings.Count(table, "<tr class=\"compacted\">"); got != compacted {
		t.Errorf("the timeline shows %d compacted requests, the API %d", got, compacted)
	}
	if got := strings.Count(table, "<tr class=\"\">"); got != turns-compacted {
		t.Errorf("the timeline shows %d requests passed through, the API %d", got, turns-compacted)
	}
	for _, line := range []string{"before", "after"} {
		m := regexp.MustCompile(`<polyline class="` + line + `" points="([^"]*)"`).FindStringSubmatch(dom)
		if m == nil || len(strings.Fields(m[1])) != turns {
			t.Errorf("the chart's %q line: %v; want %d points", line, m, turns)
		}
	}
	// The last request was compacted: its "after" point is below (a
	// larger y than) its "before" point.
	last := func(line string) float64 {
		m := regexp.MustCompile(`<polyline class="` + line + `" points="([^"]*)"`).FindStringSubmatch(dom)
		f := strings.Fields(m[1])
		var x, y float64
		fmt.Sscanf(f[len(f)-1], "%f,%f", &x, &y)
		return y
	}
	if p.Requests[0].Compacted && last("after") <= last("before") {
		t.Errorf("the chart shows the compacted request's tokens sent (y %v) no lower than before (y %v)", last("after"), last("before"))
	}
	if raw, _ := json.Marshal(p); strings.Contains(string(raw), upstreamtest.OpenAIKey) {
		t.Error("the API's records hold the provider key")
	}

	out := *screenshots
	if out == "" {
		out = t.TempDir()
	}
	path := filepath.Join(out, "status-page-timeline.png")
	browse(t, bin, page+"#timeline", path)
	checkScreenshot(t, path)
}
