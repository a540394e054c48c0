package provider

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
)

// messagesFields are the Messages request's top-level fields; any other
// is refused, as Anthropic refuses it.
var messagesFields = fieldSet("model messages max_tokens system metadata stop_sequences stream temperature top_k top_p " +
	"tools tool_choice thinking service_tier container mcp_servers context_management")

// maxCacheControls is how many blocks may carry cache_control in one
// Messages request (tools, system and messages together).
const maxCacheControls = 4

// block is one Anthropic content block.
type block struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// anthMessage is one Messages message, its content as blocks.
type anthMessage struct {
	Role   string
	Blocks []block
	index  int // in the request
}

// validateMessages checks a Messages request as Anthropic does and
// returns what the script needs.
func validateMessages(body []byte) (*view, *apiError) {
	top, e := topLevel(body)
	if e != nil {
		return nil, invalid("There was an issue with your request body: it is not valid JSON.")
	}
	for k := range top {
		if !messagesFields[k] {
			return nil, invalid("%s: Extra inputs are not permitted", k)
		}
	}
	v := &view{parallel: true}
	if err := json.Unmarshal(top["model"], &v.model); err != nil || v.model == "" {
		return nil, invalid("model: Field required")
	}
	var maxTokens int
	if isNull(top["max_tokens"]) {
		return nil, invalid("max_tokens: Field required")
	}
	if err := json.Unmarshal(top["max_tokens"], &maxTokens); err != nil || maxTokens < 1 {
		return nil, invalid("max_tokens: Input should be a valid integer greater than or equal to 1")
	}
	if !isNull(top["stream"]) {
		if err := json.Unmarshal(top["stream"], &v.stream); err != nil {
			return nil, invalid("stream: Input should be a valid boolean")
		}
	}
	if n := countCacheControl(top["tools"]) + countCacheControl(top["system"]) + countCacheControl(top["messages"]); n > maxCacheControls {
		return nil, invalid("A maximum of %d blocks with cache_control may be provided. Found %d.", maxCacheControls, n)
	}
	if !isNull(top["tool_choice"]) {
		var tc struct {
			DisableParallel bool `json:"disable_parallel_tool_use"`
		}
		json.Unmarshal(top["tool_choice"], &tc)
		v.parallel = !tc.DisableParallel
	}
	if !isNull(top["tools"]) {
		var tools []struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if err := json.Unmarshal(top["tools"], &tools); err != nil {
			return nil, invalid("tools: Input should be a valid list")
		}
		for i, t := range tools {
			if !toolName.MatchString(t.Name) {
				return nil, invalid("tools.%d.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", i)
			}
			if (t.Type == "" || t.Type == "custom") && isNull(t.InputSchema) {
				return nil, invalid("tools.%d.custom.input_schema: Field required", i)
			}
			v.tools = append(v.tools, tool{name: t.Name, schema: t.InputSchema})
		}
	}
	if !isNull(top["system"]) {
		sys, e := anthText(top["system"], "system")
		if e != nil {
			return nil, e
		}
		v.texts = append(v.texts, sys)
	}
	var raw []json.RawMessage
	if isNull(top["messages"]) {
		return nil, invalid("messages: Field required")
	}
	if err := json.Unmarshal(top["messages"], &raw); err != nil {
		return nil, invalid("messages: Input should be a valid list")
	}
	if len(raw) == 0 {
		return nil, invalid("messages: at least one message is required")
	}
	if e := checkAnthropicMessages(raw, v); e != nil {
		return nil, e
	}
	return v, nil
}

// countCacheControl counts the objects with a non-null cache_control at
// any depth of raw.
func countCacheControl(raw json.RawMessage) int {
	if !bytes.Contains(raw, []byte(`"cache_control"`)) {
		return 0
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return 0
	}
	var walk func(any) int
	walk = func(v any) int {
		n := 0
		switch x := v.(type) {
		case map[string]any:
			if cc, ok := x["cache_control"]; ok && cc != nil {
				n++
			}
			for _, c := range x {
				n += walk(c)
			}
		case []any:
			for _, c := range x {
				n += walk(c)
			}
		}
		return n
	}
	return walk(v)
}

