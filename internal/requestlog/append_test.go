package requestlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestAppendRecords: appending to a stored list as bytes gives the list
// decoding, appending, trimming and encoding the whole list gave (what
// the store writer did before), in the one-record-a-line layout, from a
// list in that layout or in any other (one line, indented); an
// unreadable list starts over.
func TestAppendRecords(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 6, 0, 0, 123456789, time.UTC)
	recs := func(from, n int) []Record {
		out := make([]Record, n)
		for i := range out {
			cost := float64(from+i) / 7
			out[i] = Record{ID: fmt.Sprintf("r-%d", from+i), Time: at.Add(time.Duration(from+i) * time.Millisecond), Kind: KindCompact,
				ConversationID: "c", Pipeline: []string{"ledger"}, TokensBefore: from + i, CompactdMS: 0.25, CostUSD: &cost,
				Warnings: []string{"quote \" and <html> & \u2028"}}
		}
		return out
	}
	encode := func(t *testing.T, rs []Record) []byte {
		b, err := json.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// lines is rs in the one-a-line layout; indent is rs indented.
	lines := func(t *testing.T, rs []Record) []byte {
		b, err := appendRecords(nil, rs, len(rs))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	indent := func(t *testing.T, rs []Record) []byte {
		b, err := json.MarshalIndent(rs, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// reencode decodes a stored list and encodes it on one line.
	reencode := func(t *testing.T, b []byte) []byte {
		var list []Record
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatalf("stored list %s: %v", b, err)
		}
		return encode(t, list)
	}
	// reference is the store writer's former append: decode, append,
	// keep the last limit, encode.
	reference := func(t *testing.T, old []byte, add []Record, limit int) []byte {
		var list []Record
		if old != nil {
			if err := json.Unmarshal(old, &list); err != nil {
				list = nil
			}
		}
		list = append(list, add...)
		if len(list) > limit {
			list = list[len(list)-limit:]
		}
		return encode(t, list)
	}
	cases := []struct {
		name  string
		old   []byte
		add   []Record
		limit int
	}{
		{"absent", nil, recs(0, 3), 5},
		{"empty list", []byte(`[]`), recs(0, 2), 5},
		{"room left", encode(t, recs(0, 2)), recs(2, 2), 5},
		{"fills up", encode(t, recs(0, 3)), recs(3, 2), 5},
		{"drops the oldest", encode(t, recs(0, 5)), recs(5, 2), 5},
		{"more new than the limit", encode(t, recs(0, 5)), recs(5, 8), 5},
		{"limit one", encode(t, recs(0, 1)), recs(1, 1), 1},
		{"not JSON", []byte(`[{"id":`), recs(0, 2), 5},
		{"not an array", []byte(`{"id":"x"}`), recs(0, 2), 5},
		{"not records", []byte(`[1,2]`), recs(0, 2), 5},
		{"data after the list", append(encode(t, recs(0, 2)), " x"...), recs(2, 1), 5},
		{"lines: room left", lines(t, recs(0, 2)), recs(2, 2), 5},
		{"lines: fills up", lines(t, recs(0, 3)), recs(3, 2), 5},
		{"lines: drops the oldest", lines(t, recs(0, 5)), recs(5, 2), 5},
		{"lines: drops all", lines(t, recs(0, 5)), recs(5, 5), 5},
		{"lines: more new than the limit", lines(t, recs(0, 4)), recs(4, 9), 5},
		{"lines: limit one", lines(t, recs(0, 1)), recs(1, 1), 1},
		{"lines: one record", lines(t, recs(0, 1)), recs(1, 1), 5},
		{"indented", indent(t, recs(0, 4)), recs(4, 2), 5},
		{"lines, then not JSON", append(lines(t, recs(0, 2))[:20:20], "\n]"...), recs(2, 1), 5},
		{"line break after an inner object", []byte("[\n{\"id\":\"a\",\"x\":{\"y\":1},\n\"kind\":\"compact\"}\n]"), recs(0, 1), 2},
		{"line break inside a record", []byte("[\n{\"id\":\"a\",\n\"kind\":\"compact\"},\n{\"id\":\"b\"}\n]"), recs(0, 1), 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := appendRecords(c.old, c.add, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, ok := listLines(got); !ok {
				t.Fatalf("appended list not one record a line:\n%s", got)
			}
			if want := reference(t, c.old, c.add, c.limit); !bytes.Equal(reencode(t, got), want) {
				t.Fatalf("appended list:\n%s\nwant\n%s", got, want)
			}
		})
	}
	// Records a list holds are kept as stored, fields this version does
	// not know included (another replica's newer version wrote them).
	old := []byte(`[{"id":"a","time":"2026-11-27T06:00:00Z","kind":"compact","compacted":false,"compactd_ms":0,"future_field":{"x":[1]}}]`)
	got, err := appendRecords(old, recs(1, 1), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, append([]byte(listOpen), old[1:len(old)-1]...)) {
		t.Fatalf("the stored record changed:\n%s", got)
	}
	var list []Record
	if err := json.Unmarshal(got, &list); err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "r-1" {
		t.Fatalf("appended list %s: %v", got, err)
	}
}
