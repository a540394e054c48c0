package requestlog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/store/redisstore"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

func newLog(t *testing.T, o requestlog.Options) *requestlog.Log {
	t.Helper()
	l, err := requestlog.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// all pages through a listing, limit records at a time.
func all(t *testing.T, l *requestlog.Log, conv string, limit int) []requestlog.Record {
	t.Helper()
	var out []requestlog.Record
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := l.List(context.Background(), conv, limit, cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Requests) > limit {
			t.Fatalf("page of %d records for limit %d", len(p.Requests), limit)
		}
		out = append(out, p.Requests...)
		if p.NextCursor == "" {
			return out
		}
		if pages > 10_000 {
			t.Fatal("listing does not end")
		}
		cursor = p.NextCursor
	}
}

func TestBoundsAndPagination(t *testing.T) {
	t.Parallel()
	l := newLog(t, requestlog.Options{Max: 50, PerConversation: 10})
	base := time.Unix(1_700_000_000, 0)
	for i := range 100 {
		// a is chatty; b and c take turns after it.
		conv := "a"
		if i >= 60 {
			conv = string(rune('b' + i%2))
		}
		l.Add(requestlog.Record{Time: base.Add(time.Duration(i) * time.Second), ConversationID: conv, Kind: requestlog.KindProxy, TokensBefore: i})
	}
	if got := l.Stats().Held; got != 30 {
		t.Errorf("held %d records; want 30 (a's 10 newest, b's 10, c's 10)", got)
	}
	recs := all(t, l, "", 7)
	if len(recs) != 30 {
		t.Fatalf("listed %d records, want 30", len(recs))
	}
	for i := 1; i < len(recs); i++ {
		if !recs[i].Time.Before(recs[i-1].Time) {
			t.Fatalf("record %d (%v) is not older than record %d (%v)", i, recs[i].Time, i-1, recs[i-1].Time)
		}
	}
	a := all(t, l, "a", 3)
	if len(a) != 10 || a[0].TokensBefore != 59 || a[9].TokensBefore != 50 {
		t.Errorf("conversation a: %d records from %d to %d; want 10, 59 down to 50", len(a), a[0].TokensBefore, a[len(a)-1].TokensBefore)
	}
	// The total bound evicts the oldest records first.
	l2 := newLog(t, requestlog.Options{Max: 5, PerConversation: 100})
	for i := range 12 {
		l2.Add(requestlog.Record{ConversationID: fmt.Sprint("c", i%3), TokensBefore: i})
	}
	got := all(t, l2, "", 100)
	if len(got) != 5 || got[len(got)-1].TokensBefore != 7 {
		t.Errorf("after 12 records with Max 5: %d held, oldest %d; want 5, oldest 7", len(got), got[len(got)-1].TokensBefore)
	}
	if _, err := l.List(context.Background(), "", 10, "not-a-cursor"); err == nil {
		t.Error("a bad cursor was accepted")
	}
}

func TestPrice(t *testing.T) {
	t.Parallel()
	r := requestlog.Record{Model: "gpt-4o", Compacted: true, TokensBefore: 100_000, TokensAfter: 20_000,
		Usage: &requestlog.Usage{InputTokens: 20_000, CachedTokens: 10_000, OutputTokens: 1000}}
	r.Price()
	if r.CostUSD == nil || r.FullCostUSD == nil {
		t.Fatal("gpt-4o is not priced")
	}
	// gpt-4o: $2.50 input, $1.25 cached, $10 output per million.
	if want := (10_000*2.5 + 10_000*1.25 + 1000*10.0) / 1e6; fmt.Sprintf("%.6f", *r.CostUSD) != fmt.Sprintf("%.6f", want) {
		t.Errorf("cost %v, want %v", *r.CostUSD, want)
	}
	if want := *r.CostUSD + 80_000*2.5/1e6; fmt.Sprintf("%.6f", *r.FullCostUSD) != fmt.Sprintf("%.6f", want) {
		t.Errorf("full cost %v, want %v", *r.FullCostUSD, want)
	}
	// Claude: cache writes at $3.75, reads at $0.30, the rest at $3 per million.
	a := requestlog.Record{Model: "claude-sonnet-4-5", Usage: &requestlog.Usage{InputTokens: 10_000, CachedTokens: 2_000, CacheWriteTokens: 5_000, OutputTokens: 100}}
	a.Price()
	if want := (3_000*3 + 2_000*0.3 + 5_000*3.75 + 100*15.0) / 1e6; a.CostUSD == nil || fmt.Sprintf("%.6f", *a.CostUSD) != fmt.Sprintf("%.6f", want) {
		t.Errorf("claude cost %v, want %v", a.CostUSD, want)
	}
	u := requestlog.Record{Model: "some-local-model", Usage: &requestlog.Usage{InputTokens: 10}}
	u.Price()
	if u.CostUSD != nil {
		t.Errorf("an unpriced model got a cost: %v", *u.CostUSD)
	}
}

