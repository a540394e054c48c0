// Package anthropic converts an Anthropic Messages API conversation (a
// top-level "system" and "messages" of content blocks) to the chat form
// policies see through the ABI, and a policy's result back.
//
// Policies see one ABI whatever the provider: the system prompt becomes a
// leading system message; a user message's tool_result blocks become tool
// messages (tool_call_id = tool_use_id) followed by a user message holding
// its other blocks; an assistant message becomes one assistant message
// whose tool_use blocks are tool_calls (arguments = the input's JSON). So
// tool_use/tool_result pairing is the chat form's tool-call pairing, and
// convo's rules and every policy apply unchanged.
//
// Back is byte-stable: an Anthropic message whose chat parts a policy all
// kept is written back as the caller's bytes; one partly kept is rebuilt
// from its kept blocks, each block byte for byte (cache_control markers
// and fields compactd does not know included); messages a policy wrote
// become Anthropic messages. Messages of one role that end up next to each
// other (a rewritten tool result beside a kept one, say) are merged, as
// the API wants tool results in the one user message after the call.
package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/wire"
)

// ErrMalformed wraps every conversion error: the request is not the
// Messages API's shape. It also wraps chat.ErrMalformed, so callers that
// map chat errors to answers need nothing new.
var ErrMalformed = fmt.Errorf("%w (Anthropic format)", chat.ErrMalformed)

// Conversation is an Anthropic conversation and its chat form. It is not
// safe for concurrent mutation.
type Conversation struct {
	// System is the request's "system" value (nil when absent).
	System json.RawMessage
	// Messages are the request's messages, byte for byte.
	Messages []json.RawMessage
	// Chat is the chat form: what policies see.
	Chat *chat.Conversation

	places []place // per chat message
	parts  []int   // per Anthropic message: how many chat messages it became
	blocks [][]json.RawMessage
	roles  []string
}

// place is where a chat message came from in the Anthropic conversation.
type place struct {
	msg    int   // index in Messages; -1 for the system prompt
	blocks []int // its blocks in that message; nil: the whole (string) content
}

// wireMessage is one Anthropic message.
type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// wireBlock holds the fields of a content block the conversion reads.
type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// Convert builds a conversation from a request's "system" (nil if absent)
// and "messages". It checks the shape only; the chat form's structure is
// checked by whoever compacts it (chat.Conversation.Validate).
func Convert(system json.RawMessage, messages []json.RawMessage) (*Conversation, error) {
	c := &Conversation{System: system, Messages: messages,
		parts: make([]int, len(messages)), blocks: make([][]json.RawMessage, len(messages)), roles: make([]string, len(messages))}
	var raws []json.RawMessage
	var msgs []abi.Message
	add := func(m abi.Message, o place) error {
		b, err := wire.Marshal(&m)
		if err != nil {
			return err
		}
		raws, msgs = append(raws, b), append(msgs, m)
		c.places = append(c.places, o)
		if o.msg >= 0 {
			c.parts[o.msg]++
		}
		return nil
	}
	if sys, ok, err := systemMessage(system); err != nil {
		return nil, err
	} else if ok {
		if err := add(sys, place{msg: -1}); err != nil {
			return nil, err
		}
	}
	for i, raw := range messages {
		var wm wireMessage
		if err := json.Unmarshal(raw, &wm); err != nil {
			return nil, fmt.Errorf("%w: message %d: %v", ErrMalformed, i, err)
		}
		if wm.Role != abi.RoleUser && wm.Role != abi.RoleAssistant {
			return nil, fmt.Errorf("%w: message %d: role %q (want user or assistant; the system prompt is the top-level \"system\")", ErrMalformed, i, wm.Role)
		}
		c.roles[i] = wm.Role
		content := bytes.TrimSpace(wm.Content)
		if len(content) > 0 && content[0] == '"' {
			if err := add(abi.Message{Role: wm.Role, Content: abi.RawContent(content)}, place{msg: i}); err != nil {
				return nil, err
			}
			continue
		}
		var blocks []json.RawMessage
		if err := json.Unmarshal(content, &blocks); err != nil || blocks == nil {
			return nil, fmt.Errorf("%w: message %d: content must be a string or an array of content blocks", ErrMalformed, i)
		}
		c.blocks[i] = blocks
		parsed := make([]wireBlock, len(blocks))
		for k, b := range blocks {
			if err := json.Unmarshal(b, &parsed[k]); err != nil || parsed[k].Type == "" {
				return nil, fmt.Errorf("%w: message %d, block %d: want an object with a \"type\"", ErrMalformed, i, k)
			}
		}
		var err error
		if wm.Role == abi.RoleAssistant {
			err = c.convertAssistant(i, parsed, add)
		} else {
			err = c.convertUser(i, parsed, add)
		}
		if err != nil {
			return nil, err
		}
	}
	c.Chat = &chat.Conversation{Raw: raws, Messages: msgs}
	return c, nil
}

