package proxy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/internal/config"
)

// TestSharedMemoryLimit: a proxy given the daemon's memory bounds the last
// requests it holds there by proxy.max_stored_bytes, from the start and
// after a config change, and leaves the rest of the memory alone.
func TestSharedMemoryLimit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("proxy: {max_stored_bytes: 1000000}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cm, err := config.Open(config.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	mem := chat.NewMemory(chat.MemoryOptions{MaxRequestBytes: 1 << 30})
	p := New(Options{Config: cm, Memory: mem})
	defer p.Close()
	for _, id := range []string{"a", "b"} {
		mem.RememberRequest(id, chat.LastRequest{Format: OpenAI, Model: "gpt-4o", Body: make([]byte, 600000)})
	}
	if n, size := p.Stored(); n != 1 || size > 1000000 {
		t.Fatalf("%d requests (%d bytes) held within proxy.max_stored_bytes 1000000", n, size)
	}
	if _, ok := mem.LastRequest("b"); !ok {
		t.Fatal("the most recent request was dropped")
	}
	change, err := cm.Update([]byte(`{"proxy": {"max_stored_bytes": 1000}}`))
	if err != nil {
		t.Fatal(err)
	}
	p.ConfigChanged(change.Config)
	if n, _ := p.Stored(); n != 0 {
		t.Fatalf("%d requests held after proxy.max_stored_bytes went to 1000", n)
	}
	mem.RememberRequest("c", chat.LastRequest{Format: OpenAI, Model: "gpt-4o", Body: make([]byte, 2000)})
	if e, ok := mem.LastRequest("c"); !ok || e.Body != nil {
		t.Fatal("a body over the new bound is held, or its counts lost")
	}
}
