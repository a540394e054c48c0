package requestlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestAppendRecords: appending to a stored list as bytes gives the bytes
// decoding, appending, trimming and encoding the whole list gave (what
// the store writer did before), and an unreadable list starts over.
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := appendRecords(c.old, c.add, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if want := reference(t, c.old, c.add, c.limit); !bytes.Equal(got, want) {
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
	if !bytes.HasPrefix(got, old[:len(old)-1]) {
		t.Fatalf("the stored record changed:\n%s", got)
	}
	var list []Record
	if err := json.Unmarshal(got, &list); err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "r-1" {
		t.Fatalf("appended list %s: %v", got, err)
	}
}
