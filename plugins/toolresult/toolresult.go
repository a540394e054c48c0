package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/cachemark"
)

// version is the plugin's version; bump it when behaviour changes.
const version = "1.3.0"

// config is the policy's config; its zero value is not the default (see
// defaults). Sizes are in characters, counted as bytes of UTF-8 text
// (the same for ASCII, which tool output mostly is).
type config struct {
	SingleResultThreshold int     `json:"single_result_threshold"`
	ChunkSize             int     `json:"chunk_size"`
	TargetRatio           float64 `json:"target_ratio"`
	GlobalThreshold       float64 `json:"global_threshold"`
	MinResultSize         int     `json:"min_result_size"`
	ContextLimit          int     `json:"context_limit"`
	FallbackChars         int     `json:"fallback_chars"`
	Model                 string  `json:"model"`
	Temperature           float64 `json:"temperature"`
}

var defaults = config{
	SingleResultThreshold: 50000,
	ChunkSize:             50000,
	TargetRatio:           0.1,
	GlobalThreshold:       0.8,
	MinResultSize:         5000,
	ContextLimit:          0,
	FallbackChars:         1000,
	Model:                 "",
	Temperature:           0,
}

const schema = `{
  "type": "object",
  "properties": {
    "single_result_threshold": {"type": "integer", "minimum": 1,
      "description": "layer 1: a tool result longer than this many characters is summarized chunk by chunk"},
    "chunk_size": {"type": "integer", "minimum": 1000,
      "description": "layer 1: characters per chunk"},
    "target_ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
      "description": "each summary is asked to be about this fraction of its input's length"},
    "global_threshold": {"type": "number", "exclusiveMinimum": 0,
      "description": "layer 2: when the conversation's characters exceed this fraction of the context limit (the seed's rule: characters against the limit's number), every large tool result is summarized"},
    "min_result_size": {"type": "integer", "minimum": 1,
      "description": "layer 2: only tool results longer than this many characters are summarized"},
    "context_limit": {"type": "integer", "minimum": 0,
      "description": "layer 2: the context limit in tokens; 0: the model's context window from the request (layer 2 is off when neither is known)"},
    "fallback_chars": {"type": "integer", "minimum": 0,
      "description": "layer 1: when a chunk's summary fails, keep this many of its first characters"},
    "model": {"type": "string",
      "description": "the summarizer model; empty: the agent's model from the request context (else the daemon's llm.model)"},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2,
      "description": "the summarizer's sampling temperature"}
  },
  "additionalProperties": false
}`

func policy() pdk.Policy {
	return pdk.Policy{
		Name:         "toolresult",
		Version:      version,
		Description:  "Compresses large tool results with an LLM (ReAct's two layers: oversized results chunk by chunk as they arrive, and every large result once the context is nearly full), marking each so it is compressed once; never drops a step or touches the assistant's messages. The one exception to the unchanged latest turn: an oversized final tool result comes back compressed (same tool_call_id, shorter).",
		ConfigSchema: schema,
		Defaults:     defaults,
		Compact:      compact,
	}
}

// markerPrefix starts every compressed result:
//
//	[compressed tool result: 51234 chars → 5012]
//
// A result that starts with it is never compressed again.
const markerPrefix = "[compressed tool result: "

func marker(from, to int) string {
	return markerPrefix + strconv.Itoa(from) + " chars → " + strconv.Itoa(to) + "]\n"
}

func isCompressed(text string) bool { return strings.HasPrefix(text, markerPrefix) }

