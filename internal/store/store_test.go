package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/compactor"
)

var _ compactor.StateStore = (*Store)(nil)

// clock is a settable test clock.
type clock struct{ t atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.t.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time      { return time.Unix(0, c.t.Load()).UTC() }
func (c *clock) Add(d time.Duration) { c.t.Add(int64(d)) }
func (c *clock) opts(dir string) Options {
	return Options{Dir: dir, Now: c.Now, FlushInterval: time.Hour, SweepInterval: time.Hour}
}

// getString returns key k's value in b as a string, "<nil>" when absent.
func getString(t *testing.T, b *Bucket, k string) string {
	t.Helper()
	v, err := b.Get(ctx, []byte(k))
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return "<nil>"
	}
	return string(v)
}

func open(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var ctx = context.Background()

func TestStateRoundTripAndRestart(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := open(t, clk.opts(dir))
	if st, err := s.LoadState(ctx, "c1", "hier"); err != nil || st != nil {
		t.Fatalf("empty state = %s, %v", st, err)
	}
	if err := s.SaveState(ctx, "c1", "hier", json.RawMessage(`{"cycle":1}`)); err != nil {
		t.Fatal(err)
	}
	s.SaveState(ctx, "c1", "hier", json.RawMessage(`{"cycle":2}`))
	s.SaveState(ctx, "c1", "other", json.RawMessage(`[1]`))
	s.SaveState(ctx, "c10", "hier", json.RawMessage(`"x"`)) // a prefix of c1's keys must not collide
	s.Observe(Observation{ConversationID: "c1", Pipeline: []string{"hier"}, MessagesBefore: 10, TokensBefore: 1000,
		MessagesAfter: 4, TokensAfter: 300, ContextWindow: 4000, Compacted: true, Model: "gpt-4o"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	s2 := open(t, clk.opts(dir))
	for _, tt := range []struct{ conv, policy, want string }{{"c1", "hier", `{"cycle":2}`}, {"c1", "other", `[1]`}, {"c10", "hier", `"x"`}} {
		if st, err := s2.LoadState(ctx, tt.conv, tt.policy); err != nil || string(st) != tt.want {
			t.Errorf("after restart %s/%s = %s, %v", tt.conv, tt.policy, st, err)
		}
	}
	c, ok := s2.Conversation("c1")
	if !ok || c.Requests != 1 || c.Compactions != 1 || c.TokensSaved != 700 || c.UsageRatio != 0.25 || c.Model != "gpt-4o" ||
		!c.LastCompacted.Equal(clk.Now()) {
		t.Errorf("status after restart = %+v", c)
	}
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	open(t, Options{Dir: dir})
	_, err := Open(Options{Dir: dir})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

func TestObserve(t *testing.T) {
	clk := newClock()
	s := open(t, clk.opts(t.TempDir()))
	obs := []Observation{
		{ConversationID: "a", TokensBefore: 100, TokensAfter: 100, MessagesBefore: 3, MessagesAfter: 3},
		{ConversationID: "b", TokensBefore: 500, TokensAfter: 200, Compacted: true},
		{ConversationID: "a", TokensBefore: 900, TokensAfter: 400, Compacted: true, ContextWindow: 1000},
		{ConversationID: "a", TokensBefore: 950, TokensAfter: 950, Failed: true, ContextWindow: 1000},
	}
	for _, o := range obs {
		clk.Add(time.Second)
		s.Observe(o)
	}
	a, _ := s.Conversation("a")
	if a.Requests != 3 || a.Compactions != 1 || a.Failures != 1 || a.TokensSaved != 500 || a.UsageRatio != 0.95 || a.Tokens != 950 {
		t.Errorf("a = %+v", a)
	}
	if !a.FirstSeen.Equal(clk.Now().Add(-3*time.Second)) || !a.LastSeen.Equal(clk.Now()) || !a.LastCompacted.Equal(clk.Now().Add(-time.Second)) {
		t.Errorf("a times = %v %v %v", a.FirstSeen, a.LastSeen, a.LastCompacted)
	}
	list := s.Conversations(0)
	if len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" {
		t.Errorf("order = %v", list)
	}
	if l := s.Conversations(1); len(l) != 1 || l[0].ID != "a" {
		t.Errorf("limit 1 = %v", l)
	}
	if tot := s.Totals(); tot != (Totals{Conversations: 2, Requests: 4, Compactions: 2, Failures: 1, TokensSaved: 800}) {
		t.Errorf("totals = %+v", tot)
	}
}

func TestTTLExpiry(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	opts := clk.opts(dir)
	opts.TTL = time.Hour
	s := open(t, opts)
	for _, id := range []string{"old", "fresh", "revived"} {
		s.Observe(Observation{ConversationID: id})
		s.SaveState(ctx, id, "p", json.RawMessage(`1`))
	}
	clk.Add(50 * time.Minute)
	s.Observe(Observation{ConversationID: "fresh"})
	clk.Add(20 * time.Minute)
	if n := s.expireConversations(); n != 2 {
		t.Fatalf("expired %d, want 2", n)
	}
	// "revived" comes back before its state was deleted: the state stays.
	if err := s.SaveState(ctx, "revived", "p", json.RawMessage(`2`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		if _, ok := s.Conversation("old"); ok {
			t.Error("old conversation still tracked")
		}
		if st, _ := s.LoadState(ctx, "old", "p"); st != nil {
			t.Errorf("old state kept: %s", st)
		}
		if st, _ := s.LoadState(ctx, "fresh", "p"); string(st) != "1" {
			t.Errorf("fresh state = %s", st)
		}
		if st, _ := s.LoadState(ctx, "revived", "p"); string(st) != "2" {
			t.Errorf("revived state = %s", st)
		}
	}
	check(s)
	s.Close()
	// Expiry also happens on open, for what expired while the daemon was
	// down.
	clk.Add(2 * time.Hour)
	s2 := open(t, opts)
	if n := len(s2.Conversations(0)); n != 0 {
		t.Errorf("%d conversations survived a 2h downtime with a 1h TTL", n)
	}
	s2.Flush()
	if st, _ := s2.LoadState(ctx, "fresh", "p"); st != nil {
		t.Errorf("expired state kept: %s", st)
	}
}

func TestMaxConversations(t *testing.T) {
	clk := newClock()
	opts := clk.opts(t.TempDir())
	opts.MaxConversations = 20
	s := open(t, opts)
	for i := 0; i < 25; i++ {
		clk.Add(time.Second)
		id := fmt.Sprintf("c%02d", i)
		s.Observe(Observation{ConversationID: id})
		s.SaveState(ctx, id, "p", json.RawMessage(`{}`))
	}
	got := s.Conversations(0)
	if len(got) > 20 {
		t.Fatalf("%d conversations tracked, cap 20", len(got))
	}
	// The newest are kept.
	if got[0].ID != "c24" {
		t.Errorf("newest = %s", got[0].ID)
	}
	if _, ok := s.Conversation("c00"); ok {
		t.Error("oldest kept")
	}
	s.Flush()
	if st, _ := s.LoadState(ctx, "c00", "p"); st != nil {
		t.Error("evicted conversation's state kept")
	}
	// Lowering the cap applies at the next sweep.
	s.SetLimits(time.Hour, 5, 0)
	s.Sweep()
	if n := len(s.Conversations(0)); n > 5 {
		t.Errorf("%d conversations after lowering the cap to 5", n)
	}
}

func TestStateLimits(t *testing.T) {
	opts := newClock().opts(t.TempDir())
	opts.MaxStateValue = 10
	opts.MaxStateBytes = 100
	s := open(t, opts)
	if err := s.SaveState(ctx, "c", "p", json.RawMessage(`"01234567890"`)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized state = %v", err)
	}
	for i := 0; i < 20; i++ {
		if err := s.SaveState(ctx, fmt.Sprintf("c%d", i), "p", json.RawMessage(`"0123456"`)); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := s.state.Stats()
	if st.Bytes > 100 {
		t.Errorf("state bytes %d over the cap", st.Bytes)
	}
	if v, _ := s.LoadState(ctx, "c19", "p"); v == nil {
		t.Error("newest state evicted")
	}
	if v, _ := s.LoadState(ctx, "c0", "p"); v != nil {
		t.Error("oldest state kept")
	}
}

// TestBucketUpdateMany: UpdateMany hands each key's current value to fn
// (nil when absent or expired) and stores the answers in one
// transaction, under the bucket's bounds; an error from fn writes none.
func TestBucketUpdateMany(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, clk.opts(t.TempDir()))
	b, err := s.Bucket("lists", BucketOptions{MaxEntries: 3, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	get := func(k string) string { t.Helper(); return getString(t, b, k) }
	b.Put(ctx, []byte("old"), []byte("o"))
	clk.Add(2 * time.Hour) // old expires
	b.Put(ctx, []byte("a"), []byte("1"))
	clk.Add(time.Minute)
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("old")}
	var seen []string
	err = b.UpdateMany(ctx, keys, func(i int, old []byte) ([]byte, error) {
		seen = append(seen, fmt.Sprintf("%s=%q", keys[i], old))
		return append(old, '+'), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `a="1" b="" old=""`; strings.Join(seen, " ") != want {
		t.Errorf("fn saw %s; want %s", strings.Join(seen, " "), want)
	}
	for k, want := range map[string]string{"a": "1+", "b": "+", "old": "+"} {
		if got := get(k); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	if st, _ := b.Stats(); st != (BucketStats{Entries: 3, Bytes: 9}) {
		t.Errorf("stats = %+v", st)
	}
	// Past MaxEntries the oldest writes go, as with Put: a is rewritten
	// first, so b is the oldest when c comes.
	clk.Add(time.Minute)
	if err := b.UpdateMany(ctx, [][]byte{[]byte("a"), []byte("c")}, func(_ int, old []byte) ([]byte, error) { return append(old, '!'), nil }); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "1+!", "b": "<nil>", "c": "!", "old": "+"} {
		if got := get(k); got != want {
			t.Errorf("after eviction: %s = %s, want %s", k, got, want)
		}
	}
	// An error from fn (here at the second key) writes nothing.
	boom := errors.New("boom")
	err = b.UpdateMany(ctx, [][]byte{[]byte("a"), []byte("c")}, func(i int, _ []byte) ([]byte, error) {
		if i == 1 {
			return nil, boom
		}
		return []byte("x"), nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("UpdateMany = %v; want fn's error", err)
	}
	if get("a") != "1+!" {
		t.Errorf("a = %s after a failed UpdateMany; want it unchanged", get("a"))
	}
	if err := b.UpdateMany(ctx, [][]byte{[]byte("a"), nil}, func(int, []byte) ([]byte, error) { return []byte("x"), nil }); err == nil || get("a") != "1+!" {
		t.Errorf("UpdateMany with an empty key = %v, a = %s", err, get("a"))
	}
}

func TestBucket(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	s := open(t, clk.opts(dir))
	for _, bad := range []string{"", "_state", "_x", string(make([]byte, 65))} {
		if _, err := s.Bucket(bad, BucketOptions{}); !errors.Is(err, ErrBadName) {
			t.Errorf("Bucket(%q) = %v", bad, err)
		}
	}
	b, err := s.Bucket("summaries", BucketOptions{MaxEntries: 3, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := s.Bucket("summaries", BucketOptions{MaxEntries: 3, TTL: time.Hour}); b2 != b {
		t.Error("second Bucket call returned another value")
	}
	put := func(k, v string) {
		t.Helper()
		clk.Add(time.Minute)
		if err := b.Put(ctx, []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(k string) string { t.Helper(); return getString(t, b, k) }
	put("a", "1")
	put("b", "2")
	put("c", "3")
	put("a", "1'") // a rewrite refreshes a
	put("d", "4")  // evicts b, the oldest write
	for k, want := range map[string]string{"a": "1'", "b": "<nil>", "c": "3", "d": "4", "zz": "<nil>"} {
		if got := get(k); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	if st, _ := b.Stats(); st != (BucketStats{Entries: 3, Bytes: 7}) {
		t.Errorf("stats = %+v", st)
	}
	if err := b.Delete(ctx, []byte("c")); err != nil {
		t.Fatal(err)
	}
	b.Delete(ctx, []byte("never"))
	if get("c") != "<nil>" {
		t.Error("deleted key readable")
	}
	// TTL: c is gone, a was written a minute before d. An entry expires
	// once it is older than the TTL.
	clk.Add(time.Hour) // a is now 61 minutes old, d exactly 60
	if get("a") != "<nil>" || get("d") != "4" {
		t.Errorf("after TTL: a=%s d=%s", get("a"), get("d"))
	}
	if n, err := b.expire(); err != nil || n != 1 {
		t.Errorf("expire = %d, %v", n, err)
	}
	if st, _ := b.Stats(); st != (BucketStats{Entries: 1, Bytes: 2}) { // d
		t.Errorf("stats after expiry = %+v", st)
	}
	// Prefix deletion.
	put("p/1", "x")
	put("p/2", "y")
	put("q/1", "z")
	if n, err := b.DeletePrefix(ctx, []byte("p/")); err != nil || n != 2 {
		t.Errorf("DeletePrefix = %d, %v", n, err)
	}
	if get("q/1") != "z" {
		t.Error("DeletePrefix removed another prefix")
	}
	// Byte bound.
	big, _ := s.Bucket("big", BucketOptions{MaxBytes: 10})
	if err := big.Put(ctx, []byte("k"), make([]byte, 10)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized Put = %v", err)
	}
	big.Put(ctx, []byte("k1"), []byte("1234"))
	big.Put(ctx, []byte("k2"), []byte("1234"))
	if v, _ := big.Get(ctx, []byte("k1")); v != nil {
		t.Error("byte bound not enforced")
	}
	if err := b.Put(ctx, nil, []byte("x")); err == nil {
		t.Error("empty key accepted")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Put(cctx, []byte("k"), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context = %v", err)
	}
	// Entries survive a restart.
	s.Close()
	if _, err := s.Bucket("other", BucketOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Bucket after Close = %v", err)
	}
	s2 := open(t, clk.opts(dir))
	b2, _ := s2.Bucket("summaries", BucketOptions{})
	if v, _ := b2.Get(ctx, []byte("q/1")); string(v) != "z" {
		t.Errorf("after restart q/1 = %q", v)
	}
}

func TestConcurrent(t *testing.T) {
	s := open(t, Options{Dir: t.TempDir(), FlushInterval: 5 * time.Millisecond, SweepInterval: 7 * time.Millisecond, MaxConversations: 50})
	b, _ := s.Bucket("cache", BucketOptions{MaxEntries: 30})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				id := fmt.Sprintf("c%d", (g*100+i)%70)
				s.Observe(Observation{ConversationID: id, TokensBefore: 10})
				if err := s.SaveState(ctx, id, "p", json.RawMessage(`{}`)); err != nil {
					t.Error(err)
				}
				if _, err := s.LoadState(ctx, id, "p"); err != nil {
					t.Error(err)
				}
				b.Put(ctx, []byte(id), []byte("v"))
				b.Get(ctx, []byte(id))
				_ = s.Conversations(5)
			}
		}()
	}
	wg.Wait()
	if st, _ := b.Stats(); st.Entries > 30 {
		t.Errorf("bucket holds %d entries, cap 30", st.Entries)
	}
}

func TestUnreadableRecord(t *testing.T) {
	dir := t.TempDir()
	s := open(t, Options{Dir: dir})
	s.Observe(Observation{ConversationID: "ok"})
	s.Close()
	// Corrupt one record by hand.
	s2, _ := Open(Options{Dir: dir})
	s2.db.Update(func(tx *boltTx) error { return tx.Bucket(conversationsBucket).Put([]byte("bad"), []byte("{")) })
	s2.Close()
	s3 := open(t, Options{Dir: dir})
	if _, ok := s3.Conversation("ok"); !ok {
		t.Error("good record lost")
	}
	if _, ok := s3.Conversation("bad"); ok {
		t.Error("bad record loaded")
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Error(err)
	}
}

func TestRecordUsageMoney(t *testing.T) {
	t.Parallel()
	s := open(t, newClock().opts(t.TempDir()))
	for _, id := range []string{"a", "b"} {
		s.Observe(Observation{ConversationID: id, Provider: "openai", MessagesBefore: 5, TokensBefore: 50, MessagesAfter: 5, TokensAfter: 50})
	}
	for _, tc := range []struct {
		id   string
		cost *Cost
	}{
		{"a", &Cost{PaidUSD: 0.25, FullUSD: 1}},
		{"a", &Cost{PaidUSD: 0.5, FullUSD: 0.5}},
		{"a", nil}, // a model without a price
		{"b", &Cost{PaidUSD: 2, FullUSD: 3}},
		{"gone", &Cost{PaidUSD: 9, FullUSD: 9}}, // untracked: not recorded
	} {
		s.RecordUsage(tc.id, Usage{InputTokens: 10, Cost: tc.cost}, 1000, 0.8, 0)
	}
	a, _ := s.Conversation("a")
	if a.PaidUSD != 0.75 || a.FullUSD != 1.5 || a.UnpricedRequests != 1 || a.LastUsage == nil || a.LastUsage.Cost != nil {
		t.Errorf("conversation a: paid %v full %v unpriced %d last %+v", a.PaidUSD, a.FullUSD, a.UnpricedRequests, a.LastUsage)
	}
	if tot := s.Totals(); tot.PaidUSD != 2.75 || tot.FullUSD != 4.5 || tot.UnpricedRequests != 1 {
		t.Errorf("totals: %+v", tot)
	}
}

func TestRecordUsage(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := open(t, clk.opts(dir))
	if _, needs := s.RecordUsage("none", Usage{InputTokens: 90}, 100, 0.8, 0); !needs {
		t.Error("RecordUsage on an untracked conversation still reports the trigger")
	}
	if _, ok := s.Conversation("none"); ok {
		t.Error("RecordUsage created a conversation")
	}
	s.Observe(Observation{ConversationID: "p", Provider: "openai", MessagesBefore: 5, TokensBefore: 50, MessagesAfter: 5, TokensAfter: 50, ContextWindow: 1000})
	for _, tc := range []struct {
		u         Usage
		window    int
		threshold float64
		trigger   int
		ratio     float64
		needs     bool
	}{
		{Usage{InputTokens: 500, OutputTokens: 100}, 1000, 0.8, 0, 0.6, false},
		{Usage{InputTokens: 700, OutputTokens: 100, CacheReadTokens: 600}, 1000, 0.8, 0, 0.8, true},
		{Usage{InputTokens: 100, OutputTokens: 10}, 1000, 0.8, 0, 0.11, false},
		{Usage{InputTokens: 100, OutputTokens: 10}, 0, 0.8, 100, 0, true}, // unknown window: trigger_tokens
		{Usage{InputTokens: 100, OutputTokens: 10}, 0, 0.8, 0, 0, false},
	} {
		ratio, needs := s.RecordUsage("p", tc.u, tc.window, tc.threshold, tc.trigger)
		c, _ := s.Conversation("p")
		if ratio != tc.ratio || needs != tc.needs || c.NeedsCompaction != tc.needs || c.UsageRatio != tc.ratio ||
			c.LastUsage == nil || c.LastUsage.InputTokens != tc.u.InputTokens || !c.LastUsage.At.Equal(clk.Now()) {
			t.Errorf("RecordUsage(%+v, %d) = %v, %v; status %+v", tc.u, tc.window, ratio, needs, c)
		}
	}
	s.RecordUsage("p", Usage{InputTokens: 900}, 1000, 0.8, 0)
	s.Observe(Observation{ConversationID: "p", Compacted: true, MessagesBefore: 9, MessagesAfter: 3})
	if c, _ := s.Conversation("p"); c.NeedsCompaction || c.Provider != "openai" {
		t.Errorf("a compaction keeps the flag or loses the provider: %+v", c)
	}
	if !s.SetNeedsCompaction("p", true) || s.SetNeedsCompaction("none", true) {
		t.Error("SetNeedsCompaction: wrong report")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, clk.opts(dir))
	if c, _ := s2.Conversation("p"); !c.NeedsCompaction || c.LastUsage == nil || c.LastUsage.InputTokens != 900 || c.Provider != "openai" {
		t.Errorf("after restart: %+v", c)
	}
}

// TestLabelsAndPeak: a conversation keeps its title, tags and user until
// a request brings new ones, its peak is the most tokens any request or
// response carried, and all of them survive a restart.
func TestLabelsAndPeak(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := open(t, clk.opts(dir))
	s.Observe(Observation{ConversationID: "c", TokensBefore: 900, TokensAfter: 200, Compacted: true, Title: "Fix the parser", Tags: []string{"ci", "night"}, User: "ana"})
	s.RecordUsage("c", Usage{InputTokens: 1000, OutputTokens: 200}, 4000, 0.9, 0)
	s.Observe(Observation{ConversationID: "c", TokensBefore: 1100, TokensAfter: 1100, DerivedTitle: "the task's first line"})
	c, _ := s.Conversation("c")
	if c.Title != "Fix the parser" || strings.Join(c.Tags, ",") != "ci,night" || c.User != "ana" || c.PeakTokens != 1200 {
		t.Fatalf("after a request without labels: %+v", c)
	}
	s.Observe(Observation{ConversationID: "c", TokensBefore: 1300, TokensAfter: 300, Compacted: true, Title: "Renamed", Tags: []string{"x"}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, clk.opts(dir))
	s2.Observe(Observation{ConversationID: "d", DerivedTitle: "Derived"})
	if d, _ := s2.Conversation("d"); d.Title != "Derived" {
		t.Fatalf("a derived title on a conversation without one: %+v", d)
	}
	c, _ = s2.Conversation("c")
	if c.Title != "Renamed" || strings.Join(c.Tags, ",") != "x" || c.User != "ana" || c.PeakTokens != 1300 {
		t.Fatalf("after a restart: %+v", c)
	}
}
