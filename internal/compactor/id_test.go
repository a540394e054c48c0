package compactor

import (
	"encoding/json"
	"testing"

	"github.com/compactd/compactd/abi"
)

func TestConversationID(t *testing.T) {
	parse := func(s string) []abi.Message {
		var m []abi.Message
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	base := parse(`[{"role":"system","content":"s"},{"role":"user","content":"task"}]`)
	grown := parse(`[{"role":"system","content":"s"},{"role":"user","content":"task"},{"role":"assistant","content":"a"},{"role":"user","content":"more"}]`)
	reformatted := parse(`[{"content":"s","role":"system"},{"role":"user","content":[{"type":"text","text":"task"}]}]`)
	otherTask := parse(`[{"role":"system","content":"s"},{"role":"user","content":"other task"}]`)
	otherSystem := parse(`[{"role":"system","content":"S"},{"role":"user","content":"task"}]`)

	id := ConversationID(base)
	if want := "h-"; len(id) != 26 || id[:2] != want {
		t.Fatalf("id %q: want h- and 24 hex digits", id)
	}
	if ConversationID(grown) != id {
		t.Error("the id changed as the conversation grew")
	}
	if ConversationID(reformatted) != id {
		t.Error("the id depends on JSON formatting or content shape, not the text")
	}
	if ConversationID(otherTask) == id || ConversationID(otherSystem) == id {
		t.Error("different conversations share an id")
	}
	// The value is fixed across processes and releases: state is stored
	// under it, so changing the derivation orphans every stored state.
	if id != "h-c3a633754dc6632691dfcced" {
		t.Errorf("id = %s: the derivation changed", id)
	}
}
