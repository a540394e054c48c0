package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
)

// TestProxyConcurrentConversations: 48 conversations, 16 in each of the
// three wire formats, sent by 4 clients at once through one daemon in front of the
// local provider, each conversation turn after turn as an agent sends it,
// long enough that most pass the trigger (and background preparation
// starts below it). No request may fail, the provider must refuse
// nothing (it checks tool pairing and each API's rules), and every
// conversation's status must count exactly its requests. (It sent 100
// conversations before; 48 keep the four clients at once on every route
// for the whole run, at half the cost under -race.)
func TestProxyConcurrentConversations(t *testing.T) {
	t.Parallel()
	conversations, turns, clients := 48, 6, 4
	if testing.Short() {
		conversations, turns = 24, 4
	}
	raw := tauConversation(t, 12000)
	c, err := chat.FromRaw(raw)
	if err != nil {
		t.Fatal(err)
	}
	// Cut points: prefixes an agent sends (the next message is the
	// assistant's), the last `turns` of them.
	var cuts []int
	for k := 2; k < len(c.Messages); k++ {
		if c.Messages[k].Role == "assistant" {
			cuts = append(cuts, k)
		}
	}
	if len(cuts) < turns {
		t.Fatalf("the fixture has %d assistant turns, want %d", len(cuts), turns)
	}
	cuts = cuts[len(cuts)-turns:]
	_, full := tauMessages(t, 12000)
	// The window: the longest request is 1.4× it, the shortest below the
	// trigger; preparation starts at half of it.
	td, up := proxySetup(t, fmt.Sprintf("  context_window: %d\n  prepare_threshold: 0.5\n", full*10/14), pluginSliding)
	td.start(t)

	type request struct {
		path string
		body []byte
		hdr  map[string]string
	}
	// Every request, built before the clients start (the builders may
	// fail the test, which only this goroutine may do).
	plan := make([][]request, conversations)
	for i := range plan {
		id := fmt.Sprintf("conc-%03d", i)
		for turn := range turns {
			var r request
			switch i % 3 {
			case 0:
				r = request{proxy.RouteOpenAI, openAIBody(raw[:cuts[turn]], ""), map[string]string{"Authorization": "Bearer " + upstreamtest.OpenAIKey}}
			case 1:
				body, _ := anthropicBody(t, raw[:cuts[turn]], "")
				r = request{proxy.RouteAnthropic, body, map[string]string{"x-api-key": upstreamtest.AnthropicKey, "anthropic-version": "2023-06-01"}}
			default:
				r = request{proxy.RouteResponses, responsesBody(codexSession(3+3*turn, 600), ""), map[string]string{"Authorization": "Bearer " + upstreamtest.OpenAIKey}}
			}
			r.hdr["Content-Type"] = "application/json"
			r.hdr[proxy.HeaderConversation] = id
			plan[i] = append(plan[i], r)
		}
	}

	// Each client takes conversations in turn and sends every one of its
	// turns before the next conversation; the four run at once.
	var mu sync.Mutex
	var failures []string
	compacted := 0
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Go(func() {
			for i := cl; i < conversations; i += clients {
				for turn, r := range plan[i] {
					req, _ := http.NewRequest(http.MethodPost, "http://compactd"+r.path, bytes.NewReader(r.body))
					for k, v := range r.hdr {
						req.Header.Set(k, v)
					}
					resp, err := td.http.Do(req)
					if err != nil {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("conversation %d turn %d: %v", i, turn, err))
						mu.Unlock()
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					mu.Lock()
					if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderWarning) != "" {
						failures = append(failures, fmt.Sprintf("conversation %d turn %d: %d %q %.200s", i, turn, resp.StatusCode, resp.Header.Get(proxy.HeaderWarning), b))
					}
					if resp.Header.Get(proxy.HeaderCompacted) == "true" {
						compacted++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed; first: %v", len(failures), conversations*turns, failures[:min(len(failures), 5)])
	}
	if st := up.Stats(); len(st.Rejections) > 0 {
		t.Fatalf("the provider refused %d requests: %v", len(st.Rejections), st.Rejections[:min(len(st.Rejections), 3)])
	}
	if got := len(up.Received()); got != conversations*turns {
		t.Errorf("the provider got %d requests, want %d", got, conversations*turns)
	}
	if compacted < conversations {
		t.Errorf("%d of %d requests were compacted; the conversations were built to pass the trigger", compacted, conversations*turns)
	}
	for i := range conversations {
		id := fmt.Sprintf("conc-%03d", i)
		st := td.status(t, id)
		if st.Requests != int64(turns) || st.Failures != 0 {
			t.Errorf("conversation %s: %d requests, %d failures; want %d, 0", id, st.Requests, st.Failures, turns)
		}
	}
	var m bytes.Buffer
	_, metrics, _ := td.raw(t, http.MethodGet, "/metrics", "")
	m.Write(metrics)
	t.Logf("%d requests, %d compacted, 0 failed; preparation metrics present: %v", conversations*turns, compacted, bytes.Contains(m.Bytes(), []byte("compactd_proxy_prepar")))
}
