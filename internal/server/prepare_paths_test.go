package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/provider"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
)

// llmCallLimit is the config line giving the llm policy a call_timeout
// that covers a summarizer the test holds (and a loaded machine's
// -race run): call_timeout is wall-clock and includes llm_complete's
// wait, so the default 10s would fail a held call (docs/configuration.md
// advises 90s for llm).
const llmCallLimit = "limits: {plugins: {llm: {call_timeout: 10m}}}\n"

// prepareDaemon starts a daemon whose proxy runs the llm policy against
// the summarizer at sumURL, in front of up, with the given window and
// extra proxy settings.
func prepareDaemon(t *testing.T, sumURL string, up *upstreamtest.Server, window int, proxyExtra string) *testDaemon {
	t.Helper()
	cfg := fmt.Sprintf("policy: llm\ncompact: {token_threshold: 1000, retention_window: 4}\n"+llmCallLimit+
		"llm: {provider: openai, base_url: '%s/v1', model: summarizer-1, api_key_env: COMPACTD_TEST_SUMMARIZER_KEY}\n"+
		"proxy: {openai: {upstream: '%s'}, context_window: %d%s}\n", sumURL, up.OpenAIBase(), window, proxyExtra)
	td := setup(t, cfg, "plugins/llm")
	td.opts.Getenv = func(k string) string {
		if k == "COMPACTD_TEST_SUMMARIZER_KEY" {
			return upstreamtest.OpenAIKey
		}
		return ""
	}
	return td.start(t)
}

// heldSummarizer is a gated local summarizer whose calls wait until the
// returned channel is closed.
func heldSummarizer(t *testing.T) (*gatedSummarizer, string, chan struct{}) {
	gate := &gatedSummarizer{next: provider.New(provider.Options{OpenAIKey: upstreamtest.OpenAIKey})}
	hold := make(chan struct{})
	gate.set(hold, false)
	sum := httptest.NewServer(gate)
	t.Cleanup(sum.Close)
	return gate, sum.URL, hold
}

// heldPreparation is a conversation whose preparation is running, held
// by the summarizer until hold is closed.
type heldPreparation struct {
	full []json.RawMessage
	td   *testDaemon
	px   *proxy.Proxy
	id   map[string]string
	up   *upstreamtest.Server
	hold chan struct{}
}

// startHeldPreparation starts a daemon preparing at half its window
// (with the extra proxy settings), sends the conversation id's prefix
// below the trigger (forwarded untouched) and waits for its preparation
// to reach the held summarizer.
func startHeldPreparation(t *testing.T, conversation, proxyExtra string) heldPreparation {
	t.Helper()
	full, k, _, fullTokens := prepareConversation(t)
	gate, sumURL, hold := heldSummarizer(t)
	up := upstreamtest.New()
	t.Cleanup(up.Close)
	td := prepareDaemon(t, sumURL, up, fullTokens*10/8, ", prepare_threshold: 0.5"+proxyExtra)
	h := heldPreparation{full: full, td: td, px: td.server.opts.Proxy, id: map[string]string{proxy.HeaderConversation: conversation}, up: up, hold: hold}
	resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(full[:k], ""), h.id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" {
		t.Fatalf("below the trigger: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	waitFor(t, "the preparation to reach the summarizer", 2*time.Minute, func() bool { return gate.arrived.Load() > 0 })
	return h
}

// oneWorkerDaemon starts a daemon (llm, with the extra proxy settings)
// whose summarizer holds every call until the test ends, and returns it
// with send, which posts a conversation's prefix below the trigger and
// checks it went upstream untouched.
func oneWorkerDaemon(t *testing.T, proxyExtra string) (td *testDaemon, gate *gatedSummarizer, send func(id string)) {
	t.Helper()
	full, k, _, fullTokens := prepareConversation(t)
	gate, sumURL, hold := heldSummarizer(t)
	t.Cleanup(func() { close(hold) })
	up := upstreamtest.New()
	t.Cleanup(up.Close)
	td = prepareDaemon(t, sumURL, up, fullTokens*10/8, proxyExtra)
	send = func(id string) {
		t.Helper()
		resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(full[:k], ""), map[string]string{proxy.HeaderConversation: id})
		if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" || resp.Header.Get(proxy.HeaderWarning) != "" {
			t.Fatalf("%s: %d %v %s", id, resp.StatusCode, resp.Header, got)
		}
		if n := upstreamMessages(t, up); n != k {
			t.Fatalf("%s: the upstream got %d of %d messages", id, n, k)
		}
	}
	return td, gate, send
}

// stopsWithin shuts the daemon down and fails the test if that takes
// longer than two minutes (what names what might hold it).
func stopsWithin(t *testing.T, td *testDaemon, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- td.Daemon.Shutdown(bg) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the daemon did not stop with %s", what)
	}
}

// upstreamMessages returns how many messages the upstream's last request
// had.
func upstreamMessages(t *testing.T, up *upstreamtest.Server) int {
	t.Helper()
	var sent struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(up.Last().Body, &sent); err != nil {
		t.Fatal(err)
	}
	return len(sent.Messages)
}