// systemMessage converts the top-level system prompt: a string, or an
// array of text blocks.
func systemMessage(system json.RawMessage) (abi.Message, bool, error) {
	s := bytes.TrimSpace(system)
	if len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return abi.Message{}, false, nil
	}
	if s[0] == '"' {
		return abi.Message{Role: abi.RoleSystem, Content: abi.RawContent(s)}, true, nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(s, &blocks); err != nil {
		return abi.Message{}, false, fmt.Errorf("%w: \"system\" must be a string or an array of text blocks", ErrMalformed)
	}
	parts := make([]abi.ContentPart, len(blocks))
	for i, b := range blocks {
		parts[i] = part(b)
	}
	content, err := wire.MarshalParts(parts)
	if err != nil {
		return abi.Message{}, false, err
	}
	return abi.Message{Role: abi.RoleSystem, Content: content}, true, nil
}

// convertAssistant makes one assistant message: text blocks are its
// content, tool_use blocks its tool calls.
func (c *Conversation) convertAssistant(i int, blocks []wireBlock, add func(abi.Message, place) error) error {
	m := abi.Message{Role: abi.RoleAssistant}
	var parts []abi.ContentPart
	all := make([]int, len(blocks))
	for k, b := range blocks {
		all[k] = k
		if b.Type == "tool_use" {
			if b.ID == "" || b.Name == "" {
				return fmt.Errorf("%w: message %d, block %d: a tool_use block needs an id and a name", ErrMalformed, i, k)
			}
			args := string(bytes.TrimSpace(b.Input))
			if args == "" {
				args = "{}"
			}
			m.ToolCalls = append(m.ToolCalls, abi.ToolCall{ID: b.ID, Type: "function", Function: abi.FunctionCall{Name: b.Name, Arguments: args}})
			continue
		}
		parts = append(parts, part(b))
	}
	if len(parts) > 0 {
		content, err := wire.MarshalParts(parts)
		if err != nil {
			return err
		}
		m.Content = content
	}
	return add(m, place{msg: i, blocks: all})
}

// convertUser makes a tool message per tool_result block, then one user
// message of the other blocks (if any).
func (c *Conversation) convertUser(i int, blocks []wireBlock, add func(abi.Message, place) error) error {
	var rest []int
	var parts []abi.ContentPart
	for k, b := range blocks {
		if b.Type != "tool_result" {
			rest = append(rest, k)
			parts = append(parts, part(b))
			continue
		}
		if b.ToolUseID == "" {
			return fmt.Errorf("%w: message %d, block %d: a tool_result block needs a tool_use_id", ErrMalformed, i, k)
		}
		content, err := toolResultContent(b.Content)
		if err != nil {
			return fmt.Errorf("message %d, block %d: %w", i, k, err)
		}
		if err := add(abi.Message{Role: abi.RoleTool, ToolCallID: b.ToolUseID, Content: content}, place{msg: i, blocks: []int{k}}); err != nil {
			return err
		}
	}
	if len(rest) == 0 && len(blocks) > 0 {
		return nil
	}
	content, err := wire.MarshalParts(parts)
	if err != nil {
		return err
	}
	return add(abi.Message{Role: abi.RoleUser, Content: content}, place{msg: i, blocks: rest})
}