// anthText returns the text of a system prompt or a message's content (a
// string or blocks); where is the field's path for errors.
func anthText(raw json.RawMessage, where string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		json.Unmarshal(raw, &s)
		return s, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", invalid("%s: Input should be a valid string or a valid list", where)
	}
	var b strings.Builder
	for j, bl := range blocks {
		if bl.Type != "text" {
			return "", invalid("%s.%d.type: Input should be 'text'", where, j)
		}
		if bl.Text == nil || strings.TrimSpace(*bl.Text) == "" {
			return "", invalid("%s: text content blocks must contain non-whitespace text", where)
		}
		b.WriteString(*bl.Text)
	}
	return b.String(), nil
}

// checkAnthropicMessages applies the Messages API's conversation rules.
// Consecutive messages of one role are one turn (the API combines them);
// the first turn is the user's; every message has content (but a final
// assistant one), text blocks are not empty; the turn after an assistant
// turn with tool_use blocks opens with a tool_result for each of them,
// before any other block, and a tool_result answers a tool_use of the turn
// just before; tool_use ids are unique.
func checkAnthropicMessages(raw []json.RawMessage, v *view) *apiError {
	var turns []anthMessage
	seen := map[string]bool{}
	for i, r := range raw {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(r, &m); err != nil {
			return invalid("messages.%d: Input should be a valid dictionary", i)
		}
		if m.Role != "user" && m.Role != "assistant" {
			return invalid("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if isNull(m.Content) {
			return invalid("messages.%d.content: Field required", i)
		}
		var blocks []block
		c := bytes.TrimSpace(m.Content)
		if c[0] == '"' {
			var s string
			json.Unmarshal(c, &s)
			if s == "" && !(m.Role == "assistant" && i == len(raw)-1) {
				return invalid("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
			}
			if s != "" {
				blocks = []block{{Type: "text", Text: &s}}
			}
		} else if err := json.Unmarshal(c, &blocks); err != nil {
			return invalid("messages.%d.content: Input should be a valid string or a valid list", i)
		} else if len(blocks) == 0 && !(m.Role == "assistant" && i == len(raw)-1) {
			return invalid("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		for j, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == nil || *b.Text == "" {
					return invalid("messages.%d.content.%d.text: text content blocks must be non-empty", i, j)
				}
				if strings.TrimSpace(*b.Text) == "" && !(m.Role == "assistant" && i == len(raw)-1) {
					return invalid("messages: text content blocks must contain non-whitespace text")
				}
				v.texts = append(v.texts, *b.Text)
			case "tool_use":
				if m.Role != "assistant" {
					return invalid("messages.%d.content.%d: tool_use blocks are only allowed in assistant messages", i, j)
				}
				if b.ID == "" || b.Name == "" {
					return invalid("messages.%d.content.%d.tool_use: id and name are required", i, j)
				}
				if seen[b.ID] {
					return invalid("messages.%d.content.%d: `tool_use` ids must be unique", i, j)
				}
				seen[b.ID] = true
				v.texts = append(v.texts, b.Name, string(b.Input))
			case "tool_result":
				if m.Role != "user" {
					return invalid("messages.%d.content.%d: tool_result blocks are only allowed in user messages", i, j)
				}
				text, _ := toolResultText(b.Content)
				v.texts = append(v.texts, text)
			case "image", "document", "thinking", "redacted_thinking", "search_result", "server_tool_use", "web_search_tool_result":
			default:
				return invalid("messages.%d.content.%d.type: Input tag '%s' found using 'type' does not match any of the expected tags", i, j, b.Type)
			}
		}
		if n := len(turns); n > 0 && turns[n-1].Role == m.Role {
			turns[n-1].Blocks = append(turns[n-1].Blocks, blocks...)
		} else {
			turns = append(turns, anthMessage{Role: m.Role, Blocks: blocks, index: i})
		}
	}
	if turns[0].Role != "user" {
		return invalid("messages: first message must use the \"user\" role")
	}
	pending := map[string]bool{}
	for _, t := range turns {
		answered := map[string]bool{}
		other := false
		var results []string
		for j, b := range t.Blocks {
			if b.Type != "tool_result" {
				other = true
				continue
			}
			if !pending[b.ToolUseID] {
				return invalid("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", t.index, j, b.ToolUseID)
			}
			if other {
				return invalid("messages.%d.content.%d: `tool_result` blocks must come first in the user message, before any other content, to answer the `tool_use` blocks of the previous message.", t.index, j)
			}
			if answered[b.ToolUseID] {
				return invalid("messages.%d.content.%d: each `tool_use` may be answered by one `tool_result`; %s is answered twice", t.index, j, b.ToolUseID)
			}
			answered[b.ToolUseID] = true
			text, _ := toolResultText(b.Content)
			results = append(results, text)
		}
		var missing []string
		for id := range pending {
			if !answered[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return invalid("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", t.index, strings.Join(missing, ", "))
		}
		pending = map[string]bool{}
		if t.Role == "assistant" {
			for _, b := range t.Blocks {
				if b.Type == "tool_use" {
					pending[b.ID] = true
				}
			}
		}
		if t.Role == "user" {
			text := ""
			for _, b := range t.Blocks {
				if b.Type == "text" {
					text += *b.Text
				}
			}
			if text != "" {
				v.userTurns++
				v.lastUser = text
			}
			v.results = results
		} else {
			v.results = nil
		}
	}
	v.messages = len(raw)
	return nil
}

// toolResultText returns a tool_result's content as text.
func toolResultText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" && bl.Text != nil {
			b.WriteString(*bl.Text)
		}
	}
	return b.String(), nil
}

