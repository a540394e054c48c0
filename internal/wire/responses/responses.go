// Package responses is the OpenAI Responses API's wire format
// (POST /v1/responses): it reads a request's "instructions" and "input"
// items, converts them to the chat form policies see through the ABI, and
// writes a policy's result back as input items.
//
// The chat form, item by item:
//   - "instructions" becomes a leading system message (it stays the
//     request's own field on the way back);
//   - a message item (input_text, output_text, images, files, refusals)
//     becomes a chat message of its role; its text parts are text, its
//     other parts keep only their type, so policies see they are there;
//   - a run of consecutive function_call and custom_tool_call items
//     becomes one assistant message whose tool calls they are (parallel
//     calls stay one unit with their outputs); each function_call_output
//     or custom_tool_call_output becomes a tool message (tool_call_id =
//     call_id);
//   - a reasoning item (encrypted_content included) and the provider's
//     own tool items (web_search_call, …) join the chat message of the
//     assistant item they precede, so they are kept or dropped with the
//     call they led to; trailing ones make an assistant message of their
//     own;
//   - a compaction item (a provider's summary of earlier turns) becomes a
//     system message and is always written back as it was;
//   - an item_reference (an earlier output the provider stored, named by
//     its id; the Vercel AI SDK sends these by default) is opaque: it
//     joins the assistant turn it precedes, as reasoning does. Outputs
//     that follow references and answer no call in view answer a call
//     the references hold: the references become an assistant message
//     whose tool calls carry those outputs' call_ids, so a policy keeps
//     or drops the references with their outputs.
//
// Back is byte-stable: every item of a kept chat message is written back
// as the caller's bytes; chat messages a policy wrote become new items
// (messages, function_call and function_call_output items).
//
// Item types the package does not know (computer_call, …)
// are refused with ErrUnsupported: the caller forwards such a request
// uncompacted and says so, rather than guess at their pairing.
package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/wire"
)

// Name is the format's name: /v1/compact's "format", the proxy's provider
// name in the status and the metrics.
const Name = "responses"

// Route is the proxy's route for the format.
const Route = "/v1/responses"

// Item types the converter knows.
const (
	TypeMessage              = "message"
	TypeFunctionCall         = "function_call"
	TypeFunctionCallOutput   = "function_call_output"
	TypeCustomToolCall       = "custom_tool_call"
	TypeCustomToolCallOutput = "custom_tool_call_output"
	TypeReasoning            = "reasoning"
	TypeCompaction           = "compaction"
	TypeItemReference        = "item_reference"
)

// referenceToolName is the name a tool call held by item references gets
// in the chat form: the call itself is stored on the provider's side.
const referenceToolName = "item_reference"

// providerItems are items the provider ran itself (its built-in tools):
// they hold their own result, have no output item, and go with the
// assistant turn they belong to, as reasoning does.
var providerItems = map[string]bool{
	"web_search_call":       true,
	"file_search_call":      true,
	"image_generation_call": true,
	"code_interpreter_call": true,
	"mcp_call":              true,
	"mcp_list_tools":        true,
}

// ErrMalformed wraps every error about an input that is not the Responses
// API's shape. It wraps chat.ErrMalformed, so callers that map chat
// errors to answers need nothing new.
var ErrMalformed = fmt.Errorf("%w (OpenAI Responses format)", chat.ErrMalformed)

// ErrUnsupported is returned for input compactd does not convert (an item
// type it does not know): valid for the provider, but not compactable. It
// wraps chat.ErrUnsupportedFormat.
var ErrUnsupported = fmt.Errorf("%w (an OpenAI Responses input compactd does not convert)", chat.ErrUnsupportedFormat)

// Item is what the package reads of one input item.
type Item struct {
	// Raw is the item's bytes, as the caller sent them.
	Raw json.RawMessage
	// Type is the item's type ("message" when absent and a role is set).
	Type string
	// Role is a message's role.
	Role string
	// CallID is a tool call's or tool output's call_id.
	CallID string
	// Name is a function_call's or custom_tool_call's name.
	Name string

	content   json.RawMessage // a message's content
	arguments string          // a function_call's arguments, a custom_tool_call's input
	output    json.RawMessage // a tool output's output
}

