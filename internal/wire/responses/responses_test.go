package responses

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
)

// sampleInput is a Codex-like session: a user turn, reasoning before
// parallel function calls, their outputs (out of order), a custom tool
// call, an assistant answer, a provider's compaction item first.
const sampleInput = `[
{"type":"compaction","id":"cmp_1","encrypted_content":"gAAAA-summary"},
{"role":"user","content":[{"type":"input_text","text":"fix the bug in main.go"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]},
{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAA-r1"},
{"type":"function_call","id":"fc_1","call_id":"call_a","name":"read_file","arguments":"{\"path\":\"main.go\"}"},
{"type":"function_call","id":"fc_2","call_id":"call_b","name":"grep","arguments":"{\"q\":\"TODO\"}"},
{"type":"function_call_output","call_id":"call_b","output":"main.go:3: TODO"},
{"type":"function_call_output","call_id":"call_a","output":[{"type":"input_text","text":"package main"}]},
{"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"patch it"}],"encrypted_content":"gAAAA-r2"},
{"type":"custom_tool_call","id":"ctc_1","call_id":"call_c","name":"apply_patch","input":"*** Begin Patch"},
{"type":"custom_tool_call_output","call_id":"call_c","output":"Done"},
{"type":"message","role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"Fixed.","annotations":[]}]},
{"role":"user","content":"thanks"}
]`

