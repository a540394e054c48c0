package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/provider"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

// builtinPolicies are the policies under plugins/, as wasmbuild.ForTest
// takes them, with the policy name each registers.
var builtinPolicies = []struct{ src, name string }{
	{"plugins/deterministic", "deterministic"},
	{"plugins/hierarchical", "hierarchical"},
	{"plugins/lastn/lastn.c", "lastn"},
	{"plugins/ledger", "ledger"},
	{"plugins/llm", "llm"},
	{"plugins/recap", "recap"},
	{"plugins/sliding", "sliding"},
	{"plugins/toolresult", "toolresult"},
}

// llmKeyEnv names the variable the fleet daemons read the local
// provider's key from (llm.api_key_env).
const llmKeyEnv = "COMPACTD_TEST_LLM_KEY"

// fleetConfig is the config of every daemon of a fleet test: the local
// provider at llmBase as the summarizer, toolresult's thresholds lowered
// to the fixture's tool results (its defaults wait for 50000-character
// results or a nearly full context window, which the fixture never
// reaches), and, when upstream is set, the proxy in front of it with the
// policy line given (default sliding) and proxyExtra in its block.
func fleetConfig(llmBase, upstream, policy, proxyExtra string) string {
	cfg := "llm:\n  provider: openai\n  base_url: " + llmBase + "\n  api_key_env: " + llmKeyEnv + "\n  model: m\n" +
		"compact:\n  token_threshold: 2000\n  retention_window: 4\n" +
		"policies:\n  toolresult: {single_result_threshold: 6000, chunk_size: 3000, min_result_size: 2000, context_limit: 6000}\n" +
		// A call into llm or toolresult includes their summarizer calls:
		// sixteen in a row on one request here. The wall-clock call limit
		// covers the LLM's latency (docs/configuration.md), so these
		// tests give it room on a loaded machine, as a user of a real
		// LLM would; the work budget still bounds the guests themselves.
		"limits:\n  plugins:\n    llm: {call_timeout: 10m}\n    toolresult: {call_timeout: 10m}\n"
	if upstream != "" {
		if policy == "" {
			policy = "policy: sliding\n"
		}
		cfg += policy + "proxy:\n  openai: {upstream: " + upstream + "}\n" + proxyExtra
	}
	return cfg
}

// fleetStoreTimeout bounds a fleet test daemon's calls to redis-server:
// the tests compare answers byte for byte, and on this shared machine
// under -race a call has missed the default 250 ms (the daemon then
// serves that request without the store, as it should, and says so).
const fleetStoreTimeout = 10 * time.Second

// fleetDaemon starts a daemon with srcs (default: every built-in
// policy); url, when set, is its shared store (COMPACTD_STATE_URL) and
// replica its name there.
func fleetDaemon(t *testing.T, cfg, url, replica string, srcs ...string) *testDaemon {
	t.Helper()
	if len(srcs) == 0 {
		for _, p := range builtinPolicies {
			srcs = append(srcs, p.src)
		}
	}
	td := setup(t, cfg, srcs...)
	td.opts.StoreTimeout = fleetStoreTimeout
	td.opts.Getenv = func(k string) string {
		switch k {
		case config.EnvStateURL:
			return url
		case "COMPACTD_REPLICA":
			return replica
		case llmKeyEnv:
			return upstreamtest.OpenAIKey
		}
		return ""
	}
	return td.start(t)
}

// llmCalls counts the summarizer calls a local provider received since
// from (an index into its Received), and the most times one request
// body was sent.
func llmCalls(p *upstreamtest.Server, from int) (calls, maxRepeat int, seen int) {
	got := p.Received()
	bodies := map[string]int{}
	for _, r := range got[from:] {
		if r.Path != "/v1/chat/completions" {
			continue
		}
		calls++
		bodies[string(r.Body)]++
		maxRepeat = max(maxRepeat, bodies[string(r.Body)])
	}
	return calls, maxRepeat, len(got)
}

// fleetTurns is how many turns of the fixture conversation the fleet
// round robin sends, every one past the compaction threshold, each after
// a turn another replica served: the first replica serves the last one
// too, after the other two changed the conversation since its first.
// (Six turns, two per replica, checked nothing more and cost half as
// much again.)
const fleetTurns = 4

