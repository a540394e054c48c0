package eval

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactd/compactd/chat"
)

// conv builds a conversation from message JSON, keeping the bytes.
func conv(t testing.TB, msgs ...string) *chat.Conversation {
	t.Helper()
	raw := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		raw[i] = json.RawMessage(m)
	}
	c, err := chat.FromRaw(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pick returns the conversation of in's messages at idx, in that order.
func pick(in *chat.Conversation, idx ...int) *chat.Conversation {
	var raw []json.RawMessage
	for _, i := range idx {
		raw = append(raw, in.Raw[i])
	}
	out, err := chat.FromRaw(raw)
	if err != nil {
		panic(err)
	}
	return out
}

// withNew returns out with a new message (JSON) inserted at position at.
func withNew(t testing.TB, out *chat.Conversation, at int, m string) *chat.Conversation {
	raw := append([]json.RawMessage{}, out.Raw[:at]...)
	raw = append(raw, json.RawMessage(m))
	raw = append(raw, out.Raw[at:]...)
	c, err := chat.FromRaw(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const (
	mSys   = `{"role":"system","content":"You are an agent."}`
	mUser  = `{"role":"user","content":"Fix src/a.py."}`
	mCall1 = `{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"cat src/a.py\"}"}}]}`
	mRes1  = `{"role":"tool","tool_call_id":"c1","content":"def f(): pass"}`
	mText  = `{"role":"assistant","content":"It is fixed."}`
	mUser2 = `{"role":"user","content":"Run the tests."}`
	mCall2 = `{"role":"assistant","content":"","tool_calls":[{"id":"c2","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"pytest\"}"}}]}`
	mRes2  = `{"role":"tool","tool_call_id":"c2","content":"1 passed"}`
	mUser3 = `{"role":"user","content":"Thanks."}`
)

func agentConversation(t testing.TB) *chat.Conversation {
	return conv(t, mSys, mUser, mCall1, mRes1, mText, mUser2, mCall2, mRes2, mUser3)
}

func TestCheck(t *testing.T) {
	in := agentConversation(t)
	marker := `{"role":"user","content":"[4 earlier messages dropped]"}`
	tests := []struct {
		name string
		out  *chat.Conversation
		want string // "" for valid
	}{
		{"unchanged", pick(in, 0, 1, 2, 3, 4, 5, 6, 7, 8), ""},
		{"dropped units with a marker", withNew(t, pick(in, 0, 1, 5, 6, 7, 8), 2, marker), ""},
		{"only the system and the last", pick(in, 0, 8), ""},
		{"a call without its result", pick(in, 0, 1, 2, 4, 8), "no result"},
		{"a result without its call", pick(in, 0, 1, 3, 4, 8), "does not follow"},
		{"system message dropped", pick(in, 1, 2, 3, 8), "leading system"},
		{"system message moved", pick(in, 1, 0, 8), "again or out of order"},
		{"new system message in the middle", withNew(t, pick(in, 0, 1, 8), 2, `{"role":"system","content":"Summary."}`), "new system message"},
		{"final message dropped", pick(in, 0, 1, 2, 3), "final message"},
		{"final message rewritten", withNew(t, pick(in, 0, 1), 2, `{"role":"user","content":"Thanks!"}`), "final message"},
		{"messages reordered", pick(in, 0, 4, 1, 8), "again or out of order"},
		{"a message twice", pick(in, 0, 1, 1, 8), "again or out of order"},
		{"a new message without text", withNew(t, pick(in, 0, 8), 1, `{"role":"user","content":""}`), "without text"},
		{"a new message with an unknown role", withNew(t, pick(in, 0, 8), 1, `{"role":"narrator","content":"x"}`), "unknown role"},
		{"empty", &chat.Conversation{}, "no messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(in, tt.out)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Check: %v, want valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Check: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}
