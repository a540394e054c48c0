package provider

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// Real-shaped requests, each a small change away from a valid one, and
// what the real API answers them.
func TestValidateChat(t *testing.T) {
	t.Parallel()
	const tools = `"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]`
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.go\"}"}}]}`
	for _, tc := range []struct {
		name, body, want string // want "" = accepted
	}{
		{"plain", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, ""},
		{"tool round", `{"model":"gpt-4o",` + tools + `,"messages":[{"role":"user","content":"read a.go"},` + call + `,{"role":"tool","tool_call_id":"call_a","content":"package a"}]}`, ""},
		{"parts and developer", `{"model":"gpt-4o","messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}`, ""},
		{"stream with usage", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"unknown field", `{"model":"gpt-4o","x_vendor":1,"messages":[{"role":"user","content":"hi"}]}`, "Unrecognized request argument supplied: x_vendor"},
		{"no model", `{"messages":[{"role":"user","content":"hi"}]}`, "you must provide a model parameter"},
		{"no messages", `{"model":"gpt-4o"}`, "Missing required parameter: 'messages'."},
		{"empty messages", `{"model":"gpt-4o","messages":[]}`, "empty array"},
		{"not JSON", `{"model":`, "could not parse the JSON body"},
		{"stream_options without stream", `{"model":"gpt-4o","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, "only allowed when 'stream' is enabled"},
		{"call without result at the end", `{"model":"gpt-4o","messages":[{"role":"user","content":"read a.go"},` + call + `]}`, "did not have response messages: call_a"},
		{"call without result before a user turn", `{"model":"gpt-4o","messages":[{"role":"user","content":"read a.go"},` + call + `,{"role":"user","content":"well?"}]}`, "did not have response messages: call_a"},
		{"one of two parallel calls answered", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_b","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_b","content":"ok"}]}`, "did not have response messages: call_a"},
		{"orphan result", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_a","content":"ok"}]}`, "must be a response to a preceeding message with 'tool_calls'"},
		{"result after a later message", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"},` + call + `,{"role":"tool","tool_call_id":"call_a","content":"ok"},{"role":"assistant","content":"done"},{"role":"tool","tool_call_id":"call_a","content":"again"}]}`, "must be a response to a preceeding message"},
		{"result with a wrong id", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"},` + call + `,{"role":"tool","tool_call_id":"call_z","content":"ok"}]}`, "'tool_call_id' of 'call_z' not found"},
		{"result answered twice", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"},` + call + `,{"role":"tool","tool_call_id":"call_a","content":"ok"},{"role":"tool","tool_call_id":"call_a","content":"ok"}]}`, "'tool_call_id' of 'call_a' not found"},
		{"call without an id", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "tool_calls[0].id"},
		{"unknown role", `{"model":"gpt-4o","messages":[{"role":"model","content":"x"}]}`, "Invalid value: 'model'"},
		{"assistant without content or calls", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null}]}`, "expected a string, got null"},
		{"Anthropic blocks", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}]}`, "Invalid value: 'tool_result'"},
		{"bad tool name", `{"model":"gpt-4o","tools":[{"type":"function","function":{"name":"read file"}}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].function.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, e := validateChat([]byte(tc.body))
			check(t, e, tc.want)
		})
	}
}

func TestValidateMessages(t *testing.T) {
	t.Parallel()
	use := `{"role":"assistant","content":[{"type":"text","text":"Reading."},{"type":"tool_use","id":"toolu_a","name":"read_file","input":{"path":"a.go"}}]}`
	result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"package a"}]}`
	cc := `"cache_control":{"type":"ephemeral"}`
	five := `{"model":"claude-sonnet-4-5","max_tokens":64,"tools":[{"name":"a","input_schema":{"type":"object"},` + cc + `},{"name":"b","input_schema":{"type":"object"},` + cc + `}],` +
		`"system":[{"type":"text","text":"sys",` + cc + `}],"messages":[{"role":"user","content":[{"type":"text","text":"x",` + cc + `},{"type":"text","text":"y",` + cc + `}]}]}`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"plain", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"tool round", `{"model":"claude-sonnet-4-5","max_tokens":64,"system":"be brief","messages":[{"role":"user","content":"read a.go"},` + use + `,` + result + `]}`, ""},
		{"result then text in the same turn", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"read a.go"},` + use + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":[{"type":"text","text":"package a"}]},{"type":"text","text":"and b?"}]}]}`, ""},
		{"consecutive user messages are one turn", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, ""},
		{"prefill", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"The answer is"}]}`, ""},
		{"four cache_control", `{"model":"claude-sonnet-4-5","max_tokens":64,"system":[{"type":"text","text":"s",` + cc + `}],"messages":[{"role":"user","content":[{"type":"text","text":"a",` + cc + `},{"type":"text","text":"b",` + cc + `},{"type":"text","text":"c",` + cc + `}]}]}`, ""},
		{"five cache_control", five, "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{"unknown field", `{"model":"claude-sonnet-4-5","max_tokens":64,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, "stream_options: Extra inputs are not permitted"},
		{"no max_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`, "max_tokens: Field required"},
		{"assistant first", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"assistant","content":"hi"},{"role":"user","content":"hi"}]}`, `first message must use the "user" role`},
		{"system role in messages", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"system","content":"hi"}]}`, "Input should be 'user' or 'assistant'"},
		{"tool_use without result", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"read a.go"},` + use + `,{"role":"user","content":"well?"}]}`, "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_a"},
		{"orphan tool_result", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"ok"},` + result + `]}`, "unexpected `tool_use_id` found in `tool_result` blocks: toolu_a"},
		{"result first thing in the conversation", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[` + result + `]}`, "unexpected `tool_use_id`"},
		{"result after text", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"read a.go"},` + use + `,{"role":"user","content":[{"type":"text","text":"here"},{"type":"tool_result","tool_use_id":"toolu_a","content":"x"}]}]}`, "must come first"},
		{"result two turns late", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"read a.go"},` + use + `,{"role":"user","content":"wait"},{"role":"assistant","content":"ok"},` + result + `]}`, "without `tool_result` blocks immediately after"},
		{"duplicate tool_use ids", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"x"},` + use + `,` + result + `,` + use + `,` + result + `]}`, "`tool_use` ids must be unique"},
		{"empty user content", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":""}]}`, "all messages must have non-empty content"},
		{"empty block list", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[]},{"role":"user","content":"b"}]}`, "all messages must have non-empty content"},
		{"empty text block", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "text content blocks must be non-empty"},
		{"OpenAI tool message", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_1","content":"x"}]}`, "Input should be 'user' or 'assistant'"},
		{"tool without schema", `{"model":"claude-sonnet-4-5","max_tokens":64,"tools":[{"name":"a"}],"messages":[{"role":"user","content":"x"}]}`, "input_schema: Field required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, e := validateMessages([]byte(tc.body))
			check(t, e, tc.want)
		})
	}
}

