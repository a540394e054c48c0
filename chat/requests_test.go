package chat

import (
	"bytes"
	"encoding/json"
	"errors"
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

// TestCountItems: items whose bytes were in the previous request, in
// place or moved, take its counts; only the rest are counted, and a
// counter's error or wrong answer is returned.
func TestCountItems(t *testing.T) {
	t.Parallel()
	m := NewMemory(MemoryOptions{})
	raw := func(ss ...string) []json.RawMessage {
		out := make([]json.RawMessage, len(ss))
		for i, s := range ss {
			out[i] = json.RawMessage(s)
		}
		return out
	}
	var asked [][]int
	byLen := func(items []json.RawMessage) func([]int) ([]int, error) {
		return func(miss []int) ([]int, error) {
			asked = append(asked, slices.Clone(miss))
			out := make([]int, len(miss))
			for k, i := range miss {
				out[k] = len(items[i])
			}
			return out, nil
		}
	}
	first := raw(`"a"`, `"bb"`, `"ccc"`)
	h1, c1, err := m.CountItems(first, nil, byLen(first))
	if err != nil || !slices.Equal(c1, []int{3, 4, 5}) || len(h1) != 3 {
		t.Fatalf("%v %v %v", h1, c1, err)
	}
	prev := &LastRequest{Hashes: h1, Counts: []int{30, 40, 50}} // counts as the caller remembered them
	// The first item dropped (a compacted history), one edited, one added.
	next := raw(`"bb"`, `"ccc"`, `"dddd"`)
	asked = nil
	h2, c2, err := m.CountItems(next, prev, byLen(next))
	if err != nil || !slices.Equal(c2, []int{40, 50, 6}) || h2[0] != h1[1] || h2[1] != h1[2] {
		t.Fatalf("%v %v %v", h2, c2, err)
	}
	if len(asked) != 1 || !slices.Equal(asked[0], []int{2}) {
		t.Fatalf("counted %v, want only item 2", asked)
	}
	asked = nil
	if _, _, err := m.CountItems(first, prev, byLen(first)); err != nil || len(asked) != 0 {
		t.Fatalf("a repeated request was counted again (%v) or failed: %v", asked, err)
	}
	boom := errors.New("boom")
	if _, _, err := m.CountItems(next, nil, func([]int) ([]int, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if _, _, err := m.CountItems(next, nil, func([]int) ([]int, error) { return []int{1}, nil }); err == nil {
		t.Fatal("a counter that answered 1 count for 3 items was trusted")
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
				h, c, err := m.CountItems(items, prev, func(miss []int) ([]int, error) { return make([]int, len(miss)), nil })
				if err != nil {
					t.Error(err)
					return
				}
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
