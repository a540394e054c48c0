package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

// balancer spreads requests over replicas' Unix sockets round-robin and
// retries a request on the next replica when the connection to one
// fails, before or during the exchange, as a load balancer with retries
// does: the request is then served by another replica, and only a
// request no replica answers fails.
type balancer struct {
	clients []*http.Client
	next    atomic.Int64

	attempts, retries atomic.Int64
	mu                sync.Mutex
	serving           map[string]int // request tag → replica of its attempt in flight
}

func newBalancer(t *testing.T, sockets []string) *balancer {
	b := &balancer{serving: map[string]int{}}
	for _, s := range sockets {
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", s)
			},
			// A new connection per request: a connection to a replica
			// that was killed is never reused.
			DisableKeepAlives: true,
		}
		t.Cleanup(tr.CloseIdleConnections)
		b.clients = append(b.clients, &http.Client{Transport: tr})
	}
	return b
}

// post sends body to path on the next replica, retrying on the others
// after a connection failure; it returns the answer and the replica that
// gave it, or the last connection error.
func (b *balancer) post(tag, path string, body []byte, header map[string]string) (*http.Response, []byte, int, error) {
	var lastErr error
	for try := 0; try < 2*len(b.clients); try++ {
		i := int(b.next.Add(1)-1) % len(b.clients)
		b.attempts.Add(1)
		if try > 0 {
			b.retries.Add(1)
		}
		req, _ := http.NewRequest(http.MethodPost, "http://compactd"+path, bytes.NewReader(body))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		b.mu.Lock()
		b.serving[tag] = i
		b.mu.Unlock()
		resp, err := b.clients[i].Do(req)
		var got []byte
		if err == nil {
			got, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		b.mu.Lock()
		delete(b.serving, tag)
		b.mu.Unlock()
		if err != nil {
			lastErr = fmt.Errorf("replica %d: %w", i, err)
			continue
		}
		return resp, got, i, nil
	}
	return nil, nil, -1, lastErr
}

// replicaOf returns the replica serving tag's attempt in flight.
func (b *balancer) replicaOf(tag string) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, ok := b.serving[tag]
	return i, ok
}

// drillTurns are the cuts of msgs the provider accepts as requests: each
// ends on a user or tool message, with no tool result cut off after it;
// n of them, spread from a third of the conversation to its end.
func drillTurns(t *testing.T, msgs []json.RawMessage, n int) []int {
	t.Helper()
	role := func(m json.RawMessage) string {
		var r struct{ Role string }
		json.Unmarshal(m, &r)
		return r.Role
	}
	var cuts []int
	for k := len(msgs) / 3; k <= len(msgs); k++ {
		if r := role(msgs[k-1]); (r == "user" || r == "tool") && (k == len(msgs) || role(msgs[k]) != "tool") {
			cuts = append(cuts, k)
		}
	}
	if len(cuts) < n {
		t.Fatalf("%d valid cuts, want %d", len(cuts), n)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = cuts[i*(len(cuts)-1)/(n-1)]
	}
	return out
}

