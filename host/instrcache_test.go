package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/host/internal/wasminstr"
	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/hashicorp/go-hclog"
)

// TestInstrCacheEntry: an entry reads back as written, and one that is
// truncated, corrupt, of another format, for another key or whose length
// disagrees with its header is refused, never used.
func TestInstrCacheEntry(t *testing.T) {
	t.Parallel()
	key := sha256.Sum256([]byte("key"))
	code := []byte("\x00asm\x01\x00\x00\x00 instrumented")
	entry := encodeInstrEntry(key, &wasminstr.Result{HasStart: true, Loops: 7, OutOfWork: 42}, code)
	res, err := decodeInstrEntry(entry, key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.Module, code) || !res.HasStart || res.Loops != 7 || res.OutOfWork != 42 {
		t.Fatalf("read back %+v", res)
	}
	// resum rewrites an entry's checksum, so that only the check named
	// is left to refuse it.
	resum := func(b []byte) []byte {
		sum := sha256.Sum256(b[:len(b)-sha256.Size])
		copy(b[len(b)-sha256.Size:], sum[:])
		return b
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(entry)) }
	tests := []struct {
		name, want string
		entry      []byte
		key        [sha256.Size]byte
	}{
		{"empty", "truncated", nil, key},
		{"truncated", "checksum mismatch", entry[:len(entry)-1], key},
		{"header only", "truncated", entry[:instrHeader], key},
		{"a flipped bit", "checksum mismatch", edit(func(b []byte) []byte { b[instrHeader+3] ^= 1; return b }), key},
		{"another format", "not an entry of this format", edit(func(b []byte) []byte { b[0] = 'X'; return resum(b) }), key},
		{"another key", "another key", entry, sha256.Sum256([]byte("other"))},
		{"length disagrees", "header says", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[instrHeader-8:], uint64(len(code)+1))
			return resum(b)
		}), key},
	}
	for _, tt := range tests {
		if _, err := decodeInstrEntry(tt.entry, tt.key); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v; want one containing %q", tt.name, err, tt.want)
		}
	}
}