// toolResultContent converts a tool_result's content: absent, a string, or
// an array of blocks.
func toolResultContent(raw json.RawMessage) (abi.Content, error) {
	s := bytes.TrimSpace(raw)
	switch {
	case len(s) == 0 || bytes.Equal(s, []byte("null")):
		return abi.TextContent(""), nil
	case s[0] == '"':
		return abi.RawContent(s), nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(s, &blocks); err != nil {
		return abi.Content{}, fmt.Errorf("%w: a tool_result's content must be a string or an array of blocks", ErrMalformed)
	}
	parts := make([]abi.ContentPart, len(blocks))
	for i, b := range blocks {
		parts[i] = part(b)
	}
	return wire.MarshalParts(parts)
}

// part is a block as a chat content part: text blocks keep their text;
// other blocks (images, documents, thinking) keep only their type, so
// policies see they are there and token counts skip them.
func part(b wireBlock) abi.ContentPart {
	if b.Type == "text" {
		return abi.ContentPart{Type: "text", Text: b.Text}
	}
	return abi.ContentPart{Type: b.Type}
}

// ErrOrigin is returned by Back when origin does not describe out.
var ErrOrigin = errors.New("anthropic: origin does not match the conversation")

// Back converts a policy's result to Anthropic messages. out is the
// compacted chat conversation and origin maps each of its messages to the
// index of the chat message of c.Chat it keeps, or -1 for a new message
// (compactor.Response.Origin). The system prompt is not among the result:
// it is always kept, so the request's "system" stays as it was.
func (c *Conversation) Back(out *chat.Conversation, origin []int) ([]json.RawMessage, error) {
	pieces, err := c.backPieces(out, origin)
	if err != nil {
		return nil, err
	}
	msgs, _, err := mergeMarked(pieces, nil)
	return msgs, err
}

// backPieces converts a policy's result to pieces, each recording where
// the chat messages it holds end among its content blocks.
func (c *Conversation) backPieces(out *chat.Conversation, origin []int) ([]piece, error) {
	if len(origin) != out.Len() {
		return nil, fmt.Errorf("%w: %d origins for %d messages", ErrOrigin, len(origin), out.Len())
	}
	var res []piece
	for i := 0; i < len(origin); {
		src := origin[i]
		if src < 0 {
			p, err := newPiece(&out.Messages[i])
			if err != nil {
				return nil, err
			}
			p.ends = map[int]int{i: len(p.blocks) - 1}
			res = append(res, p)
			i++
			continue
		}
		if src >= len(c.places) {
			return nil, fmt.Errorf("%w: origin %d of %d", ErrOrigin, src, len(c.places))
		}
		o := c.places[src]
		if o.msg < 0 {
			i++ // the system prompt stays top-level
			continue
		}
		// The run of kept chat messages that came from one Anthropic message.
		var kept []int
		last := map[int]int{} // output index → its last block in the Anthropic message
		n := 0
		for ; i < len(origin) && origin[i] >= 0 && origin[i] < len(c.places) && c.places[origin[i]].msg == o.msg; i++ {
			bl := c.places[origin[i]].blocks
			kept = append(kept, bl...)
			switch {
			case len(bl) > 0:
				last[i] = bl[0]
				for _, b := range bl {
					last[i] = max(last[i], b)
				}
			case c.blocks[o.msg] == nil: // a string content: one text block
				last[i] = 0
			}
			n++
		}
		if n == c.parts[o.msg] {
			res = append(res, piece{role: c.roles[o.msg], raw: c.Messages[o.msg], src: o.msg, ends: last})
			continue
		}
		sorted := sortedInts(kept)
		blocks := make([]json.RawMessage, 0, len(kept))
		for _, k := range sorted {
			blocks = append(blocks, c.blocks[o.msg][k])
		}
		ends := make(map[int]int, len(last))
		for idx, b := range last {
			for pos, k := range sorted {
				if k == b {
					ends[idx] = pos
				}
			}
		}
		res = append(res, piece{role: c.roles[o.msg], blocks: blocks, src: -1, ends: ends})
	}
	return res, nil
}

// BackMarked is Back that also marks the policy's cache breakpoints: each
// chat message of out that marks lists (compactor.Response.CacheBreakpoints)
// gets Anthropic's "cache_control": {"type": "ephemeral"} on the content
// block where it ends in the Anthropic messages, so the cached prefix ends
// where the policy said. budget is how many markers the request may still
// carry (Anthropic allows 4 per request, tools and system included): when
// the marks are more, the latest are kept, as a later breakpoint's prefix
// holds the earlier ones. A block that has a cache_control already keeps
// it. It returns the messages and the indices of the marked ones.
func (c *Conversation) BackMarked(out *chat.Conversation, origin []int, marks []int, budget int) ([]json.RawMessage, []int, error) {
	pieces, err := c.backPieces(out, origin)
	if err != nil {
		return nil, nil, err
	}
	if budget < len(marks) {
		marks = marks[len(marks)-max(budget, 0):]
	}
	return mergeMarked(pieces, marks)
}

// BackWithBreakpoints is BackMarked with the budget worked out: Anthropic's
// MaxCacheControls less the markers the request keeps (in the system
// prompt, in the messages of the answer) and reserved ones (those in the
// request's tools, which compactd does not see).
func (c *Conversation) BackWithBreakpoints(out *chat.Conversation, origin []int, marks []int, reserved int) ([]json.RawMessage, []int, error) {
	pieces, err := c.backPieces(out, origin)
	if err != nil {
		return nil, nil, err
	}
	plain, _, err := mergeMarked(pieces, nil)
	if err != nil || len(marks) == 0 {
		return plain, nil, err
	}
	budget := MaxCacheControls - reserved - wire.CountCacheControls(c.System)
	for _, m := range plain {
		budget -= wire.CountCacheControls(m)
	}
	if budget <= 0 {
		return plain, nil, nil
	}
	if budget < len(marks) {
		marks = marks[len(marks)-budget:]
	}
	return mergeMarked(pieces, marks)
}

// MaxCacheControls is how many cache_control markers Anthropic accepts in
// one request (tools, system and messages together).
const MaxCacheControls = 4

// piece is one Anthropic message of a result: the caller's bytes (raw,
// src its index) or blocks to wrap.
type piece struct {
	role   string
	raw    json.RawMessage
	src    int
	blocks []json.RawMessage
	// ends maps the index of a chat message of the result the piece holds
	// to the index of its last block among the piece's content blocks.
	ends map[int]int
}

// newPiece converts a message a policy wrote.
func newPiece(m *abi.Message) (piece, error) {
	switch m.Role {
	case abi.RoleTool:
		content := m.Content.Raw()
		if !m.Content.IsString() {
			content, _ = wire.Marshal(m.Content.Text())
		}
		block, err := wire.Marshal(struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}{"tool_result", m.ToolCallID, content})
		return piece{role: abi.RoleUser, blocks: []json.RawMessage{block}, src: -1}, err
	case abi.RoleAssistant:
		var blocks []json.RawMessage
		if text := m.Text(); text != "" || len(m.ToolCalls) == 0 {
			b, err := textBlock(text)
			if err != nil {
				return piece{}, err
			}
			blocks = append(blocks, b)
		}
		for _, tc := range m.ToolCalls {
			input := json.RawMessage(bytes.TrimSpace([]byte(tc.Function.Arguments)))
			if len(input) == 0 || input[0] != '{' || !json.Valid(input) {
				input = json.RawMessage("{}")
			}
			b, err := wire.Marshal(struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			}{"tool_use", tc.ID, tc.Function.Name, input})
			if err != nil {
				return piece{}, err
			}
			blocks = append(blocks, b)
		}
		return piece{role: abi.RoleAssistant, blocks: blocks, src: -1}, nil
	default: // user, and system or developer messages a policy placed mid-conversation
		b, err := textBlock(m.Text())
		return piece{role: abi.RoleUser, blocks: []json.RawMessage{b}, src: -1}, err
	}
}

