package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// responsesFields are the Responses request's top-level fields; any other
// is refused, as OpenAI refuses it.
var responsesFields = fieldSet("model input instructions tools tool_choice parallel_tool_calls stream stream_options store " +
	"previous_response_id prompt_cache_key prompt_cache_retention reasoning text temperature top_p max_output_tokens max_tool_calls " +
	"metadata include truncation user safety_identifier service_tier background prompt conversation top_logprobs context_management")

// storedItem is an output item the provider kept (store: true), which a
// later request may name by id (item_reference) or through its response
// (previous_response_id).
type storedItem struct {
	typ, callID string
}

// responseStore keeps the latest responses' output items, bounded.
type responseStore struct {
	mu        sync.Mutex
	max       int
	order     []string                // response ids, oldest first
	responses map[string][]storedItem // by response id: its items and those of the chain before it
	items     map[string]storedItem   // by item id
	itemsOf   map[string][]string     // response id → its item ids
}

func newResponseStore(max int) *responseStore {
	return &responseStore{max: max, responses: map[string][]storedItem{}, items: map[string]storedItem{}, itemsOf: map[string][]string{}}
}

func (s *responseStore) put(respID string, history []storedItem, ids []string, items []storedItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.order) >= s.max {
		old := s.order[0]
		s.order = s.order[1:]
		for _, id := range s.itemsOf[old] {
			delete(s.items, id)
		}
		delete(s.itemsOf, old)
		delete(s.responses, old)
	}
	s.order = append(s.order, respID)
	s.responses[respID] = append(append([]storedItem(nil), history...), items...)
	s.itemsOf[respID] = ids
	for i, id := range ids {
		s.items[id] = items[i]
	}
}

func (s *responseStore) response(id string) ([]storedItem, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.responses[id]
	return r, ok
}

func (s *responseStore) item(id string) (storedItem, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[id]
	return it, ok
}

// inputItem is one Responses input item (the fields the checks read).
type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	ID      string          `json:"id"`
	CallID  string          `json:"call_id"`
	Name    string          `json:"name"`
	Args    *string         `json:"arguments"`
	Input   *string         `json:"input"`
	Output  json.RawMessage `json:"output"`
}

// responsesRequest is a validated Responses request.
type responsesRequest struct {
	view
	store    bool
	previous string
	history  []storedItem // what the request holds: the previous chain and its own items
}

