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

// TestRequestsSharing: last requests are found by their body's opening,
// in their format only, the most recently remembered first, at most
// maxPerOpening per opening; a request replaced or dropped (evicted, or
// its body over the bound) is no longer found by its old opening, and
// the index holds nothing the memory does not; a lookup is not a use.
func TestRequestsSharing(t *testing.T) {
	t.Parallel()
	m := NewMemory(MemoryOptions{MaxRequestBytes: 1 << 20})
	opening := bytes.Repeat([]byte("o"), RequestOpeningBytes)
	body := func(rest string) []byte { return append(slices.Clone(opening), rest...) }
	ids := func(rs []LastRequest) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Model)
		}
		return out
	}
	checkIndex := func() {
		t.Helper()
		m.mu.Lock()
		defer m.mu.Unlock()
		n := 0
		for key, b := range m.byOpening {
			if len(b) == 0 || len(b) > maxPerOpening {
				t.Fatalf("opening %x holds %d", key, len(b))
			}
			for _, el := range b {
				e := el.Value.(*requestEntry)
				if !e.indexed || e.opening != key || m.byID[e.id] != el {
					t.Fatalf("the index holds %q, which the memory does not hold under that opening", e.id)
				}
				n++
			}
		}
		indexed := 0
		for _, el := range m.byID {
			if el.Value.(*requestEntry).indexed {
				indexed++
			}
		}
		if n != indexed {
			t.Fatalf("the index holds %d, %d entries say they are in it", n, indexed)
		}
	}

	m.RememberRequest("a", LastRequest{Format: "openai", Model: "a", Body: body("a1")})
	m.RememberRequest("b", LastRequest{Format: "openai", Model: "b", Body: body("b1")})
	// A lookup is not a use: the least recently used goes first still.
	if got := ids(m.RequestsSharing("openai", opening, nil)); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("found %q, want b then a", got)
	}
	st := m.Stats()
	m.SetRequestLimit(st.RequestBytes - 1)
	if _, ok := m.LastRequest("a"); ok {
		t.Fatal("a lookup by opening kept the least recently used request")
	}
	checkIndex()
	m.SetRequestLimit(1 << 20)
	m.RememberRequest("a", LastRequest{Format: "openai", Model: "a", Body: body("a1")})
	m.RememberRequest("b", LastRequest{Format: "openai", Model: "b", Body: body("b1")})
	m.RememberRequest("c", LastRequest{Format: "anthropic", Model: "c", Body: body("c1")})
	m.RememberRequest("short", LastRequest{Format: "openai", Model: "short", Body: opening[:RequestOpeningBytes-1]})
	if got := ids(m.RequestsSharing("openai", body("a1, and more"), nil)); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("found %q, want b then a (most recent first, openai only)", got)
	}
	if got := m.RequestsSharing("openai", opening[:RequestOpeningBytes-1], nil); len(got) != 0 {
		t.Fatalf("a body shorter than the opening found %d", len(got))
	}
	other := slices.Clone(opening)
	other[RequestOpeningBytes-1] = 'x'
	if got := m.RequestsSharing("openai", other, nil); len(got) != 0 {
		t.Fatalf("another opening found %d", len(got))
	}
	// Replaced by a request that opens differently: found only by that.
	m.RememberRequest("a", LastRequest{Format: "openai", Model: "a", Body: other})
	if got := ids(m.RequestsSharing("openai", opening, nil)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("found %q by the old opening, want b", got)
	}
	if got := ids(m.RequestsSharing("openai", other, nil)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("found %q by the new opening, want a", got)
	}
	// A body over the bound is not held, so not found.
	m.SetRequestLimit(3000)
	m.RememberRequest("b", LastRequest{Format: "openai", Model: "b", Body: body(string(bytes.Repeat([]byte("z"), 3000)))})
	if got := m.RequestsSharing("openai", opening, nil); len(got) != 0 {
		t.Fatalf("a dropped body is found: %q", ids(got))
	}
	checkIndex()
	m.SetRequestLimit(1 << 20)

	// At most maxPerOpening per opening, the most recent ones; the rest
	// stay held (by id).
	for i := range maxPerOpening + 8 {
		m.RememberRequest(fmt.Sprint("n", i), LastRequest{Format: "openai", Model: fmt.Sprint("n", i), Body: body(fmt.Sprint(i))})
	}
	got := ids(m.RequestsSharing("openai", opening, nil))
	if len(got) != maxPerOpening || got[0] != fmt.Sprint("n", maxPerOpening+7) || got[maxPerOpening-1] != "n8" {
		t.Fatalf("found %d (%q...), want the %d most recent", len(got), got[:min(3, len(got))], maxPerOpening)
	}
	if _, ok := m.LastRequest("n0"); !ok {
		t.Fatal("a request left out of the index was dropped from the memory")
	}
	checkIndex()

	m.SetRequestLimit(0)
	checkIndex()
	if len(m.byOpening) != 0 {
		t.Fatalf("an empty memory's index holds %d openings", len(m.byOpening))
	}
}