func TestValidateResponses(t *testing.T) {
	t.Parallel()
	fc := `{"type":"function_call","call_id":"call_a","name":"read_file","arguments":"{\"path\":\"a.go\"}"}`
	out := `{"type":"function_call_output","call_id":"call_a","output":"package a"}`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"string input", `{"model":"gpt-4o","input":"hi"}`, ""},
		{"tool round", `{"model":"gpt-4o","instructions":"be brief","input":[{"role":"user","content":"read a.go"},` + fc + `,` + out + `]}`, ""},
		{"typed message and reasoning", `{"model":"gpt-4o","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"y"}]}]}`, ""},
		{"custom tool round", `{"model":"gpt-4o","input":[{"role":"user","content":"x"},{"type":"custom_tool_call","call_id":"call_c","name":"patch","input":"*** Begin"},{"type":"custom_tool_call_output","call_id":"call_c","output":"done"}]}`, ""},
		{"unknown field", `{"model":"gpt-4o","input":"hi","messages":[]}`, "Unknown parameter: 'messages'."},
		{"no model", `{"input":"hi"}`, "Missing required parameter: 'model'."},
		{"no input", `{"model":"gpt-4o"}`, "Missing required parameter: 'input'."},
		{"call without output", `{"model":"gpt-4o","input":[{"role":"user","content":"read a.go"},` + fc + `]}`, "No tool output found for function call call_a."},
		{"call without output before a user turn", `{"model":"gpt-4o","input":[{"role":"user","content":"read a.go"},` + fc + `,{"role":"user","content":"well?"}]}`, "No tool output found for function call call_a."},
		{"orphan output", `{"model":"gpt-4o","input":[{"role":"user","content":"x"},` + out + `]}`, "No tool call found for function call output with call_id call_a."},
		{"output before its call", `{"model":"gpt-4o","input":[{"role":"user","content":"x"},` + out + `,` + fc + `]}`, "No tool call found for function call output"},
		{"output answers a custom call", `{"model":"gpt-4o","input":[{"role":"user","content":"x"},{"type":"custom_tool_call","call_id":"call_a","name":"p","input":"x"},` + out + `]}`, "No tool call found for function call output with call_id call_a."},
		{"output twice", `{"model":"gpt-4o","input":[{"role":"user","content":"x"},` + fc + `,` + out + `,` + out + `]}`, "Duplicate item found with call_id 'call_a'."},
		{"input_text in an assistant message", `{"model":"gpt-4o","input":[{"role":"assistant","content":[{"type":"input_text","text":"y"}]}]}`, "Invalid value: 'input_text'"},
		{"chat-style tool message", `{"model":"gpt-4o","input":[{"role":"tool","content":"x"}]}`, "Invalid value: 'tool'"},
		{"unknown item", `{"model":"gpt-4o","input":[{"type":"tool_result","content":"x"}]}`, "Invalid value: 'tool_result'"},
		{"unknown previous response", `{"model":"gpt-4o","previous_response_id":"resp_nope","input":"hi"}`, "Previous response with id 'resp_nope' not found."},
		{"unknown item reference", `{"model":"gpt-4o","input":[{"type":"item_reference","id":"fc_nope"}]}`, "Item with id 'fc_nope' not found."},
		{"stream_options without stream", `{"model":"gpt-4o","input":"hi","stream_options":{"include_obfuscation":false}}`, "only allowed when 'stream' is enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, e := New(Options{}).validateResponses([]byte(tc.body))
			check(t, e, tc.want)
		})
	}
}

