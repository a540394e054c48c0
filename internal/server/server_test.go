package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
)

func TestCompactRealConversation(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "", pluginSliding, pluginLastn)
	msgs := tauConversation(t, 13000)
	// Reformat one kept message with odd whitespace and an unknown field:
	// the daemon must return it byte for byte.
	last := json.RawMessage(`{ "role" : "user",  "content":"Thanks!", "x_trace": {"id": 7} }`)
	msgs = append(append([]json.RawMessage{}, msgs...), last)
	resp, err := td.c.Compact(bg, &client.CompactRequest{Policy: "sliding", Model: "gpt-4o", Messages: msgs,
		Config: map[string]any{"window_size": 4, "step": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Compacted || len(resp.Messages) >= len(msgs) || resp.Stats.TokensAfter >= resp.Stats.TokensBefore {
		t.Errorf("not compacted: %d → %d messages, %+v", len(msgs), len(resp.Messages), resp.Stats)
	}
	if got := resp.Messages[len(resp.Messages)-1]; string(got) != string(last) {
		t.Errorf("last message changed:\n%s\nwant\n%s", got, last)
	}
	if string(resp.Messages[0]) != string(msgs[0]) {
		t.Error("system message changed")
	}
	newMsgs := 0
	for _, m := range resp.Messages {
		if !contains(msgs, m) {
			newMsgs++ // the "[K earlier entries discarded]" marker
		}
	}
	if newMsgs > 1 {
		t.Errorf("%d messages are not byte-identical to an input message", newMsgs)
	}
	conv, err := chat.FromRaw(resp.Messages)
	if err != nil || conv.Validate() != nil {
		t.Errorf("output invalid: %v %v", err, conv.Validate())
	}
	st := resp.Stats
	if len(st.Stages) != 1 || st.Stages[0].Policy != "sliding" || st.Stages[0].Version == "" || st.Stages[0].Duration <= 0 ||
		st.MessagesBefore != len(msgs) || st.Encoding != "o200k_base" || resp.ConversationID == "" || len(resp.Warnings) != 0 {
		t.Errorf("stats = %+v, id %q, warnings %v", st, resp.ConversationID, resp.Warnings)
	}
	// The same conversation gets the same derived id every time.
	again, _ := td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", Messages: msgs})
	if again.ConversationID != resp.ConversationID {
		t.Errorf("conversation id %s, then %s", resp.ConversationID, again.ConversationID)
	}
}

func TestCompactVariants(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "policy: lastn\npolicies:\n  lastn: {n: 3, step: 1}\n", pluginSliding, pluginLastn, pluginGohostile)
	msgs := chatMessages(6) // 14 messages
	tests := []struct {
		name     string
		req      client.CompactRequest
		messages int    // messages returned
		warning  string // substring of the one warning, "" for none
		stages   string // policies run, comma-separated
	}{
		// lastn keeps the system message, the task and its last n.
		{"default policy and its file config", client.CompactRequest{}, 5, "", "lastn"},
		{"request override beats the file", client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 5, "step": 1}}, 7, "", "lastn"},
		{"pipeline with per-policy config", client.CompactRequest{Pipeline: []string{"sliding", "lastn"},
			Config: map[string]any{"sliding": map[string]any{"window_size": 6, "step": 1}, "lastn": map[string]any{"n": 2, "step": 1}}}, 4, "", "sliding,lastn"},
		{"a pipeline of one takes config by policy name", client.CompactRequest{Pipeline: []string{"lastn"},
			Config: map[string]any{"lastn": map[string]any{"n": 1, "step": 1}}}, 3, "", "lastn"},
		{"pipeline stops at the target", client.CompactRequest{Pipeline: []string{"lastn", "sliding"}, TargetTokens: 1000}, 14, "", "lastn,sliding"},
		{"plugin traps: input kept, warning", client.CompactRequest{Policy: "gohostile", Config: map[string]any{"mode": "exit"}}, 14, "plugin trapped", "gohostile"},
		{"plugin panics: input kept, warning", client.CompactRequest{Policy: "gohostile", Config: map[string]any{"mode": "panic"}}, 14, "panicked", "gohostile"},
		{"plugin reports an error: input kept", client.CompactRequest{Policy: "gohostile", Config: map[string]any{"mode": "error"}}, 14, "gohostile: refusing", "gohostile"},
		{"invalid result: input kept", client.CompactRequest{Policy: "gohostile", Config: map[string]any{"mode": "badref"}}, 14, "invalid conversation", "gohostile"},
		{"failed stage in a pipeline is skipped", client.CompactRequest{Pipeline: []string{"gohostile", "lastn"},
			Config: map[string]any{"gohostile": map[string]any{"mode": "dropsystem"}}}, 5, "gohostile", "gohostile,lastn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			req.Messages = msgs
			resp, err := td.c.Compact(bg, &req)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Messages) != tt.messages {
				t.Errorf("%d messages, want %d", len(resp.Messages), tt.messages)
			}
			if tt.warning == "" && len(resp.Warnings) != 0 || tt.warning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tt.warning)) {
				t.Errorf("warnings %q, want one with %q", resp.Warnings, tt.warning)
			}
			var ran []string
			for _, st := range resp.Stats.Stages {
				ran = append(ran, st.Policy)
			}
			if strings.Join(ran, ",") != tt.stages {
				t.Errorf("stages %v, want %s", ran, tt.stages)
			}
			if tt.messages == len(msgs) {
				for i := range msgs {
					if string(resp.Messages[i]) != string(msgs[i]) {
						t.Fatalf("message %d changed", i)
					}
				}
			}
		})
	}
}