// messages answers a Messages request.
func (p *Provider) messages(w http.ResponseWriter, r *http.Request, body []byte) *apiError {
	v, e := validateMessages(body)
	if e != nil {
		return e
	}
	rep := p.decide(v, func() string { return p.newID("toolu_") })
	input := p.promptTokens(v, toolsLen(body))
	if e := p.overflow(r, APIMessages, input); e != nil {
		return e
	}
	output := p.completionTokens(rep)
	// A tenth of the prompt is "read from the cache", so cache fields are
	// exercised; input_tokens is the rest, as Anthropic reports it.
	cached := input / 10
	usage := map[string]any{"input_tokens": input - cached, "output_tokens": output, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached,
		"service_tier": "standard"}
	stop := "end_turn"
	var content []any
	if len(rep.calls) > 0 {
		stop = "tool_use"
		for _, c := range rep.calls {
			content = append(content, map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": json.RawMessage(c.args)})
		}
	} else {
		content = []any{map[string]any{"type": "text", "text": rep.text}}
	}
	p.count(APIMessages, func(s *APIStats) {
		s.ToolCall += int64(len(rep.calls))
		if v.stream {
			s.Streamed++
		}
	})
	msg := map[string]any{"id": p.newID("msg_"), "type": "message", "role": "assistant", "model": v.model,
		"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	if !v.stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(msg)
		return nil
	}
	ev := newSSE(w, r)
	start := map[string]any{}
	for k, x := range msg {
		start[k] = x
	}
	start["content"], start["stop_reason"] = []any{}, nil
	start["usage"] = map[string]any{"input_tokens": input - cached, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached, "service_tier": "standard"}
	if !ev.send("message_start", map[string]any{"type": "message_start", "message": start}) {
		return nil
	}
	for i, c := range rep.calls {
		if !ev.send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": map[string]any{}}}) {
			return nil
		}
		for _, part := range halves(c.args) {
			if !ev.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": part}}) {
				return nil
			}
		}
		if !ev.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}) {
			return nil
		}
	}
	if len(rep.calls) == 0 {
		if !ev.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) {
			return nil
		}
		if !ev.send("ping", map[string]any{"type": "ping"}) {
			return nil
		}
		for _, wd := range words(rep.text) {
			if !ev.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": wd}}) {
				return nil
			}
		}
		if !ev.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) {
			return nil
		}
	}
	if !ev.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": output}}) {
		return nil
	}
	ev.send("message_stop", map[string]any{"type": "message_stop"})
	return nil
}
