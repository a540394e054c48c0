package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/dataset"
	"github.com/compactd/compactd/internal/wire"
)

// sample is an Anthropic conversation with every shape the conversion
// handles: a block system prompt with cache_control, string and block
// contents, parallel tool calls answered in one user message followed by
// text, an image, a thinking block and an unknown field.
var sample = struct {
	system   string
	messages []string
}{
	system: `[{"type":"text","text":"You are a coding agent.","cache_control":{"type":"ephemeral"}}]`,
	messages: []string{
		`{"role":"user","content":"Fix the failing test in pkg/foo."}`,
		`{"role":"assistant","content":[{"type":"thinking","thinking":"look first","signature":"sig"},{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t1","name":"bash","input":{"cmd":"ls pkg/foo"}},{"type":"tool_use","id":"t2","name":"bash","input":{"cmd":"go test ./pkg/foo"}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"foo.go foo_test.go"},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"FAIL: TestFoo"}],"is_error":true},{"type":"text","text":"Also check the README.","cache_control":{"type":"ephemeral"}}]}`,
		`{"role":"assistant","content":[{"type":"tool_use","id":"t3","name":"read","input":{"path":"pkg/foo/foo.go"}}],"x_unknown":1}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t3","content":"package foo"}]}`,
		`{"role":"assistant","content":"Found it: an off-by-one."}`,
		`{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"text","text":"Does this screenshot match?"}]}`,
	},
}

