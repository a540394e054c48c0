package host

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/dataset"
)

// TestGuestReusesItsBuffers: a Go guest decodes each request into the
// memory the previous one used and writes each result over the previous
// one's buffer. One instance serving a long request, a failing one, a
// short one and the long one again answers each exactly as a fresh
// instance does.
func TestGuestReusesItsBuffers(t *testing.T) {
	t.Parallel()
	files, err := dataset.FixtureFiles()
	if err != nil {
		t.Fatal(err)
	}
	// long is the longest conversation whose agent calls no tools (it
	// writes its commands in its text); tools the longest whose agent
	// does. long follows tools into the same memory: a message's tool
	// calls left from tools would show in long's ledger.
	var long, tools, short *chat.Conversation
	for _, f := range files {
		convs, err := dataset.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range convs {
			if !hasToolCalls(c.Chat) && (long == nil || len(c.Chat.Raw) > len(long.Raw)) {
				long = c.Chat
			}
			if short == nil || len(c.Chat.Raw) < len(short.Raw) {
				short = c.Chat
			}
			if hasToolCalls(c.Chat) && (tools == nil || len(c.Chat.Raw) > len(tools.Raw)) {
				tools = c.Chat
			}
		}
	}
	if long == nil || tools == nil {
		t.Fatal("the fixtures need a conversation with tool calls and one without")
	}
	for _, c := range []*chat.Conversation{long, tools, short} {
		for i := range c.Messages {
			c.Messages[i].Tokens = len(c.Raw[i]) / 4
		}
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, path.disable, Limits{})
			// The ledger folds the long conversation into new messages
			// (a result of kilobytes) and keeps the short one.
			load := func() *Plugin { return loadTestPlugin(t, e, "plugins/ledger", Limits{MaxInstances: 1}) }
			cfg := json.RawMessage(`{"min_tokens":0,"min_turns":0}`)
			bad := json.RawMessage(`{"fold_tokens":0}`)
			calls := []struct {
				name string
				conv *chat.Conversation
				cfg  json.RawMessage
			}{{"tools", tools, cfg}, {"long", long, cfg}, {"bad config", long, bad}, {"short", short, cfg}, {"tools again", tools, cfg}, {"long again", long, cfg}}
			reused := load()
			for _, c := range calls {
				got, gotErr := reused.Compact(context.Background(), &Request{Conversation: c.conv, Config: c.cfg})
				want, wantErr := load().Compact(context.Background(), &Request{Conversation: c.conv, Config: c.cfg})
				if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
					t.Fatalf("%s: reused instance: %v; fresh: %v", c.name, gotErr, wantErr)
				}
				if gotErr != nil {
					continue
				}
				if !bytes.Equal(got.Conversation.Encode(), want.Conversation.Encode()) || got.Result.Summary != want.Result.Summary {
					t.Fatalf("%s: the reused instance answered %s (%q), a fresh one %s (%q)", c.name, got.Conversation.Encode(), got.Result.Summary, want.Conversation.Encode(), want.Result.Summary)
				}
				if c.conv != short && !got.Result.Compacted {
					t.Fatalf("%s: not compacted: the test does not see a large result", c.name)
				}
			}
		})
	}
}

func hasToolCalls(c *chat.Conversation) bool {
	for i := range c.Messages {
		if len(c.Messages[i].ToolCalls) > 0 {
			return true
		}
	}
	return false
}