func textBlock(text string) (json.RawMessage, error) {
	return wire.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{"text", text})
}

// merge writes the pieces as messages, merging neighbours of one role
// unless they were neighbours in the caller's request already.
func merge(pieces []piece) ([]json.RawMessage, error) {
	out, _, err := mergeMarked(pieces, nil)
	return out, err
}

// mergeMarked is merge that puts a cache_control marker on the block where
// each chat message of marks ends. It returns the indices of the messages
// it marked.
func mergeMarked(pieces []piece, marks []int) ([]json.RawMessage, []int, error) {
	want := make(map[int]bool, len(marks))
	for _, m := range marks {
		want[m] = true
	}
	out := make([]json.RawMessage, 0, len(pieces))
	var marked []int
	for i := 0; i < len(pieces); {
		j := i + 1
		for j < len(pieces) && pieces[j].role == pieces[i].role &&
			!(pieces[j-1].src >= 0 && pieces[j].src == pieces[j-1].src+1) {
			j++
		}
		// The blocks of this message to mark.
		var at []int
		offset := 0
		for _, p := range pieces[i:j] {
			for idx, b := range p.ends {
				if want[idx] {
					at = append(at, offset+b)
				}
			}
			if len(at) > 0 || j > i+1 {
				n, err := p.blockCount()
				if err != nil {
					return nil, nil, err
				}
				offset += n
			}
		}
		if j == i+1 && pieces[i].raw != nil && len(at) == 0 {
			out = append(out, pieces[i].raw)
			i = j
			continue
		}
		var blocks []json.RawMessage
		for _, p := range pieces[i:j] {
			b, err := p.contentBlocks()
			if err != nil {
				return nil, nil, err
			}
			blocks = append(blocks, b...)
		}
		if len(at) > 0 {
			blocks = append([]json.RawMessage(nil), blocks...)
			for _, k := range at {
				if k >= 0 && k < len(blocks) {
					blocks[k] = withCacheControl(blocks[k])
				}
			}
			marked = append(marked, len(out))
			if j == i+1 && pieces[i].raw != nil {
				// The caller's message with its content marked: its
				// other members stay.
				m, err := replaceContent(pieces[i].raw, blocks)
				if err != nil {
					return nil, nil, err
				}
				out = append(out, m)
				i = j
				continue
			}
		}
		m, err := wrap(pieces[i].role, blocks)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, m)
		i = j
	}
	return out, marked, nil
}

