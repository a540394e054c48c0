package server

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/dataset"
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

// countingProvider is the local OpenAI-format provider, counting calls.
type countingProvider struct {
	fakeOpenAI
	n atomic.Int64
}

func (c *countingProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	c.fakeOpenAI.ServeHTTP(w, r)
}

// fleetDaemon starts a daemon with every built-in policy; url, when set,
// is its shared store (COMPACTD_STATE_URL) and replica its name there.
func fleetDaemon(t *testing.T, providerURL, url, replica string, srcs ...string) *testDaemon {
	t.Helper()
	cfg := "llm:\n  provider: openai\n  base_url: " + providerURL + "\n  model: m\n" +
		"compact:\n  token_threshold: 2000\n  retention_window: 4\n"
	if len(srcs) == 0 {
		for _, p := range builtinPolicies {
			srcs = append(srcs, p.src)
		}
	}
	td := setup(t, cfg, srcs...)
	td.opts.Getenv = func(k string) string {
		switch k {
		case config.EnvStateURL:
			return url
		case "COMPACTD_REPLICA":
			return replica
		}
		return ""
	}
	return td.start(t)
}

// TestFleetRoundRobin: three daemons sharing one real redis-server take a
// conversation's turns in turn, for every built-in policy. Each turn's
// answer is byte-identical to one daemon's (on its own bbolt store), the
// LLM summarizer is called no more often than by one daemon (once per
// span, fleet-wide), and the fleet's status shows the conversation's
// totals and the replica that served it last.
//
// It starts four daemons with every built-in plugin (about six minutes
// on two shared cores, far more under -race), so it runs when
// COMPACTD_FLEET_TEST=1 is set.
func TestFleetRoundRobin(t *testing.T) {
	if os.Getenv("COMPACTD_FLEET_TEST") == "" {
		t.Skip("set COMPACTD_FLEET_TEST=1 to run the fleet round robin (four daemons with every built-in plugin)")
	}
	srv := redistest.Start(t)
	one, fleetProv := &countingProvider{}, &countingProvider{}
	p1, pf := httptest.NewServer(one), httptest.NewServer(fleetProv)
	defer p1.Close()
	defer pf.Close()
	single := fleetDaemon(t, p1.URL, "", "")
	fleet := []*testDaemon{
		fleetDaemon(t, pf.URL, srv.URL(), "r0"),
		fleetDaemon(t, pf.URL, srv.URL(), "r1"),
		fleetDaemon(t, pf.URL, srv.URL(), "r2"),
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
	const turns = 9
	var table strings.Builder
	fmt.Fprintf(&table, "| policy | turns | identical | compacted | LLM calls, 1 daemon | LLM calls, 3 daemons |\n|---|---|---|---|---|---|\n")
	for _, p := range builtinPolicies {
		id := "fleet-" + p.name
		before1, beforeF := one.n.Load(), fleetProv.n.Load()
		identical, compacted := 0, 0
		for k := 0; k < turns; k++ {
			n := len(msgs)/3 + k*(len(msgs)-len(msgs)/3)/(turns-1)
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
		c1, cf := one.n.Load()-before1, fleetProv.n.Load()-beforeF
		if cf > c1 {
			t.Errorf("%s: the fleet called the summarizer %d times, one daemon %d", p.name, cf, c1)
		}
		fmt.Fprintf(&table, "| %s | %d | %d | %d | %d | %d |\n", p.name, turns, identical, compacted, c1, cf)
		// Any replica shows the fleet's totals for the conversation.
		st, err := fleet[(turns)%3].c.Conversation(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Requests != turns || st.Replica != fmt.Sprintf("r%d", (turns-1)%3) {
			t.Errorf("%s: fleet status requests=%d replica=%q, want %d and r%d", p.name, st.Requests, st.Replica, turns, (turns-1)%3)
		}
	}
	t.Logf("fleet round robin (3 daemons, one redis-server) vs one daemon:\n%s", table.String())
}

// TestFleetRedisDown stops the shared redis-server in mid-run and starts
// it again: no request fails, answers carry the warning header while it
// is down, /healthz says degraded and /metrics counts the dropped writes;
// after the restart the daemon is healthy again and writes reach Redis.
func TestFleetRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	prov := &countingProvider{}
	ps := httptest.NewServer(prov)
	defer ps.Close()
	d := fleetDaemon(t, ps.URL, srv.URL(), "r0", "plugins/sliding")
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