// fleetReplicas starts n replicas of a fleet on the shared store at url
// (named r0, r1, ...), each with every built-in policy, as `compactd
// serve` processes built without the race detector, and waits until each
// serves every policy compiled.
//
// The fleet tests that compare whole conversations policy by policy run
// their replicas this way: they check what a fleet answers, not data
// races, and four daemons serving eight policies under -race made
// TestFleetRoundRobin the package's slowest test by far (112 s quiet; the
// race detector's bookkeeping of copying the plugins' bytes and running
// their host calls was most of it). The same daemon code runs under -race
// on a shared store in TestFleetDeferredTrigger and TestFleetRedisDown,
// and every policy under -race in the reference daemon the round robin
// compares the fleet with.
func fleetReplicas(t *testing.T, cfg, url string, n int) []*childDaemon {
	t.Helper()
	var srcs []string
	for _, p := range builtinPolicies {
		srcs = append(srcs, p.src)
	}
	var replicas []*childDaemon
	for i := range n {
		// state.timeout is what fleetStoreTimeout is to the in-process
		// daemons.
		td := setup(t, cfg+"state:\n  timeout: "+fleetStoreTimeout.String()+"\n", srcs...)
		td.served = true
		td.childEnv = []string{config.EnvStateURL + "=" + url, fmt.Sprintf("COMPACTD_REPLICA=r%d", i), llmKeyEnv + "=" + upstreamtest.OpenAIKey}
		replicas = append(replicas, startChild(t, td))
	}
	for _, d := range replicas {
		d.waitHealthy(5 * time.Minute)
		waitCompiled(t, d.c)
	}
	return replicas
}

// TestFleetRoundRobin: three daemons sharing one real redis-server take a
// conversation's turns in turn, for every built-in policy. Each turn's
// answer is byte-identical to one daemon's (on its own bbolt store); the
// local provider, as the summarizer, gets each summarization request
// once across the fleet and as many as one daemon sends, also when all
// three get the same turn at once; and the fleet's status shows the
// conversation's totals and the replica that served it last.
//
// The single daemon runs in the test process (under -race when the suite
// is), loading every built-in compiled from the tests' shared compilation
// cache; the three replicas are `compactd serve` processes (see
// fleetReplicas). The turns are the fixture's growing prefixes.
func TestFleetRoundRobin(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	llmOne, llmFleet := upstreamtest.New(), upstreamtest.New()
	defer llmOne.Close()
	defer llmFleet.Close()
	single := fleetDaemon(t, fleetConfig(llmOne.OpenAIBase(), "", "", ""), "", "")
	fleet := fleetReplicas(t, fleetConfig(llmFleet.OpenAIBase(), "", "", ""), srv.URL(), 3)
	// Every daemon serves the same build of every policy (a fleet whose
	// replicas run different builds cannot agree, and the comparison
	// below would blame the store).
	digests := func(c *client.Client) map[string]string {
		list, err := c.Policies(bg)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, p := range list {
			m[p.Name] = p.Version + " " + p.SHA256
		}
		return m
	}
	want := digests(single.c)
	if len(want) != len(builtinPolicies) {
		t.Fatalf("the single daemon serves %d policies, want %d: %v", len(want), len(builtinPolicies), want)
	}
	for i, r := range fleet {
		if got := digests(r.c); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("replica %d serves %v, the single daemon %v", i, got, want)
		}
	}
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	msgs := convs[0].Chat.Raw
	var table strings.Builder
	fmt.Fprintf(&table, "| policy | turns | identical | compacted | LLM calls, 1 daemon | LLM calls, 3 daemons | most sends of one request, 3 daemons |\n|---|---|---|---|---|---|---|\n")
	var fromOne, fromFleet int
	for _, p := range builtinPolicies {
		id := "fleet-" + p.name
		identical, compacted := 0, 0
		for k := 0; k < fleetTurns; k++ {
			n := len(msgs)/3 + k*(len(msgs)-len(msgs)/3)/(fleetTurns-1)
			n = min(n, len(msgs))
			req := &client.CompactRequest{Policy: p.name, Model: "deepseek-chat", ConversationID: id, Messages: msgs[:n]}
			want, err := single.c.Compact(bg, req)
			if err != nil {
				t.Fatalf("%s turn %d, one daemon: %v", p.name, k, err)
			}
			got, err := fleet[k%3].c.Compact(bg, req)
			if err != nil {
				t.Fatalf("%s turn %d, replica %d: %v", p.name, k, k%3, err)
			}
			w, g := mustJSON(t, want.Messages), mustJSON(t, got.Messages)
			if w != g || want.Compacted != got.Compacted || want.Summary != got.Summary || len(got.Warnings) != len(want.Warnings) {
				t.Errorf("%s turn %d (replica %d): differs from one daemon: compacted %v/%v, %d/%d bytes, warnings %q / %q",
					p.name, k, k%3, want.Compacted, got.Compacted, len(w), len(g), want.Warnings, got.Warnings)
				continue
			}
			identical++
			if got.Compacted {
				compacted++
			}
		}
		c1, r1, next1 := llmCalls(llmOne, fromOne)
		cf, rf, nextF := llmCalls(llmFleet, fromFleet)
		fromOne, fromFleet = next1, nextF
		if cf != c1 || rf > 1 || r1 > 1 {
			t.Errorf("%s: the fleet called the summarizer %d times (one request up to %d times), one daemon %d (up to %d)", p.name, cf, rf, c1, r1)
		}
		fmt.Fprintf(&table, "| %s | %d | %d | %d | %d | %d | %d |\n", p.name, fleetTurns, identical, compacted, c1, cf, rf)
		// Any replica shows the fleet's totals for the conversation.
		st, err := fleet[fleetTurns%3].c.Conversation(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Requests != fleetTurns || st.Replica != fmt.Sprintf("r%d", (fleetTurns-1)%3) {
			t.Errorf("%s: fleet status requests=%d replica=%q, want %d and r%d", p.name, st.Requests, st.Replica, fleetTurns, (fleetTurns-1)%3)
		}
	}
	// The same turn on all three replicas at once: one of them calls the
	// summarizer for each span, the others wait for its answer.
	req := &client.CompactRequest{Policy: "llm", Model: "deepseek-chat", ConversationID: "fleet-llm-concurrent", Messages: convs[1].Chat.Raw}
	alone, err := single.c.Compact(bg, req)
	if err != nil {
		t.Fatal(err)
	}
	if !alone.Compacted || len(alone.Warnings) != 0 {
		t.Fatalf("concurrent turn, one daemon: compacted %v, warnings %q", alone.Compacted, alone.Warnings)
	}
	c1, _, _ := llmCalls(llmOne, fromOne)
	answers := make([]*client.CompactResponse, len(fleet))
	errs := make([]error, len(fleet))
	var wg sync.WaitGroup
	for i, r := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = r.c.Compact(bg, req)
		}()
	}
	wg.Wait()
	cf, rf, _ := llmCalls(llmFleet, fromFleet)
	for i, got := range answers {
		if errs[i] != nil {
			t.Fatalf("replica %d, concurrent turn: %v", i, errs[i])
		}
		if mustJSON(t, got.Messages) != mustJSON(t, alone.Messages) || !got.Compacted {
			t.Errorf("replica %d, concurrent turn: differs from one daemon (compacted %v, warnings %q)", i, got.Compacted, got.Warnings)
		}
	}
	if cf != c1 || rf > 1 || c1 == 0 {
		t.Errorf("one turn on three replicas at once: %d summarizer calls (one request up to %d times), one daemon %d", cf, rf, c1)
	}
	fmt.Fprintf(&table, "| llm, one turn on 3 replicas at once | 1 | %d | %d | %d | %d | %d |\n", len(fleet), len(fleet), c1, cf, rf)
	if s := llmFleet.Stats(); s.APIs[provider.APIChat].Rejected != 0 {
		t.Errorf("the local provider refused summarization requests: %v", s.Rejections)
	}
	t.Logf("fleet round robin (3 daemons, one redis-server) vs one daemon:\n%s", table.String())
}

