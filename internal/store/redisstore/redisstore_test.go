package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/store/redisstore"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

// clock is a test clock the stores share.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

func open(t *testing.T, url string, o redisstore.Options) *redisstore.Store {
	t.Helper()
	o.URL = url
	if o.SweepInterval == 0 {
		o.SweepInterval = time.Hour // tests sweep by hand
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = 10 * time.Second // a shared machine under -race is slow; the degraded tests set their own
	}
	s, err := redisstore.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := dir + "/pw"
	if err := writeFile(pw, "s3cret\n"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, pwFile string
		wantErr     bool
		check       func(redisstore.Target) error
	}{
		{url: "redis://127.0.0.1:6379/2", check: func(tg redisstore.Target) error {
			if tg.Standalone == nil || tg.Standalone.Addr != "127.0.0.1:6379" || tg.Standalone.DB != 2 {
				return fmt.Errorf("%+v", tg.Standalone)
			}
			return nil
		}},
		{url: "rediss://u:p@h:6380/0", check: func(tg redisstore.Target) error {
			if tg.Standalone.TLSConfig == nil || tg.Standalone.Password != "p" || tg.Standalone.Username != "u" {
				return fmt.Errorf("tls or auth missing")
			}
			return nil
		}},
		{url: "unix:///run/redis.sock?db=3", pwFile: pw, check: func(tg redisstore.Target) error {
			if tg.Standalone.Network != "unix" || tg.Standalone.DB != 3 || tg.Standalone.Password != "s3cret" {
				return fmt.Errorf("%+v", tg.Standalone)
			}
			return nil
		}},
		{url: "redis://:pw@a:1,redis://b:2,redis://c:3", check: func(tg redisstore.Target) error {
			if tg.Cluster == nil || len(tg.Cluster.Addrs) != 3 || tg.Cluster.Password != "pw" {
				return fmt.Errorf("%+v", tg.Cluster)
			}
			return nil
		}},
		{url: "", wantErr: true},
		{url: "http://x", wantErr: true},
		{url: "redis://a:1,rediss://b:2", wantErr: true},
		{url: "redis://a:1/1,redis://b:2", wantErr: true},
		{url: "redis://a:1", pwFile: dir + "/missing", wantErr: true},
	} {
		tg, err := redisstore.ParseURL(tc.url, tc.pwFile)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err %v, want error %v", tc.url, err, tc.wantErr)
			continue
		}
		if err == nil {
			if cerr := tc.check(tg); cerr != nil {
				t.Errorf("%q: %v", tc.url, cerr)
			}
		}
	}
	if got := redisstore.Redact("redis://u:secret@h:1,redis://h:2"); got != "redis://u:xxxxx@h:1,redis://h:2" {
		t.Errorf("Redact: %s", got)
	}
}

func TestStateCompareAndSet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := open(t, srv.URL(), redisstore.Options{Replica: "a"})
	b := open(t, srv.URL(), redisstore.Options{Replica: "b"})
	ctx := context.Background()
	st, v, err := a.LoadStateVersion(ctx, "c1", "p")
	if err != nil || st != nil || v != "" {
		t.Fatalf("empty: %s %q %v", st, v, err)
	}
	if err := a.SaveStateIf(ctx, "c1", "p", json.RawMessage(`{"n":1}`), v); err != nil {
		t.Fatal(err)
	}
	// b read before a wrote: its write loses and says so.
	if err := b.SaveStateIf(ctx, "c1", "p", json.RawMessage(`{"n":99}`), v); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale write: %v, want ErrConflict", err)
	}
	got, v2, err := b.LoadStateVersion(ctx, "c1", "p")
	if err != nil || string(got) != `{"n":1}` || v2 == v {
		t.Fatalf("after CAS: %s %q %v", got, v2, err)
	}
	// Many concurrent read-modify-writes from two replicas: every
	// increment that reports success is kept, none is lost.
	var wg sync.WaitGroup
	var wins atomic.Int64
	for i := 0; i < 40; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cur, ver, err := s.LoadStateVersion(ctx, "c2", "p")
				if err != nil {
					t.Error(err)
					return
				}
				var n struct{ N int }
				_ = json.Unmarshal(cur, &n)
				next, _ := json.Marshal(struct{ N int }{n.N + 1})
				err = s.SaveStateIf(ctx, "c2", "p", next, ver)
				if errors.Is(err, store.ErrConflict) {
					continue
				}
				if err != nil {
					t.Error(err)
				}
				wins.Add(1)
				return
			}
		}()
	}
	wg.Wait()
	final, _ := a.LoadState(ctx, "c2", "p")
	if want := fmt.Sprintf(`{"N":%d}`, wins.Load()); string(final) != want || wins.Load() != 40 {
		t.Fatalf("final %s, want %s (40 writers)", final, want)
	}
	if err := a.SaveState(ctx, "c3", "p", make(json.RawMessage, store.DefaultMaxStateValue+1)); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("oversized state: %v", err)
	}
}

func TestStatusAddsUpAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := open(t, srv.URL(), redisstore.Options{Replica: "a"})
	b := open(t, srv.URL(), redisstore.Options{Replica: "b"})
	obs := store.Observation{ConversationID: "conv", Model: "m", Pipeline: []string{"p"}, MessagesBefore: 10, TokensBefore: 1000, MessagesAfter: 4, TokensAfter: 400, ContextWindow: 2000, Compacted: true}
	a.Observe(obs)
	b.Observe(obs)
	obs.Failed, obs.Compacted = true, false
	b.Observe(obs)
	c, ok := a.Conversation("conv")
	if !ok {
		t.Fatal("conversation not found")
	}
	if c.Requests != 3 || c.Compactions != 2 || c.Failures != 1 || c.TokensSaved != 1800 || c.Replica != "b" || c.UsageRatio != 0.5 {
		t.Fatalf("fleet status: %+v", c)
	}
	// The deferred trigger set on one replica is seen on the other.
	if _, needs := a.RecordUsage("conv", store.Usage{InputTokens: 1900, OutputTokens: 50}, 2000, 0.9, 0); !needs {
		t.Fatal("usage over the threshold did not set the trigger")
	}
	if c, _ := b.Conversation("conv"); !c.NeedsCompaction || c.LastUsage == nil || c.LastUsage.InputTokens != 1900 {
		t.Fatalf("trigger not shared: %+v", c)
	}
	if a.SetNeedsCompaction("unknown", true) {
		t.Fatal("SetNeedsCompaction on an unknown conversation reported tracked")
	}
	// Money adds up across replicas.
	a.RecordUsage("conv", store.Usage{InputTokens: 10, Cost: &store.Cost{PaidUSD: 0.125, FullUSD: 0.5}}, 2000, 0.9, 0)
	b.RecordUsage("conv", store.Usage{InputTokens: 10, Cost: &store.Cost{PaidUSD: 0.25, FullUSD: 0.25}}, 2000, 0.9, 0)
	b.RecordUsage("conv", store.Usage{InputTokens: 10}, 2000, 0.9, 0) // unpriced
	tot := b.Totals()
	if tot.Conversations != 1 || tot.Requests != 3 || tot.PaidUSD != 0.375 || tot.FullUSD != 0.75 || tot.UnpricedRequests != 2 {
		t.Fatalf("totals: %+v", tot)
	}
	if err := a.SetLastCompactionFunc("conv", func() ([]byte, error) { return []byte(`{"r":1}`), nil }); err != nil {
		t.Fatal(err)
	}
	a.Flush()
	if rec, err := b.LastCompaction(context.Background(), "conv"); err != nil || string(rec) != `{"r":1}` {
		t.Fatalf("record: %s %v", rec, err)
	}
}

