package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestRequestsBound: the last requests are bounded by MaxRequestBytes,
// least recently used out first; a body over the bound is dropped but its
// entry kept; the offset survives the next request; a lowered limit
// applies at once; the conversations ScanMessages reads are not touched.
func TestRequestsBound(t *testing.T) {
	t.Parallel()
	m := NewMemory(MemoryOptions{MaxRequestBytes: 4000})
	b := bytes.Repeat([]byte("x"), 1000)
	for _, id := range []string{"a", "b", "c", "d"} {
		m.RememberRequest(id, LastRequest{Format: "openai", Model: "gpt-4o", Body: b, Hashes: []uint64{1}, Counts: []int{1}})
	}
	if st := m.Stats(); st.Requests != 3 || st.RequestBytes > 4000 || st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("%+v", st)
	}
	if _, ok := m.LastRequest("a"); ok {
		t.Fatal("the least recently used was not the one dropped")
	}
	if _, ok := m.LastRequest("d"); !ok {
		t.Fatal("the most recent was dropped")
	}
	m.Calibrate("d", -5)
	m.RememberRequest("d", LastRequest{Format: "openai", Model: "gpt-4o", Body: b, Offset: 99})
	if e, _ := m.LastRequest("d"); e.Offset != 0 {
		t.Fatalf("offset %d, want 0 (a negative one counts as 0; the argument's is ignored)", e.Offset)
	}
	m.Calibrate("d", 42)
	m.RememberRequest("d", LastRequest{Format: "openai", Model: "gpt-4o", Body: b, Pipeline: []string{"sliding"}})
	if e, _ := m.LastRequest("d"); e.Offset != 42 || !slices.Equal(e.Pipeline, []string{"sliding"}) || e.Model != "gpt-4o" || e.Format != "openai" {
		t.Fatalf("offset not kept, or fields lost: %+v", e)
	}
	m.Calibrate("unknown", 7)
	if _, ok := m.LastRequest("unknown"); ok {
		t.Fatal("Calibrate made an entry")
	}
	m.RememberRequest("huge", LastRequest{Format: "openai", Model: "gpt-4o", Body: bytes.Repeat(b, 10), Hashes: []uint64{5}, Counts: []int{9}})
	if e, ok := m.LastRequest("huge"); !ok || e.Body != nil || e.Counts[0] != 9 {
		t.Fatalf("a body over the bound is kept, or its entry lost: %v %+v", ok, e)
	}
	m.SetRequestLimit(0)
	if st := m.Stats(); st.Requests != 0 || st.RequestBytes != 0 {
		t.Fatalf("%+v after the limit went to 0", st)
	}
}

// TestItemCounts: items whose bytes were in the previous request, in
// place or moved, take its counts; only the rest are left to count.
func TestItemCounts(t *testing.T) {
	t.Parallel()
	m := NewMemory(MemoryOptions{})
	raw := func(ss ...string) []json.RawMessage {
		out := make([]json.RawMessage, len(ss))
		for i, s := range ss {
			out[i] = json.RawMessage(s)
		}
		return out
	}
	first := raw(`"a"`, `"bb"`, `"ccc"`)
	h1, c1, missing := m.ItemCounts(first, nil)
	if len(h1) != 3 || !slices.Equal(c1, []int{0, 0, 0}) || !slices.Equal(missing, []int{0, 1, 2}) {
		t.Fatalf("%v %v %v", h1, c1, missing)
	}
	if h1[0] == h1[1] || h1[1] == h1[2] {
		t.Fatalf("distinct items hash alike: %v", h1)
	}
	prev := &LastRequest{Hashes: h1, Counts: []int{30, 40, 50}} // as the caller counted them
	// The first item dropped (a compacted history), the rest moved, one added.
	h2, c2, missing := m.ItemCounts(raw(`"bb"`, `"ccc"`, `"dddd"`), prev)
	if !slices.Equal(c2, []int{40, 50, 0}) || !slices.Equal(missing, []int{2}) || h2[0] != h1[1] || h2[1] != h1[2] {
		t.Fatalf("%v %v %v", h2, c2, missing)
	}
	// The same request again: nothing left to count.
	if _, c, missing := m.ItemCounts(first, prev); missing != nil || !slices.Equal(c, []int{30, 40, 50}) {
		t.Fatalf("%v %v", c, missing)
	}
	// An item edited in place is counted again.
	if _, c, missing := m.ItemCounts(raw(`"a"`, `"bX"`, `"ccc"`), prev); !slices.Equal(missing, []int{1}) || !slices.Equal(c, []int{30, 0, 50}) {
		t.Fatalf("%v %v", c, missing)
	}
	// A LastRequest with fewer counts than hashes is read only as far as
	// it has counts.
	if _, c, missing := m.ItemCounts(first, &LastRequest{Hashes: h1, Counts: []int{7}}); !slices.Equal(missing, []int{1, 2}) || c[0] != 7 {
		t.Fatalf("%v %v", c, missing)
	}
}

// TestRequestsConcurrent exercises the by-id memory from many goroutines
// (run with -race).
func TestRequestsConcurrent(t *testing.T) {
	t.Parallel()
	m := NewMemory(MemoryOptions{MaxRequestBytes: 1 << 14})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				id := fmt.Sprintf("c%d", (g*7+i)%13)
				items := []json.RawMessage{json.RawMessage(fmt.Sprintf(`"%d"`, i))}
				last, ok := m.LastRequest(id)
				var prev *LastRequest
				if ok {
					prev = &last
				}
				h, c, _ := m.ItemCounts(items, prev)
				m.RememberRequest(id, LastRequest{Format: "openai", Model: "m", Body: bytes.Repeat([]byte("y"), 500), Hashes: h, Counts: c})
				m.Calibrate(id, i)
			}
		}()
	}
	wg.Wait()
	if st := m.Stats(); st.RequestBytes > 1<<14 || st.Requests == 0 {
		t.Fatalf("%+v", st)
	}
}
