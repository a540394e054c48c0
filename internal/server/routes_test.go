package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/provider"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/tokens"
)

// routesConfig is the proxy block of the routing tests: claude-* runs
// lastn from 70% of the window, gpt-4o* a pipeline at the proxy's 80%,
// and any other model the proxy's policy, sliding.
const routesConfig = `  policy: sliding
  context_window: %d
  routes:
    - {model: "claude-*", policy: lastn, threshold: 0.7}
    - {model: "gpt-4o*", pipeline: [lastn, sliding]}
`

// routesWindow is the context window of TestProxyRoutes.
const routesWindow = 10000

// sizedConversation returns a conversation of plain text turns that
// model's tokenizer counts as about want tokens (a system prompt, then
// user and assistant turns of some 40 tokens each, a user turn last).
func sizedConversation(t *testing.T, model string, want int) []json.RawMessage {
	t.Helper()
	tok := tokens.New(tokens.Options{}).ForModel(model)
	count := func(raw json.RawMessage) int {
		c, err := chat.FromRaw([]json.RawMessage{raw})
		if err != nil {
			t.Fatal(err)
		}
		return tok.CountMessages(c.Messages)
	}
	msg := func(role, text string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"role": role, "content": text})
		return b
	}
	msgs := []json.RawMessage{msg("system", "You are a careful assistant for the airline's booking desk.")}
	total := count(msgs[0])
	for i := 0; ; i++ {
		last := msg("user", fmt.Sprintf("Question %d: please check reservation R%04d for flight HAT%03d on May %d and tell me the fare class, the seat and the baggage allowance.", i, i, i%1000, i%28+1))
		if total+count(last) >= want {
			return append(msgs, last)
		}
		answer := msg("assistant", fmt.Sprintf("Reservation R%04d: flight HAT%03d, economy fare class, seat %dC, two checked bags of 23 kg included.", i, i%1000, i%40+1))
		msgs = append(msgs, last, answer)
		total += count(last) + count(answer)
	}
}