func identity(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

func rawItems(t *testing.T, s string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestConvertShape(t *testing.T) {
	t.Parallel()
	c, err := Convert(json.RawMessage(`"You are a coding agent."`), json.RawMessage(sampleInput))
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		role  string
		calls []string
		tool  string
		items []int
	}
	wants := []want{
		{role: abi.RoleSystem},                  // instructions
		{role: abi.RoleSystem, items: []int{0}}, // compaction
		{role: abi.RoleUser, items: []int{1}},   // user
		{role: abi.RoleAssistant, calls: []string{"call_a", "call_b"}, items: []int{2, 3, 4}},
		{role: abi.RoleTool, tool: "call_b", items: []int{5}},
		{role: abi.RoleTool, tool: "call_a", items: []int{6}},
		{role: abi.RoleAssistant, calls: []string{"call_c"}, items: []int{7, 8}},
		{role: abi.RoleTool, tool: "call_c", items: []int{9}},
		{role: abi.RoleAssistant, items: []int{10}},
		{role: abi.RoleUser, items: []int{11}},
	}
	if got := c.Chat.Len(); got != len(wants) {
		t.Fatalf("%d chat messages, want %d: %s", got, len(wants), c.Chat.MessagesJSON())
	}
	for i, w := range wants {
		m := c.Chat.Messages[i]
		if m.Role != w.role || m.ToolCallID != w.tool || len(m.ToolCalls) != len(w.calls) {
			t.Errorf("message %d: %+v, want %+v", i, m, w)
		}
		for k, id := range w.calls {
			if m.ToolCalls[k].ID != id {
				t.Errorf("message %d call %d: %q, want %q", i, k, m.ToolCalls[k].ID, id)
			}
		}
		if w.items != nil && !equal(c.places[i], w.items) {
			t.Errorf("message %d comes from items %v, want %v", i, c.places[i], w.items)
		}
	}
	if got := c.Chat.Messages[2].Text(); !strings.Contains(got, "fix the bug") {
		t.Errorf("user text %q", got)
	}
	if got := c.Chat.Messages[5].Text(); got != "package main" {
		t.Errorf("tool output text %q", got)
	}
	if c.Chat.Messages[6].ToolCalls[0].Type != "custom" || c.Chat.Messages[6].ToolCalls[0].Function.Arguments != "*** Begin Patch" {
		t.Errorf("custom call %+v", c.Chat.Messages[6].ToolCalls[0])
	}
	if err := c.Chat.Validate(); err != nil {
		t.Fatalf("the chat form is not a valid conversation: %v", err)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBackKeepsEverythingByteForByte(t *testing.T) {
	t.Parallel()
	c, err := Convert(json.RawMessage(`"sys"`), json.RawMessage(sampleInput))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Back(c.Chat, identity(c.Chat.Len()))
	if err != nil {
		t.Fatal(err)
	}
	want := rawItems(t, sampleInput)
	if len(got) != len(want) {
		t.Fatalf("%d items back, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Errorf("item %d: %s, want %s", i, got[i], want[i])
		}
	}
}

// result builds a policy's output: ints are kept chat messages (by index),
// abi.Messages new ones.
func result(t *testing.T, c *Conversation, parts ...any) (*chat.Conversation, []int) {
	t.Helper()
	var msgs []abi.Message
	var origin []int
	for _, p := range parts {
		switch v := p.(type) {
		case int:
			msgs, origin = append(msgs, c.Chat.Messages[v]), append(origin, v)
		case abi.Message:
			msgs, origin = append(msgs, v), append(origin, -1)
		}
	}
	raws := make([]json.RawMessage, len(msgs))
	for i := range msgs {
		b, err := json.Marshal(&msgs[i])
		if err != nil {
			t.Fatal(err)
		}
		raws[i] = b
	}
	return &chat.Conversation{Raw: raws, Messages: msgs}, origin
}

func TestBackAfterCompaction(t *testing.T) {
	t.Parallel()
	c, err := Convert(json.RawMessage(`"sys"`), json.RawMessage(sampleInput))
	if err != nil {
		t.Fatal(err)
	}
	in := rawItems(t, sampleInput)
	// A policy keeps the instructions, the task, writes a summary, masks
	// call_a's output, drops the custom call's turn and keeps the tail;
	// it dropped the compaction item too, which goes back.
	out, origin := result(t, c, 0, 2,
		abi.Message{Role: abi.RoleUser, Content: abi.TextContent("Summary: read main.go")},
		3, 4, abi.Message{Role: abi.RoleTool, ToolCallID: "call_a", Content: abi.TextContent("[omitted]")},
		8, 9)
	got, err := c.Back(out, origin)
	if err != nil {
		t.Fatal(err)
	}
	s := func(i int) string { return string(in[i]) }
	want := []string{s(0), s(1),
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"Summary: read main.go"}]}`,
		s(2), s(3), s(4), s(5),
		`{"type":"function_call_output","call_id":"call_a","output":"[omitted]"}`,
		s(10), s(11)}
	if len(got) != len(want) {
		t.Fatalf("%d items:\n%s\nwant %d", len(got), join(got), len(want))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("item %d: %s\nwant %s", i, got[i], want[i])
		}
	}
	items, err := Items(json.RawMessage(join(got)))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(items, true); err != nil {
		t.Fatalf("the result is not a valid Responses input: %v", err)
	}
}

func join(items []json.RawMessage) string {
	b, _ := json.Marshal(items)
	return string(b)
}

func TestNewToolCallItems(t *testing.T) {
	t.Parallel()
	c, err := Convert(nil, json.RawMessage(sampleInput))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.newItems(&abi.Message{Role: abi.RoleAssistant, ToolCalls: []abi.ToolCall{
		{ID: "call_x", Type: "function", Function: abi.FunctionCall{Name: "ls", Arguments: "{}"}},
		{ID: "call_c", Type: "function", Function: abi.FunctionCall{Name: "apply_patch", Arguments: "patch"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"type":"function_call","call_id":"call_x","name":"ls","arguments":"{}"}`,
		`{"type":"custom_tool_call","call_id":"call_c","name":"apply_patch","input":"patch"}`}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("item %d: %s, want %s", i, got[i], want[i])
		}
	}
	got, err = c.newItems(&abi.Message{Role: abi.RoleTool, ToolCallID: "call_c", Content: abi.TextContent("ok")})
	if err != nil || string(got[0]) != `{"type":"custom_tool_call_output","call_id":"call_c","output":"ok"}` {
		t.Errorf("custom output: %s, %v", got, err)
	}
}

