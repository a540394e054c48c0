package compactor

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
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
	cacheMoved := parse(`[{"role":"system","content":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"task"}]`)

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
	if ConversationID(cacheMoved) != id {
		t.Error("the id depends on where the cache breakpoints are")
	}
	if ConversationID(otherTask) == id || ConversationID(otherSystem) == id {
		t.Error("different conversations share an id")
	}
	// The value is fixed across processes and releases: state is stored
	// under it, so changing the derivation orphans every stored state (a
	// stateful policy then rebuilds it from the history). It changed once,
	// when the id came to cover the whole content (F9).
	if id != "h-d68da7b961fd2eb1a9097d56" {
		t.Errorf("id = %s: the derivation changed", id)
	}
}

// TestConversationIDsDoNotCollide (F9): conversations whose text is the
// same but whose content is not get different ids.
func TestConversationIDsDoNotCollide(t *testing.T) {
	convs := map[string]string{
		"text":            `[{"role":"user","content":"look"}]`,
		"with an image":   `[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]`,
		"another image":   `[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,BBBB"}}]}]`,
		"image detail":    `[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"high"}}]}]`,
		"a file":          `[{"role":"user","content":[{"type":"text","text":"look"},{"type":"file","file":{"file_id":"f1"}}]}]`,
		"two parts":       `[{"role":"user","content":[{"type":"text","text":"lo"},{"type":"text","text":"ok"}]}]`,
		"joined parts":    `[{"role":"user","content":"lo\nok"}]`,
		"split parts":     `[{"role":"user","content":[{"type":"text","text":"lo"},{"type":"text","text":"ok"}]}]`,
		"named":           `[{"role":"user","name":"alice","content":"look"}]`,
		"system + user":   `[{"role":"system","content":"a"},{"role":"user","content":"b\u0000user\u0000c"}]`,
		"NUL in system":   `[{"role":"system","content":"a\u0000user\u0000b"},{"role":"user","content":"c"}]`,
		"developer":       `[{"role":"developer","content":"a"},{"role":"user","content":"b\u0000user\u0000c"}]`,
		"null content":    `[{"role":"system","content":null},{"role":"user","content":"look"}]`,
		"empty system":    `[{"role":"system","content":""},{"role":"user","content":"look"}]`,
		"no system, user": `[{"role":"user","content":""}]`,
	}
	seen := map[string]string{}
	for name, js := range convs {
		var msgs []abi.Message
		if err := json.Unmarshal([]byte(js), &msgs); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		id := ConversationID(msgs)
		if other, dup := seen[id]; dup && !(name == "two parts" && other == "split parts" || name == "split parts" && other == "two parts") {
			t.Errorf("%q and %q share the id %s", name, other, id)
		}
		seen[id] = name
	}
}

// TestIDCache: the cache answers what ConversationID does, for requests
// that grow, that mean the same in other bytes, and that differ only
// where the id looks; and it stays bounded.
func TestIDCache(t *testing.T) {
	t.Parallel()
	convs := []string{
		`[{"role":"system","content":"s"},{"role":"user","content":"task"}]`,
		`[{"role":"system","content":"s"},{"role":"user","content":"task"},{"role":"assistant","content":"a"},{"role":"user","content":"more"}]`,
		`[{"content":"s","role":"system"},{"role":"user","content":[{"type":"text","text":"task"}]}]`,
		`[{"role":"system","content":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"task"}]`,
		`[{"role":"system","content":"s"},{"role":"user","content":"other task"}]`,
		`[{"role":"system","content":"S"},{"role":"user","content":"task"}]`,
		`[{"role":"system","content":"s"},{"role":"system","content":"t"},{"role":"user","content":"task"}]`,
		`[{"role":"system","content":"st"},{"role":"user","content":"task"}]`,
		`[{"role":"assistant","content":"no user yet"}]`,
	}
	c := newIDCache()
	for round := 0; round < 2; round++ { // the second round is served from the cache
		for _, s := range convs {
			conv, err := chat.Parse([]byte(s))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := c.id(conv), ConversationID(conv.Messages); got != want {
				t.Errorf("round %d, %s: cached id %s, want %s", round, s, got, want)
			}
		}
	}
	for i := 0; i < 2*idCacheSize; i++ {
		conv, err := chat.Parse([]byte(`[{"role":"user","content":"task ` + strconv.Itoa(i) + `"}]`))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c.id(conv), ConversationID(conv.Messages); got != want {
			t.Fatalf("conversation %d: cached id %s, want %s", i, got, want)
		}
	}
	if n := len(c.ids); n > idCacheSize {
		t.Errorf("the cache holds %d ids, more than %d", n, idCacheSize)
	}
}