func TestCompactErrors(t *testing.T) {
	t.Parallel()
	td := setup(t, "limits:\n  max_messages: 20\n  max_body_bytes: 4096\n", pluginLastn).start(t)
	msgs := mustJSON(t, chatMessages(2))
	tests := []struct {
		name, body string
		status     int
		code       string
		message    string // substring
	}{
		{"not JSON", `{"policy":`, 400, CodeInvalidJSON, "ends early"},
		{"syntax error", `{"policy" "x"}`, 400, CodeInvalidJSON, "not valid JSON at byte"},
		{"empty body", ``, 400, CodeInvalidJSON, "empty body"},
		{"trailing data", `{"policy":"lastn","messages":[]} {}`, 400, CodeInvalidJSON, "data after"},
		{"unknown field", `{"policy":"lastn","mesages":[]}`, 400, CodeInvalidJSON, `unknown field "mesages"`},
		{"wrong type", `{"policy":["lastn"],"messages":[]}`, 400, CodeInvalidJSON, `field "policy"`},
		{"no messages", `{"policy":"lastn"}`, 400, CodeBadRequest, `"messages" is required`},
		{"policy and pipeline", `{"policy":"lastn","pipeline":["lastn"],"messages":` + msgs + `}`, 400, CodeBadRequest, "not both"},
		{"no policy: the default, ledger, is not loaded here", `{"messages":` + msgs + `}`, 404, CodeUnknownPolicy, `"ledger"`},
		{"bad policy name", `{"policy":"Last N","messages":` + msgs + `}`, 400, CodeBadRequest, "not a policy name"},
		{"unknown policy", `{"policy":"nope","messages":` + msgs + `}`, 404, CodeUnknownPolicy, "available: lastn"},
		{"invalid config value", `{"policy":"lastn","config":{"n":0},"messages":` + msgs + `}`, 400, CodeInvalidConfig, "n"},
		{"unknown config key", `{"policy":"lastn","config":{"m":3},"messages":` + msgs + `}`, 400, CodeInvalidConfig, `unknown key "m"`},
		{"pipeline config not an object", `{"pipeline":["lastn","lastn"],"config":{"lastn":3},"messages":` + msgs + `}`, 400, CodeBadRequest, "one object per policy"},
		{"config for a policy outside the pipeline", `{"pipeline":["lastn","lastn"],"config":{"sliding":{}},"messages":` + msgs + `}`, 400, CodeBadRequest, "not in the pipeline"},
		{"message not an object", `{"policy":"lastn","messages":[1]}`, 400, CodeInvalidConversation, "not a JSON object"},
		{"empty conversation", `{"policy":"lastn","messages":[]}`, 400, CodeInvalidConversation, ""},
		{"orphan tool result", `{"policy":"lastn","messages":[{"role":"user","content":"a"},{"role":"tool","tool_call_id":"x","content":"b"}]}`, 400, CodeInvalidConversation, "tool"},
		{"unknown role", `{"policy":"lastn","messages":[{"role":"robot","content":"a"}]}`, 400, CodeInvalidConversation, "robot"},
		{"anthropic tool_result", `{"policy":"lastn","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"}]}]}`, 400, CodeUnsupportedFormat, `Anthropic Messages format (content block of type "tool_result")`},
		{"anthropic tool_use", `{"policy":"lastn","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]}]}`, 400, CodeUnsupportedFormat, "message 1 is in the Anthropic"},
		{"conversation id with NUL", `{"policy":"lastn","conversation_id":"a\u0000b","messages":` + msgs + `}`, 400, CodeBadRequest, "NUL"},
		{"conversation id too long", `{"policy":"lastn","conversation_id":"` + strings.Repeat("x", 300) + `","messages":` + msgs + `}`, 400, CodeBadRequest, "limit is 256"},
		{"negative window", `{"policy":"lastn","context_window":-1,"messages":` + msgs + `}`, 400, CodeBadRequest, "context_window is -1; the range is 0 to 2147483647"},
		// F7: beyond what a plugin can be sent, not truncated.
		{"window over 2^32", `{"policy":"lastn","context_window":4294967296,"messages":` + msgs + `}`, 400, CodeBadRequest, "context_window is 4294967296; the range is 0 to 2147483647"},
		{"target over 2^31", `{"policy":"lastn","target_tokens":2147483648,"messages":` + msgs + `}`, 400, CodeBadRequest, "target_tokens is 2147483648"},
		{"window as a float", `{"policy":"lastn","context_window":1e100,"messages":` + msgs + `}`, 400, CodeInvalidJSON, `field "context_window"`},
		// F8: invalid UTF-8 anywhere, even where nothing decodes it.
		{"invalid UTF-8 in content", "{\"policy\":\"lastn\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", 400, CodeInvalidJSON, "not UTF-8 (byte 59)"},
		{"invalid UTF-8 in conversation id", "{\"policy\":\"lastn\",\"conversation_id\":\"\xff\",\"messages\":" + msgs + "}", 400, CodeInvalidJSON, "not UTF-8"},
		{"invalid UTF-8 in an unknown field", "{\"policy\":\"lastn\",\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"x\":\"\xc3\"}]}", 400, CodeInvalidJSON, "not UTF-8"},
		// F9: content parts in OpenAI's format.
		{"unknown content part", `{"policy":"lastn","messages":[{"role":"user","content":[{"type":"video","video":"x"}]}]}`, 400, CodeInvalidConversation, `type "video" is not a content part of user messages`},
		{"anthropic content block", `{"policy":"lastn","messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, 400, CodeUnsupportedFormat, `"format": "anthropic"`},
		{"content part not an object", `{"policy":"lastn","messages":[{"role":"user","content":[42]}]}`, 400, CodeInvalidConversation, "content part 0: want an object"},
		// F6: pipelines are capped.
		{"pipeline too long", `{"pipeline":` + mustJSON(t, strings.Split(strings.Repeat("lastn ", 17), " ")[:17]) + `,"messages":` + msgs + `}`, 400, CodeBadRequest, "pipeline has 17 policies; the limit is 16"},
		{"model name too long", `{"policy":"lastn","model":"` + strings.Repeat("m", 300) + `","messages":` + msgs + `}`, 400, CodeBadRequest, "model is 300 bytes"},
		{"too many messages", `{"policy":"lastn","messages":` + mustJSON(t, chatMessages(10)) + `}`, 413, CodeTooManyMessages, "limit is 20"},
		{"body too large", `{"policy":"lastn","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, CodeRequestTooLarge, "4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, _ := td.raw(t, http.MethodPost, "/v1/compact", tt.body)
			code, msg := errorCode(t, body)
			if status != tt.status || code != tt.code || !strings.Contains(msg, tt.message) {
				t.Errorf("%d %s %q, want %d %s containing %q", status, code, msg, tt.status, tt.code, tt.message)
			}
		})
	}
	// The client surfaces the same errors as *client.Error.
	_, err := td.c.Compact(bg, &client.CompactRequest{Policy: "nope", Messages: chatMessages(1)})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != 404 || !client.IsCode(err, CodeUnknownPolicy) {
		t.Errorf("client error = %#v", err)
	}
}