func TestBoundsTTLAndCaps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := newClock()
	s := open(t, srv.URL(), redisstore.Options{Now: clk.Now, TTL: time.Hour, MaxConversations: 10, MaxStateBytes: 1000})
	ctx := context.Background()
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("c%02d", i)
		s.Observe(store.Observation{ConversationID: id})
		if err := s.SaveState(ctx, id, "p", json.RawMessage(fmt.Sprintf(`"%0100d"`, i))); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
	}
	// Observe itself starts a background sweep once a new conversation
	// takes the index over the cap, so the sweep that evicts may be that
	// one or ours: either way c00 and c01 go, and what is left is the
	// cap's nine tenths plus any conversation seen after that sweep.
	var cs []store.Conversation
	sweepUntil(t, s, func() bool {
		cs = s.Conversations(0)
		return len(cs) <= 10 && !hasConversation(cs, "c00") && !hasConversation(cs, "c01")
	})
	if len(cs) < 9 || cs[0].ID != "c11" {
		t.Fatalf("cap of 10 keeps the 9 or 10 most recent, newest first; got %d: %v", len(cs), cs)
	}
	if st, _ := s.LoadState(ctx, "c00", "p"); st != nil {
		t.Fatal("state of an evicted conversation kept")
	}
	// State over its byte cap: the least recently seen conversations'
	// state goes first.
	size, _ := s.Client().Get(ctx, s.Prefix()+":statebytes").Int64()
	if size > 1000 {
		t.Fatalf("state bytes %d over the 1000 cap", size)
	}
	if st, _ := s.LoadState(ctx, "c11", "p"); st == nil {
		t.Fatal("the most recent conversation's state was evicted")
	}
	clk.Add(2 * time.Hour)
	sweepUntil(t, s, func() bool { return len(s.Conversations(0)) == 0 })
	if size, _ := s.Client().Get(ctx, s.Prefix()+":statebytes").Int64(); size != 0 {
		t.Fatalf("state bytes %d after everything expired", size)
	}
	// A bucket: entries and bytes capped, oldest writes first, TTL.
	b, err := s.Bucket("cache", store.BucketOptions{MaxEntries: 3, MaxBytes: 100, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := b.Put(ctx, []byte(fmt.Sprintf("k%d", i)), []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Millisecond * 2)
	}
	if v, _ := b.Get(ctx, []byte("k0")); v != nil {
		t.Fatal("oldest entry kept past MaxEntries")
	}
	if v, _ := b.Get(ctx, []byte("k4")); string(v) != "0123456789" {
		t.Fatalf("newest entry: %q", v)
	}
	if st, _ := b.Stats(ctx); st.Entries != 3 || st.Bytes != 36 {
		t.Fatalf("stats %+v", st)
	}
	if err := b.Put(ctx, []byte("big"), make([]byte, 200)); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("oversized entry: %v", err)
	}
	clk.Add(2 * time.Minute)
	if v, _ := b.Get(ctx, []byte("k4")); v != nil {
		t.Fatal("entry served past its TTL")
	}
	sweepUntil(t, s, func() bool {
		st, _ := b.Stats(ctx)
		return st.Entries == 0 && st.Bytes == 0
	})
	if _, err := s.Bucket("_x", store.BucketOptions{}); !errors.Is(err, store.ErrBadName) {
		t.Fatal("reserved bucket name accepted")
	}
}

// TestDegradedAndRecovery stops redis-server mid-run: every call keeps
// answering (fast), writes are dropped and counted, Health says degraded;
// after a restart the store recovers by itself.
func TestDegradedAndRecovery(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL(), redisstore.Options{ProbeInterval: 20 * time.Millisecond, OpTimeout: time.Second})
	ctx := context.Background()
	s.Observe(store.Observation{ConversationID: "c"})
	if s.Health().Degraded {
		t.Fatal("degraded while the server runs")
	}
	srv.Kill()
	s.Observe(store.Observation{ConversationID: "c"}) // notices
	h := s.Health()
	if !h.Degraded || h.Error == "" || h.DroppedWrites == 0 {
		t.Fatalf("after kill: %+v", h)
	}
	for i := 0; i < 50; i++ {
		s.Observe(store.Observation{ConversationID: "c"})
		if err := s.SaveState(ctx, "c", "p", json.RawMessage(`1`)); !errors.Is(err, redisstore.ErrUnavailable) {
			t.Fatalf("SaveState while down: %v", err)
		}
		if _, err := s.LoadState(ctx, "c", "p"); !errors.Is(err, redisstore.ErrUnavailable) {
			t.Fatalf("LoadState while down: %v", err)
		}
		if _, ok := s.Conversation("c"); ok {
			t.Fatal("conversation served while down")
		}
	}
	if h := s.Health(); h.DroppedWrites < 100 || h.FailedReads < 100 {
		t.Fatalf("counts while down: %+v", h)
	}
	srv.Restart()
	for s.Health().Degraded {
		time.Sleep(10 * time.Millisecond) // the probe runs every 20ms; the test's deadline bounds this
	}
	s.Observe(store.Observation{ConversationID: "c"})
	if c, ok := s.Conversation("c"); !ok || c.Requests != 1 {
		t.Fatalf("after recovery: %+v %v", c, ok)
	}
}