// TestInstrCacheFiles: entries are written whole, a bad one on disk is
// removed and missed, the directory stays under its bound by dropping
// the least recently used, and temporary files a dead writer left go.
func TestInstrCacheFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "instrumented")
	code := bytes.Repeat([]byte{0xab}, 1000)
	entrySize := int64(len(encodeInstrEntry([32]byte{}, &wasminstr.Result{}, code)))
	c := newInstrCache(dir, 2*entrySize, hclog.NewNullLogger())
	opts := wasminstr.Options{CallBudget: 5}
	keyOf := func(s string) [sha256.Size]byte { return c.key(sha256.Sum256([]byte(s)), opts, false) }
	if k1, k2 := keyOf("a"), c.key(sha256.Sum256([]byte("a")), opts, true); k1 == k2 {
		t.Fatal("checked and unchecked share a key")
	}
	if k1, k2 := keyOf("a"), c.key(sha256.Sum256([]byte("a")), wasminstr.Options{CallBudget: 6}, false); k1 == k2 {
		t.Fatal("two budgets share a key")
	}

	if _, _, ok := c.get(keyOf("a"), opts); ok {
		t.Fatal("a hit in an empty cache")
	}
	c.put(keyOf("a"), &wasminstr.Result{Loops: 3}, code)
	res, got, ok := c.get(keyOf("a"), opts)
	if !ok || !bytes.Equal(got, code) || res.Loops != 3 || res.Options != opts {
		t.Fatalf("get after put: ok %v, %d bytes, %+v", ok, len(got), res)
	}

	// A corrupt entry is missed and removed, and a rewrite serves again.
	path := c.path(keyOf("a"))
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.get(keyOf("a"), opts); ok {
		t.Fatal("a corrupt entry was used")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the corrupt entry is still there: %v", err)
	}
	// So is a truncated one.
	c.put(keyOf("a"), &wasminstr.Result{Loops: 3}, code)
	if err := os.Truncate(path, entrySize/2); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.get(keyOf("a"), opts); ok {
		t.Fatal("a truncated entry was used")
	}
	// A directory in an entry's place is missed, without blocking.
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.get(keyOf("a"), opts); ok {
		t.Fatal("a directory was used as an entry")
	}
	os.Remove(path)

	// The bound: two entries fit; a third removes the least recently
	// used, which is "b" once "a" has been read.
	stale := filepath.Join(dir, instrTempPrefix+"left")
	os.WriteFile(stale, code, 0o600)
	old := time.Now().Add(-2 * instrTempAge)
	os.Chtimes(stale, old, old)
	fresh := filepath.Join(dir, instrTempPrefix+"writing")
	os.WriteFile(fresh, code, 0o600)
	c.put(keyOf("a"), &wasminstr.Result{}, code)
	c.put(keyOf("b"), &wasminstr.Result{}, code)
	for _, k := range []string{"a", "b"} { // written within a clock tick
		ago := time.Now().Add(-time.Minute)
		if k == "a" {
			ago = ago.Add(-time.Minute)
		}
		os.Chtimes(c.path(keyOf(k)), ago, ago)
	}
	if _, _, ok := c.get(keyOf("a"), opts); !ok {
		t.Fatal("a miss")
	}
	c.put(keyOf("c"), &wasminstr.Result{}, code)
	for k, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, err := os.Stat(c.path(keyOf(k))); (err == nil) != want {
			t.Errorf("entry %s: kept %v, want %v", k, err == nil, want)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("a dead writer's temporary file was kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("a temporary file being written was removed")
	}

	// An entry over the bound is not written; an unwritable directory
	// only costs the instrumentation.
	small := newInstrCache(filepath.Join(t.TempDir(), "small"), entrySize-1, hclog.NewNullLogger())
	small.put(keyOf("a"), &wasminstr.Result{}, code)
	if small.stores.Load() != 0 {
		t.Error("an entry over the bound was written")
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	blocked := newInstrCache(filepath.Join(file, "instrumented"), 1<<20, hclog.NewNullLogger())
	blocked.put(keyOf("a"), &wasminstr.Result{}, code)
	if _, _, ok := blocked.get(keyOf("a"), opts); ok || blocked.stores.Load() != 0 {
		t.Error("an entry in an unwritable directory")
	}
}

// TestInstrumentedModulesCached: an engine with a cache directory keeps
// the modules it instrumented; the next engine on it loads them from
// there and serves the same; a corrupt entry is instrumented again and
// rewritten, and other limits are another entry.
func TestInstrumentedModulesCached(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	wasm, err := os.ReadFile(wasmbuild.ForTest(t, "plugins/lastn/lastn.c"))
	if err != nil {
		t.Fatal(err)
	}
	// load loads lastn in a new engine on dir, checks it compacts and
	// returns the engine's cache counts.
	load := func(limits Limits) (hits, misses, stores uint64) {
		t.Helper()
		e, err := NewEngine(Config{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		p, err := e.Load(ctx, wasm, LoadOptions{Source: "lastn.wasm", Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(ctx)
		cfg, err := p.Schema().Resolve(policyLayer(map[string]any{"n": 2, "step": 1}))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := p.Compact(ctx, &Request{Conversation: testConversation(t), Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Conversation.Len(); got != 4 {
			t.Fatalf("got %d messages: %s", got, resp.Conversation.Encode())
		}
		c := e.instrumented
		return c.hits.Load(), c.misses.Load(), c.stores.Load()
	}
	if h, m, s := load(Limits{}); h != 0 || m != 1 || s != 1 {
		t.Fatalf("first load: %d hits, %d misses, %d stores; want 0, 1, 1", h, m, s)
	}
	if h, m, s := load(Limits{}); h != 1 || m != 0 || s != 0 {
		t.Fatalf("second load: %d hits, %d misses, %d stores; want 1, 0, 0", h, m, s)
	}
	entries, _ := filepath.Glob(filepath.Join(dir, instrCacheSubdir, "*.wasm"))
	if len(entries) != 1 {
		t.Fatalf("entries %v; want one", entries)
	}
	b, _ := os.ReadFile(entries[0])
	b[len(b)-100] ^= 0x5a // in the module's last bytes (its data)
	os.WriteFile(entries[0], b, 0o600)
	if h, m, s := load(Limits{}); h != 0 || m != 1 || s != 1 {
		t.Fatalf("load over a corrupt entry: %d hits, %d misses, %d stores; want 0, 1, 1", h, m, s)
	}
	if h, m, s := load(Limits{}); h != 1 || m != 0 || s != 0 {
		t.Fatalf("load after the rewrite: %d hits, %d misses, %d stores; want 1, 0, 0", h, m, s)
	}
	if h, m, s := load(Limits{WorkBudget: 1 << 30}); h != 0 || m != 1 || s != 1 {
		t.Fatalf("load with another work budget: %d hits, %d misses, %d stores; want 0, 1, 1", h, m, s)
	}
}