// TestProxyRoutes: each request runs the route its model matches (its
// pipeline, and its threshold for the trigger), or the one its
// X-Compactd-Policy header names over the route's threshold; the status
// and the request log say which route matched, and the header never goes
// upstream.
func TestProxyRoutes(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, fmt.Sprintf(routesConfig, routesWindow), pluginSliding, pluginLastn)

	for _, tc := range []struct {
		name, path, model string
		share             float64 // of the window, in the model's count
		header            string  // X-Compactd-Policy
		compacted         bool
		route             string
		pipeline          []string
	}{
		{"claude at 75% passes its 0.7", proxy.RouteAnthropic, "claude-sonnet-4-5", 0.75, "", true, "claude-*", []string{"lastn"}},
		{"claude at 65% is below its 0.7", proxy.RouteAnthropic, "claude-opus-4-1", 0.65, "", false, "claude-*", []string{"lastn"}},
		{"gpt-4o at 75% is below 0.8", proxy.RouteOpenAI, "gpt-4o", 0.75, "", false, "gpt-4o*", []string{"lastn", "sliding"}},
		{"gpt-4o-mini at 90%", proxy.RouteOpenAI, "gpt-4o-mini", 0.9, "", true, "gpt-4o*", []string{"lastn", "sliding"}},
		{"fallback at 90%", proxy.RouteOpenAI, "o3-mini", 0.9, "", true, "default", []string{"sliding"}},
		{"fallback at 75% is below 0.8", proxy.RouteOpenAI, "o3-mini", 0.75, "", false, "default", []string{"sliding"}},
		{"claude through the Chat Completions API", proxy.RouteOpenAI, "claude-sonnet-4-5", 0.75, "", true, "claude-*", []string{"lastn"}},
		{"header over a route", proxy.RouteOpenAI, "gpt-4o", 0.9, "sliding", true, "header", []string{"sliding"}},
		{"header pipeline keeps claude's 0.7", proxy.RouteAnthropic, "claude-sonnet-4-5", 0.75, " sliding , lastn ", true, "header", []string{"sliding", "lastn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "route-" + strings.NewReplacer(" ", "-", "%", "", "'", "").Replace(tc.name)
			h := map[string]string{proxy.HeaderConversation: id}
			if tc.header != "" {
				h[proxy.HeaderPolicy] = tc.header
			}
			msgs := sizedConversation(t, tc.model, int(tc.share*routesWindow))
			var body []byte
			if tc.path == proxy.RouteAnthropic {
				body, _ = anthropicBody(t, msgs, "")
				body = []byte(strings.Replace(string(body), `"claude-sonnet-4-5"`, `"`+tc.model+`"`, 1))
			} else {
				body = []byte(strings.Replace(string(openAIBody(msgs, "")), `"gpt-4o"`, `"`+tc.model+`"`, 1))
			}
			resp, got := td.post(t, tc.path, body, h)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, got)
			}
			// The request log: compactd's count (what the trigger
			// compares) is where the case wants it, and the record
			// carries the route and its pipeline.
			var page struct {
				Requests []struct {
					Pipeline      []string `json:"pipeline"`
					Route         string   `json:"route"`
					TokensBefore  int      `json:"tokens_before"`
					ContextWindow int      `json:"context_window"`
				} `json:"requests"`
			}
			code, out, _ := td.raw(t, http.MethodGet, "/v1/requests?conversation="+id, "")
			if code != http.StatusOK || json.Unmarshal(out, &page) != nil || len(page.Requests) != 1 {
				t.Fatalf("requests: %d %s", code, out)
			}
			r := page.Requests[0]
			if share := float64(r.TokensBefore) / float64(r.ContextWindow); share < tc.share-0.02 || share > tc.share+0.02 {
				t.Fatalf("fixture: the request was %.3f of the window, the case wants %.2f", share, tc.share)
			}
			if !slices.Equal(r.Pipeline, tc.pipeline) || r.Route != tc.route {
				t.Fatalf("request record: pipeline %v route %q; want %v %q", r.Pipeline, r.Route, tc.pipeline, tc.route)
			}
			if compacted := resp.Header.Get(proxy.HeaderCompacted) == "true"; compacted != tc.compacted {
				t.Fatalf("compacted = %v, want %v (warnings %q)", compacted, tc.compacted, resp.Header.Values(proxy.HeaderWarning))
			}
			for k := range up.Last().Header {
				if strings.HasPrefix(k, "X-Compactd-") {
					t.Errorf("%s went upstream", k)
				}
			}
			st := td.status(t, id)
			if st.Route != tc.route || !slices.Equal(st.Pipeline, tc.pipeline) || st.Model != tc.model {
				t.Fatalf("status: route %q pipeline %v model %q; want %q %v %q", st.Route, st.Pipeline, st.Model, tc.route, tc.pipeline, tc.model)
			}
			if tc.compacted {
				if d := st.LastCompaction; d == nil || !slices.Equal(d.Pipeline, tc.pipeline) {
					t.Fatalf("last compaction %+v", d)
				}
			}
			// The conversation's page names the route.
			want := map[string]string{"header": "chosen by X-Compactd-Policy", "default": "default route"}[tc.route]
			if want == "" {
				want = `route <span class="mono">` + tc.route + `</span>`
			}
			code, page2, _ := td.raw(t, http.MethodGet, "/conversation?id="+url.QueryEscape(id), "")
			if code != http.StatusOK || !strings.Contains(string(page2), want) {
				t.Fatalf("the conversation page (%d) does not show %q", code, want)
			}
		})
	}
	// A search finds conversations by their route (no model has a *).
	code, out, _ := td.raw(t, http.MethodGet, "/v1/status?q="+url.QueryEscape("CLAUDE-*"), "")
	var found struct {
		Conversations []client.Conversation `json:"conversations"`
	}
	if code != http.StatusOK || json.Unmarshal(out, &found) != nil || len(found.Conversations) != 3 {
		t.Fatalf("search by route: %d %s", code, out)
	}
	for _, c := range found.Conversations {
		if c.Route != "claude-*" {
			t.Errorf("search by route found %s on route %q", c.ID, c.Route)
		}
	}
	// The overview lists every route.
	code, overview, _ := td.raw(t, http.MethodGet, "/", "")
	for _, want := range []string{`route <span class="mono">claude-*</span>`, `route <span class="mono">gpt-4o*</span>`, "default route", "chosen by X-Compactd-Policy"} {
		if code != http.StatusOK || !strings.Contains(string(overview), want) {
			t.Errorf("the status page (%d) does not show %q", code, want)
		}
	}
}