// TestFleetDeferredTrigger: through the proxy, the provider's usage on a
// response relayed by replica A flags the conversation, and the next
// turn, sent to replica B, is compacted; the upstream gets the same bytes
// as from one daemon that served both turns.
func TestFleetDeferredTrigger(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := upstreamtest.New()
	defer up.Close()
	msgs, n := tauMessages(t, 24000)
	tools := `,"tools":[{"type":"function","function":{"name":"lookup","description":"` + strings.Repeat("a ", n) + `","parameters":{"type":"object"}}}]`
	window := n * 8 / 5 // the messages alone are 62%: no pre-flight trigger; with the tools, 94%
	cfg := fleetConfig(up.OpenAIBase(), up.OpenAIBase(), "", fmt.Sprintf("  context_window: %d\n", window))
	single := fleetDaemon(t, cfg, "", "", pluginSliding)
	a := fleetDaemon(t, cfg, srv.URL(), "a", pluginSliding)
	b := fleetDaemon(t, cfg, srv.URL(), "b", pluginSliding)
	next := append(append([]json.RawMessage(nil), msgs...),
		json.RawMessage(`{"role":"assistant","content":"noted"}`), json.RawMessage(`{"role":"user","content":"and now?"}`))
	id := map[string]string{proxy.HeaderConversation: "deferred-fleet"}
	// turn sends one turn through td and returns whether it was
	// compacted and the body the upstream got.
	turn := func(td *testDaemon, msgs []json.RawMessage) (bool, []byte) {
		resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(msgs, tools), id)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
		return resp.Header.Get(proxy.HeaderCompacted) == "true", up.Last().Body
	}
	c1, want1 := turn(single, msgs)
	c2, want2 := turn(single, next)
	if c1 || !c2 {
		t.Fatalf("one daemon: compacted %v, %v; want the second turn only", c1, c2)
	}
	if c, got := turn(a, msgs); c || !bytes.Equal(got, want1) {
		t.Fatalf("replica a, first turn: compacted %v, upstream got %d bytes, one daemon sent %d", c, len(got), len(want1))
	}
	if st := b.status(t, "deferred-fleet"); !st.NeedsCompaction || st.UsageRatio < 0.8 || st.Replica != "a" {
		t.Fatalf("replica b's view after a's response: %+v", st)
	}
	c, got := turn(b, next)
	if !c || !bytes.Equal(got, want2) {
		t.Fatalf("replica b, second turn: compacted %v, upstream got %d bytes, one daemon sent %d", c, len(got), len(want2))
	}
	st := a.status(t, "deferred-fleet")
	if st.NeedsCompaction || st.Compactions != 1 || st.Requests != 2 || st.Replica != "b" || st.UsageRatio >= 0.8 {
		t.Fatalf("replica a's view after b's compacted turn: %+v", st)
	}
	t.Logf("deferred trigger: set by replica a's response (usage ratio above 0.8), fired on replica b (%d of %d messages sent upstream, as from one daemon)",
		strings.Count(string(got), `"role"`), len(next))
}