// chars is a message's size by the seed's measure: the characters of its
// text, name and tool calls (names and arguments).
func chars(m *abi.Message) int {
	n := len(m.Text()) + len(m.Name)
	for _, tc := range m.ToolCalls {
		n += len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return n
}

func compact(h pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	cfg := defaults
	if err := req.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	if cfg.SingleResultThreshold < 1 || cfg.ChunkSize < 1 || cfg.TargetRatio <= 0 || cfg.MinResultSize < 1 || cfg.FallbackChars < 0 || cfg.Temperature < 0 || cfg.Temperature > 2 {
		return nil, &abi.Error{Code: abi.CodeInvalidConfig, Message: "sizes must be positive, target_ratio above 0 and temperature in [0, 2]"}
	}
	msgs := req.Messages
	model := cfg.Model
	if model == "" {
		model = req.Context.Model
	}
	c := &compressor{h: h, cfg: cfg, model: model, msgs: msgs, news: map[int]string{}}

	// Layer 1: oversized results, one by one, as they arrive — the final
	// message included (the seed compresses each result before the agent
	// sees it): it comes back as the same tool result, shortened.
	last := len(msgs) - 1
	for i := range msgs {
		if text, ok := c.candidate(i, true); ok && len(text) > cfg.SingleResultThreshold {
			out := c.layer1(i, text)
			if i == last && len(out) >= len(text) {
				continue // the final message is only ever shortened
			}
			c.news[i] = out
		}
	}
	// Layer 2: when the whole conversation is near the limit, every large
	// result (oldest first). The seed's rule counts characters — every
	// message's text and tool calls, after layer 1 — against the fraction
	// of the limit's number (its tokens taken as characters).
	limit := cfg.ContextLimit
	if limit == 0 {
		limit = req.Context.ContextWindow
	}
	// The host's decision turns layer 2 on for the conversation from then
	// on (the state remembers it), so its results do not come back in
	// full on the next turn.
	forced := req.Context.Compact != nil || string(req.Context.State) == forcedState
	var state json.RawMessage
	if forced {
		state = json.RawMessage(forcedState)
		c.forced = true
	}
	if limit > 0 || forced {
		total := 0
		for i := range msgs {
			if text, ok := c.news[i]; ok {
				total += len(text)
			} else {
				total += chars(&msgs[i])
			}
		}
		if forced || float64(total) > cfg.GlobalThreshold*float64(limit) {
			for i := range msgs {
				if _, done := c.news[i]; done {
					continue
				}
				if text, ok := c.candidate(i, false); ok && len(text) > cfg.MinResultSize && !c.stopped {
					if s, ok := c.layer2(i, text); ok {
						c.news[i] = s
					}
				}
			}
		}
	}
	// The stable prefix: the system messages and the task, up to the
	// first rewritten message (rewrites are kept the same from turn to
	// turn, but an earlier one may appear when layer 2 starts).
	stable := convo.Pinned(msgs, true)
	for i := range c.news {
		stable = min(stable, i)
	}
	if len(c.news) == 0 {
		res := cachemark.Unchanged(len(msgs), "no tool result to compress", stable)
		res.Warnings = c.warnings()
		res.State = state
		return res, nil
	}
	items := make([]abi.Item, len(msgs))
	var rewritten []int
	before, after := 0, 0
	for i := range msgs {
		text, ok := c.news[i]
		if !ok {
			items[i] = abi.Ref(i)
			continue
		}
		m := msgs[i]
		items[i] = abi.New(abi.Message{Role: abi.RoleTool, ToolCallID: m.ToolCallID, Name: m.Name, Content: abi.TextContent(text)})
		rewritten = append(rewritten, i)
		before += len(m.Text())
		after += len(text)
	}
	return &abi.CompactResult{
		Messages:          items,
		Compacted:         true,
		Summary:           fmt.Sprintf("compressed %d tool result(s): %d → %d characters (%d LLM calls)", len(rewritten), before, after, c.calls),
		EntriesSummarized: len(rewritten),
		Rewritten:         rewritten,
		Warnings:          c.warnings(),
		CacheBreakpoints:  cachemark.Marks(stable),
		State:             state,
	}, nil
}

// forcedState is the state of a conversation the host once decided to
// compact: layer 2 stays on.
const forcedState = `{"layer2":true}`

// compressor holds one call's work.
type compressor struct {
	h     pdk.Host
	cfg   config
	model string
	msgs  []abi.Message
	news  map[int]string // new contents by message index

	// forced is set when the host decided to compact: layer 2 then
	// keeps the head of a result it could not summarize, as layer 1 does.
	forced   bool
	calls    int
	stopped  bool           // the budget ran out: no more LLM calls
	failures map[string]int // "layer N: first error" → count
	order    []string
}

// candidate returns the text of message i if it is a tool result this
// policy may compress: a plain string content, not already compressed,
// and — unless final is set (layer 1) — not the conversation's final
// message.
func (c *compressor) candidate(i int, final bool) (string, bool) {
	m := &c.msgs[i]
	if m.Role != abi.RoleTool || !final && i == len(c.msgs)-1 || !m.Content.IsString() {
		return "", false
	}
	text := m.Text()
	if isCompressed(text) {
		return "", false
	}
	return text, true
}

// call returns the tool call (name and arguments) result i answers, and
// the text of the assistant message that made it: the assistant message
// that opens i's block, matched by id.
func (c *compressor) call(i int) (name, args, reasoning string) {
	j := i - 1
	for j >= 0 && c.msgs[j].Role == abi.RoleTool {
		j--
	}
	if j < 0 || c.msgs[j].Role != abi.RoleAssistant {
		return "tool", "", ""
	}
	a := &c.msgs[j]
	for _, tc := range a.ToolCalls {
		if tc.ID == c.msgs[i].ToolCallID {
			return tc.Function.Name, tc.Function.Arguments, strings.TrimSpace(a.Text())
		}
	}
	return "tool", "", strings.TrimSpace(a.Text())
}

// layer1 compresses an oversized result: each chunk summarized to
// target_ratio, parts joined under [Part i/n] headers, and the joined text
// summarized once more if it is still over the threshold. Failures
// degrade: a chunk keeps its first fallback_chars characters, an
// oversized join is truncated; both say so in the text.
func (c *compressor) layer1(i int, text string) string {
	name, args, _ := c.call(i)
	chunks := split(text, c.cfg.ChunkSize)
	var b strings.Builder
	for k, chunk := range chunks {
		if len(chunks) > 1 {
			if k > 0 {
				b.WriteString("\n\n")
			}
			fmt.Fprintf(&b, "[Part %d/%d]\n", k+1, len(chunks))
		}
		prompt := fmt.Sprintf("Tool %s was called with %s. Below is part %d of %d of its output (%d characters). Condense it to about %d characters.\n\n<output>\n%s\n</output>",
			name, orNone(args), k+1, len(chunks), len(chunk), c.target(len(chunk)), chunk)
		if s, ok := c.complete(1, prompt, len(chunk)); ok {
			b.WriteString(s)
			continue
		}
		head := prefix(chunk, c.cfg.FallbackChars)
		b.WriteString(head)
		fmt.Fprintf(&b, "\n[… %d more characters of this part not shown: summary unavailable]", len(chunk)-len(head))
	}
	joined := b.String()
	if len(joined) > c.cfg.SingleResultThreshold {
		prompt := fmt.Sprintf("Tool %s was called with %s. Below are condensed parts of its output. Merge them into one text of about %d characters.\n\n<output>\n%s\n</output>",
			name, orNone(args), c.target(len(text)), joined)
		if s, ok := c.complete(1, prompt, len(joined)); ok {
			joined = s
		} else {
			head := prefix(joined, c.cfg.SingleResultThreshold)
			joined = head + fmt.Sprintf("\n[… truncated: %d more characters not shown]", len(joined)-len(head))
		}
	}
	return marker(len(text), len(joined)) + joined
}

// layer2 compresses a large result with the assistant's reasoning and
// call as context. It reports false when the LLM failed or its summary is
// no shorter than the result (the result then stays as it is).
func (c *compressor) layer2(i int, text string) (string, bool) {
	name, args, reasoning := c.call(i)
	var p strings.Builder
	if reasoning != "" {
		fmt.Fprintf(&p, "The assistant wrote:\n<reasoning>\n%s\n</reasoning>\n", reasoning)
	}
	fmt.Fprintf(&p, "It called the tool %s with %s. Condense the tool's result below to about %d characters, keeping what the assistant needs for what it was trying to do.\n\n<result>\n%s\n</result>",
		name, orNone(args), c.target(len(text)), text)
	s, ok := c.complete(2, p.String(), len(text))
	if !ok && c.forced {
		head := prefix(text, c.cfg.FallbackChars)
		s, ok = head+fmt.Sprintf("\n[… %d more characters not shown: summary unavailable]", len(text)-len(head)), true
	}
	if !ok {
		return "", false
	}
	out := marker(len(text), len(s)) + s
	if len(out) >= len(text) {
		return "", false
	}
	return out, true
}

// systemPrompt is the same for every call, so requests stay cacheable.
const systemPrompt = `You condense tool output for an AI agent that will continue its task with your text in place of the output. Keep what the agent needs: facts, identifiers, file paths, numbers, error messages and the output's structure; drop repetition and boilerplate. Do not invent anything. Answer with the condensed text only.`

// complete asks for a summary about target_ratio of inputLen characters.
func (c *compressor) complete(layer int, prompt string, inputLen int) (string, bool) {
	if c.stopped {
		c.fail(layer, errBudgetSpent)
		return "", false
	}
	c.calls++
	resp, err := c.h.Complete(abi.LLMRequest{
		Model:       c.model,
		Temperature: c.cfg.Temperature,
		MaxTokens:   max(128, c.target(inputLen)/2),
		Messages: []abi.LLMMessage{
			{Role: abi.RoleSystem, Content: systemPrompt},
			{Role: abi.RoleUser, Content: prompt},
		},
	})
	if err != nil {
		var ae *abi.Error
		if errors.As(err, &ae) && ae.Code == abi.CodeBudgetExceeded {
			c.stopped = true
		}
		c.fail(layer, err)
		return "", false
	}
	s := strings.TrimSpace(resp.Text)
	if s == "" {
		c.fail(layer, errEmpty)
		return "", false
	}
	return s, true
}

var (
	errBudgetSpent = errors.New("the LLM budget of this request is spent")
	errEmpty       = errors.New("the LLM answered with no text")
)

func (c *compressor) fail(layer int, err error) {
	key := fmt.Sprintf("layer %d: %v", layer, err)
	if c.failures == nil {
		c.failures = map[string]int{}
	}
	if c.failures[key] == 0 {
		c.order = append(c.order, key)
	}
	c.failures[key]++
}

// warnings reports each distinct failure once, with what was done instead.
func (c *compressor) warnings() []string {
	var out []string
	for _, key := range c.order {
		then := "kept the first characters of each failed chunk"
		if strings.HasPrefix(key, "layer 2") {
			then = "left those results as they are"
		}
		out = append(out, fmt.Sprintf("tool result summary failed %d time(s) (%s); %s", c.failures[key], key, then))
	}
	return out
}

// target is the summary length asked for n characters of input.
func (c *compressor) target(n int) int { return max(200, int(float64(n)*c.cfg.TargetRatio)) }

// split cuts s into pieces of at most size bytes, at a newline in the
// last tenth of a piece when there is one, never inside a UTF-8 sequence.
func split(s string, size int) []string {
	var out []string
	for len(s) > size {
		end := size
		if nl := strings.LastIndexByte(s[size-size/10:size], '\n'); nl >= 0 {
			end = size - size/10 + nl + 1
		}
		for end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		if end == 0 {
			end = size
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return append(out, s)
}

// prefix returns at most n bytes of s, cut at a UTF-8 boundary.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func orNone(args string) string {
	if strings.TrimSpace(args) == "" {
		return "no arguments"
	}
	return args
}
