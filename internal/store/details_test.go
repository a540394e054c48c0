package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestLastCompaction(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := clk.opts(dir)
	opts.TTL = time.Hour
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetLastCompaction("c1", []byte(`{"rows":[]}`)); err == nil {
		t.Error("a record for an unseen conversation was accepted")
	}
	s.Observe(Observation{ConversationID: "c1", Compacted: true})
	s.Observe(Observation{ConversationID: "c2", Compacted: true})
	if err := s.SetLastCompaction("c1", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLastCompaction("c1", []byte(`{"n":2}`)); err != nil {
		t.Fatal(err)
	}
	s.SetLastCompaction("c2", []byte(`{"n":3}`))
	if err := s.SetLastCompaction("c2", make([]byte, DefaultMaxDetailValue+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized record: %v", err)
	}
	if v, err := s.LastCompaction(ctx, "c1"); err != nil || string(v) != `{"n":2}` {
		t.Errorf("pending record = %s, %v", v, err)
	}
	if v, err := s.LastCompaction(ctx, "nope"); err != nil || v != nil {
		t.Errorf("unknown conversation = %s, %v", v, err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.LastCompaction(ctx, "c1"); string(v) != `{"n":2}` {
		t.Errorf("written record = %s", v)
	}
	// Records survive a restart.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, opts)
	if v, _ := s.LastCompaction(ctx, "c2"); string(v) != `{"n":3}` {
		t.Errorf("after a restart = %s", v)
	}
	// A record expires with its conversation.
	clk.Add(30 * time.Minute)
	s.Observe(Observation{ConversationID: "c2"})
	clk.Add(45 * time.Minute)
	if n, err := s.Sweep(); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	if v, _ := s.LastCompaction(ctx, "c1"); v != nil {
		t.Errorf("expired conversation's record = %s", v)
	}
	if v, _ := s.LastCompaction(ctx, "c2"); string(v) != `{"n":3}` {
		t.Errorf("live conversation's record = %s", v)
	}
	if st, _ := s.details.Stats(); st.Entries != 1 {
		t.Errorf("details bucket holds %d entries after the sweep, want 1", st.Entries)
	}
}

func TestLastCompactionBounded(t *testing.T) {
	opts := newClock().opts(t.TempDir())
	opts.MaxDetailBytes = 10 << 10
	s := open(t, opts)
	record := []byte(`"` + strings.Repeat("x", 1000) + `"`)
	for i := 0; i < 50; i++ {
		id := fmt.Sprintf("c%02d", i)
		s.Observe(Observation{ConversationID: id})
		if err := s.SetLastCompaction(id, record); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Flush()
	st, _ := s.details.Stats()
	if st.Bytes > opts.MaxDetailBytes || st.Entries == 0 {
		t.Errorf("details bucket: %d entries, %d bytes (cap %d)", st.Entries, st.Bytes, opts.MaxDetailBytes)
	}
	if v, _ := s.LastCompaction(ctx, "c49"); v == nil {
		t.Error("the newest record was evicted")
	}
	if v, _ := s.LastCompaction(ctx, "c00"); v != nil {
		t.Error("the oldest record survived over the cap")
	}
}

// TestLastCompactionFunc: a record given as a function is built once,
// when it is read or written, and the latest one wins.
func TestLastCompactionFunc(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(newClock().opts(dir))
	if err != nil {
		t.Fatal(err)
	}
	s.Observe(Observation{ConversationID: "c1", Compacted: true})
	builds := 0
	build := func(v string) func() ([]byte, error) {
		return func() ([]byte, error) { builds++; return []byte(v), nil }
	}
	for i := 0; i < 100; i++ { // a conversation compacted many times
		if err := s.SetLastCompactionFunc("c1", build(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	if builds != 0 {
		t.Fatalf("%d records built before anyone needed one", builds)
	}
	if v, err := s.LastCompaction(ctx, "c1"); err != nil || string(v) != `{"n":99}` || builds != 1 {
		t.Fatalf("read = %s, %v (%d builds)", v, err, builds)
	}
	if err := s.Flush(); err != nil || builds != 1 {
		t.Fatalf("flush: %v (%d builds)", err, builds)
	}
	s.SetLastCompactionFunc("c1", build(`{"n":100}`))
	s.SetLastCompaction("c1", []byte(`{"n":101}`)) // a later plain record replaces it
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, newClock().opts(dir))
	if v, _ := s.LastCompaction(ctx, "c1"); string(v) != `{"n":101}` || builds != 1 {
		t.Errorf("after a restart = %s (%d builds)", v, builds)
	}
	if err := s.SetLastCompactionFunc("nope", build("{}")); err == nil {
		t.Error("a record for an unseen conversation was accepted")
	}
}

// TestLastCompactionWhileFlushBuilds: a record a Flush is building is
// still read (once built), never lost to a read that falls between the
// builder and the pending records.
func TestLastCompactionWhileFlushBuilds(t *testing.T) {
	s, err := Open(newClock().opts(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Observe(Observation{ConversationID: "c1", Compacted: true})
	entered, release := make(chan struct{}), make(chan struct{})
	if err := s.SetLastCompactionFunc("c1", func() ([]byte, error) {
		close(entered)
		<-release
		return []byte(`{"n":1}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush() }()
	<-entered // the flush is building the record
	read := make(chan string, 1)
	go func() {
		v, _ := s.LastCompaction(ctx, "c1")
		read <- string(v)
	}()
	// The read waits for the build: an answer before the release can only
	// be a wrong one (no record). (A slow machine may start the read
	// only after the release; the test then passes without showing
	// anything, but it never fails a correct store.)
	var v string
	select {
	case v = <-read:
		close(release)
	case <-time.After(200 * time.Millisecond):
		close(release)
		v = <-read
	}
	if v != `{"n":1}` {
		t.Errorf("read while a flush built the record = %q", v)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if v, _ := s.LastCompaction(ctx, "c1"); string(v) != `{"n":1}` {
		t.Errorf("after the flush = %q", v)
	}
}