func TestRouting(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "", pluginLastn)
	tests := []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/v1/compact", 405, CodeMethodNotAllowed, "POST"},
		{"DELETE", "/v1/config", 405, CodeMethodNotAllowed, "GET, HEAD, PUT"},
		{"POST", "/v1/policies", 405, CodeMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v2/compact", 404, CodeNotFound, ""},
		{"GET", "/index.html", 404, CodeNotFound, ""},
		{"POST", "/", 405, CodeMethodNotAllowed, "GET, HEAD"},
	}
	for _, tt := range tests {
		status, body, h := td.raw(t, tt.method, tt.path, "")
		code, _ := errorCode(t, body)
		if status != tt.status || code != tt.code || h.Get("Allow") != tt.allow || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s = %d %s (Allow %q)", tt.method, tt.path, status, code, h.Get("Allow"))
		}
	}
	if status, _, _ := td.raw(t, "HEAD", "/healthz", ""); status != 200 {
		t.Errorf("HEAD /healthz = %d", status)
	}
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	td := setup(t, "", pluginSliding, pluginLastn)
	os.WriteFile(td.plugins+"/broken.wasm", []byte("not wasm"), 0o644)
	td.start(t)
	list, err := td.c.Policies(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("policies = %+v", list)
	}
	broken, lastn, sliding := list[0], list[1], list[2]
	if broken.Name != "broken" || broken.Serving || broken.Error == nil || !strings.Contains(broken.Error.Message, "not a valid compactd plugin module") || broken.Error.SHA256 == "" {
		t.Errorf("broken = %+v", broken)
	}
	if !lastn.Serving || lastn.Path != "fast" || lastn.ABI != "1.1" || lastn.View != "full" || lastn.Limits == nil || lastn.Limits.CallTimeout != "10s" || len(lastn.SHA256) != 64 || lastn.LoadedAt.IsZero() {
		t.Errorf("lastn = %+v", lastn)
	}
	if sliding.Path != "fast" || len(sliding.ConfigSchema) == 0 || len(sliding.Defaults) == 0 || sliding.Calls == 0 /* the smoke test */ {
		t.Errorf("sliding = %+v", sliding)
	}
	p, err := td.c.Policy(bg, "sliding")
	if err != nil || p.Name != "sliding" || p.Version != sliding.Version {
		t.Errorf("Policy(sliding) = %+v, %v", p, err)
	}
	if p, err := td.c.Policy(bg, "broken"); err != nil || p.Error == nil {
		t.Errorf("Policy(broken) = %+v, %v", p, err)
	}
	if _, err := td.c.Policy(bg, "nope"); !client.IsCode(err, CodeUnknownPolicy) {
		t.Errorf("Policy(nope) = %v", err)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "", pluginLastn)
	for i := 0; i < 3; i++ {
		if _, err := td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", Model: "gpt-4o", ConversationID: "conv-a",
			Config: map[string]any{"n": 2, "step": 1}, Messages: chatMessages(3 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", ConversationID: "conv-b", Messages: chatMessages(1)})
	st, err := td.c.Status(bg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Conversations) != 2 || st.Conversations[0].ID != "conv-b" || st.Totals.Requests != 4 || st.Totals.Compactions != 3 ||
		st.Policies.Serving != 1 || st.Version != "test" || st.ABI != abi.Version.String() || st.Store.TTL != "168h0m0s" || st.UptimeSeconds <= 0 {
		t.Errorf("status = %+v", st)
	}
	a, err := td.c.Conversation(bg, "conv-a")
	if err != nil {
		t.Fatal(err)
	}
	if a.Requests != 3 || a.Compactions != 3 || a.Messages != 12 || a.MessagesAfter != 4 || a.ContextWindow != 128000 ||
		a.UsageRatio <= 0 || a.UsageRatio != float64(a.Tokens)/128000 || a.TokensSaved <= 0 || a.LastCompacted.IsZero() || a.Model != "gpt-4o" {
		t.Errorf("conv-a = %+v", a)
	}
	if st, _ := td.c.Status(bg, 1); len(st.Conversations) != 1 {
		t.Errorf("limit=1 gave %d", len(st.Conversations))
	}
	if _, err := td.c.Conversation(bg, "nope"); !client.IsCode(err, CodeNotFound) {
		t.Errorf("unknown conversation = %v", err)
	}
	for _, q := range []string{"limit=0", "limit=x"} {
		status, body, _ := td.raw(t, "GET", "/v1/status?"+q, "")
		if code, _ := errorCode(t, body); status != 400 || code != CodeBadRequest {
			t.Errorf("%s = %d %s", q, status, code)
		}
	}
}

func TestConfigAPI(t *testing.T) {
	t.Parallel()
	const initial = "# daemon settings\npolicies:\n  lastn:\n    n: 3 # few\n    step: 1\n"
	td := startDaemon(t, initial, pluginLastn)
	doc, err := td.c.Config(bg)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	json.Unmarshal(doc.Config, &cfg)
	if doc.File != td.config || cfg["socket"] != td.Socket() || cfg["policies"].(map[string]any)["lastn"].(map[string]any)["n"] != 3.0 {
		t.Errorf("GET /v1/config = %s %s", doc.File, doc.Config)
	}
	msgs := chatMessages(6)
	count := func() int {
		r, err := td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Messages)
	}
	if n := count(); n != 5 {
		t.Fatalf("before the update: %d messages", n)
	}

	tests := []struct {
		name    string
		patch   string
		status  int
		code    string
		message string
	}{
		{"unknown key", `{"limits":{"max_mesages":3}}`, 400, CodeInvalidConfig, `unknown key "limits.max_mesages"`},
		{"bad duration", `{"limits":{"request_timeout":"300"}}`, 400, CodeInvalidConfig, "not a duration"},
		{"policy config the plugin rejects", `{"policies":{"lastn":{"n":0}}}`, 400, CodeInvalidConfig, "lastn"},
		{"policy config key the plugin does not know", `{"policies":{"lastn":{"nn":1}}}`, 400, CodeInvalidConfig, `unknown key "nn"`},
		{"not an object", `[1]`, 400, CodeInvalidConfig, "want an object"},
		{"empty", ``, 400, CodeBadRequest, "empty body"},
		{"not JSON", `{"a":`, 400, CodeInvalidConfig, ""},
		// F1, F4: limits a start could not use are refused before they
		// are saved, naming the key and its range.
		{"memory limit of 1 MiB", `{"limits":{"plugin":{"max_memory_mb":1}}}`, 400, CodeInvalidConfig, "limits.plugin.max_memory_mb: 1 is out of range (allowed: 16 to 4096"},
		{"negative memory limit", `{"limits":{"plugin":{"max_memory_mb":-1}}}`, 400, CodeInvalidConfig, "limits.plugin.max_memory_mb: -1 is out of range"},
		{"negative instances", `{"limits":{"plugin":{"max_instances":-3}}}`, 400, CodeInvalidConfig, "limits.plugin.max_instances: -3 is out of range (allowed: 1 to 256"},
		{"negative output limit", `{"limits":{"plugins":{"lastn":{"max_output_bytes":-1}}}}`, 400, CodeInvalidConfig, "limits.plugins.lastn.max_output_bytes: -1 is out of range"},
		// F10: a whole number no plugin can decode as an integer.
		{"1e100 for an integer", `{"policies":{"lastn":{"n":1e100}}}`, 400, CodeInvalidConfig, "n: 1e+100 is out of range"},
		{"1e100 for a limit", `{"limits":{"max_messages":1e100}}`, 400, CodeInvalidConfig, "1e100"},
		// Built as a start would: the provider block and the TCP token.
		{"unknown LLM provider", `{"llm":{"provider":"nope"}}`, 400, CodeInvalidConfig, `llm.provider: "nope" is not a provider`},
		{"LLM key variable unset", `{"llm":{"provider":"anthropic"}}`, 400, CodeInvalidConfig, "ANTHROPIC_API_KEY"},
		{"LLM concurrency", `{"llm":{"provider":"openai","concurrency":100000}}`, 400, CodeInvalidConfig, "llm.concurrency: 100000 is out of range"},
		{"TCP without a token", `{"tcp":{"listen":"127.0.0.1:7077"}}`, 400, CodeInvalidConfig, "no bearer token"},
		{"pipeline too long", `{"policy":null,"pipeline":["lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn","lastn"]}`, 400, CodeInvalidConfig, "1 to 16 policies"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, _ := td.raw(t, "PUT", "/v1/config", tt.patch)
			code, msg := errorCode(t, body)
			if status != tt.status || code != tt.code || !strings.Contains(msg, tt.message) {
				t.Errorf("%d %s %q", status, code, msg)
			}
			if b, _ := os.ReadFile(td.config); string(b) != initial {
				t.Errorf("a rejected update changed the file:\n%s", b)
			}
			if p, _ := td.c.Policy(bg, "lastn"); p == nil || p.Limits.MaxInstances != td.Daemon.engine.Limits().MaxInstances || !p.Serving {
				t.Errorf("a rejected update changed the plugin: %+v", p)
			}
		})
	}

	up, err := td.c.UpdateConfig(bg, map[string]any{
		"policies": map[string]any{"lastn": map[string]any{"n": 5}, "absent": map[string]any{"x": 1}},
		"state":    map[string]any{"ttl": "1h"},
		"socket":   "/elsewhere.sock",
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(up.RestartRequired, ",") != "socket" || len(up.Warnings) != 1 || !strings.Contains(up.Warnings[0], `"absent" is configured but not loaded`) {
		t.Errorf("update answer: restart %v, warnings %v", up.RestartRequired, up.Warnings)
	}
	if n := count(); n != 7 {
		t.Errorf("after the update: %d messages, want 7", n)
	}
	b, _ := os.ReadFile(td.config)
	for _, want := range []string{"# daemon settings", "n: 5 # few", "absent:", "ttl: 1h", "socket: /elsewhere.sock"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("file lacks %q:\n%s", want, b)
		}
	}
	if st, _ := td.c.Status(bg, 0); st.Store.TTL != "1h0m0s" {
		t.Errorf("store TTL not applied: %s", st.Store.TTL)
	}

	// SIGHUP's path: a broken file keeps the running config.
	os.WriteFile(td.config, []byte("policies: {lastn: {n: 2, step: 1}}\nbogus: 1\n"), 0o600)
	if _, err := td.Reload(); err == nil || !strings.Contains(err.Error(), `unknown key "bogus"`) {
		t.Errorf("Reload of a broken file = %v", err)
	}
	if n := count(); n != 7 {
		t.Errorf("after a failed reload: %d messages, want 7", n)
	}
	os.WriteFile(td.config, []byte("policies: {lastn: {n: 2, step: 1}}\nlimits: {plugins: {lastn: {call_timeout: 2s}}}\n"), 0o600)
	if _, err := td.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 4 {
		t.Errorf("after a reload: %d messages, want 4", n)
	}
	if p, _ := td.c.Policy(bg, "lastn"); p.Limits.CallTimeout != "2s" {
		t.Errorf("plugin limits not applied on reload: %+v", p.Limits)
	}
	// A config rejected by a plugin's schema on reload also keeps the old.
	os.WriteFile(td.config, []byte("policies: {lastn: {n: -1}}\n"), 0o600)
	if _, err := td.Reload(); err == nil {
		t.Error("reload accepted a config the plugin rejects")
	}
	if n := count(); n != 4 {
		t.Errorf("after a rejected reload: %d messages", n)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "", pluginLastn, pluginGohostile)
	h, err := td.c.Health(bg)
	if err != nil || h.Status != "ok" || h.Policies != 2 {
		t.Fatalf("health = %+v, %v", h, err)
	}
	td.c.Compact(bg, &client.CompactRequest{Policy: "lastn", Config: map[string]any{"n": 1, "step": 1}, Messages: chatMessages(3)})
	td.c.Compact(bg, &client.CompactRequest{Policy: "gohostile", Config: map[string]any{"mode": "exit"}, Messages: chatMessages(3)})
	td.c.Compact(bg, &client.CompactRequest{Policy: "nope", Messages: chatMessages(3)})
	text, err := td.c.Metrics(bg)
	if err != nil {
		t.Fatal(err)
	}
	// Every line is a comment or `name{labels} value`.
	line := regexp.MustCompile(`^[a-z_]+(\{([a-z_]+="[^"]*",?)+\})? [0-9.e+-]+$|^\+Inf$`)
	values := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "# HELP ") || strings.HasPrefix(l, "# TYPE ") {
			continue
		}
		if !line.MatchString(l) {
			t.Errorf("malformed metrics line %q", l)
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, _ := strconv.ParseFloat(l[i+1:], 64)
		values[l[:i]] = v
	}
	for series, want := range map[string]float64{
		`compactd_http_requests_total{handler="compact",code="200"}`:                         2,
		`compactd_http_requests_total{handler="compact",code="404"}`:                         1,
		`compactd_compactions_total{policy="lastn",outcome="compacted"}`:                     1,
		`compactd_compactions_total{policy="gohostile",outcome="failed"}`:                    1,
		`compactd_http_request_duration_seconds_count{handler="compact"}`:                    3,
		`compactd_policy_duration_seconds_bucket{policy="lastn",le="+Inf"}`:                  1,
		`compactd_plugin_loads_total`:                                                        2,
		`compactd_plugins_serving`:                                                           2,
		`compactd_plugins_loading`:                                                           0,
		`compactd_plugin_load_failures_total`:                                                0,
		`compactd_conversations_tracked`:                                                     1, // both requests sent one conversation
		`compactd_conversation_cache_entries`:                                                1, // the three requests sent the same messages
		`compactd_conversation_cache_misses_total`:                                           1,
		`compactd_conversation_cache_hits_total`:                                             2,
		`compactd_conversation_cache_reused_messages_total`:                                  16, // 8 messages each
		`compactd_conversation_cache_parsed_messages_total`:                                  8,
		`compactd_http_requests_in_flight`:                                                   1, // this scrape
		`compactd_http_request_duration_seconds_bucket{handler="healthz",le="+Inf"}`:         1,
		`compactd_http_request_duration_seconds_bucket{handler="compact",le="0.00025"}` + "": values[`compactd_http_request_duration_seconds_bucket{handler="compact",le="0.00025"}`],
	} {
		if got, ok := values[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if values[`compactd_tokens_saved_total{policy="lastn"}`] <= 0 || values[`compactd_tokens_in_total`] <= values[`compactd_tokens_out_total`] {
		t.Errorf("token counters: %v", values)
	}
}

// A daemon with no policy is up but degraded, and /healthz says so; the
// first plugin that arrives makes it ok.
func TestHealthDegradedWithoutPolicies(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "")
	h, err := td.c.Health(bg)
	if err != nil || h.Status != "degraded" || h.Policies != 0 {
		t.Fatalf("health with no plugins = %+v, %v", h, err)
	}
	td.addPlugin(t, pluginLastn, "")
	waitFor(t, "the plugin to load", 2*time.Minute, func() bool {
		h, err := td.c.Health(bg)
		return err == nil && h.Status == "ok" && h.Policies == 1
	})
}
