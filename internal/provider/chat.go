package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"
)

// chatFields are the Chat Completions request's top-level fields; any
// other is refused, as OpenAI refuses it.
var chatFields = fieldSet("model messages audio frequency_penalty function_call functions logit_bias logprobs " +
	"max_completion_tokens max_tokens metadata modalities n parallel_tool_calls prediction presence_penalty " +
	"prompt_cache_key prompt_cache_retention reasoning_effort response_format safety_identifier seed service_tier stop store " +
	"stream stream_options temperature tool_choice tools top_logprobs top_p user verbosity web_search_options")

func fieldSet(list string) map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(list) {
		m[f] = true
	}
	return m
}

// toolName is what OpenAI accepts as a function's name.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// topLevel decodes a request body into its top-level fields.
func topLevel(body []byte) (map[string]json.RawMessage, *apiError) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, invalid("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
	}
	return top, nil
}

// isNull reports whether a field is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// chatMessage is one Chat Completions message.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID *string         `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// validateChat checks a Chat Completions request as OpenAI does and
// returns what the script needs.
func validateChat(body []byte) (*view, *apiError) {
	top, e := topLevel(body)
	if e != nil {
		return nil, e
	}
	for k := range top {
		if !chatFields[k] {
			return nil, invalid("Unrecognized request argument supplied: %s", k)
		}
	}
	v := &view{parallel: true}
	if err := json.Unmarshal(top["model"], &v.model); err != nil || v.model == "" {
		return nil, invalid("you must provide a model parameter").withParam("model", "")
	}
	if !isNull(top["stream"]) {
		if err := json.Unmarshal(top["stream"], &v.stream); err != nil {
			return nil, invalid("Invalid type for 'stream': expected a boolean, but got %s instead.", top["stream"]).withParam("stream", "invalid_type")
		}
	}
	if !isNull(top["stream_options"]) {
		if !v.stream {
			return nil, invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.").withParam("stream_options", "invalid_value")
		}
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := json.Unmarshal(top["stream_options"], &so); err != nil {
			return nil, invalid("Invalid type for 'stream_options': expected an object.").withParam("stream_options", "invalid_type")
		}
		v.includeUsage = so.IncludeUsage != nil && *so.IncludeUsage
	}
	if !isNull(top["parallel_tool_calls"]) {
		json.Unmarshal(top["parallel_tool_calls"], &v.parallel)
	}
	if !isNull(top["tools"]) {
		var tools []struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(top["tools"], &tools); err != nil {
			return nil, invalid("Invalid type for 'tools': expected an array of objects.").withParam("tools", "invalid_type")
		}
		for i, t := range tools {
			if t.Type != "function" && t.Type != "custom" {
				return nil, invalid("Invalid value: '%s'. Supported values are: 'function' and 'custom'.", t.Type).withParam(fmt.Sprintf("tools[%d].type", i), "invalid_value")
			}
			if t.Type == "function" {
				if t.Function == nil || !toolName.MatchString(t.Function.Name) {
					return nil, invalid("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i).withParam(fmt.Sprintf("tools[%d].function.name", i), "invalid_value")
				}
				v.tools = append(v.tools, tool{name: t.Function.Name, schema: t.Function.Parameters})
			}
		}
	}
	var msgs []chatMessage
	if isNull(top["messages"]) {
		return nil, invalid("Missing required parameter: 'messages'.").withParam("messages", "missing_required_parameter")
	}
	if err := json.Unmarshal(top["messages"], &msgs); err != nil {
		return nil, invalid("Invalid type for 'messages': expected an array of objects (%v).", err).withParam("messages", "invalid_type")
	}
	if len(msgs) == 0 {
		return nil, invalid("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.").withParam("messages", "empty_array")
	}
	if e := checkChatMessages(msgs, v); e != nil {
		return nil, e
	}
	return v, nil
}

// checkChatMessages applies OpenAI's conversation rules: known roles, each
// assistant message's tool calls answered by tool messages right after it
// (one per id), and no tool message that answers nothing.
func checkChatMessages(msgs []chatMessage, v *view) *apiError {
	pending := map[string]bool{} // ids of the last tool-calling message not yet answered
	answering := false           // inside the tool messages after a tool-calling message
	var results []string
	for i, m := range msgs {
		param := fmt.Sprintf("messages.[%d].role", i)
		if m.Role != "tool" && len(pending) > 0 {
			return unanswered(pending, param)
		}
		switch m.Role {
		case "system", "developer", "user":
			text, e := chatText(m.Content, i, m.Role)
			if e != nil {
				return e
			}
			v.texts = append(v.texts, text)
			if m.Role == "user" {
				v.userTurns++
				v.lastUser = text
			}
			answering, results = false, nil
		case "assistant":
			if len(m.ToolCalls) == 0 && isNull(m.Content) {
				return invalid("Invalid value for 'content': expected a string, got null.").withParam(fmt.Sprintf("messages.[%d].content", i), "")
			}
			text, e := chatText(m.Content, i, m.Role)
			if e != nil {
				return e
			}
			v.texts = append(v.texts, text)
			for j, tc := range m.ToolCalls {
				if tc.ID == "" {
					return invalid("Missing required parameter: 'messages[%d].tool_calls[%d].id'.", i, j).withParam(fmt.Sprintf("messages[%d].tool_calls[%d].id", i, j), "missing_required_parameter")
				}
				if tc.Type != "function" {
					return invalid("Missing required parameter: 'messages[%d].tool_calls[%d].type'.", i, j).withParam(fmt.Sprintf("messages[%d].tool_calls[%d].type", i, j), "missing_required_parameter")
				}
				if pending[tc.ID] {
					return invalid("Duplicate value for 'tool_call_id' of %s in message[%d]. Please ensure all tool call ids are unique.", tc.ID, i).withParam(fmt.Sprintf("messages.[%d].tool_calls", i), "")
				}
				pending[tc.ID] = true
				v.texts = append(v.texts, tc.Function.Name, tc.Function.Arguments)
			}
			answering, results = len(m.ToolCalls) > 0, nil
		case "tool":
			if !answering {
				return invalid("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.").withParam(param, "")
			}
			if m.ToolCallID == nil || !pending[*m.ToolCallID] {
				id := ""
				if m.ToolCallID != nil {
					id = *m.ToolCallID
				}
				return invalid("Invalid parameter: 'tool_call_id' of '%s' not found in 'tool_calls' of previous message.", id).withParam(fmt.Sprintf("messages.[%d].tool_call_id", i), "")
			}
			delete(pending, *m.ToolCallID)
			text, e := chatText(m.Content, i, m.Role)
			if e != nil {
				return e
			}
			v.texts = append(v.texts, text)
			results = append(results, text)
		case "function":
			return invalid("Invalid value: 'function'. The 'function' role is deprecated; use 'tool'.").withParam(param, "invalid_value")
		default:
			return invalid("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role).withParam(fmt.Sprintf("messages[%d].role", i), "invalid_value")
		}
	}
	if len(pending) > 0 {
		return unanswered(pending, fmt.Sprintf("messages.[%d].role", len(msgs)))
	}
	v.messages = len(msgs)
	if last := msgs[len(msgs)-1]; last.Role == "tool" {
		v.results = results
	}
	return nil
}

func unanswered(pending map[string]bool, param string) *apiError {
	ids := make([]string, 0, len(pending))
	for id := range pending {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return invalid("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(ids, ", ")).withParam(param, "")
}

// chatText returns a message's text: its string content or its text
// parts (other parts, images say, count as nothing).
func chatText(raw json.RawMessage, i int, role string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", invalid("Invalid 'messages[%d].content': %v.", i, err).withParam(fmt.Sprintf("messages[%d].content", i), "invalid_type")
		}
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid("Invalid type for 'messages[%d].content': expected one of a string or array of objects, but got %s instead.", i, kind(raw)).withParam(fmt.Sprintf("messages[%d].content", i), "invalid_type")
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "text":
			if p.Text == nil {
				return "", invalid("Missing required parameter: 'messages[%d].content[%d].text'.", i, j).withParam(fmt.Sprintf("messages[%d].content[%d].text", i, j), "missing_required_parameter")
			}
			b.WriteString(*p.Text)
		case "image_url", "input_audio", "file", "refusal":
			if role != "user" && p.Type != "refusal" {
				return "", invalid("Invalid 'messages[%d].content[%d].type': '%s' is only supported for messages with role 'user'.", i, j, p.Type).withParam(fmt.Sprintf("messages[%d].content[%d].type", i, j), "invalid_value")
			}
		default:
			return "", invalid("Invalid value: '%s'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', and 'file'.", p.Type).withParam(fmt.Sprintf("messages[%d].content[%d].type", i, j), "invalid_value")
		}
	}
	return b.String(), nil
}

func kind(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	}
	return "a number"
}