// replaceContent returns the message raw with its content replaced by
// blocks; its other members keep their bytes.
func replaceContent(raw json.RawMessage, blocks []json.RawMessage) (json.RawMessage, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, err
	}
	content, err := wrap("", blocks)
	if err != nil {
		return nil, err
	}
	var w struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(content, &w); err != nil {
		return nil, err
	}
	members["content"] = w.Content
	return json.Marshal(members)
}

// blockCount is how many content blocks the piece has.
func (p piece) blockCount() (int, error) {
	if p.raw == nil {
		return len(p.blocks), nil
	}
	b, err := p.contentBlocks()
	return len(b), err
}

// withCacheControl adds "cache_control": {"type": "ephemeral"} as the
// block's last member, unless it has one (the rest of its bytes are kept).
func withCacheControl(block json.RawMessage) json.RawMessage {
	b := bytes.TrimSpace(block)
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return block
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(b, &members) != nil {
		return block
	}
	if _, ok := members["cache_control"]; ok {
		return block
	}
	out := make([]byte, 0, len(b)+40)
	out = append(out, b[:len(b)-1]...)
	if len(members) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"cache_control":{"type":"ephemeral"}}`...)
	return out
}

// contentBlocks returns a piece's content as blocks (a string content
// becomes one text block).
func (p piece) contentBlocks() ([]json.RawMessage, error) {
	if p.raw == nil {
		return p.blocks, nil
	}
	var wm wireMessage
	if err := json.Unmarshal(p.raw, &wm); err != nil {
		return nil, err
	}
	content := bytes.TrimSpace(wm.Content)
	if len(content) > 0 && content[0] == '"' {
		var s string
		if err := json.Unmarshal(content, &s); err != nil {
			return nil, err
		}
		b, err := textBlock(s)
		return []json.RawMessage{b}, err
	}
	var blocks []json.RawMessage
	err := json.Unmarshal(content, &blocks)
	return blocks, err
}

func wrap(role string, blocks []json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"role":`)
	r, err := wire.Marshal(role)
	if err != nil {
		return nil, err
	}
	buf.Write(r)
	buf.WriteString(`,"content":[`)
	for i, b := range blocks {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(b)
	}
	buf.WriteString("]}")
	return buf.Bytes(), nil
}

func sortedInts(s []int) []int {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// FromChat writes chat messages in Anthropic format: the leading system
// messages' texts joined into "system" (nil when there are none), the rest
// as messages (tool messages become tool_result blocks, tool calls
// tool_use blocks, neighbours of one role merged). Tests and tools use it
// to turn OpenAI-format data into Anthropic requests.
func FromChat(msgs []abi.Message) (system json.RawMessage, messages []json.RawMessage, err error) {
	var sys []string
	i := 0
	for ; i < len(msgs) && msgs[i].IsSystem(); i++ {
		sys = append(sys, msgs[i].Text())
	}
	if len(sys) > 0 {
		joined := sys[0]
		for _, s := range sys[1:] {
			joined += "\n\n" + s
		}
		if system, err = wire.Marshal(joined); err != nil {
			return nil, nil, err
		}
	}
	pieces := make([]piece, 0, len(msgs)-i)
	for ; i < len(msgs); i++ {
		p, err := newPiece(&msgs[i])
		if err != nil {
			return nil, nil, err
		}
		pieces = append(pieces, p)
	}
	messages, err = merge(pieces)
	return system, messages, err
}