// TestFleetRedisDown stops the shared redis-server in mid-run and starts
// it again: no request fails, answers carry the warning header while it
// is down, /healthz says degraded and /metrics counts the dropped writes;
// after the restart the daemon is healthy again and writes reach Redis.
func TestFleetRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := upstreamtest.New()
	defer up.Close()
	d := fleetDaemon(t, fleetConfig(up.OpenAIBase(), "", "", ""), srv.URL(), "r0", pluginSliding)
	body := func(id string) string {
		return `{"policy":"sliding","conversation_id":"` + id + `","messages":` + mustJSON(t, chatMessages(30)) + `}`
	}
	failed, served := 0, 0
	compact := func(id string) http.Header {
		code, b, h := d.raw(t, http.MethodPost, "/v1/compact", body(id))
		if code != http.StatusOK {
			failed++
			t.Errorf("compact while %s: %d %s", id, code, b)
		}
		served++
		return h
	}
	for i := 0; i < 5; i++ {
		if h := compact("up"); h.Get("X-Compactd-Warning") != "" {
			t.Fatalf("warning while Redis is up: %q", h.Get("X-Compactd-Warning"))
		}
	}
	srv.Kill()
	var warned int
	for i := 0; i < 20; i++ {
		if h := compact("down"); strings.Contains(h.Get("X-Compactd-Warning"), "state store unavailable") {
			warned++
		}
	}
	if warned < 19 { // the first request may be the one that finds Redis gone
		t.Errorf("%d of 20 answers while Redis was down carried the warning", warned)
	}
	_, hb, _ := d.raw(t, http.MethodGet, "/healthz", "")
	if !bytes.Contains(hb, []byte(`"status":"degraded"`)) || !bytes.Contains(hb, []byte(`"degraded":true`)) {
		t.Errorf("/healthz while Redis is down: %s", hb)
	}
	_, mb, _ := d.raw(t, http.MethodGet, "/metrics", "")
	if !bytes.Contains(mb, []byte("compactd_store_degraded 1")) || bytes.Contains(mb, []byte("compactd_store_writes_dropped_total 0\n")) {
		t.Errorf("/metrics while Redis is down lacks the degraded gauge or dropped writes")
	}
	srv.Restart()
	waitFor(t, "the store to recover", 30*time.Second, func() bool {
		_, hb, _ := d.raw(t, http.MethodGet, "/healthz", "")
		return bytes.Contains(hb, []byte(`"status":"ok"`))
	})
	if h := compact("back"); h.Get("X-Compactd-Warning") != "" {
		t.Errorf("warning after recovery: %q", h.Get("X-Compactd-Warning"))
	}
	if st, err := d.c.Conversation(bg, "back"); err != nil || st.Requests != 1 {
		t.Errorf("status after recovery: %+v %v", st, err)
	}
	t.Logf("redis stop/restart drill: %d requests, %d failed, %d warned while down", served, failed, warned)
}