// TestUnreachableAtStart: a daemon whose Redis is not up yet starts
// degraded and recovers when it comes.
func TestUnreachableAtStart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Kill()
	s := open(t, srv.URL(), redisstore.Options{ProbeInterval: 20 * time.Millisecond})
	if !s.Health().Degraded {
		t.Fatal("not degraded with no server")
	}
	srv.Restart()
	for s.Health().Degraded {
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCluster runs the store on a real 3-node Redis Cluster: a
// conversation's keys share a slot (the CAS script would fail with
// CROSSSLOT otherwise), and status, state, buckets and the sweep work.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	a := open(t, cl.URL(), redisstore.Options{Replica: "a", MaxConversations: 20})
	b := open(t, cl.URL(), redisstore.Options{Replica: "b", MaxConversations: 20})
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("conv-%d", i)
		a.Observe(store.Observation{ConversationID: id, TokensBefore: 10})
		b.Observe(store.Observation{ConversationID: id, TokensBefore: 10})
		_, v, err := a.LoadStateVersion(ctx, id, "p")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.SaveStateIf(ctx, id, "p", json.RawMessage(`{"i":1}`), v); err != nil {
			t.Fatal(err)
		}
		if err := b.SaveStateIf(ctx, id, "p", json.RawMessage(`{"i":2}`), v); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("cluster CAS: %v", err)
		}
	}
	if a.Health().Degraded {
		t.Fatalf("degraded: %+v", a.Health())
	}
	slots := map[int64]bool{}
	for _, kind := range []string{"st", "ps"} {
		n, err := a.Client().ClusterKeySlot(ctx, a.Prefix()+":{conv-29}:"+kind).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[n] = true
	}
	if len(slots) != 1 {
		t.Fatalf("a conversation's keys span slots %v", slots)
	}
	if c, ok := b.Conversation("conv-29"); !ok || c.Requests != 2 {
		t.Fatalf("cluster status: %+v", c)
	}
	sweepUntil(t, a, func() bool { return len(b.Conversations(0)) <= 20 })
	bk, err := a.Bucket("llm_cache", store.BucketOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := bk.Put(ctx, []byte(fmt.Sprintf("key%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := bk.Get(ctx, []byte("key3")); err != nil || string(v) != "v" {
		t.Fatalf("cluster bucket: %q %v", v, err)
	}
}

// sweepUntil sweeps until done reports true. A sweep that finds another
// one holding the fleet's sweep lock (here: the one Observe starts in the
// background) does nothing, so it waits for the lock to be free and
// sweeps again. The minute is a hang guard, not a time budget.
func sweepUntil(t *testing.T, s *redisstore.Store, done func() bool) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		if n, _ := s.Client().Exists(ctx, s.Prefix()+":sweeplock").Result(); n == 0 {
			if _, err := s.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if done() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweep did not reach the expected state within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hasConversation(cs []store.Conversation, id string) bool {
	for _, c := range cs {
		if c.ID == id {
			return true
		}
	}
	return false
}

// TestLabelsAndPeak: titles, tags and users are shared by a fleet, and
// the peak is the most tokens any replica saw.
func TestLabelsAndPeak(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := open(t, srv.URL(), redisstore.Options{Replica: "a"})
	b := open(t, srv.URL(), redisstore.Options{Replica: "b"})
	a.Observe(store.Observation{ConversationID: "c", TokensBefore: 900, TokensAfter: 200, Compacted: true, Title: "Fix the parser", Tags: []string{"ci", "night"}, User: "ana"})
	b.RecordUsage("c", store.Usage{InputTokens: 1000, OutputTokens: 200}, 4000, 0.9, 0)
	b.Observe(store.Observation{ConversationID: "c", TokensBefore: 1100, TokensAfter: 1100, DerivedTitle: "the task's first line"})
	b.Observe(store.Observation{ConversationID: "d", DerivedTitle: "Derived"})
	if d, _ := a.Conversation("d"); d.Title != "Derived" {
		t.Fatalf("a derived title on a conversation without one: %+v", d)
	}
	c, ok := a.Conversation("c")
	if !ok || c.Title != "Fix the parser" || fmt.Sprint(c.Tags) != "[ci night]" || c.User != "ana" || c.PeakTokens != 1200 {
		t.Fatalf("fleet labels: %+v", c)
	}
	a.Observe(store.Observation{ConversationID: "c", TokensBefore: 1300, TokensAfter: 300, Title: "Renamed", Tags: []string{"x"}})
	// The list is ordered by last seen at the index's millisecond, so c
	// and d may tie: find c by its id.
	l := b.Conversations(0)
	i := slices.IndexFunc(l, func(c store.Conversation) bool { return c.ID == "c" })
	if len(l) != 2 || i < 0 || l[i].Title != "Renamed" || fmt.Sprint(l[i].Tags) != "[x]" || l[i].PeakTokens != 1300 {
		t.Fatalf("list: %+v", l)
	}
}
