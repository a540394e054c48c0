package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/proxy"
	"github.com/compactd/compactd/internal/proxy/upstreamtest"
)

// hostileUpstream is a provider that misbehaves as each request's
// X-Hostile header says (the proxy passes it through):
//
//	endless-line   a stream whose one line never ends
//	endless-event  a stream of short lines and never the blank line that ends an event
//	stall-stream   a stream's first event, then silence
//	stall-json     a JSON answer's headers and first bytes, then silence
//	broken-json    a JSON answer's headers and first bytes, then a cut connection
//	usage          a JSON answer whose usage counts are X-Hostile-Prompt and X-Hostile-Completion
//	long-stream    a healthy stream of X-Hostile-Events events, 150ms apart
//
// It sends at most hostileCap bytes, and records, by X-Hostile-Id, how
// much it sent and when its handler ended (compactd closed the
// connection, or it was done).
type hostileUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	runs map[string]*hostileRun
}

type hostileRun struct {
	sent atomic.Int64
	done chan struct{}
}

// hostileCap bounds what the upstream sends on one request: enough that a
// proxy buffering without bound exhausts its memory limit.
const hostileCap = 1 << 30

func newHostileUpstream(t *testing.T) *hostileUpstream {
	h := &hostileUpstream{runs: map[string]*hostileRun{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

func (h *hostileUpstream) run(id string) *hostileRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.runs[id]
	if !ok {
		r = &hostileRun{done: make(chan struct{})}
		h.runs[id] = r
	}
	return r
}

func (h *hostileUpstream) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	run := h.run(r.Header.Get("X-Hostile-Id"))
	defer close(run.done)
	anthropic := strings.HasPrefix(r.URL.Path, "/v1/messages")
	write := func(s string) bool {
		n, err := io.WriteString(w, s)
		run.sent.Add(int64(n))
		return err == nil
	}
	flush := func() { w.(http.Flusher).Flush() }
	switch mode := r.Header.Get("X-Hostile"); mode {
	case "endless-line", "endless-event":
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := strings.Repeat("a", 1<<20)
		if mode == "endless-event" {
			chunk = strings.Repeat("data: {\"x\":1}\n", (1<<20)/15)
		}
		if anthropic {
			write("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n")
			write("event: content_block_delta\n")
		} else {
			write("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		}
		if mode == "endless-line" {
			write(`data: {"x":"`)
		}
		for run.sent.Load() < hostileCap && write(chunk) {
		}
		<-r.Context().Done()
	case "stall-stream":
		w.Header().Set("Content-Type", "text/event-stream")
		write("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		flush()
		<-r.Context().Done()
	case "stall-json", "broken-json":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		write(`{"id":"x",`)
		flush()
		if mode == "broken-json" {
			panic(http.ErrAbortHandler) // the connection is cut mid-answer
		}
		<-r.Context().Done()
	case "usage":
		w.Header().Set("Content-Type", "application/json")
		prompt, completion := r.Header.Get("X-Hostile-Prompt"), r.Header.Get("X-Hostile-Completion")
		if anthropic {
			write(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":` + prompt + `,"output_tokens":` + completion + `}}`)
		} else {
			write(`{"id":"x","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":` + prompt + `,"completion_tokens":` + completion + `}}`)
		}
	case "long-stream":
		w.Header().Set("Content-Type", "text/event-stream")
		n, _ := strconv.Atoi(r.Header.Get("X-Hostile-Events"))
		for i := range n {
			if !write(fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%d \"}}]}\n\n", i)) {
				return
			}
			flush()
			time.Sleep(150 * time.Millisecond)
		}
		write("data: [DONE]\n\n")
	default:
		http.Error(w, "unknown X-Hostile mode", http.StatusBadRequest)
	}
}

// TestProxyHostileUpstream runs a daemon process, under a memory limit,
// in front of an upstream that misbehaves: streams whose line or event
// never ends, answers that stall after their headers, usage counts that
// lie. Each exchange ends cleanly for the client, in the provider's
// format (an error event ending a stream, a 504 for a non-streamed
// answer), the upstream's connection is closed, the daemon's memory
// stays bounded (a proxy that buffered an endless event whole would be
// killed at the limit and fail the test), and a long healthy stream runs
// past every total-time setting uncut.
//
// The daemon is the compactd binary as users run it (`compactd serve`,
// without the race detector): the test checks containment, and the
// race detector's bookkeeping of every byte of the endless streams the
// proxy reads made it one of the package's slowest tests (24 s quiet)
// and tripled the memory the limit had to allow. internal/proxy's own
// tests and TestSDKsSeeStreamErrors run these streams under -race.
func TestProxyHostileUpstream(t *testing.T) {
	t.Parallel()
	up := newHostileUpstream(t)
	td := setup(t, fmt.Sprintf(`policy: sliding
policies: {sliding: {window_size: 2, step: 1}}
limits: {request_timeout: 3s, write_timeout: 3s}
proxy:
  openai: {upstream: '%s/v1', stream_usage: false}
  anthropic: {upstream: '%s'}
  timeout: 30s
  read_timeout: 30s
  context_window: 1000
`, up.URL, up.URL), pluginSliding)
	td.served = true
	d := startChild(t, td)
	d.waitHealthy(2 * time.Minute)
	// Four streams each held to 16 MiB (a regression holds a GiB each).
	lim := limitMemory(t, d.cmd.Process.Pid, 512<<20)
	idleRSS := procStatusKB(d.cmd.Process.Pid, "VmRSS:") << 10
	c := unixHTTP(t, d.socket)

	var seq atomic.Int64
	// send posts a proxied request and reads the whole answer; readErr is
	// the error reading its body (nil when it ended cleanly).
	send := func(t *testing.T, route, mode string, h map[string]string, body string) (resp *http.Response, got []byte, run *hostileRun, readErr error) {
		t.Helper()
		id := strconv.FormatInt(seq.Add(1), 10)
		if body == "" {
			body = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if route == proxy.RouteAnthropic {
				body = `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			}
		}
		method := http.MethodPost
		if route == "/v1/models" {
			method, body = http.MethodGet, ""
		}
		req, _ := http.NewRequest(method, "http://compactd"+route, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+upstreamtest.OpenAIKey)
		if route == proxy.RouteAnthropic {
			req.Header.Set("anthropic-version", "2023-06-01")
		}
		req.Header.Set("X-Hostile", mode)
		req.Header.Set("X-Hostile-Id", id)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v (the daemon exited: %v; OOM kills: %d); daemon log:\n%s", mode, err, d.exited(), lim.oomKills(), d.Log())
		}
		got, readErr = io.ReadAll(resp.Body)
		resp.Body.Close()
		if readErr != nil && d.exited() {
			t.Fatalf("%s: the daemon died (OOM kills: %d, peak RSS %d MiB); log:\n%s", mode, lim.oomKills(), d.peakRSS()>>20, d.Log())
		}
		t.Logf("%s %s: %d, %d bytes in %v, read error %v", route, mode, resp.StatusCode, len(got), time.Since(start).Round(time.Millisecond), readErr)
		return resp, got, up.run(id), readErr
	}
	// closed waits for the upstream's handler to end: compactd closed
	// the connection (the test's timeout catches one it left open).
	closed := func(t *testing.T, run *hostileRun, most int64) {
		t.Helper()
		<-run.done
		if n := run.sent.Load(); n > most {
			t.Fatalf("the upstream sent %d MiB before compactd hung up; want at most %d MiB", n>>20, most>>20)
		}
	}
	// reused checks that the client's connection survived the exchange:
	// the next request goes over it.
	reused := func(t *testing.T) {
		t.Helper()
		var got httptrace.GotConnInfo
		req, _ := http.NewRequest(http.MethodGet, "http://compactd/healthz", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got = i }}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !got.Reused {
			t.Error("the client's connection was not kept after the stream ended")
		}
	}

	t.Run("event over max_event_bytes", func(t *testing.T) {
		for _, tc := range []struct{ route, mode, code string }{
			{proxy.RouteOpenAI, "endless-line", "upstream_event_too_large"},
			{proxy.RouteOpenAI, "endless-event", "upstream_event_too_large"},
			{proxy.RouteAnthropic, "endless-line", "upstream_event_too_large"},
			{proxy.RouteAnthropic, "endless-event", "upstream_event_too_large"},
		} {
			resp, got, run, readErr := send(t, tc.route, tc.mode, nil, "")
			if resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderUpstream) == "" || readErr != nil {
				t.Fatalf("%s %s: %d %v, read error %v", tc.route, tc.mode, resp.StatusCode, resp.Header, readErr)
			}
			checkLastEvent(t, tc.route, got, tc.code, "proxy.max_event_bytes")
			closed(t, run, 64<<20)
			reused(t)
		}
	})

	t.Run("four at once", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				route := []string{proxy.RouteOpenAI, proxy.RouteAnthropic}[i%2]
				_, got, run, readErr := send(t, route, "endless-event", nil, "")
				if readErr != nil {
					t.Errorf("read error %v", readErr)
					return
				}
				checkLastEvent(t, route, got, "upstream_event_too_large", "proxy.max_event_bytes")
				closed(t, run, 64<<20)
			}()
		}
		wg.Wait()
	})

	// The timeouts are generous above, so that a busy machine's slowness
	// is not taken for a stall; the stalls get a short one.
	setProxy := func(t *testing.T, settings map[string]any) {
		t.Helper()
		if _, err := d.c.UpdateConfig(bg, map[string]any{"proxy": settings}); err != nil {
			t.Fatal(err)
		}
	}
	setProxy(t, map[string]any{"read_timeout": "1s"})

	t.Run("stream stalls", func(t *testing.T) {
		resp, got, run, readErr := send(t, proxy.RouteOpenAI, "stall-stream", nil, "")
		if resp.StatusCode != 200 || readErr != nil || !bytes.HasPrefix(got, []byte(`data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\n")) {
			t.Fatalf("%d, read error %v: %q", resp.StatusCode, readErr, got)
		}
		checkLastEvent(t, proxy.RouteOpenAI, got, "upstream_timeout", "proxy.read_timeout")
		closed(t, run, 1<<20)
		reused(t)
	})

	t.Run("answer stalls", func(t *testing.T) {
		for _, route := range []string{proxy.RouteOpenAI, proxy.RouteAnthropic, "/v1/models"} {
			body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			resp, got, run, _ := send(t, route, "stall-json", nil, body)
			if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get(proxy.HeaderUpstream) != "" ||
				!strings.Contains(string(got), "upstream_timeout") || !strings.Contains(string(got), "proxy.read_timeout") {
				t.Fatalf("%s: %d %v %s", route, resp.StatusCode, resp.Header, got)
			}
			if route == proxy.RouteAnthropic && !strings.Contains(string(got), `"type":"error"`) {
				t.Fatalf("not Anthropic's error format: %s", got)
			}
			closed(t, run, 1<<20)
		}
	})

	setProxy(t, map[string]any{"read_timeout": "30s"})

	t.Run("answer breaks off", func(t *testing.T) {
		resp, got, _, _ := send(t, proxy.RouteOpenAI, "broken-json", nil, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(got), `"code":"upstream_unreachable"`) || !strings.Contains(string(got), "broke off its answer") {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
	})

	t.Run("usage lies", func(t *testing.T) {
		msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":"one"},{"role":"assistant","content":"a"},{"role":"user","content":"two"},{"role":"assistant","content":"b"},{"role":"user","content":"three"}]`
		body := `{"model":"gpt-4o","messages":` + msgs + `}`
		for _, lie := range []struct{ prompt, completion string }{{"-5000", "10"}, {"9223372036854775807", "10"}, {"1e300", "10"}, {`"12"`, "10"}} {
			h := map[string]string{proxy.HeaderConversation: "lies", "X-Hostile-Prompt": lie.prompt, "X-Hostile-Completion": lie.completion}
			if resp, _, _, _ := send(t, proxy.RouteOpenAI, "usage", h, body); resp.StatusCode != 200 {
				t.Fatalf("%d", resp.StatusCode)
			}
			st := childConversation(t, d, "lies")
			if st.LastUsage != nil || st.UsageRatio < 0 || st.NeedsCompaction {
				t.Fatalf("prompt_tokens %s was recorded: %+v", lie.prompt, st)
			}
		}
		// A true count next to a lying one: the true one is kept, and a
		// conversation at 118% of its window is compacted on its next
		// request (2^63-1 once overflowed the ratio, and it was not).
		h := map[string]string{proxy.HeaderConversation: "lies", "X-Hostile-Prompt": "1180", "X-Hostile-Completion": "9223372036854775807"}
		send(t, proxy.RouteOpenAI, "usage", h, body)
		st := childConversation(t, d, "lies")
		if st.LastUsage == nil || st.LastUsage.InputTokens != 1180 || st.LastUsage.OutputTokens != 0 || st.UsageRatio != 1.18 || !st.NeedsCompaction {
			t.Fatalf("status after a true prompt count: %+v %+v", st, st.LastUsage)
		}
		h["X-Hostile-Prompt"], h["X-Hostile-Completion"] = "100", "5"
		resp, _, _, _ := send(t, proxy.RouteOpenAI, "usage", h, body)
		if resp.Header.Get(proxy.HeaderCompacted) != "true" {
			t.Fatalf("the conversation at 118%% was not compacted: %v", resp.Header)
		}
		// Anthropic's counts too.
		ah := map[string]string{proxy.HeaderConversation: "lies-anthropic", "X-Hostile-Prompt": "-1", "X-Hostile-Completion": "3"}
		send(t, proxy.RouteAnthropic, "usage", ah, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
		if st := childConversation(t, d, "lies-anthropic"); st.LastUsage != nil {
			t.Fatalf("input_tokens -1 was recorded: %+v", st.LastUsage)
		}
	})

	t.Run("long healthy stream", func(t *testing.T) {
		// 40 events 150ms apart: twice proxy.timeout,
		// limits.request_timeout and limits.write_timeout (3s each), each
		// gap far below proxy.read_timeout.
		setProxy(t, map[string]any{"timeout": "3s"})
		resp, got, _, readErr := send(t, proxy.RouteOpenAI, "long-stream", map[string]string{"X-Hostile-Events": "40"}, "")
		events := sseEvents(t, got)
		if resp.StatusCode != 200 || readErr != nil || len(events) != 41 || events[40] != "[DONE]" {
			t.Fatalf("%d, read error %v, %d events: %q", resp.StatusCode, readErr, len(events), got)
		}
	})

	// The books balance: nothing in flight but this request, the faults
	// counted, and the memory within the limit, with no kill.
	m := childMetrics(t, d)
	for _, want := range []string{
		"compactd_http_requests_in_flight 1\n",
		`compactd_proxy_upstream_faults_total{provider="openai",fault="event_too_large"} 4`,
		`compactd_proxy_upstream_faults_total{provider="anthropic",fault="event_too_large"} 4`,
		`compactd_proxy_upstream_faults_total{provider="openai",fault="stalled"} 3`,
		`compactd_proxy_upstream_faults_total{provider="openai",fault="unreachable"} 1`,
		`compactd_proxy_upstream_faults_total{provider="openai",fault="usage_refused"} 5`,
		`compactd_proxy_upstream_faults_total{provider="anthropic",fault="usage_refused"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(m, "compactd_proxy_upstream_faults_total", "in_flight"))
		}
	}
	peak := d.peakRSS()
	t.Logf("daemon memory: %d MiB at idle, peak %d MiB (limit: %v)", idleRSS>>20, peak>>20, lim)
	if d.exited() || lim.oomKills() > 0 {
		t.Fatalf("the daemon died (exited %v, OOM kills %d); log:\n%s", d.exited(), lim.oomKills(), d.Log())
	}
	for _, want := range []string{"stream event over the limit", "upstream stalled after its headers", "upstream stream stalled", "token counts that are not whole numbers"} {
		if !strings.Contains(d.Log(), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	d.stop()
}

// checkLastEvent checks that a stream ends with one error event in the
// route's provider's format, with code and a message naming setting.
func checkLastEvent(t *testing.T, route string, stream []byte, code, setting string) {
	t.Helper()
	if !bytes.HasSuffix(stream, []byte("\n\n")) {
		t.Fatalf("the stream does not end with a whole event: %.200q", stream[max(0, len(stream)-200):])
	}
	body := stream[:len(stream)-2]
	last := body[bytes.LastIndex(body, []byte("\n\n"))+2:]
	var typ, data string
	sc := bufio.NewScanner(bytes.NewReader(last))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			typ = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = v
		}
	}
	if route == proxy.RouteAnthropic {
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if typ != "error" || json.Unmarshal([]byte(data), &e) != nil || e.Type != "error" || e.Error.Type != "api_error" ||
			!strings.HasPrefix(e.Error.Message, "compactd ("+code+"): ") || !strings.Contains(e.Error.Message, setting) {
			t.Fatalf("not Anthropic's error event (%s): %q", code, last)
		}
		return
	}
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if typ != "" || json.Unmarshal([]byte(data), &e) != nil || e.Error.Code != code || e.Error.Type != "compactd_error" || !strings.Contains(e.Error.Message, setting) {
		t.Fatalf("not OpenAI's error event (%s): %q", code, last)
	}
}

// childConversation returns a conversation's status from a child daemon.
func childConversation(t *testing.T, d *childDaemon, id string) client.Conversation {
	t.Helper()
	c, err := d.c.Conversation(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	return *c
}

// childMetrics returns a child daemon's /metrics.
func childMetrics(t *testing.T, d *childDaemon) string {
	t.Helper()
	m, err := d.c.Metrics(bg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// grepLines returns the lines of s that contain any of words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