func TestStringInputAndTrailingReasoning(t *testing.T) {
	t.Parallel()
	c, err := Convert(nil, json.RawMessage(`"hello"`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Chat.Len() != 1 || c.Chat.Messages[0].Role != abi.RoleUser || c.Chat.Messages[0].Text() != "hello" {
		t.Fatalf("string input: %s", c.Chat.MessagesJSON())
	}
	c, err = Convert(nil, json.RawMessage(`[{"role":"user","content":"q"},{"type":"reasoning","id":"rs","summary":[]},{"role":"user","content":"again"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Chat.Len() != 3 || c.Chat.Messages[1].Role != abi.RoleAssistant || !equal(c.places[1], []int{1}) {
		t.Fatalf("trailing reasoning: %s", c.Chat.MessagesJSON())
	}
}

func TestConvertRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, input string
		want        error
		text        string
	}{
		{"not an array", `{"role":"user"}`, ErrMalformed, "string or an array"},
		{"unknown item", `[{"type":"computer_call","id":"cu_1"}]`, ErrUnsupported, `"computer_call"`},
		{"orphan output after a reference's output", `[{"type":"item_reference","id":"fc_1"},{"type":"function_call_output","call_id":"c1","output":"x"},{"type":"function_call_output","call_id":"c1","output":"y"}]`, ErrMalformed, `"c1"`},
		{"no type", `[{"content":"x"}]`, ErrMalformed, `needs a "type"`},
		{"bad role", `[{"role":"tool","content":"x"}]`, ErrMalformed, `role is "tool"`},
		{"call without id", `[{"type":"function_call","name":"f","arguments":"{}"}]`, ErrMalformed, "call_id"},
		{"orphan output", `[{"type":"function_call_output","call_id":"c9","output":"x"}]`, ErrMalformed, `"c9"`},
		{"duplicate call id", `[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call","call_id":"c","name":"g","arguments":"{}"}]`, ErrMalformed, "earlier call"},
		{"kind mismatch", `[{"type":"custom_tool_call","call_id":"c","name":"f","input":"x"},{"type":"function_call_output","call_id":"c","output":"x"}]`, ErrMalformed, "answered by"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Convert(nil, json.RawMessage(tc.input))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("error %v, want %v containing %q", err, tc.want, tc.text)
			}
		})
	}
	if !errors.Is(ErrMalformed, chat.ErrMalformed) {
		t.Error("ErrMalformed does not wrap chat.ErrMalformed")
	}
	if _, err := Convert(json.RawMessage(`["x"]`), nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("array instructions: %v", err)
	}
}

func TestValidateRequireOutputs(t *testing.T) {
	t.Parallel()
	items, err := Items(json.RawMessage(`[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(items, false); err != nil {
		t.Errorf("a pending call: %v", err)
	}
	if err := Validate(items, true); err == nil || !strings.Contains(err.Error(), "no function_call_output") {
		t.Errorf("an unanswered call: %v", err)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	u := ResponseUsage([]byte(`{"id":"resp_1","usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":40},"output_tokens":7,"total_tokens":107}}`))
	if u == nil || u.InputTokens.N != 100 || u.OutputTokens.N != 7 || u.Cached() != 40 {
		t.Fatalf("usage %+v", u)
	}
	ev := []byte(`{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","usage":{"input_tokens":5,"output_tokens":-1}}}`)
	u = EventUsage("response.completed", ev)
	if u == nil || u.InputTokens.N != 5 || u.OutputTokens.Set || len(u.Refused()) != 1 {
		t.Fatalf("event usage %+v", u)
	}
	if EventUsage("", ev) == nil {
		t.Error("an event without its event line is read by its type")
	}
	if EventUsage("response.output_text.delta", []byte(`{"type":"response.output_text.delta","delta":"usage"}`)) != nil {
		t.Error("a delta has no usage")
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	var body struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.Unmarshal(ErrorBody("proxy_off", "off"), &body); err != nil || body.Error.Code != "proxy_off" || body.Error.Message != "compactd: off" {
		t.Errorf("error body %+v, %v", body, err)
	}
	ev := string(StreamError("upstream_timeout", "silent"))
	if !strings.HasPrefix(ev, "event: error\ndata: {\"type\":\"error\",\"code\":\"upstream_timeout\"") || !strings.HasSuffix(ev, "\n\n") {
		t.Errorf("stream error %q", ev)
	}
}

func FuzzConvert(f *testing.F) {
	f.Add(sampleInput)
	f.Add(`"hi"`)
	f.Add(`[{"type":"reasoning"},{"type":"function_call","call_id":"a","name":"b","arguments":""}]`)
	f.Fuzz(func(t *testing.T, input string) {
		c, err := Convert(nil, json.RawMessage(input))
		if err != nil {
			return
		}
		got, err := c.Back(c.Chat, identity(c.Chat.Len()))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.Items) {
			t.Fatalf("%d items back of %d", len(got), len(c.Items))
		}
	})
}

// TestItemReferences: the Vercel AI SDK's default Responses model names
// earlier outputs by id. The references join the turn they belong to, and
// outputs of calls the references hold pair with them, so a policy keeps
// or drops the references with their outputs, and back is byte-stable.
func TestItemReferences(t *testing.T) {
	t.Parallel()
	input := `[{"role":"user","content":"fix main.go"},` +
		`{"type":"item_reference","id":"rs_1"},{"type":"item_reference","id":"fc_1"},{"type":"item_reference","id":"fc_2"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"package main"},` +
		`{"type":"function_call_output","call_id":"call_2","output":"ok"},` +
		`{"type":"item_reference","id":"msg_1"},` +
		`{"role":"user","content":"now the tests"}]`
	c, err := Convert(nil, json.RawMessage(input))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Chat.Messages
	if len(m) != 6 || m[1].Role != abi.RoleAssistant || len(m[1].ToolCalls) != 2 || m[1].ToolCalls[0].ID != "call_1" || m[1].ToolCalls[1].ID != "call_2" ||
		m[2].ToolCallID != "call_1" || m[3].ToolCallID != "call_2" || m[4].Role != abi.RoleAssistant || !equal(c.places[1], []int{1, 2, 3}) || !equal(c.places[4], []int{6}) {
		t.Fatalf("chat form: %s", c.Chat.MessagesJSON())
	}
	got, err := c.Back(c.Chat, identity(c.Chat.Len()))
	if err != nil {
		t.Fatal(err)
	}
	want := rawItems(t, input)
	if len(got) != len(want) {
		t.Fatalf("%d items back, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Errorf("item %d: %s, want %s", i, got[i], want[i])
		}
	}
	// A policy that drops the tool turn drops the references with it.
	out, origin := result(t, c, 0, 4, 5)
	got, err = c.Back(out, origin)
	if err != nil {
		t.Fatal(err)
	}
	var back []Item
	for _, raw := range got {
		it, err := readItem(raw)
		if err != nil {
			t.Fatal(err)
		}
		back = append(back, it)
	}
	if err := Validate(back, false); err != nil || len(back) != 3 || string(got[1]) != `{"type":"item_reference","id":"msg_1"}` {
		t.Fatalf("after dropping the tool turn (%v): %s", err, got)
	}
}

// TestFormatLeading: the leading items (up to and including the first
// user message) convert as the whole input's leading part does, and only
// they are read: an unreadable item after them does not matter, one
// among them is an error.
func TestFormatLeading(t *testing.T) {
	t.Parallel()
	var items []json.RawMessage
	if err := json.Unmarshal([]byte(sampleInput), &items); err != nil {
		t.Fatal(err)
	}
	instructions := json.RawMessage(`"be careful"`)
	got, settled, err := Format{}.Leading(instructions, items)
	if err != nil {
		t.Fatal(err)
	}
	if settled < 1 || settled > len(items) || string(items[settled-1]) == "" {
		t.Fatalf("settled %d of %d items", settled, len(items))
	}
	all, err := readItems(items)
	if err != nil {
		t.Fatal(err)
	}
	want, err := leading(instructions, all)
	if err != nil {
		t.Fatal(err)
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) || len(got) == 0 || got[len(got)-1].Role != abi.RoleUser {
		t.Fatalf("leading %s, want %s", gj, wj)
	}
	bad := json.RawMessage(`{"type":"message","role":7}`)
	if _, _, err := (Format{}).Leading(instructions, append(items[:2:2], bad)); err != nil {
		t.Fatalf("an item after the first user message was read: %v", err)
	}
	if _, _, err := (Format{}).Leading(instructions, []json.RawMessage{items[0], bad, items[1]}); err == nil || !strings.Contains(err.Error(), "input item 1") {
		t.Fatalf("an unreadable leading item: %v", err)
	}
}