// TestProxyPolicyHeaderRefused: a malformed X-Compactd-Policy, or one
// naming a policy no plugin serves, is refused with a 400 in the
// provider's error shape, and nothing goes upstream.
func TestProxyPolicyHeaderRefused(t *testing.T) {
	t.Parallel()
	td, up := proxyDaemon(t, "", pluginSliding)
	msgs := chatMessages(2)
	anth, _ := anthropicBody(t, msgs, "")
	for _, tc := range []struct {
		name, path, header, code string
		body                     []byte
	}{
		{"openai unknown", proxy.RouteOpenAI, "nosuch", "unknown_policy", openAIBody(msgs, "")},
		{"openai unknown in a pipeline", proxy.RouteOpenAI, "sliding,nosuch", "unknown_policy", openAIBody(msgs, "")},
		{"openai malformed", proxy.RouteOpenAI, "Bad Name", "bad_request", openAIBody(msgs, "")},
		{"openai empty element", proxy.RouteOpenAI, "sliding,,sliding", "bad_request", openAIBody(msgs, "")},
		{"anthropic unknown", proxy.RouteAnthropic, "nosuch", "unknown_policy", anth},
		{"anthropic malformed", proxy.RouteAnthropic, "sliding;lastn", "bad_request", anth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.Received())
			resp, got := td.post(t, tc.path, tc.body, map[string]string{proxy.HeaderPolicy: tc.header})
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(proxy.HeaderUpstream) != "" {
				t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
			}
			if n := len(up.Received()); n != before {
				t.Fatalf("%d requests went upstream", n-before)
			}
			if tc.path == proxy.RouteAnthropic {
				var e struct {
					Type  string `json:"type"`
					Error struct {
						Type    string `json:"type"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if json.Unmarshal(got, &e) != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" ||
					!strings.HasPrefix(e.Error.Message, "compactd ("+tc.code+"): "+proxy.HeaderPolicy) {
					t.Fatalf("not Anthropic's error shape with code %s: %s", tc.code, got)
				}
				return
			}
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(got, &e) != nil || e.Error.Code != tc.code || !strings.Contains(e.Error.Message, proxy.HeaderPolicy) {
				t.Fatalf("not OpenAI's error shape with code %s: %s", tc.code, got)
			}
			if tc.code == "unknown_policy" && !strings.Contains(e.Error.Message, "sliding") {
				t.Errorf("the message does not list the policies served: %s", e.Error.Message)
			}
		})
	}
}

// TestProxyRoutesManualCompaction: a manual compaction of a stored
// request runs its route's pipeline (or the one its X-Compactd-Policy
// chose), not the proxy's default.
func TestProxyRoutesManualCompaction(t *testing.T) {
	t.Parallel()
	raw, _ := tauMessages(t, 12000)
	td, _ := proxyDaemon(t, fmt.Sprintf(routesConfig, 1_000_000), pluginSliding, pluginLastn)
	for _, tc := range []struct {
		name, model, header string
		pipeline            []string
	}{
		{"route", "gpt-4o", "", []string{"lastn", "sliding"}},
		{"default", "o3-mini", "", []string{"sliding"}},
		{"header", "gpt-4o", "lastn", []string{"lastn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "manual-route-" + tc.name
			h := map[string]string{proxy.HeaderConversation: id}
			if tc.header != "" {
				h[proxy.HeaderPolicy] = tc.header
			}
			body := []byte(strings.Replace(string(openAIBody(raw, "")), `"gpt-4o"`, `"`+tc.model+`"`, 1))
			if resp, got := td.post(t, proxy.RouteOpenAI, body, h); resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
				t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
			}
			code, out, _ := td.raw(t, "POST", "/v1/compact", `{"conversation_id":"`+id+`"}`)
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, out)
			}
			st := td.status(t, id)
			if d := st.LastCompaction; d == nil || !slices.Equal(d.Pipeline, tc.pipeline) {
				t.Fatalf("manual compaction ran %+v, want %v", d, tc.pipeline)
			}
		})
	}
}

// TestProxyRoutesReload: PUT /v1/config replaces the routes for the next
// request; a bad route is refused naming it, and a route naming a policy
// no plugin serves is a warning.
func TestProxyRoutesReload(t *testing.T) {
	t.Parallel()
	td, _ := proxyDaemon(t, fmt.Sprintf(routesConfig, routesWindow), pluginSliding, pluginLastn)
	send := func(id string) (compacted bool, st client.Conversation) {
		t.Helper()
		body := openAIBody(sizedConversation(t, "gpt-4o", int(0.75*routesWindow)), "")
		resp, got := td.post(t, proxy.RouteOpenAI, body, map[string]string{proxy.HeaderConversation: id})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
		return resp.Header.Get(proxy.HeaderCompacted) == "true", td.status(t, id)
	}
	if compacted, st := send("reload-before"); compacted || st.Route != "gpt-4o*" {
		t.Fatalf("before the update: compacted %v, route %q", compacted, st.Route)
	}

	for _, tc := range []struct{ name, patch, want string }{
		{"bad pattern", `{"proxy":{"routes":[{"model":"gpt-[4","policy":"lastn"}]}}`, `proxy.routes[0].model: "gpt-[4" is not a valid pattern`},
		{"empty pattern", `{"proxy":{"routes":[{"model":"","policy":"lastn"}]}}`, "proxy.routes[0].model: empty"},
		{"no policy", `{"proxy":{"routes":[{"model":"gpt-*"}]}}`, "no policy or pipeline"},
		{"bad name", `{"proxy":{"routes":[{"model":"gpt-*","policy":"Lastn"}]}}`, `policy name "Lastn"`},
	} {
		code, out, _ := td.raw(t, http.MethodPut, "/v1/config", tc.patch)
		if c, msg := errorCode(t, out); code != http.StatusBadRequest || c != CodeInvalidConfig || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %s", tc.name, code, out)
		}
	}

	up, err := td.c.UpdateConfig(bg, map[string]any{"proxy": map[string]any{"routes": []any{
		map[string]any{"model": "gpt-4o*", "policy": "lastn", "threshold": 0.7},
		map[string]any{"model": "claude-*", "policy": "nosuch"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(up.Warnings, func(w string) bool { return strings.Contains(w, `"nosuch" is configured but not loaded`) }) {
		t.Errorf("warnings %v", up.Warnings)
	}
	compacted, st := send("reload-after")
	if !compacted || st.Route != "gpt-4o*" || !slices.Equal(st.Pipeline, []string{"lastn"}) {
		t.Fatalf("after the update: compacted %v, route %q, pipeline %v", compacted, st.Route, st.Pipeline)
	}
}

// TestProxyRoutesDeferredTrigger: the provider's usage of a response is
// compared with the route's threshold. Large tool definitions (which
// compactd does not count) put the usage between claude-*'s 0.7 and the
// proxy's 0.8 while compactd's own count stays far below both: the Claude
// conversation is flagged for compaction, the GPT one is not.
func TestProxyRoutesDeferredTrigger(t *testing.T) {
	t.Parallel()
	td, _ := proxyDaemon(t, fmt.Sprintf(routesConfig, routesWindow), pluginSliding, pluginLastn)
	for _, tc := range []struct {
		name, path, model, tools string
		words                    int // of the tools' description: the usage at about 0.75 of the window
		flagged                  bool
	}{
		{"claude", proxy.RouteAnthropic, "claude-sonnet-4-5", `,"tools":[{"name":"lookup","description":"%s","input_schema":{"type":"object"}}]`, 10000, true},
		{"gpt-4o", proxy.RouteOpenAI, "gpt-4o", `,"tools":[{"type":"function","function":{"name":"lookup","description":"%s","parameters":{"type":"object"}}}]`, 8800, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "deferred-route-" + tc.name
			msgs := sizedConversation(t, tc.model, int(0.3*routesWindow))
			tools := fmt.Sprintf(tc.tools, strings.Repeat("a ", tc.words))
			var body []byte
			if tc.path == proxy.RouteAnthropic {
				body, _ = anthropicBody(t, msgs, tools)
			} else {
				body = openAIBody(msgs, tools)
			}
			resp, got := td.post(t, tc.path, body, map[string]string{proxy.HeaderConversation: id})
			if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
				t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
			}
			st := td.status(t, id)
			if st.LastUsage == nil {
				t.Fatal("no usage recorded")
			}
			ratio := float64(st.LastUsage.InputTokens+st.LastUsage.OutputTokens) / routesWindow
			if ratio <= 0.7 || ratio >= 0.8 {
				t.Fatalf("fixture: the provider's usage is %.3f of the window; the test wants it between 0.7 and 0.8", ratio)
			}
			t.Logf("the provider's usage: %.3f of the window", ratio)
			if st.NeedsCompaction != tc.flagged || st.Route != map[bool]string{true: "claude-*", false: "gpt-4o*"}[tc.flagged] {
				t.Fatalf("usage %.3f of the window: needs_compaction %v on route %q, want %v", ratio, st.NeedsCompaction, st.Route, tc.flagged)
			}
		})
	}
}

// TestProxyRoutesPrepare: background preparation starts at the route's
// prepare_threshold, runs the route's pipeline, and the request at the
// route's trigger is sent from it; a model of another route (without
// preparation) is not prepared.
func TestProxyRoutesPrepare(t *testing.T) {
	t.Parallel()
	td, _ := proxyDaemon(t, fmt.Sprintf(`  policy: lastn
  context_window: %d
  routes:
    - {model: "claude-*", policy: sliding, threshold: 0.9, prepare_threshold: 0.5}
`, routesWindow), pluginSliding, pluginLastn)
	px := td.server.opts.Proxy
	post := func(model, id string, share float64) *http.Response {
		t.Helper()
		body, _ := anthropicBody(t, sizedConversation(t, model, int(share*routesWindow)), "")
		body = []byte(strings.Replace(string(body), `"claude-sonnet-4-5"`, `"`+model+`"`, 1))
		resp, got := td.post(t, proxy.RouteAnthropic, body, map[string]string{proxy.HeaderConversation: id})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
		return resp
	}
	// Past the default route's (absent) preparation: nothing starts.
	if resp := post("other-model", "prepare-default", 0.6); resp.Header.Get(proxy.HeaderCompacted) != "" {
		t.Fatal("compacted below the trigger")
	}
	if st := px.PrepareStats(); st.Started != 0 {
		t.Fatalf("a preparation started without a prepare_threshold: %+v", st)
	}
	// Past claude-*'s 0.5: one starts, and is held.
	if resp := post("claude-sonnet-4-5", "prepare-claude", 0.6); resp.Header.Get(proxy.HeaderCompacted) != "" {
		t.Fatal("compacted below the trigger")
	}
	waitFor(t, "the preparation", 2*time.Minute, func() bool { st := px.PrepareStats(); return st.Held == 1 && st.InFlight == 0 })
	if st := px.PrepareStats(); st.Started != 1 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	// At claude-*'s 0.9 (the same conversation, grown): sent from it.
	if resp := post("claude-sonnet-4-5", "prepare-claude", 0.95); resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("not compacted at the trigger: %v", resp.Header)
	}
	if st := px.PrepareStats(); st.Used != 1 {
		t.Fatalf("the request at the trigger was not sent from the prepared compaction: %+v", st)
	}
	if st := td.status(t, "prepare-claude"); st.Route != "claude-*" || !slices.Equal(st.Pipeline, []string{"sliding"}) {
		t.Fatalf("status: route %q, pipeline %v", st.Route, st.Pipeline)
	}
}

// TestProxyRoutesRecoverOverflow: the compaction after a context-length
// error runs the request's route (or its X-Compactd-Policy).
func TestProxyRoutesRecoverOverflow(t *testing.T) {
	t.Parallel()
	td, _ := proxyDaemon(t, fmt.Sprintf(routesConfig, 1_000_000), pluginSliding, pluginLastn)
	msgs := chatMessages(21) // about 300 tokens by the provider's count
	for _, tc := range []struct {
		name, header, route string
		pipeline            []string
	}{
		{"route", "", "claude-*", []string{"lastn"}},
		{"header", "sliding", "header", []string{"sliding"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "overflow-route-" + tc.name
			h := map[string]string{proxy.HeaderConversation: id, provider.HeaderContextLimit: "150"}
			if tc.header != "" {
				h[proxy.HeaderPolicy] = tc.header
			}
			// A model of its own each: the proxy learns a stated limit.
			body, _ := anthropicBody(t, msgs, "")
			body = bytes.Replace(body, []byte(`"claude-sonnet-4-5"`), []byte(`"claude-`+tc.name+`"`), 1)
			r, got := td.post(t, proxy.RouteAnthropic, body, h)
			if r.StatusCode != http.StatusOK || r.Header.Get(proxy.HeaderRecovered) != proxy.RecoveredOverflow {
				t.Fatalf("want the retry's answer marked recovered: %d %v %s", r.StatusCode, r.Header, got)
			}
			st := td.status(t, id)
			if st.Recoveries != 1 || st.Route != tc.route || st.LastCompaction == nil || !slices.Equal(st.LastCompaction.Pipeline, tc.pipeline) {
				t.Fatalf("recoveries %d, route %q, last compaction %+v; want %q %v", st.Recoveries, st.Route, st.LastCompaction, tc.route, tc.pipeline)
			}
		})
	}
}