func TestFileRotation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "access.jsonl")
	f, err := requestlog.OpenFile(path, 2000, 2)
	if err != nil {
		t.Fatal(err)
	}
	l := newLog(t, requestlog.Options{File: f})
	for i := range 100 {
		l.Add(requestlog.Record{ConversationID: "conv", Model: "gpt-4o", TokensBefore: i})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var seen []int
	for _, name := range []string{path + ".2", path + ".1", path} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 2000 {
			t.Errorf("%s is %d bytes, over access_max_bytes 2000", name, st.Size())
		}
		fh, _ := os.Open(name)
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r requestlog.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			seen = append(seen, r.TokensBefore)
		}
		fh.Close()
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3 exists; only 2 rotated files are kept", path)
	}
	// The kept files hold the newest records, in order, none missing.
	for i := 1; i < len(seen); i++ {
		if seen[i] != seen[i-1]+1 {
			t.Fatalf("records out of order or missing across the files: %v", seen)
		}
	}
	if len(seen) == 0 || seen[len(seen)-1] != 99 {
		t.Fatalf("the newest record is not last in the live file: %v", seen)
	}
	// A file that cannot be opened is a clear error.
	if _, err := requestlog.OpenFile(filepath.Join(t.TempDir(), "missing", "x.jsonl"), 0, 1); err == nil {
		t.Error("opening an access file in a missing directory succeeded")
	}
}

// testStore runs the store copy against a backend: two logs (two
// replicas) write one conversation; each lists the other's records too.
func testStore(t *testing.T, a, b store.Backend) {
	la := newLog(t, requestlog.Options{Store: a, PerConversation: 20})
	lb := newLog(t, requestlog.Options{Store: b, PerConversation: 20})
	for i := range 30 {
		l := la
		if i%2 == 1 {
			l = lb
		}
		l.Add(requestlog.Record{ConversationID: "shared", TokensBefore: i})
		l.Flush()
	}
	recs := all(t, la, "shared", 6)
	if len(recs) != 20 {
		t.Fatalf("replica a lists %d records of the shared conversation; want 20 (the store's bound)", len(recs))
	}
	if recs[0].TokensBefore != 29 || recs[19].TokensBefore != 10 {
		t.Errorf("replica a lists %d..%d; want 29..10", recs[0].TokensBefore, recs[19].TokensBefore)
	}
}

func TestStoreBbolt(t *testing.T) {
	t.Parallel()
	s, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	testStore(t, s, s)
	testConcurrentStore(t, s, s, s)
}

func TestStoreRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	open := func() store.Backend {
		s, err := redisstore.Open(redisstore.Options{URL: srv.URL(), OpTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	testStore(t, open(), open())
	testConcurrentStore(t, open(), open(), open())
}

// testConcurrentStore: two replicas append to one conversation at the
// same time, many records each, without waiting for each other; the
// store then holds every record (a third replica, with none in memory,
// lists them all).
func testConcurrentStore(t *testing.T, a, b, c store.Backend) {
	const each = 150
	logs := []*requestlog.Log{
		newLog(t, requestlog.Options{Store: a, PerConversation: 500}),
		newLog(t, requestlog.Options{Store: b, PerConversation: 500}),
	}
	var wg sync.WaitGroup
	for k, l := range logs {
		wg.Go(func() {
			for i := range each {
				l.Add(requestlog.Record{ConversationID: "raced", TokensBefore: k*each + i})
				if i%7 == 0 {
					runtime.Gosched()
				}
			}
			l.Flush()
		})
	}
	wg.Wait()
	for _, l := range logs {
		if st := l.Stats(); st.Failures != 0 || st.StoreDropped != 0 {
			t.Fatalf("store copy: %+v", st)
		}
	}
	fresh := newLog(t, requestlog.Options{Store: c, PerConversation: 500})
	recs := all(t, fresh, "raced", 100)
	seen := map[int]bool{}
	for _, r := range recs {
		seen[r.TokensBefore] = true
	}
	if len(recs) != 2*each || len(seen) != 2*each {
		t.Fatalf("the store holds %d records (%d distinct) of the raced conversation; want %d", len(recs), len(seen), 2*each)
	}
}

// countingStore counts the store updates of the buckets it opens.
type countingStore struct {
	store.Backend
	updates *atomic.Int64
}

func (c countingStore) OpenBucket(name string, o store.BucketOptions) (store.KV, error) {
	kv, err := c.Backend.OpenBucket(name, o)
	return countingKV{kv, c.updates}, err
}

type countingKV struct {
	store.KV
	updates *atomic.Int64
}

func (c countingKV) Update(ctx context.Context, key []byte, fn func([]byte) ([]byte, error)) error {
	c.updates.Add(1)
	return c.KV.Update(ctx, key, fn)
}

// UpdateMany counts one store write (the bbolt bucket's is one
// transaction).
func (c countingKV) UpdateMany(ctx context.Context, keys [][]byte, fn func(int, []byte) ([]byte, error)) error {
	c.updates.Add(1)
	return c.KV.(store.MultiUpdater).UpdateMany(ctx, keys, fn)
}

// TestStoreCopyGathers: the store copy gathers records for FlushInterval
// and writes them together, one store write (bbolt: one transaction for
// every conversation of the batch) for many requests; Flush, the interval
// and Close each write what has gathered, and nothing is lost.
func TestStoreCopyGathers(t *testing.T) {
	t.Parallel()
	s, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var updates atomic.Int64
	counted := countingStore{s, &updates}
	reader := newLog(t, requestlog.Options{Store: s})
	stored := func(conv string) int { return len(all(t, reader, conv, 100)) }

	held := newLog(t, requestlog.Options{Store: counted, FlushInterval: time.Hour})
	for i := range 40 {
		held.Add(requestlog.Record{ConversationID: "c", TokensBefore: i})
		held.Add(requestlog.Record{ConversationID: "d", TokensBefore: i})
		runtime.Gosched() // the writer runs between requests, as it does under load
	}
	held.Flush()
	if n := updates.Load(); n != 1 {
		t.Errorf("80 records of 2 conversations took %d store writes; want 1", n)
	}
	if c, d := stored("c"), stored("d"); c != 40 || d != 40 {
		t.Fatalf("%d and %d records stored after Flush; want 40 each", c, d)
	}

	// Many conversations at once, one request of each in turn (agents
	// side by side): one write per 64 conversations of a batch.
	updates.Store(0)
	const convs, each = 100, 10
	for i := range each {
		for c := range convs {
			held.Add(requestlog.Record{ConversationID: fmt.Sprintf("many-%d", c), TokensBefore: i})
		}
		runtime.Gosched()
	}
	held.Flush()
	if n := updates.Load(); n != 2 {
		t.Errorf("%d records of %d conversations took %d store writes; want 2 (64 conversations a write)", convs*each, convs, n)
	}
	if n := stored("many-7"); n != each {
		t.Fatalf("%d records of a conversation stored after Flush; want %d", n, each)
	}

	timed := newLog(t, requestlog.Options{Store: s, FlushInterval: 20 * time.Millisecond})
	for i := range 3 {
		timed.Add(requestlog.Record{ConversationID: "c", TokensBefore: 100 + i})
	}
	for deadline := time.Now().Add(time.Minute); stored("c") != 43; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d records stored a minute after a 20ms interval; want 43", stored("c"))
		}
	}

	closing, err := requestlog.New(requestlog.Options{Store: s, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	closing.Add(requestlog.Record{ConversationID: "c", TokensBefore: 200})
	closing.Add(requestlog.Record{ConversationID: "c", TokensBefore: 201})
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	if n := stored("c"); n != 45 {
		t.Fatalf("%d records stored after Close; want 45", n)
	}
}