// validateResponses checks a Responses request as OpenAI does and returns
// what the script needs. It reads the provider's store for
// previous_response_id and item_reference.
func (p *Provider) validateResponses(body []byte) (*responsesRequest, *apiError) {
	top, e := topLevel(body)
	if e != nil {
		return nil, e
	}
	var unknown []string
	for k := range top {
		if !responsesFields[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, invalid("Unknown parameter: '%s'.", unknown[0]).withParam(unknown[0], "unknown_parameter")
	}
	req := &responsesRequest{view: view{parallel: true}, store: true}
	v := &req.view
	if err := json.Unmarshal(top["model"], &v.model); err != nil || v.model == "" {
		return nil, invalid("Missing required parameter: 'model'.").withParam("model", "missing_required_parameter")
	}
	if !isNull(top["stream"]) {
		if err := json.Unmarshal(top["stream"], &v.stream); err != nil {
			return nil, invalid("Invalid type for 'stream': expected a boolean, but got %s instead.", kind(top["stream"])).withParam("stream", "invalid_type")
		}
	}
	if !isNull(top["stream_options"]) && !v.stream {
		return nil, invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.").withParam("stream_options", "invalid_value")
	}
	if !isNull(top["store"]) {
		json.Unmarshal(top["store"], &req.store)
	}
	if !isNull(top["parallel_tool_calls"]) {
		json.Unmarshal(top["parallel_tool_calls"], &v.parallel)
	}
	if !isNull(top["instructions"]) {
		var s string
		if err := json.Unmarshal(top["instructions"], &s); err != nil {
			return nil, invalid("Invalid type for 'instructions': expected a string, but got %s instead.", kind(top["instructions"])).withParam("instructions", "invalid_type")
		}
		v.texts = append(v.texts, s)
	}
	if !isNull(top["tools"]) {
		var tools []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(top["tools"], &tools); err != nil {
			return nil, invalid("Invalid type for 'tools': expected an array of objects.").withParam("tools", "invalid_type")
		}
		for i, t := range tools {
			if t.Type == "function" {
				if !toolName.MatchString(t.Name) {
					return nil, invalid("Invalid 'tools[%d].name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i).withParam(fmt.Sprintf("tools[%d].name", i), "invalid_value")
				}
				v.tools = append(v.tools, tool{name: t.Name, schema: t.Parameters})
			}
		}
	}
	if !isNull(top["previous_response_id"]) {
		json.Unmarshal(top["previous_response_id"], &req.previous)
		hist, ok := p.store.response(req.previous)
		if !ok {
			return nil, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: fmt.Sprintf("Previous response with id '%s' not found.", req.previous), param: "previous_response_id", code: "previous_response_not_found"}
		}
		req.history = append(req.history, hist...)
	}
	if isNull(top["input"]) {
		if req.previous == "" {
			return nil, invalid("Missing required parameter: 'input'.").withParam("input", "missing_required_parameter")
		}
		return req, nil
	}
	in := bytes.TrimSpace(top["input"])
	if in[0] == '"' {
		// A string is one user message.
		in, _ = json.Marshal([]map[string]json.RawMessage{{"role": json.RawMessage(`"user"`), "content": in}})
	}
	var items []inputItem
	if err := json.Unmarshal(in, &items); err != nil {
		return nil, invalid("Invalid type for 'input': expected one of a string or array of input items, but got %s instead.", kind(in)).withParam("input", "invalid_type")
	}
	if e := p.checkInput(items, req); e != nil {
		return nil, e
	}
	return req, nil
}

// checkInput applies the Responses API's rules to input items: known
// types and roles, each function call answered by an output with its
// call_id (a call without an output is refused, as is an output without a
// call before it), references to stored items that exist.
func (p *Provider) checkInput(items []inputItem, req *responsesRequest) *apiError {
	v := &req.view
	calls := map[string]string{} // call_id → its call's type, from the previous chain and this input
	answered := map[string]bool{}
	for _, it := range req.history {
		if it.callID != "" && (it.typ == "function_call" || it.typ == "custom_tool_call") {
			calls[it.callID] = it.typ
		}
		if it.typ == "function_call_output" || it.typ == "custom_tool_call_output" {
			answered[it.callID] = true
		}
	}
	var results []string
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		if typ == "item_reference" {
			st, ok := p.store.item(it.ID)
			if !ok {
				return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", message: fmt.Sprintf("Item with id '%s' not found.", it.ID), param: param}
			}
			typ, it.CallID = st.typ, st.callID
		}
		switch typ {
		case "message":
			if it.Type == "item_reference" {
				results = nil // the stored message, checked when it was made
				break
			}
			text, e := responsesText(it, i)
			if e != nil {
				return e
			}
			v.texts = append(v.texts, text)
			if it.Role == "user" && text != "" {
				v.userTurns++
				v.lastUser = text
			}
			results = nil
		case "function_call", "custom_tool_call":
			if it.CallID == "" {
				return invalid("Missing required parameter: '%s.call_id'.", param).withParam(param+".call_id", "missing_required_parameter")
			}
			if it.Name == "" && it.Type != "item_reference" {
				return invalid("Missing required parameter: '%s.name'.", param).withParam(param+".name", "missing_required_parameter")
			}
			if typ == "function_call" && it.Args == nil && it.Type != "item_reference" {
				return invalid("Missing required parameter: '%s.arguments'.", param).withParam(param+".arguments", "missing_required_parameter")
			}
			if _, dup := calls[it.CallID]; dup {
				return invalid("Duplicate item found with call_id '%s'.", it.CallID).withParam("input", "")
			}
			calls[it.CallID] = typ
			if it.Args != nil {
				v.texts = append(v.texts, it.Name, *it.Args)
			}
			if it.Input != nil {
				v.texts = append(v.texts, it.Name, *it.Input)
			}
			results = nil
		case "function_call_output", "custom_tool_call_output":
			want := strings.TrimSuffix(typ, "_output")
			if calls[it.CallID] != want {
				return invalid("No tool call found for %s output with call_id %s.", strings.ReplaceAll(want, "_", " "), it.CallID).withParam("input", "")
			}
			if answered[it.CallID] {
				return invalid("Duplicate item found with call_id '%s'.", it.CallID).withParam("input", "")
			}
			answered[it.CallID] = true
			text, e := outputText(it.Output, param)
			if e != nil {
				return e
			}
			v.texts = append(v.texts, text)
			results = append(results, text)
		case "reasoning", "compaction", "web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call", "mcp_call", "mcp_list_tools", "local_shell_call", "local_shell_call_output":
			results = nil
		default:
			return invalid("Invalid value: '%s'. Supported values are: 'message', 'function_call', 'function_call_output', 'custom_tool_call', 'custom_tool_call_output', 'reasoning', 'item_reference', ….", typ).withParam(param+".type", "invalid_value")
		}
		req.history = append(req.history, storedItem{typ: typ, callID: it.CallID})
	}
	var missing []string
	for id, typ := range calls {
		if !answered[id] {
			missing = append(missing, strings.ReplaceAll(typ, "_", " ")+" "+id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return invalid("No tool output found for %s.", missing[0]).withParam("input", "")
	}
	v.results = results
	v.messages = len(items)
	return nil
}

// responsesText returns a message item's text, checking its role and its
// parts' types against the role.
func responsesText(it inputItem, i int) (string, *apiError) {
	switch it.Role {
	case "user", "system", "developer", "assistant":
	default:
		return "", invalid("Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", it.Role).withParam(fmt.Sprintf("input[%d].role", i), "invalid_value")
	}
	c := bytes.TrimSpace(it.Content)
	if isNull(c) {
		return "", invalid("Missing required parameter: 'input[%d].content'.", i).withParam(fmt.Sprintf("input[%d].content", i), "missing_required_parameter")
	}
	if c[0] == '"' {
		var s string
		json.Unmarshal(c, &s)
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return "", invalid("Invalid type for 'input[%d].content': expected one of a string or array of input items.", i).withParam(fmt.Sprintf("input[%d].content", i), "invalid_type")
	}
	var b strings.Builder
	for j, pt := range parts {
		param := fmt.Sprintf("input[%d].content[%d].type", i, j)
		switch pt.Type {
		case "input_text", "output_text":
			if (pt.Type == "output_text") != (it.Role == "assistant") {
				want := "'input_text', 'input_image', 'input_file'"
				if it.Role == "assistant" {
					want = "'output_text', 'refusal'"
				}
				return "", invalid("Invalid value: '%s'. Supported values are: %s.", pt.Type, want).withParam(param, "invalid_value")
			}
			if pt.Text == nil {
				return "", invalid("Missing required parameter: 'input[%d].content[%d].text'.", i, j).withParam(fmt.Sprintf("input[%d].content[%d].text", i, j), "missing_required_parameter")
			}
			b.WriteString(*pt.Text)
		case "input_image", "input_file", "input_audio":
			if it.Role == "assistant" {
				return "", invalid("Invalid value: '%s'. Supported values are: 'output_text', 'refusal'.", pt.Type).withParam(param, "invalid_value")
			}
		case "refusal":
			if it.Role != "assistant" {
				return "", invalid("Invalid value: 'refusal'. Supported values are: 'input_text', 'input_image', 'input_file'.").withParam(param, "invalid_value")
			}
		default:
			return "", invalid("Invalid value: '%s'. Supported values are: 'input_text', 'input_image', 'input_file', 'output_text', 'refusal'.", pt.Type).withParam(param, "invalid_value")
		}
	}
	return b.String(), nil
}

// outputText returns a function call output's text (a string, or
// input_text parts).
func outputText(raw json.RawMessage, param string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", invalid("Missing required parameter: '%s.output'.", param).withParam(param+".output", "missing_required_parameter")
	}
	if raw[0] == '"' {
		var s string
		json.Unmarshal(raw, &s)
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid("Invalid type for '%s.output': expected one of a string or array of input items.", param).withParam(param+".output", "invalid_type")
	}
	var b strings.Builder
	for _, pt := range parts {
		b.WriteString(pt.Text)
	}
	return b.String(), nil
}

// responses answers a Responses request.
func (p *Provider) responses(w http.ResponseWriter, r *http.Request, body []byte) *apiError {
	req, e := p.validateResponses(body)
	if e != nil {
		return e
	}
	v := &req.view
	rep := p.decide(v, func() string { return p.newID("call_") })
	input := p.promptTokens(v, toolsLen(body))
	if e := p.overflow(r, APIResponses, input); e != nil {
		return e
	}
	output := p.completionTokens(rep)
	respID, created := p.newID("resp_"), time.Now().Unix()
	usage := map[string]any{"input_tokens": input, "input_tokens_details": map[string]int{"cached_tokens": 0},
		"output_tokens": output, "output_tokens_details": map[string]int{"reasoning_tokens": 0}, "total_tokens": input + output}

	// The output items, finished.
	type outItem struct {
		id   string
		done map[string]any
	}
	var out []outItem
	var stored []storedItem
	for _, c := range rep.calls {
		id := p.newID("fc_")
		out = append(out, outItem{id, map[string]any{"type": "function_call", "id": id, "call_id": c.id, "name": c.name, "arguments": c.args, "status": "completed"}})
		stored = append(stored, storedItem{typ: "function_call", callID: c.id})
	}
	if len(rep.calls) == 0 {
		id := p.newID("msg_")
		out = append(out, outItem{id, map[string]any{"type": "message", "id": id, "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": rep.text, "annotations": []any{}, "logprobs": []any{}}}}})
		stored = append(stored, storedItem{typ: "message"})
	}
	if req.store {
		ids := make([]string, len(out))
		for i, o := range out {
			ids[i] = o.id
		}
		p.store.put(respID, req.history, ids, stored)
	}
	p.count(APIResponses, func(s *APIStats) {
		s.ToolCall += int64(len(rep.calls))
		if v.stream {
			s.Streamed++
		}
	})
	response := func(status string, output []any, usage any) map[string]any {
		return map[string]any{"id": respID, "object": "response", "created_at": created, "status": status, "background": false,
			"error": nil, "incomplete_details": nil, "instructions": nil, "max_output_tokens": nil, "max_tool_calls": nil,
			"model": v.model, "output": output, "parallel_tool_calls": v.parallel, "previous_response_id": nullable(req.previous),
			"reasoning": map[string]any{"effort": nil, "summary": nil}, "service_tier": "default", "store": req.store,
			"temperature": 1.0, "text": map[string]any{"format": map[string]string{"type": "text"}, "verbosity": "medium"},
			"tool_choice": "auto", "tools": []any{}, "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled",
			"usage": usage, "user": nil, "metadata": map[string]any{}}
	}
	final := make([]any, len(out))
	for i, o := range out {
		final[i] = o.done
	}
	if !v.stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(response("completed", final, usage))
		return nil
	}
	ev := newSSE(w, r)
	seq := 0
	send := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		return ev.send(typ, fields)
	}
	if !send("response.created", map[string]any{"response": response("in_progress", []any{}, nil)}) ||
		!send("response.in_progress", map[string]any{"response": response("in_progress", []any{}, nil)}) {
		return nil
	}
	for i, o := range out {
		if o.done["type"] == "function_call" {
			added := map[string]any{}
			for k, x := range o.done {
				added[k] = x
			}
			added["arguments"], added["status"] = "", "in_progress"
			if !send("response.output_item.added", map[string]any{"output_index": i, "item": added}) {
				return nil
			}
			args := o.done["arguments"].(string)
			for _, part := range halves(args) {
				if !send("response.function_call_arguments.delta", map[string]any{"item_id": o.id, "output_index": i, "delta": part}) {
					return nil
				}
			}
			if !send("response.function_call_arguments.done", map[string]any{"item_id": o.id, "output_index": i, "arguments": args}) {
				return nil
			}
		} else {
			if !send("response.output_item.added", map[string]any{"output_index": i,
				"item": map[string]any{"type": "message", "id": o.id, "status": "in_progress", "role": "assistant", "content": []any{}}}) {
				return nil
			}
			if !send("response.content_part.added", map[string]any{"item_id": o.id, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}}) {
				return nil
			}
			for _, wd := range words(rep.text) {
				if !send("response.output_text.delta", map[string]any{"item_id": o.id, "output_index": i, "content_index": 0, "delta": wd, "logprobs": []any{}}) {
					return nil
				}
			}
			if !send("response.output_text.done", map[string]any{"item_id": o.id, "output_index": i, "content_index": 0, "text": rep.text, "logprobs": []any{}}) ||
				!send("response.content_part.done", map[string]any{"item_id": o.id, "output_index": i, "content_index": 0,
					"part": map[string]any{"type": "output_text", "text": rep.text, "annotations": []any{}, "logprobs": []any{}}}) {
				return nil
			}
		}
		if !send("response.output_item.done", map[string]any{"output_index": i, "item": o.done}) {
			return nil
		}
	}
	send("response.completed", map[string]any{"response": response("completed", final, usage)})
	return nil
}