func check(t *testing.T, e *apiError, want string) {
	t.Helper()
	switch {
	case want == "" && e != nil:
		t.Fatalf("refused: %s", e.message)
	case want != "" && e == nil:
		t.Fatalf("accepted, want %q", want)
	case want != "" && !strings.Contains(e.message, want):
		t.Fatalf("refused with %q, want %q", e.message, want)
	case e != nil && e.status/100 != 4:
		t.Fatalf("status %d", e.status)
	}
}

// post sends a request to p as the SDKs do and returns the status and body.
func post(t *testing.T, p http.Handler, path, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if path == "/v1/messages" {
		r.Header.Set("x-api-key", "k")
		r.Header.Set("anthropic-version", "2023-06-01")
	} else {
		r.Header.Set("Authorization", "Bearer k")
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// Errors come in each provider's shape, and are counted.
func TestErrorShapes(t *testing.T) {
	t.Parallel()
	p := New(Options{})
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"m","messages":[],"foo":1}`, `{"error":{"code":null,"message":"Unrecognized request argument supplied: foo","param":null,"type":"invalid_request_error"}}`},
		{"/v1/responses", `{"model":"m","input":"x","foo":1}`, `{"error":{"code":"unknown_parameter","message":"Unknown parameter: 'foo'.","param":"foo","type":"invalid_request_error"}}`},
		{"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"foo":1}`, `{"error":{"message":"foo: Extra inputs are not permitted","type":"invalid_request_error"},"type":"error"}`},
	} {
		code, body := post(t, p, tc.path, tc.body)
		if code != 400 || strings.TrimSpace(body) != tc.want {
			t.Errorf("%s: %d %s, want 400 %s", tc.path, code, body, tc.want)
		}
	}
	st := p.Stats()
	for _, api := range []string{APIChat, APIResponses, APIMessages} {
		if s := st.APIs[api]; s.Requests != 1 || s.Rejected != 1 {
			t.Errorf("%s: %+v", api, s)
		}
	}
	if len(st.Rejections) != 3 {
		t.Errorf("rejections %q", st.Rejections)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`))
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	if w.Code != 401 || !strings.Contains(w.Body.String(), "invalid_api_key") {
		t.Errorf("no key: %d %s", w.Code, w.Body)
	}
}

// events splits an SSE body into its events' types (the event: line, or
// the data's "type"/"object") and data.
func events(t *testing.T, body string) (types []string, data []map[string]any) {
	t.Helper()
	for _, ev := range strings.Split(strings.TrimSpace(body), "\n\n") {
		var typ, d string
		for _, line := range strings.Split(ev, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				typ = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				d = v
			}
		}
		if d == "[DONE]" {
			types = append(types, "[DONE]")
			data = append(data, nil)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if typ == "" {
			typ, _ = m["object"].(string)
		}
		types = append(types, typ)
		data = append(data, m)
	}
	return types, data
}

// A scripted session in each format: tool calls with unique ids and
// schema-shaped arguments, two in parallel every ParallelEvery-th turn,
// answers that quote the results, real event sequences.
func TestScriptedStreams(t *testing.T) {
	t.Parallel()
	p := New(Options{ParallelEvery: 2})
	tools := `[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"},"record_id":{"type":"string"},"limit":{"type":"integer"}}}}}]`

	// Chat Completions, streamed with usage.
	msgs := `[{"role":"user","content":"first"}]`
	code, body := post(t, p, "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"tools":`+tools+`,"messages":`+msgs+`}`)
	types, data := events(t, body)
	if code != 200 || types[len(types)-1] != "[DONE]" {
		t.Fatalf("%d %s", code, body)
	}
	var ids []string
	for i, d := range data[:len(data)-1] {
		u, has := d["usage"]
		if i < len(data)-2 && (!has || u != nil) {
			t.Fatalf("chunk %d: usage %v, want null", i, u)
		}
		if i == len(data)-2 && u == nil {
			t.Fatalf("last chunk without usage: %v", d)
		}
		for _, c := range d["choices"].([]any) {
			delta := c.(map[string]any)["delta"].(map[string]any)
			for _, tc := range asList(delta["tool_calls"]) {
				if id, ok := tc.(map[string]any)["id"].(string); ok {
					ids = append(ids, id)
				}
			}
		}
	}
	if len(ids) == 0 {
		t.Fatalf("turn 1: no call")
	}
	ids = ids[:1]
	// Later questions: one in ParallelEvery gets two calls.
	seen := map[string]bool{ids[0]: true}
	counts := map[int]int{}
	for q := 0; q < 20; q++ {
		code, body = post(t, p, "/v1/chat/completions", `{"model":"gpt-4o","tools":`+tools+`,"messages":[{"role":"user","content":"first"},`+
			`{"role":"assistant","content":null,"tool_calls":[{"id":"`+ids[0]+`","type":"function","function":{"name":"read_file","arguments":"{}"}}]},`+
			`{"role":"tool","tool_call_id":"`+ids[0]+`","content":"contents of a.go"},{"role":"assistant","content":"ok"},{"role":"user","content":"question `+strconv.Itoa(q)+`"}]}`)
		var cc struct {
			Choices []struct {
				Message struct {
					ToolCalls []struct {
						ID       string
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		json.Unmarshal([]byte(body), &cc)
		if code != 200 || len(cc.Choices) != 1 {
			t.Fatalf("question %d: %d %s", q, code, body)
		}
		counts[len(cc.Choices[0].Message.ToolCalls)]++
		for _, c := range cc.Choices[0].Message.ToolCalls {
			if seen[c.ID] {
				t.Fatalf("id %s issued twice", c.ID)
			}
			seen[c.ID] = true
			var args struct {
				Path     string `json:"path"`
				RecordID string `json:"record_id"`
				Limit    *int   `json:"limit"`
			}
			if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil || !strings.HasPrefix(args.Path, "src/") || !strings.HasPrefix(args.RecordID, "REC-") || args.Limit == nil {
				t.Fatalf("arguments %s", c.Function.Arguments)
			}
		}
	}
	if counts[1] == 0 || counts[2] == 0 || counts[1]+counts[2] != 20 {
		t.Fatalf("calls per answer: %v, want some single and some parallel", counts)
	}
	// parallel_tool_calls false: one call.
	_, body = post(t, p, "/v1/chat/completions", `{"model":"gpt-4o","parallel_tool_calls":false,"tools":`+tools+`,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`)
	if strings.Count(body, `"type":"function"`) != 1 {
		t.Fatalf("parallel_tool_calls false: %s", body)
	}

	// Messages, streamed: the event sequence of a tool_use answer.
	_, body = post(t, p, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"tools":[{"name":"read_file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],"messages":[{"role":"user","content":"a"}]}`)
	types, _ = events(t, body)
	if got := strings.Join(types, " "); !strings.HasPrefix(got, "message_start content_block_start content_block_delta content_block_delta content_block_stop ") ||
		!strings.HasSuffix(got, " content_block_stop message_delta message_stop") {
		t.Fatalf("messages events: %s", got)
	}
	// And of a text answer to the result.
	_, body = post(t, p, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"a"},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_x","name":"read_file","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_x","content":"line one"}]}]}`)
	types, data = events(t, body)
	if types[0] != "message_start" || types[len(types)-1] != "message_stop" || !strings.Contains(body, `"text":"result:"`) || !strings.Contains(body, `"text":" line"`) {
		t.Fatalf("messages text events: %v\n%s", types, body)
	}
	_ = data

	// Responses, streamed: a function call, then the answer to its output.
	_, body = post(t, p, "/v1/responses", `{"model":"gpt-4o","stream":true,"tools":[{"type":"function","name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}],"input":"first"}`)
	types, data = events(t, body)
	want := "response.created response.in_progress response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done response.completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("responses events: %s", got)
	}
	for i, d := range data {
		if d["sequence_number"] != float64(i) || d["type"] != types[i] {
			t.Fatalf("event %d: %v", i, d)
		}
	}
	resp := data[len(data)-1]["response"].(map[string]any)
	item := resp["output"].([]any)[0].(map[string]any)
	respID, callID, itemID := resp["id"].(string), item["call_id"].(string), item["id"].(string)
	if resp["usage"] == nil || !strings.HasPrefix(callID, "call_") || !strings.HasPrefix(itemID, "fc_") {
		t.Fatalf("completed: %v", resp)
	}
	// previous_response_id: the output alone answers the stored call.
	code, body = post(t, p, "/v1/responses", `{"model":"gpt-4o","previous_response_id":"`+respID+`","input":[{"type":"function_call_output","call_id":"`+callID+`","output":"package a"}]}`)
	if code != 200 || !strings.Contains(body, `"text":"result: package a"`) {
		t.Fatalf("previous_response_id: %d %s", code, body)
	}
	// Without the output, the stored call is unanswered.
	code, body = post(t, p, "/v1/responses", `{"model":"gpt-4o","previous_response_id":"`+respID+`","input":"and?"}`)
	if code != 400 || !strings.Contains(body, "No tool output found for function call "+callID) {
		t.Fatalf("previous_response_id without output: %d %s", code, body)
	}
	// item_reference names the stored call.
	code, body = post(t, p, "/v1/responses", `{"model":"gpt-4o","input":[{"role":"user","content":"first"},{"type":"item_reference","id":"`+itemID+`"},{"type":"function_call_output","call_id":"`+callID+`","output":"ok"}]}`)
	if code != 200 {
		t.Fatalf("item_reference: %d %s", code, body)
	}
	// A text answer streams its parts.
	_, body = post(t, p, "/v1/responses", `{"model":"gpt-4o","stream":true,"input":"hello there"}`)
	types, _ = events(t, body)
	if !bytes.Contains([]byte(strings.Join(types, " ")), []byte("response.output_item.added response.content_part.added response.output_text.delta")) ||
		types[len(types)-1] != "response.completed" {
		t.Fatalf("responses text events: %v", types)
	}
	if st := p.Stats(); st.APIs[APIResponses].Rejected != 1 || st.APIs[APIChat].Rejected != 0 || st.APIs[APIMessages].Rejected != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