func sampleConversation(t *testing.T) *Conversation {
	t.Helper()
	msgs := make([]json.RawMessage, len(sample.messages))
	for i, m := range sample.messages {
		msgs[i] = json.RawMessage(m)
	}
	c, err := Convert(json.RawMessage(sample.system), msgs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func identity(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestConvertShape(t *testing.T) {
	c := sampleConversation(t)
	if err := c.Chat.Validate(); err != nil {
		t.Fatalf("the chat form is not valid: %v", err)
	}
	var got []string
	for _, m := range c.Chat.Messages {
		s := m.Role
		if m.ToolCallID != "" {
			s += "(" + m.ToolCallID + ")"
		}
		for _, tc := range m.ToolCalls {
			s += "[" + tc.ID + " " + tc.Function.Name + " " + tc.Function.Arguments + "]"
		}
		got = append(got, s+" "+m.Text())
	}
	want := []string{
		"system You are a coding agent.",
		"user Fix the failing test in pkg/foo.",
		`assistant[t1 bash {"cmd":"ls pkg/foo"}][t2 bash {"cmd":"go test ./pkg/foo"}] Let me look.`,
		"tool(t1) foo.go foo_test.go",
		"tool(t2) FAIL: TestFoo",
		"user Also check the README.",
		`assistant[t3 read {"path":"pkg/foo/foo.go"}] `,
		"tool(t3) package foo",
		"assistant Found it: an off-by-one.",
		"user Does this screenshot match?",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("chat form:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The chat form's raw bytes are what the Extism path sends: they must
	// parse as the messages they stand for. (Not with chat.FromRaw, which
	// also holds content parts to OpenAI's format: the chat form of an
	// Anthropic conversation has parts such as {"type":"thinking"}.)
	for i, raw := range c.Chat.Raw {
		var again abi.Message
		if err := json.Unmarshal(raw, &again); err != nil {
			t.Fatalf("raw message %d: %v", i, err)
		}
		if again.Text() != c.Chat.Messages[i].Text() || len(again.ToolCalls) != len(c.Chat.Messages[i].ToolCalls) {
			t.Errorf("raw message %d does not parse as itself: %s", i, raw)
		}
	}
}

func TestBackKeepsEverythingByteForByte(t *testing.T) {
	c := sampleConversation(t)
	out, err := c.Back(c.Chat, identity(c.Chat.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(c.Messages) {
		t.Fatalf("%d messages back, want %d", len(out), len(c.Messages))
	}
	for i := range out {
		if !bytes.Equal(out[i], c.Messages[i]) {
			t.Errorf("message %d:\n got %s\nwant %s", i, out[i], c.Messages[i])
		}
	}
}

// result builds a compacted chat conversation from items over c.Chat:
// an int keeps that chat message, an abi.Message is new.
func result(t *testing.T, c *Conversation, items ...any) (*chat.Conversation, []int) {
	t.Helper()
	var raws []json.RawMessage
	var msgs []abi.Message
	var origin []int
	for _, it := range items {
		switch v := it.(type) {
		case int:
			raws, msgs, origin = append(raws, c.Chat.Raw[v]), append(msgs, c.Chat.Messages[v]), append(origin, v)
		case abi.Message:
			b, _ := json.Marshal(v)
			raws, msgs, origin = append(raws, b), append(msgs, v), append(origin, -1)
		}
	}
	out := &chat.Conversation{Raw: raws, Messages: msgs}
	if err := out.Validate(); err != nil {
		t.Fatalf("test result is not valid: %v", err)
	}
	return out, origin
}

func TestBackAfterCompaction(t *testing.T) {
	c := sampleConversation(t)
	summary := abi.Message{Role: abi.RoleUser, Content: abi.TextContent("[summary] looked at pkg/foo")}
	short := abi.Message{Role: abi.RoleTool, ToolCallID: "t2", Content: abi.TextContent("FAIL (shortened)")}
	for _, tc := range []struct {
		name  string
		items []any
		want  []string
	}{{
		// The first tool loop is summarized; the task, the summary and the
		// user text of message 2 are user turns in a row: one message.
		name:  "summary",
		items: []any{0, 1, summary, 5, 6, 7, 8, 9},
		want: []string{
			`{"role":"user","content":[{"type":"text","text":"Fix the failing test in pkg/foo."},{"type":"text","text":"[summary] looked at pkg/foo"},{"type":"text","text":"Also check the README.","cache_control":{"type":"ephemeral"}}]}`,
			sample.messages[3], sample.messages[4], sample.messages[5], sample.messages[6],
		},
	}, {
		// A rewritten tool result sits between two kept blocks of one
		// message: one user message, blocks in order, kept blocks as they were.
		name:  "rewritten tool result",
		items: []any{0, 1, 2, 3, short, 5, 6, 7, 8, 9},
		want: []string{
			sample.messages[0], sample.messages[1],
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"foo.go foo_test.go"},{"type":"tool_result","tool_use_id":"t2","content":"FAIL (shortened)"},{"type":"text","text":"Also check the README.","cache_control":{"type":"ephemeral"}}]}`,
			sample.messages[3], sample.messages[4], sample.messages[5], sample.messages[6],
		},
	}, {
		// Kept neighbours of one role that were not neighbours are merged.
		name:  "window",
		items: []any{0, 1, 9},
		want: []string{
			`{"role":"user","content":[{"type":"text","text":"Fix the failing test in pkg/foo."},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"text","text":"Does this screenshot match?"}]}`,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out, origin := result(t, c, tc.items...)
			got, err := c.Back(out, origin)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if len(got) != len(want) {
				t.Fatalf("%d messages:\n%s", len(got), join(got))
			}
			for i := range got {
				if string(got[i]) != want[i] {
					t.Errorf("message %d:\n got %s\nwant %s", i, got[i], want[i])
				}
			}
			checkAnthropic(t, got)
		})
	}
}

func join(msgs []json.RawMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.Write(m)
		b.WriteByte('\n')
	}
	return b.String()
}

// checkAnthropic checks the Messages API's structural rules: roles user
// and assistant, the first user, every tool_result answering a tool_use of
// the message right before it and coming before any other block, every
// tool_use answered in the next message (the last may be pending).
func checkAnthropic(t *testing.T, msgs []json.RawMessage) {
	t.Helper()
	var pending map[string]bool
	for i, raw := range msgs {
		var wm wireMessage
		if err := json.Unmarshal(raw, &wm); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if i == 0 && wm.Role != "user" {
			t.Errorf("the first message is %s", wm.Role)
		}
		var blocks []wireBlock
		if len(wm.Content) > 0 && wm.Content[0] == '[' {
			if err := json.Unmarshal(wm.Content, &blocks); err != nil {
				t.Fatalf("message %d content: %v", i, err)
			}
		}
		answered := map[string]bool{}
		seenOther := false
		for _, b := range blocks {
			switch b.Type {
			case "tool_result":
				if wm.Role != "user" || seenOther || !pending[b.ToolUseID] {
					t.Errorf("message %d: tool_result %s out of place", i, b.ToolUseID)
				}
				answered[b.ToolUseID] = true
			default:
				seenOther = true
			}
		}
		for id := range pending {
			if !answered[id] {
				t.Errorf("message %d: tool_use %s has no result", i, id)
			}
		}
		pending = map[string]bool{}
		for _, b := range blocks {
			if b.Type == "tool_use" {
				pending[b.ID] = true
			}
		}
		if i > 0 && wm.Role == roleOf(t, msgs[i-1]) && wm.Role == "assistant" {
			t.Errorf("messages %d and %d are both assistant turns", i-1, i)
		}
	}
}

func roleOf(t *testing.T, raw json.RawMessage) string {
	var wm wireMessage
	json.Unmarshal(raw, &wm)
	return wm.Role
}

func TestConvertMalformed(t *testing.T) {
	for _, tc := range []struct{ name, system, msg string }{
		{"not an object", "", `[1]`},
		{"system role", "", `{"role":"system","content":"x"}`},
		{"number content", "", `{"role":"user","content":3}`},
		{"block without type", "", `{"role":"user","content":[{"text":"x"}]}`},
		{"tool_use without id", "", `{"role":"assistant","content":[{"type":"tool_use","name":"x","input":{}}]}`},
		{"tool_result without id", "", `{"role":"user","content":[{"type":"tool_result","content":"x"}]}`},
		{"tool_result content", "", `{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":5}]}`},
		{"system number", `5`, `{"role":"user","content":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sys json.RawMessage
			if tc.system != "" {
				sys = json.RawMessage(tc.system)
			}
			_, err := Convert(sys, []json.RawMessage{json.RawMessage(tc.msg)})
			if !errors.Is(err, ErrMalformed) || !errors.Is(err, chat.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

// TestFixturesRoundTrip writes every fixture conversation in Anthropic
// format, converts it, and checks the chat form is valid and comes back
// byte for byte.
func TestFixturesRoundTrip(t *testing.T) {
	files, err := dataset.FixtureFiles()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, cv := range convs {
			sys, msgs, err := FromChat(cv.Chat.Messages)
			if err != nil {
				t.Fatal(err)
			}
			checkAnthropic(t, msgs)
			c, err := Convert(sys, msgs)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := c.Chat.Validate(); err != nil {
				t.Fatalf("%s: chat form invalid: %v", f, err)
			}
			back, err := c.Back(c.Chat, identity(c.Chat.Len()))
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != len(msgs) {
				t.Fatalf("%s: %d messages back, want %d", f, len(back), len(msgs))
			}
			for i := range back {
				if !bytes.Equal(back[i], msgs[i]) {
					t.Fatalf("%s: message %d changed", f, i)
				}
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no fixture conversations")
	}
}

func FuzzConvert(f *testing.F) {
	f.Add(sample.system, sample.messages[1], sample.messages[2])
	f.Add(`"sys"`, `{"role":"user","content":"hi"}`, `{"role":"assistant","content":"yo"}`)
	f.Fuzz(func(t *testing.T, system, a, b string) {
		c, err := Convert(json.RawMessage(system), []json.RawMessage{json.RawMessage(a), json.RawMessage(b)})
		if err != nil {
			return
		}
		back, err := c.Back(c.Chat, identity(c.Chat.Len()))
		if err != nil {
			t.Fatal(err)
		}
		if len(back) != 2 || !bytes.Equal(back[0], []byte(a)) || !bytes.Equal(back[1], []byte(b)) {
			t.Fatalf("identity result changed the messages: %s", join(back))
		}
	})
}

// markedBlocks returns, for each message, the indices of its content
// blocks that carry cache_control.
func markedBlocks(t *testing.T, msgs []json.RawMessage) map[int][]int {
	t.Helper()
	out := map[int][]int{}
	for i, m := range msgs {
		var wm struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(m, &wm); err != nil {
			t.Fatal(err)
		}
		var blocks []map[string]json.RawMessage
		if json.Unmarshal(wm.Content, &blocks) != nil {
			continue // a string content
		}
		for k, b := range blocks {
			if _, ok := b["cache_control"]; ok {
				out[i] = append(out[i], k)
			}
		}
	}
	return out
}

// TestBackMarked: a breakpoint lands on the block where its chat message
// ends, within Anthropic's budget, and leaves everything else as it was.
func TestBackMarked(t *testing.T) {
	// The sample's chat form: 0 system, 1 user task, 2 assistant (t1, t2),
	// 3 tool t1, 4 tool t2, 5 user text (marked by the caller), 6
	// assistant t3, 7 tool t3, 8 assistant text, 9 user image+text.
	// Anthropic messages: 0 task, 1 assistant, 2 results+text (block 2
	// marked), 3 assistant t3, 4 result t3, 5 text, 6 image+text.
	tests := []struct {
		name   string
		marks  []int
		budget int
		want   map[int][]int // Anthropic message → marked blocks
		marked []int
	}{
		{"none", nil, 4, map[int][]int{2: {2}}, nil},
		{"a string content becomes a marked text block", []int{1}, 4, map[int][]int{0: {0}, 2: {2}}, []int{0}},
		{"the first tool result of a merged message", []int{3}, 4, map[int][]int{2: {0, 2}}, []int{2}},
		{"the second tool result", []int{4}, 4, map[int][]int{2: {1, 2}}, []int{2}},
		{"a block marked already stays as it is", []int{5}, 4, map[int][]int{2: {2}}, []int{2}},
		{"an assistant message with other members", []int{6}, 4, map[int][]int{2: {2}, 3: {0}}, []int{3}},
		{"the last block of a message of two", []int{9}, 4, map[int][]int{2: {2}, 6: {1}}, []int{6}},
		{"over budget: the latest marks", []int{1, 6, 9}, 1, map[int][]int{2: {2}, 6: {1}}, []int{6}},
		{"no budget", []int{1, 6, 9}, 0, map[int][]int{2: {2}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := sampleConversation(t)
			got, marked, err := c.BackMarked(c.Chat, identity(c.Chat.Len()), tt.marks, tt.budget)
			if err != nil {
				t.Fatal(err)
			}
			if m := markedBlocks(t, got); !equalMarks(m, tt.want) {
				t.Errorf("marked blocks %v, want %v", m, tt.want)
			}
			if !slicesEqual(marked, tt.marked) {
				t.Errorf("marked messages %v, want %v", marked, tt.marked)
			}
			for i, m := range got {
				if !containsInt(marked, i) && !bytes.Equal(m, c.Messages[i]) {
					t.Errorf("message %d changed: %s", i, m)
				}
			}
			if containsInt(marked, 3) && !bytes.Contains(got[3], []byte(`"x_unknown":1`)) {
				t.Errorf("a marked message lost its other members: %s", got[3])
			}
			// The answer converts again, to the same chat form.
			again, err := Convert(c.System, got)
			if err != nil || again.Chat.Len() != c.Chat.Len() {
				t.Fatalf("the marked messages do not convert: %v", err)
			}
		})
	}
}

// TestBackMarkedAfterCompaction: a mark on a message a policy wrote, and
// on a kept message after dropped ones.
func TestBackMarkedAfterCompaction(t *testing.T) {
	c := sampleConversation(t)
	// Keep system, the task, a summary, then messages 8 and 9.
	summary := abi.Message{Role: abi.RoleAssistant, Content: abi.TextContent("Earlier: ran ls and go test; read foo.go.")}
	msgs := []abi.Message{c.Chat.Messages[0], c.Chat.Messages[1], summary, c.Chat.Messages[8], c.Chat.Messages[9]}
	raws := []json.RawMessage{c.Chat.Raw[0], c.Chat.Raw[1], mustMarshal(t, summary), c.Chat.Raw[8], c.Chat.Raw[9]}
	out := &chat.Conversation{Raw: raws, Messages: msgs}
	origin := []int{0, 1, -1, 8, 9}
	got, marked, err := c.BackMarked(out, origin, []int{2}, 4)
	if err != nil {
		t.Fatal(err)
	}
	// The summary and the kept assistant text merge into one assistant
	// message (1); its first block, the summary, is marked.
	if m := markedBlocks(t, got); !equalMarks(m, map[int][]int{1: {0}}) || !slicesEqual(marked, []int{1}) {
		t.Errorf("marked blocks %v (messages %v): want the summary's block", m, marked)
	}
}

func mustMarshal(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func equalMarks(a, b map[int][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slicesEqual(v, b[k]) {
			return false
		}
	}
	return true
}

func slicesEqual(a, b []int) bool {
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

func containsInt(s []int, x int) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// TestCountCacheControls counts markers at any depth.
func TestCountCacheControls(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`"You are a coding agent."`, 0},
		{sample.system, 1},
		{`[` + strings.Join(sample.messages, ",") + `]`, 1},
		{`[{"name":"bash","input_schema":{},"cache_control":{"type":"ephemeral"}},{"name":"read","cache_control":null}]`, 1},
		{`not json "cache_control"`, 0},
	}
	for _, tt := range tests {
		if got := wire.CountCacheControls(json.RawMessage(tt.in)); got != tt.want {
			t.Errorf("wire.CountCacheControls(%.40s) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

// TestBackWithBreakpointsBudget: the markers the request keeps count
// against Anthropic's four.
func TestBackWithBreakpointsBudget(t *testing.T) {
	c := sampleConversation(t) // system and message 2 carry one marker each
	for _, tt := range []struct {
		reserved int
		want     []int
	}{
		{0, []int{3, 6}}, // two left: the two latest marks
		{1, []int{6}},
		{2, nil},
	} {
		got, marked, err := c.BackWithBreakpoints(c.Chat, identity(c.Chat.Len()), []int{1, 6, 9}, tt.reserved)
		if err != nil {
			t.Fatal(err)
		}
		if !slicesEqual(marked, tt.want) {
			t.Errorf("reserved %d: marked %v, want %v", tt.reserved, marked, tt.want)
		}
		total := wire.CountCacheControls(c.System)
		for _, m := range got {
			total += wire.CountCacheControls(m)
		}
		if total+tt.reserved > MaxCacheControls {
			t.Errorf("reserved %d: %d markers in the request", tt.reserved, total+tt.reserved)
		}
	}
}