// wireItem holds the fields of an item the conversion reads.
type wireItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Input     *string         `json:"input"`
	Output    json.RawMessage `json:"output"`
}

// Items reads a request's "input": a string (one user message) or an
// array of items.
func Items(input json.RawMessage) ([]Item, error) {
	in := bytes.TrimSpace(input)
	if len(in) == 0 || bytes.Equal(in, []byte("null")) {
		return nil, nil
	}
	if in[0] == '"' {
		var s string
		if err := json.Unmarshal(in, &s); err != nil {
			return nil, fmt.Errorf("%w: \"input\": %v", ErrMalformed, err)
		}
		raw, err := wire.Marshal(struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}{abi.RoleUser, in})
		if err != nil {
			return nil, err
		}
		return []Item{{Raw: raw, Type: TypeMessage, Role: abi.RoleUser, content: in}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(in, &raws); err != nil {
		return nil, fmt.Errorf("%w: \"input\" must be a string or an array of items", ErrMalformed)
	}
	return readItems(raws)
}

// readItems reads items given one by one.
func readItems(raws []json.RawMessage) ([]Item, error) {
	items := make([]Item, len(raws))
	for i, raw := range raws {
		it, err := readItem(raw)
		if err != nil {
			return nil, fmt.Errorf("input item %d: %w", i, err)
		}
		items[i] = it
	}
	return items, nil
}

// readItem reads one item.
func readItem(raw json.RawMessage) (Item, error) {
	var w wireItem
	if err := json.Unmarshal(raw, &w); err != nil {
		return Item{}, fmt.Errorf("%w: want an object: %v", ErrMalformed, err)
	}
	it := Item{Raw: raw, Type: w.Type, Role: w.Role, CallID: w.CallID, Name: w.Name, content: w.Content, output: w.Output}
	if it.Type == "" && it.Role != "" {
		it.Type = TypeMessage
	}
	switch it.Type {
	case TypeMessage:
		switch it.Role {
		case abi.RoleUser, abi.RoleAssistant, abi.RoleSystem, abi.RoleDeveloper:
		default:
			return Item{}, fmt.Errorf("%w: a message's role is %q (want user, assistant, system or developer)", ErrMalformed, it.Role)
		}
		if c := bytes.TrimSpace(w.Content); len(c) == 0 || c[0] != '"' && c[0] != '[' {
			return Item{}, fmt.Errorf("%w: a message's content must be a string or an array of parts", ErrMalformed)
		}
	case TypeFunctionCall, TypeCustomToolCall:
		if it.CallID == "" || it.Name == "" {
			return Item{}, fmt.Errorf("%w: a %s needs a call_id and a name", ErrMalformed, it.Type)
		}
		if it.Type == TypeFunctionCall && w.Arguments != nil {
			it.arguments = *w.Arguments
		} else if w.Input != nil {
			it.arguments = *w.Input
		}
	case TypeFunctionCallOutput, TypeCustomToolCallOutput:
		if it.CallID == "" {
			return Item{}, fmt.Errorf("%w: a %s needs a call_id", ErrMalformed, it.Type)
		}
	case TypeReasoning, TypeCompaction, TypeItemReference:
	case "":
		return Item{}, fmt.Errorf("%w: an item needs a \"type\" (or a message's \"role\")", ErrMalformed)
	default:
		if !providerItems[it.Type] {
			return Item{}, fmt.Errorf("%w: items of type %q", ErrUnsupported, it.Type)
		}
	}
	return it, nil
}

// isCall reports whether an item type is a call the client answers.
func isCall(typ string) bool { return typ == TypeFunctionCall || typ == TypeCustomToolCall }

// outputOf returns the output item type that answers a call type.
func outputOf(call string) string {
	if call == TypeCustomToolCall {
		return TypeCustomToolCallOutput
	}
	return TypeFunctionCallOutput
}

// Validate checks the items' pairing as the API does: call_ids are unique
// among calls, every output answers an earlier call of its kind, and with
// requireOutputs every call has its output.
func Validate(items []Item, requireOutputs bool) error {
	calls := map[string]string{} // call_id → call type
	answered := map[string]bool{}
	referenced := false // an item_reference came earlier: it may hold calls
	for i, it := range items {
		switch {
		case it.Type == TypeItemReference:
			referenced = true
		case isCall(it.Type):
			if _, dup := calls[it.CallID]; dup {
				return fmt.Errorf("%w: input item %d: call_id %q is used by an earlier call", ErrMalformed, i, it.CallID)
			}
			calls[it.CallID] = it.Type
		case it.Type == TypeFunctionCallOutput || it.Type == TypeCustomToolCallOutput:
			typ, ok := calls[it.CallID]
			if !ok && referenced && !answered[it.CallID] {
				// A call held by an item_reference: the provider checks it.
				answered[it.CallID] = true
				continue
			}
			if !ok {
				return fmt.Errorf("%w: input item %d: no earlier call has the call_id %q of this %s", ErrMalformed, i, it.CallID, it.Type)
			}
			if outputOf(typ) != it.Type {
				return fmt.Errorf("%w: input item %d: call %q is a %s, answered by a %s", ErrMalformed, i, it.CallID, typ, it.Type)
			}
			if answered[it.CallID] {
				return fmt.Errorf("%w: input item %d: call %q is answered twice", ErrMalformed, i, it.CallID)
			}
			answered[it.CallID] = true
		}
	}
	if requireOutputs {
		for i, it := range items {
			if isCall(it.Type) && !answered[it.CallID] {
				return fmt.Errorf("%w: input item %d: no %s for call_id %q", ErrMalformed, i, outputOf(it.Type), it.CallID)
			}
		}
	}
	return nil
}

// Conversation is a Responses request's conversation and its chat form.
type Conversation struct {
	// Instructions is the request's "instructions" (nil when absent).
	Instructions json.RawMessage
	// Items are the request's input items.
	Items []Item
	// Chat is the chat form: what policies see.
	Chat *chat.Conversation

	// places[i] lists the items chat message i came from (nil: the
	// instructions).
	places [][]int
	// calls maps a call_id to its call's item type.
	calls map[string]string
}

// Convert builds a conversation from a request's "instructions" (nil if
// absent) and "input". It checks the items' shape and pairing; the chat
// form's structure is checked by whoever compacts it.
func Convert(instructions, input json.RawMessage) (*Conversation, error) {
	items, err := Items(input)
	if err != nil {
		return nil, err
	}
	if err := Validate(items, false); err != nil {
		return nil, err
	}
	return convert(instructions, items)
}

// ConvertItems is Convert for input items given one by one (each an
// item's bytes).
func ConvertItems(instructions json.RawMessage, raws []json.RawMessage) (*Conversation, error) {
	items, err := readItems(raws)
	if err != nil {
		return nil, err
	}
	if err := Validate(items, false); err != nil {
		return nil, err
	}
	return convert(instructions, items)
}

// convert converts items whose shape (not pairing) is checked.
func convert(instructions json.RawMessage, items []Item) (*Conversation, error) {
	c := &Conversation{Instructions: instructions, Items: items, calls: map[string]string{}}
	var raws []json.RawMessage
	var msgs []abi.Message
	add := func(m abi.Message, place []int) error {
		b, err := wire.Marshal(&m)
		if err != nil {
			return err
		}
		raws, msgs = append(raws, b), append(msgs, m)
		c.places = append(c.places, place)
		return nil
	}
	if ins := bytes.TrimSpace(instructions); len(ins) > 0 && !bytes.Equal(ins, []byte("null")) {
		if ins[0] != '"' {
			return nil, fmt.Errorf("%w: \"instructions\" must be a string", ErrMalformed)
		}
		if err := add(abi.Message{Role: abi.RoleSystem, Content: abi.RawContent(ins)}, nil); err != nil {
			return nil, err
		}
	}
	var pending []int // reasoning and provider items waiting for the assistant item they precede
	for i := 0; i < len(items); {
		it := &items[i]
		switch {
		case it.Type == TypeReasoning || providerItems[it.Type] || it.Type == TypeItemReference:
			pending = append(pending, i)
			i++
			continue
		case (it.Type == TypeFunctionCallOutput || it.Type == TypeCustomToolCallOutput) && c.calls[it.CallID] == "" && hasReference(items, pending):
			// Outputs of calls the pending references hold.
			m := abi.Message{Role: abi.RoleAssistant}
			for j := i; j < len(items) && (items[j].Type == TypeFunctionCallOutput || items[j].Type == TypeCustomToolCallOutput) && c.calls[items[j].CallID] == ""; j++ {
				typ, call := "function", TypeFunctionCall
				if items[j].Type == TypeCustomToolCallOutput {
					typ, call = "custom", TypeCustomToolCall
				}
				c.calls[items[j].CallID] = call
				m.ToolCalls = append(m.ToolCalls, abi.ToolCall{ID: items[j].CallID, Type: typ, Function: abi.FunctionCall{Name: referenceToolName, Arguments: "{}"}})
			}
			if err := add(m, pending); err != nil {
				return nil, err
			}
			pending = nil
			continue
		case isCall(it.Type):
			m := abi.Message{Role: abi.RoleAssistant}
			place := pending
			pending = nil
			for ; i < len(items); i++ {
				it := &items[i]
				if it.Type == TypeReasoning || providerItems[it.Type] {
					// Reasoning between parallel calls belongs to the run
					// when a call follows it.
					j := i
					for j < len(items) && (items[j].Type == TypeReasoning || providerItems[items[j].Type]) {
						j++
					}
					if j == len(items) || !isCall(items[j].Type) {
						break
					}
					for ; i < j; i++ {
						place = append(place, i)
					}
					it = &items[i]
				}
				if !isCall(it.Type) {
					break
				}
				typ := "function"
				if it.Type == TypeCustomToolCall {
					typ = "custom"
				}
				c.calls[it.CallID] = it.Type
				m.ToolCalls = append(m.ToolCalls, abi.ToolCall{ID: it.CallID, Type: typ, Function: abi.FunctionCall{Name: it.Name, Arguments: it.arguments}})
				place = append(place, i)
			}
			if err := add(m, place); err != nil {
				return nil, err
			}
			continue
		case it.Type == TypeFunctionCallOutput || it.Type == TypeCustomToolCallOutput:
			if len(pending) > 0 {
				if err := c.addPending(pending, add); err != nil {
					return nil, err
				}
				pending = nil
			}
			content, err := outputContent(it.output)
			if err != nil {
				return nil, fmt.Errorf("input item %d: %w", i, err)
			}
			if err := add(abi.Message{Role: abi.RoleTool, ToolCallID: it.CallID, Content: content}, []int{i}); err != nil {
				return nil, err
			}
		case it.Type == TypeCompaction:
			if len(pending) > 0 {
				if err := c.addPending(pending, add); err != nil {
					return nil, err
				}
				pending = nil
			}
			content, err := wire.MarshalParts([]abi.ContentPart{{Type: TypeCompaction}})
			if err != nil {
				return nil, err
			}
			if err := add(abi.Message{Role: abi.RoleSystem, Content: content}, []int{i}); err != nil {
				return nil, err
			}
		default: // a message
			place := []int{i}
			if it.Role == abi.RoleAssistant {
				place = append(pending, i)
			} else if len(pending) > 0 {
				if err := c.addPending(pending, add); err != nil {
					return nil, err
				}
			}
			pending = nil
			content, err := messageContent(it.content)
			if err != nil {
				return nil, fmt.Errorf("input item %d: %w", i, err)
			}
			if err := add(abi.Message{Role: it.Role, Content: content}, place); err != nil {
				return nil, err
			}
		}
		i++
	}
	if len(pending) > 0 {
		if err := c.addPending(pending, add); err != nil {
			return nil, err
		}
	}
	c.Chat = &chat.Conversation{Raw: raws, Messages: msgs}
	return c, nil
}

// hasReference reports whether any of the pending items is an
// item_reference.
func hasReference(items []Item, pending []int) bool {
	for _, i := range pending {
		if items[i].Type == TypeItemReference {
			return true
		}
	}
	return false
}

// addPending makes an assistant message of reasoning and provider items
// no assistant item follows.
func (c *Conversation) addPending(pending []int, add func(abi.Message, []int) error) error {
	parts := make([]abi.ContentPart, len(pending))
	for k, i := range pending {
		parts[k] = abi.ContentPart{Type: c.Items[i].Type}
	}
	content, err := wire.MarshalParts(parts)
	if err != nil {
		return err
	}
	return add(abi.Message{Role: abi.RoleAssistant, Content: content}, pending)
}

// wirePart holds the fields of a content part the conversion reads.
type wirePart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// messageContent converts a message's content: a string, or parts whose
// text types (input_text, output_text, text) are text and whose others
// keep their type.
func messageContent(raw json.RawMessage) (abi.Content, error) {
	s := bytes.TrimSpace(raw)
	if len(s) > 0 && s[0] == '"' {
		return abi.RawContent(s), nil
	}
	var parts []wirePart
	if err := json.Unmarshal(s, &parts); err != nil {
		return abi.Content{}, fmt.Errorf("%w: a message's content must be a string or an array of parts", ErrMalformed)
	}
	out := make([]abi.ContentPart, len(parts))
	for k, p := range parts {
		if p.Type == "" {
			return abi.Content{}, fmt.Errorf("%w: content part %d has no type", ErrMalformed, k)
		}
		out[k] = part(p)
	}
	return wire.MarshalParts(out)
}

// outputContent converts a tool output: a string, or parts as a
// message's.
func outputContent(raw json.RawMessage) (abi.Content, error) {
	s := bytes.TrimSpace(raw)
	switch {
	case len(s) == 0 || bytes.Equal(s, []byte("null")):
		return abi.TextContent(""), nil
	case s[0] == '"':
		return abi.RawContent(s), nil
	}
	var parts []wirePart
	if err := json.Unmarshal(s, &parts); err != nil {
		return abi.Content{}, fmt.Errorf("%w: a tool output must be a string or an array of parts", ErrMalformed)
	}
	out := make([]abi.ContentPart, len(parts))
	for k, p := range parts {
		out[k] = part(p)
	}
	return wire.MarshalParts(out)
}

func part(p wirePart) abi.ContentPart {
	switch p.Type {
	case "input_text", "output_text", "text":
		return abi.ContentPart{Type: "text", Text: p.Text}
	}
	return abi.ContentPart{Type: p.Type}
}

// ErrOrigin is returned by Back when origin does not describe out.
var ErrOrigin = errors.New("responses: origin does not match the conversation")

// Back converts a policy's result to input items. out is the compacted
// chat conversation and origin maps each of its messages to the index of
// the chat message of c.Chat it keeps, or -1 for a new message
// (compactor.Response.Origin). The instructions are not among the result:
// they stay the request's "instructions". Compaction items a policy
// dropped are put back where they were: they are the provider's summary
// of what came before them.
func (c *Conversation) Back(out *chat.Conversation, origin []int) ([]json.RawMessage, error) {
	if len(origin) != out.Len() {
		return nil, fmt.Errorf("%w: %d origins for %d messages", ErrOrigin, len(origin), out.Len())
	}
	kept := map[int]bool{}
	for _, src := range origin {
		if src >= len(c.places) {
			return nil, fmt.Errorf("%w: origin %d of %d", ErrOrigin, src, len(c.places))
		}
		if src >= 0 {
			kept[src] = true
		}
	}
	// Dropped compaction items go back before the first kept message that
	// came after them.
	var restore []int // chat indices
	for src, place := range c.places {
		if len(place) == 1 && c.Items[place[0]].Type == TypeCompaction && !kept[src] {
			restore = append(restore, src)
		}
	}
	items := make([]json.RawMessage, 0, len(c.Items))
	put := func(src int) {
		for _, i := range c.places[src] {
			items = append(items, c.Items[i].Raw)
		}
	}
	for k, src := range origin {
		if src >= 0 {
			for len(restore) > 0 && restore[0] < src {
				put(restore[0])
				restore = restore[1:]
			}
			put(src)
			continue
		}
		if len(restore) > 0 && k == 0 {
			// A summary a policy wrote at the start follows the
			// provider's own summaries of earlier turns.
			for _, r := range restore {
				put(r)
			}
			restore = nil
		}
		news, err := c.newItems(&out.Messages[k])
		if err != nil {
			return nil, err
		}
		items = append(items, news...)
	}
	for _, r := range restore {
		put(r)
	}
	return items, nil
}

// newItems converts a message a policy wrote to input items.
func (c *Conversation) newItems(m *abi.Message) ([]json.RawMessage, error) {
	switch m.Role {
	case abi.RoleTool:
		typ := TypeFunctionCallOutput
		if c.calls[m.ToolCallID] == TypeCustomToolCall {
			typ = TypeCustomToolCallOutput
		}
		b, err := wire.Marshal(struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Output string `json:"output"`
		}{typ, m.ToolCallID, m.Text()})
		return []json.RawMessage{b}, err
	case abi.RoleAssistant:
		var out []json.RawMessage
		if text := m.Text(); text != "" || len(m.ToolCalls) == 0 {
			b, err := messageItem(abi.RoleAssistant, "output_text", text)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		for _, tc := range m.ToolCalls {
			var b json.RawMessage
			var err error
			if tc.Type == "custom" || c.calls[tc.ID] == TypeCustomToolCall {
				b, err = wire.Marshal(struct {
					Type   string `json:"type"`
					CallID string `json:"call_id"`
					Name   string `json:"name"`
					Input  string `json:"input"`
				}{TypeCustomToolCall, tc.ID, tc.Function.Name, tc.Function.Arguments})
			} else {
				b, err = wire.Marshal(struct {
					Type      string `json:"type"`
					CallID    string `json:"call_id"`
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				}{TypeFunctionCall, tc.ID, tc.Function.Name, tc.Function.Arguments})
			}
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		return out, nil
	case abi.RoleSystem, abi.RoleDeveloper, abi.RoleUser:
		b, err := messageItem(m.Role, "input_text", m.Text())
		return []json.RawMessage{b}, err
	}
	return nil, fmt.Errorf("%w: a message of role %q", ErrMalformed, m.Role)
}

// messageItem writes a message item of one text part.
func messageItem(role, partType, text string) (json.RawMessage, error) {
	type textPart struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	return wire.Marshal(struct {
		Type    string     `json:"type"`
		Role    string     `json:"role"`
		Content []textPart `json:"content"`
	}{TypeMessage, role, []textPart{{partType, text}}})
}

// Leading returns the chat form of the instructions and the input items up
// to and including the first user message, for a derived conversation id.
func Leading(instructions, input json.RawMessage) ([]abi.Message, error) {
	items, err := Items(input)
	if err != nil {
		return nil, err
	}
	return leading(instructions, items)
}

func leading(instructions json.RawMessage, items []Item) ([]abi.Message, error) {
	n := 0
	for n < len(items) {
		n++
		if items[n-1].Type == TypeMessage && items[n-1].Role == abi.RoleUser {
			break
		}
	}
	c, err := convert(instructions, items[:n])
	if err != nil {
		return nil, err
	}
	return c.Chat.Messages, nil
}

// ItemMessages converts one input item on its own to chat messages, for
// counting its tokens.
func ItemMessages(raw json.RawMessage) ([]abi.Message, error) {
	it, err := readItem(raw)
	if err != nil {
		return nil, err
	}
	c, err := convert(nil, []Item{it})
	if err != nil {
		return nil, err
	}
	return c.Chat.Messages, nil
}

// InstructionsMessage converts "instructions" to its chat message.
func InstructionsMessage(instructions json.RawMessage) ([]abi.Message, error) {
	c, err := Convert(instructions, nil)
	if err != nil {
		return nil, err
	}
	return c.Chat.Messages, nil
}
