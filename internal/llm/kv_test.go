package llm

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/compactd/compactd/internal/store"
)

// The daemon's store bucket fits NewKVCache.
var _ KV = (*store.Bucket)(nil)

// TestPersistentCacheSurvivesRestart runs the summary cache on a bucket of
// the embedded store: a completion made before the store is closed and
// reopened is served from the cache after.
func TestPersistentCacheSurvivesRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	f := newFake(t, KindAnthropic)
	for round := 0; round < 2; round++ {
		st, err := store.Open(store.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Bucket("llm_cache", store.BucketOptions{MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := f.client(t, nil, WithCache(NewKVCache(b)))
		resp, err := c.Complete(context.Background(), request("history"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Cached != (round == 1) {
			t.Fatalf("round %d: cached = %v", round, resp.Cached)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d provider calls across a restart", n)
	}
}