// chatCompletions answers a Chat Completions request.
func (p *Provider) chatCompletions(w http.ResponseWriter, r *http.Request, body []byte) *apiError {
	v, e := validateChat(body)
	if e != nil {
		return e
	}
	rep := p.decide(v, func() string { return p.newID("call_") })
	prompt := p.promptTokens(v, toolsLen(body))
	if e := p.overflow(r, APIChat, prompt); e != nil {
		return e
	}
	completion := p.completionTokens(rep)
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
		"prompt_tokens_details":     map[string]int{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]int{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
	id, created := p.newID("chatcmpl-"), time.Now().Unix()
	finish := "stop"
	if len(rep.calls) > 0 {
		finish = "tool_calls"
	}
	p.count(APIChat, func(s *APIStats) {
		s.ToolCall += int64(len(rep.calls))
		if v.stream {
			s.Streamed++
		}
	})
	if !v.stream {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
		if len(rep.calls) > 0 {
			var calls []any
			for _, c := range rep.calls {
				calls = append(calls, map[string]any{"id": c.id, "type": "function", "function": map[string]string{"name": c.name, "arguments": c.args}})
			}
			msg["tool_calls"] = calls
		} else {
			msg["content"] = rep.text
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": created, "model": v.model,
			"choices":      []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
			"usage":        usage,
			"service_tier": "default", "system_fingerprint": "fp_compactd"})
		return nil
	}
	e2 := newSSE(w, r)
	chunk := func(delta map[string]any, finish any) bool {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": v.model,
			"service_tier": "default", "system_fingerprint": "fp_compactd",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
		if v.includeUsage {
			c["usage"] = nil // as OpenAI sends it on every chunk but the last
		}
		return e2.send("", c)
	}
	if !chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil) {
		return nil
	}
	// Mistral's API (OpenAI's format, but its own SDK's schema wants a
	// name in every tool-call delta) sends each call whole in one delta;
	// OpenAI sends the id and name, then the arguments in pieces.
	whole := strings.HasPrefix(v.model, "mistral") || strings.HasPrefix(v.model, "codestral") || strings.HasPrefix(v.model, "devstral")
	for i, c := range rep.calls {
		if whole {
			if !chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.id, "type": "function", "function": map[string]string{"name": c.name, "arguments": c.args}}}}, nil) {
				return nil
			}
			continue
		}
		if !chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.id, "type": "function", "function": map[string]string{"name": c.name, "arguments": ""}}}}, nil) {
			return nil
		}
		for _, part := range halves(c.args) {
			if !chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]string{"arguments": part}}}}, nil) {
				return nil
			}
		}
	}
	if len(rep.calls) == 0 {
		for _, wd := range words(rep.text) {
			if !chunk(map[string]any{"content": wd}, nil) {
				return nil
			}
		}
	}
	if !chunk(map[string]any{}, finish) {
		return nil
	}
	if v.includeUsage && !e2.send("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": v.model,
		"service_tier": "default", "system_fingerprint": "fp_compactd", "choices": []any{}, "usage": usage}) {
		return nil
	}
	e2.done()
	return nil
}

// toolsLen is the size of a request's "tools" JSON.
func toolsLen(body []byte) int {
	var m struct {
		Tools json.RawMessage `json:"tools"`
	}
	json.Unmarshal(body, &m)
	return len(m.Tools)
}