// TestProxyPreparationMissForward: with prepare_miss: forward, the
// request that reaches the trigger while its preparation is still
// running goes upstream as it is (with a warning, counted as a miss);
// once the preparation is done, the next request is sent from it.
func TestProxyPreparationMissForward(t *testing.T) {
	t.Parallel()
	h := startHeldPreparation(t, "miss", ", prepare_miss: forward")
	full, td, px, id, up, hold := h.full, h.td, h.px, h.id, h.up, h.hold

	// At the trigger, the preparation held: forwarded whole, a miss.
	resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(full, ""), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "" ||
		!strings.Contains(resp.Header.Get(proxy.HeaderWarning), "prepare_miss: forward") {
		t.Fatalf("a miss: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	if n := upstreamMessages(t, up); n != len(full) {
		t.Fatalf("the miss sent %d messages upstream, want all %d", n, len(full))
	}
	if st := px.PrepareStats(); st.Missed != 1 || st.Started != 1 || st.InFlight != 1 {
		t.Fatalf("after the miss: %+v", st)
	}

	close(hold)
	waitFor(t, "the preparation", 2*time.Minute, func() bool { st := px.PrepareStats(); return st.InFlight == 0 && st.Held == 1 })
	resp, got = td.post(t, proxy.RouteOpenAI, openAIBody(full, ""), id)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderCompacted) != "true" {
		t.Fatalf("the next request: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	if st := px.PrepareStats(); st.Used != 1 {
		t.Fatalf("the next request was not sent from the preparation: %+v", st)
	}
	if n := upstreamMessages(t, up); n >= len(full) {
		t.Fatalf("the prepared request sent %d of %d messages", n, len(full))
	}
}

// TestProxyPreparationQueueAndShutdown: with one worker and a queue of
// one, a third conversation's preparation is dropped and counted while
// its request goes on untouched; a daemon stopped with one preparation
// running and one queued cancels both and stops.
func TestProxyPreparationQueueAndShutdown(t *testing.T) {
	t.Parallel()
	td, gate, send := oneWorkerDaemon(t, ", prepare_threshold: 0.5, prepare_workers: 1, prepare_queue: 1")
	px := td.server.opts.Proxy
	send("a")
	waitFor(t, "a's preparation to hold the worker", 2*time.Minute, func() bool { return gate.arrived.Load() > 0 })
	send("b") // queued
	send("c") // the queue is full: dropped
	if st := px.PrepareStats(); st.Started != 2 || st.Dropped != 1 || st.InFlight != 2 {
		t.Fatalf("one worker, a queue of one, three conversations: %+v", st)
	}
	_, metrics, _ := td.raw(t, http.MethodGet, "/metrics", "")
	if !strings.Contains(string(metrics), `compactd_proxy_prepare_total{outcome="dropped"} 1`) {
		t.Errorf("/metrics does not count the dropped preparation:\n%s", grepLines(string(metrics), "prepare"))
	}

	// Stop with a running and a queued preparation: both are cancelled
	// (the summarizer call ends with the daemon's context), nothing waits
	// for the held summarizer.
	stopsWithin(t, td, "a preparation held by the summarizer")
	if st := px.PrepareStats(); st.InFlight != 0 || st.Used != 0 {
		t.Fatalf("after the stop: %+v", st)
	}
}

// TestProxyPreparationWait: with prepare_wait set, the request that
// reaches the trigger while its preparation is still running waits for
// it (within the bound, counted as waiting in /metrics) instead of
// compacting on its own: once the preparation finishes, the request is
// sent from it — compacted, the preparation counted as used, not
// missed.
func TestProxyPreparationWait(t *testing.T) {
	t.Parallel()
	h := startHeldPreparation(t, "wait", ", prepare_wait: 5m")
	full, td, px, id, up, hold := h.full, h.td, h.px, h.id, h.up, h.hold

	type answer struct {
		resp *http.Response
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		resp, got := td.post(t, proxy.RouteOpenAI, openAIBody(full, ""), id)
		done <- answer{resp, got}
	}()
	// The triggering request is in the proxy, waiting for the held
	// preparation: it has not gone upstream.
	waitFor(t, "the triggering request to wait for its preparation", 2*time.Minute, func() bool { return px.PrepareStats().Waiting == 1 })
	_, metrics, _ := td.raw(t, http.MethodGet, "/metrics", "")
	if !strings.Contains(string(metrics), "compactd_proxy_prepare_waiting 1") {
		t.Errorf("/metrics does not show the waiting request:\n%s", grepLines(string(metrics), "prepare"))
	}
	select {
	case a := <-done:
		t.Fatalf("the triggering request did not wait for its preparation: %d %v %s", a.resp.StatusCode, a.resp.Header, a.body)
	default:
	}
	close(hold)
	var a answer
	select {
	case a = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the triggering request did not end once its preparation was done")
	}
	if a.resp.StatusCode != http.StatusOK || a.resp.Header.Get(proxy.HeaderCompacted) != "true" || a.resp.Header.Get(proxy.HeaderWarning) != "" {
		t.Fatalf("the waiting request: %d %v %s", a.resp.StatusCode, a.resp.Header, a.body)
	}
	if st := px.PrepareStats(); st.Used != 1 || st.Missed != 0 || st.Waiting != 0 {
		t.Fatalf("the waiting request was not sent from its preparation: %+v", st)
	}
	if n := upstreamMessages(t, up); n >= len(full) {
		t.Fatalf("the prepared request sent %d of %d messages", n, len(full))
	}
}