// TestFleetReplicaKilled is the kill -9 drill: three replica processes
// on one redis-server proxy conversations (hierarchical, a stateful
// policy, compacting every turn) behind a round-robin balancer that
// retries on a connection failure. One replica is killed with SIGKILL
// while it holds a request (the upstream is answering it), and started
// again. No request fails; every replica is healthy afterwards; each
// conversation's status counts its turns and names a replica; and each
// turn reached the upstream with the bytes one daemon on its own store
// sends for it, so the state the dead replica left behind is intact.
func TestFleetReplicaKilled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := upstreamtest.New()
	defer up.Close()
	cfg := fleetConfig(up.OpenAIBase(), up.OpenAIBase(), "policy: hierarchical\n", "  context_window: 3000\n")
	var replicas []*testDaemon
	var children []*childDaemon
	var sockets []string
	for i := 0; i < 3; i++ {
		// The replicas are `compactd serve` processes (the binary, not
		// the race-built test binary: the shared store's code is
		// race-checked in-process by TestFleetDeferredTrigger and
		// TestFleetRedisDown), writing their counters behind as often as
		// the test-binary daemons do, so a kill loses none the test counts.
		td := setup(t, cfg+"state:\n  flush_interval: 10ms\n", "plugins/hierarchical")
		td.served = true
		td.childEnv = []string{"COMPACTD_STATE_URL=" + srv.URL(), fmt.Sprintf("COMPACTD_REPLICA=r%d", i), llmKeyEnv + "=" + upstreamtest.OpenAIKey}
		replicas = append(replicas, td)
		children = append(children, startChild(t, td))
		sockets = append(sockets, children[i].socket)
	}
	for _, c := range children {
		c.waitHealthy(5 * time.Minute)
	}
	path, err := dataset.Fixture("mini_swe_agent_deepseek_swebench.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	convs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const conversations, turns, victimTurn = 3, 5, 2
	lb := newBalancer(t, sockets)
	cuts := make([][]int, conversations)
	for c := range cuts {
		cuts[c] = drillTurns(t, convs[c].Chat.Raw, turns)
	}
	request := func(c, k int) ([]byte, map[string]string) {
		msgs := convs[c].Chat.Raw
		cut := cuts[c][k]
		h := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + upstreamtest.OpenAIKey,
			proxy.HeaderConversation: fmt.Sprintf("drill-%d", c), "X-Drill-Turn": fmt.Sprintf("%d/%d", c, k)}
		if c == 0 && k == victimTurn {
			h["X-Upstream-Delay"] = "2s" // the replica holds it while the upstream answers
		}
		return openAIBody(msgs[:cut], ""), h
	}
	var failed, served atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < conversations; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < turns; k++ {
				body, h := request(c, k)
				resp, got, _, err := lb.post(h["X-Drill-Turn"], proxy.RouteOpenAI, body, h)
				switch {
				case err != nil:
					failed.Add(1)
					t.Errorf("conversation %d turn %d: no replica answered: %v", c, k, err)
				case resp.StatusCode != http.StatusOK:
					failed.Add(1)
					t.Errorf("conversation %d turn %d: %d %s", c, k, resp.StatusCode, got)
				default:
					served.Add(1)
				}
			}
		}()
	}
	// The kill: as soon as the upstream holds the victim's request, the
	// replica relaying it dies.
	victimTag := fmt.Sprintf("0/%d", victimTurn)
	waitFor(t, "the victim request at the upstream", 5*time.Minute, func() bool {
		for _, r := range up.Received() {
			if r.Header.Get("X-Drill-Turn") == victimTag {
				return true
			}
		}
		return false
	})
	killed, ok := lb.replicaOf(victimTag)
	if !ok {
		t.Fatal("the victim request is at the upstream but no replica holds it")
	}
	if err := children[killed].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-children[killed].done
	// It comes back on the same directory, as a supervisor restarts it.
	children[killed] = startChild(t, replicas[killed])
	children[killed].waitHealthy(5 * time.Minute)
	wg.Wait()

	for i, c := range children {
		if h, err := c.c.Health(bg); err != nil || h.Status != "ok" {
			t.Errorf("replica %d after the drill: %+v %v", i, h, err)
		}
	}
	// Each turn's last request at the upstream (a killed attempt's
	// retry sends it again) against one daemon that served every turn.
	last := map[string][]byte{}
	for _, r := range up.Received() {
		if tag := r.Header.Get("X-Drill-Turn"); tag != "" {
			last[tag] = r.Body
		}
	}
	ref := fleetDaemon(t, cfg, "", "", "plugins/hierarchical")
	identical := 0
	var statuses []string
	for c := 0; c < conversations; c++ {
		for k := 0; k < turns; k++ {
			body, h := request(c, k)
			delete(h, "X-Upstream-Delay")
			tag := h["X-Drill-Turn"]
			before := len(up.Received())
			resp, got := ref.post(t, proxy.RouteOpenAI, body, h)
			if resp.StatusCode != http.StatusOK || len(up.Received()) != before+1 {
				t.Fatalf("one daemon, turn %s: %d %s", tag, resp.StatusCode, got)
			}
			if want := up.Last().Body; !bytes.Equal(last[tag], want) {
				t.Errorf("turn %s: the fleet sent the upstream %d bytes, one daemon %d", tag, len(last[tag]), len(want))
			} else {
				identical++
			}
		}
		// Any replica (here the c-th) shows the conversation whole.
		conv, err := children[c].c.Conversation(bg, fmt.Sprintf("drill-%d", c))
		if err != nil {
			t.Fatal(err)
		}
		if conv.Requests < turns || conv.Compactions < turns || !strings.HasPrefix(conv.Replica, "r") {
			t.Errorf("drill-%d's status after the drill: %+v", c, conv)
		}
		statuses = append(statuses, fmt.Sprintf("drill-%d: %d requests, %d compactions, last on %s", c, conv.Requests, conv.Compactions, conv.Replica))
	}
	if n := lb.retries.Load(); n == 0 {
		t.Errorf("no request was retried: the kill hit nothing in flight")
	}
	t.Logf("kill -9 drill: replica r%d killed holding turn %s; %d requests, %d served, %d failed, %d attempts (%d retried); %d of %d turns sent upstream as one daemon sends them; status afterwards: %s",
		killed, victimTag, conversations*turns, served.Load(), failed.Load(), lb.attempts.Load(), lb.retries.Load(), identical, conversations*turns, strings.Join(statuses, "; "))
}
