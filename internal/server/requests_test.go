package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/requestlog"
)

// requestsPage reads GET /v1/requests with the query q.
func (td *testDaemon) requests(t *testing.T, q url.Values) (requestsPage, []byte) {
	t.Helper()
	code, body, _ := td.raw(t, http.MethodGet, "/v1/requests?"+q.Encode(), "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/requests?%s: %d %s", q.Encode(), code, body)
	}
	var p requestsPage
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	return p, body
}

// TestRequestLog runs passed-through, compacted and /v1/compact requests
// through a daemon and reads their records from GET /v1/requests (paged),
// the access file and /metrics; no credential or content reaches any.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	msgs, n := tauMessages(t, 12000)
	access := filepath.Join(t.TempDir(), "access.jsonl")
	td, up := proxyDaemon(t, fmt.Sprintf("  context_window: %d\nlog: {access_file: %s}\n", n, access), pluginSliding)

	const secret = "sk-test-SECRET-never-logged"
	const content = "CONTENT-MARKER-never-logged"
	short := openAIBody([]json.RawMessage{json.RawMessage(`{"role":"user","content":"` + content + `"}`)}, "")
	hdr := map[string]string{"X-Compactd-Conversation": "short", "X-Secret": secret}
	for range 3 {
		if resp, b := td.post(t, proxy.RouteOpenAI, short, hdr); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	resp, b := td.post(t, proxy.RouteOpenAI, openAIBody(msgs, ""), map[string]string{"X-Compactd-Conversation": "long"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	if code, b, _ := td.raw(t, http.MethodPost, "/v1/compact", mustJSON(t, map[string]any{"policy": "sliding", "model": "gpt-4o", "conversation_id": "direct", "messages": msgs})); code != http.StatusOK {
		t.Fatalf("/v1/compact: %d %s", code, b)
	}
	if code, _, _ := td.raw(t, http.MethodPost, "/v1/compact", `{"messages": 3}`); code != http.StatusBadRequest {
		t.Fatalf("a bad /v1/compact: %d", code)
	}

	// Every request, newest first, one at a time through the cursor.
	var all []requestlog.Record
	var raw bytes.Buffer
	q := url.Values{"limit": {"1"}}
	for {
		p, body := td.requests(t, q)
		raw.Write(body)
		all = append(all, p.Requests...)
		if p.NextCursor == "" {
			break
		}
		if len(all) > 10 {
			t.Fatalf("the listing does not end: %d records", len(all))
		}
		q.Set("cursor", p.NextCursor)
	}
	if len(all) != 6 {
		t.Fatalf("%d records, want 6: %+v", len(all), all)
	}
	seen := map[string]bool{}
	for _, r := range all {
		if seen[r.ID] {
			t.Fatalf("record %s listed twice", r.ID)
		}
		seen[r.ID] = true
	}
	bad, direct, long, short0 := all[0], all[1], all[2], all[5]
	if bad.Kind != requestlog.KindCompact || bad.Status != http.StatusBadRequest || bad.NotCompacted != proxy.NotCompactedError {
		t.Errorf("the bad /v1/compact: %+v", bad)
	}
	if direct.Kind != requestlog.KindCompact || direct.ConversationID != "direct" || !direct.Compacted || direct.TokensAfter >= direct.TokensBefore || direct.Status != 200 {
		t.Errorf("the /v1/compact: %+v", direct)
	}
	if long.Kind != requestlog.KindProxy || long.ConversationID != "long" || !long.Compacted || long.Reason == "" ||
		long.TokensAfter >= long.TokensBefore || len(long.Pipeline) != 1 || long.Pipeline[0] != "sliding" ||
		long.Status != 200 || !long.Upstream || long.Usage == nil || long.Usage.InputTokens == 0 || long.Format != "openai" || long.Model != "gpt-4o" {
		t.Errorf("the compacted proxy request: %+v", long)
	}
	if long.CostUSD == nil || long.FullCostUSD == nil || *long.FullCostUSD <= *long.CostUSD {
		t.Errorf("the compacted request's money: paid %v, full %v; want full > paid", long.CostUSD, long.FullCostUSD)
	}
	if short0.Compacted || short0.NotCompacted != proxy.NotCompactedBelow || short0.Usage == nil || short0.UpstreamMS <= 0 ||
		short0.FirstByteMS <= 0 || short0.FirstByteMS > short0.UpstreamMS || short0.CompactdMS <= 0 || *short0.CostUSD != *short0.FullCostUSD {
		t.Errorf("a passed-through request: %+v", short0)
	}

	// One conversation's records, with their money.
	p, _ := td.requests(t, url.Values{"conversation": {"short"}})
	if len(p.Requests) != 3 || p.Money.Priced != 3 || p.Money.PaidUSD <= 0 || p.Money.PaidUSD != p.Money.FullUSD {
		t.Errorf("conversation short: %d records, money %+v", len(p.Requests), p.Money)
	}
	// /v1/status carries the same money per conversation and in the
	// totals (kept with the conversation, not read from the log's ring).
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	if c := td.status(t, "long"); !near(c.PaidUSD, *long.CostUSD) || !near(c.FullUSD, *long.FullCostUSD) || c.UnpricedRequests != 0 {
		t.Errorf("/v1/status money of long: paid %v full %v unpriced %d; the log says %v, %v", c.PaidUSD, c.FullUSD, c.UnpricedRequests, *long.CostUSD, *long.FullCostUSD)
	}
	if c := td.status(t, "short"); !near(c.PaidUSD, p.Money.PaidUSD) || !near(c.FullUSD, p.Money.FullUSD) {
		t.Errorf("/v1/status money of short: paid %v full %v; the log says %+v", c.PaidUSD, c.FullUSD, p.Money)
	}
	var st client.Status
	if code, b, _ := td.raw(t, http.MethodGet, "/v1/status", ""); code != http.StatusOK || json.Unmarshal(b, &st) != nil {
		t.Fatalf("/v1/status: %d %s", code, b)
	}
	if want := *long.CostUSD + p.Money.PaidUSD; !near(st.Totals.PaidUSD, want) || !near(st.Totals.FullUSD, *long.FullCostUSD+p.Money.FullUSD) {
		t.Errorf("/v1/status totals: %+v; want paid %v", st.Totals, want)
	}
	if code, page, _ := td.raw(t, http.MethodGet, "/", ""); code != http.StatusOK || !bytes.Contains(page, []byte(`data-k="conv:long:paid_usd">`+formatUSD(*long.CostUSD)+`<`)) ||
		!bytes.Contains(page, []byte(`data-k="totals.full_usd"`)) {
		t.Errorf("the status page does not show the money: %d", code)
	}
	if code, b, _ := td.raw(t, http.MethodGet, "/v1/requests?cursor=nonsense", ""); code != http.StatusBadRequest {
		t.Errorf("a bad cursor: %d %s", code, b)
	}
	if code, b, _ := td.raw(t, http.MethodGet, "/v1/requests?limit=0", ""); code != http.StatusBadRequest {
		t.Errorf("limit=0: %d %s", code, b)
	}

	// The access file has the same records once they are written (Add
	// writes it before the answer's record is listed).
	file, err := os.ReadFile(access)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(file))
	for sc.Scan() {
		var r requestlog.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || !seen[r.ID] {
			t.Errorf("access file line %q: %v", sc.Text(), err)
		}
		lines++
	}
	if lines != 6 {
		t.Errorf("the access file has %d lines, want 6", lines)
	}

	_, metrics, _ := td.raw(t, http.MethodGet, "/metrics", "")
	for _, want := range []string{
		`compactd_upstream_requests_total{provider="openai",model="gpt-4o",status="2xx"} 4`,
		`compactd_upstream_input_tokens_total{provider="openai",model="gpt-4o"}`,
		`compactd_upstream_cost_dollars_total{provider="openai",model="gpt-4o"}`,
		`compactd_upstream_duration_seconds_count{provider="openai"} 4`,
		`compactd_request_overhead_seconds_count{kind="compact"} 2`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	for what, b := range map[string][]byte{"GET /v1/requests": raw.Bytes(), "the access file": file, "/metrics": metrics} {
		for _, s := range []string{secret, content, upstreamtest.OpenAIKey, proxyToken} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds %q", what, s)
			}
		}
	}
	if last := up.Last(); bytes.Contains(last.Body, []byte(content)) || !bytes.Contains(last.Body, []byte(`"gpt-4o"`)) {
		t.Errorf("the upstream's last request is not the compacted long conversation")
	}
}
