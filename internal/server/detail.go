package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/compactor"
)

// Bounds of a compaction record (client.CompactionDetail), which the store
// keeps per conversation for the status page.
const (
	// keptPreview and changedPreview cut the text of kept messages and of
	// the messages a compaction changed, removed or wrote.
	keptPreview    = 240
	changedPreview = 2000
	// tightPreview is the cut when a record is still over maxDetailBytes.
	tightPreview = 160
	// keptRun: a run of more kept messages shows its first and last
	// keptEnds and one "elided" row for the rest.
	keptRun  = 6
	keptEnds = 2
	// rowMessages: a row with more messages on one side lists the first
	// and last rowMessages/2 and counts the rest in Omitted.
	rowMessages = 20
	// maxRows: a record with more rows keeps the first and last maxRows/2
	// and one "elided" row for the middle.
	maxRows = 400
	// maxDetailBytes is the size a record is brought under.
	maxDetailBytes = 256 << 10
)

// compactionDetail describes what a compaction did to in, message by
// message: each output message is an input message (resp.Origin) or new,
// and the new ones are paired with the input messages they replaced.
func compactionDetail(in *chat.Conversation, resp *compactor.Response, model string, pipeline []string, at time.Time) *client.CompactionDetail {
	st := resp.Stats
	d := &client.CompactionDetail{
		At: at.UTC(), Model: model, Pipeline: pipeline, Summary: resp.Summary,
		TokensBefore: st.TokensBefore, TokensAfter: st.TokensAfter, MessagesBefore: st.MessagesBefore, MessagesAfter: st.MessagesAfter,
		Stages: make([]client.Stage, len(st.Stages)), Rows: []client.CompactionRow{},
	}
	for i, s := range st.Stages {
		d.Stages[i] = client.Stage(s)
	}
	out := resp.Conversation
	rewritten := map[int]bool{}
	for _, r := range resp.Rewritten {
		rewritten[r] = true
	}
	var rows []client.CompactionRow
	i, j := 0, 0 // the next input and output message
	for {
		// The next output message that is an input message (an anchor)
		// ends a group of removed inputs and new outputs.
		next := j
		for next < out.Len() && resp.Origin[next] < 0 {
			next++
		}
		anchor := in.Len()
		if next < out.Len() {
			anchor = resp.Origin[next]
		}
		if anchor < i { // not a checked result; show what is there
			anchor = i
		}
		rows = append(rows, changedRows(in, out, i, anchor, j, next, rewritten)...)
		if next >= out.Len() {
			break
		}
		rows = append(rows, client.CompactionRow{Kind: client.RowKept,
			Before: []client.MessagePreview{{Index: anchor}}, After: []client.MessagePreview{{Index: next}}})
		i, j = anchor+1, next+1
	}
	// Previews are made only for the rows that stay listed: a long
	// conversation's kept runs cost nothing.
	d.Rows = boundRows(elideKeptRuns(rows), maxRows)
	for r := range d.Rows {
		limit := changedPreview
		if d.Rows[r].Kind == client.RowKept {
			limit = keptPreview
		}
		for k, m := range d.Rows[r].Before {
			d.Rows[r].Before[k] = preview(&in.Messages[m.Index], m.Index, limit)
		}
		for k, m := range d.Rows[r].After {
			d.Rows[r].After[k] = preview(&out.Messages[m.Index], m.Index, limit)
		}
	}
	if estimateSize(d) > maxDetailBytes/2 && detailSize(d) > maxDetailBytes {
		d.Truncated = true
		for r := range d.Rows {
			for _, side := range [][]client.MessagePreview{d.Rows[r].Before, d.Rows[r].After} {
				for k := range side {
					if t := cut(side[k].Text, tightPreview); t != side[k].Text {
						side[k].Text, side[k].Cut = t, true
					}
				}
			}
		}
		for n := len(d.Rows) / 2; detailSize(d) > maxDetailBytes && n >= 2; n /= 2 {
			d.Rows = boundRows(d.Rows, n)
		}
	}
	return d
}

// estimateSize is a cheap upper estimate of a record's JSON size: its
// texts, escaped at worst, and room for the other fields.
func estimateSize(d *client.CompactionDetail) int {
	n := 4096
	for _, r := range d.Rows {
		n += 64
		for _, side := range [][]client.MessagePreview{r.Before, r.After} {
			for _, m := range side {
				n += 2*len(m.Text) + len(m.Name) + len(m.ToolCallID) + 160
				for _, c := range m.ToolCalls {
					n += len(c) + 4
				}
			}
		}
	}
	return n
}

func detailSize(d *client.CompactionDetail) int {
	b, _ := json.Marshal(d)
	return len(b)
}

// changedRows describes the input messages [i, a) that the compaction
// removed and the output messages [j, b) it wrote in their place.
func changedRows(in, out *chat.Conversation, i, a, j, b int, rewritten map[int]bool) []client.CompactionRow {
	if i == a && j == b {
		return nil
	}
	removed := make([]client.MessagePreview, 0, a-i)
	for k := i; k < a; k++ {
		removed = append(removed, client.MessagePreview{Index: k})
	}
	added := make([]client.MessagePreview, 0, b-j)
	for k := j; k < b; k++ {
		added = append(added, client.MessagePreview{Index: k})
	}
	switch {
	case len(removed) == 0:
		return []client.CompactionRow{sideRow(client.RowAdded, nil, added)}
	case len(added) == 0:
		return []client.CompactionRow{sideRow(client.RowDropped, removed, nil)}
	case len(added) == len(removed) && masked(in, out, i, a, j, rewritten):
		rows := make([]client.CompactionRow, len(removed))
		for k := range removed {
			rows[k] = client.CompactionRow{Kind: client.RowMasked, Before: removed[k : k+1], After: added[k : k+1]}
		}
		return rows
	}
	return []client.CompactionRow{sideRow(client.RowSummarized, removed, added)}
}

// masked reports whether the new messages replace the removed ones one
// for one, in place: the policy said it rewrote them, or each keeps its
// counterpart's role and tool call id.
func masked(in, out *chat.Conversation, i, a, j int, rewritten map[int]bool) bool {
	if a-i != 0 && out.Len() >= j+(a-i) {
		said, same := true, true
		for k := 0; k < a-i; k++ {
			m, n := &in.Messages[i+k], &out.Messages[j+k]
			said = said && rewritten[i+k]
			same = same && m.Role == n.Role && m.ToolCallID == n.ToolCallID
		}
		return same || said
	}
	return false
}

// sideRow is a row, with long sides shortened (see rowMessages).
func sideRow(kind string, before, after []client.MessagePreview) client.CompactionRow {
	r := client.CompactionRow{Kind: kind}
	r.Before, r.Omitted = shorten(before, r.Omitted)
	r.After, r.Omitted = shorten(after, r.Omitted)
	return r
}

func shorten(ms []client.MessagePreview, omitted int) ([]client.MessagePreview, int) {
	if len(ms) <= rowMessages {
		return ms, omitted
	}
	h := rowMessages / 2
	return append(ms[:h:h], ms[len(ms)-h:]...), omitted + len(ms) - rowMessages
}

// elideKeptRuns replaces the middle of each run of more than keptRun kept
// rows by one "elided" row.
func elideKeptRuns(rows []client.CompactionRow) []client.CompactionRow {
	var out []client.CompactionRow
	for k := 0; k < len(rows); {
		end := k
		for end < len(rows) && rows[end].Kind == client.RowKept {
			end++
		}
		if end-k <= keptRun {
			if end == k {
				end = k + 1
			}
			out = append(out, rows[k:end]...)
			k = end
			continue
		}
		out = append(out, rows[k:k+keptEnds]...)
		first := rows[k+keptEnds].Before[0].Index
		out = append(out, client.CompactionRow{Kind: client.RowElided, Elided: end - k - 2*keptEnds, First: &first})
		out = append(out, rows[end-keptEnds:end]...)
		k = end
	}
	return out
}

// boundRows keeps the first and last n/2 rows of a longer record, and one
// "elided" row for the input messages between them.
func boundRows(rows []client.CompactionRow, n int) []client.CompactionRow {
	if len(rows) <= n {
		return rows
	}
	h := n / 2
	head, tail := rows[:h], rows[len(rows)-h:]
	first, last := lastInput(head)+1, firstInput(tail)
	out := append([]client.CompactionRow{}, head...)
	out = append(out, client.CompactionRow{Kind: client.RowElided, Elided: max(last-first, 0), First: &first})
	return append(out, tail...)
}

// lastInput returns the highest input index rows cover (-1 if none).
func lastInput(rows []client.CompactionRow) int {
	n := -1
	for _, r := range rows {
		for _, m := range r.Before {
			n = max(n, m.Index)
		}
		if r.First != nil {
			n = max(n, *r.First+r.Elided-1)
		}
	}
	return n
}

// firstInput returns the lowest input index rows cover.
func firstInput(rows []client.CompactionRow) int {
	for _, r := range rows {
		if r.First != nil {
			return *r.First
		}
		if len(r.Before) > 0 {
			return r.Before[0].Index
		}
	}
	return 0
}

// preview describes message m at index i, its text cut to limit bytes.
func preview(m *abi.Message, i, limit int) client.MessagePreview {
	p := client.MessagePreview{Index: i, Role: m.Role, Name: m.Name, ToolCallID: m.ToolCallID, Tokens: m.Tokens, Bytes: m.Content.Len()}
	text, more := contentPrefix(m.Content, limit)
	if len(m.ToolCalls) > 0 {
		var calls strings.Builder
		for _, c := range m.ToolCalls {
			p.ToolCalls = append(p.ToolCalls, c.Function.Name)
			if calls.Len() > 0 || text != "" {
				calls.WriteByte('\n')
			}
			calls.WriteString("→ " + c.Function.Name + "(" + c.Function.Arguments + ")")
			p.Bytes += len(c.Function.Arguments)
		}
		text += calls.String()
	}
	p.Text = cut(text, limit)
	p.Cut = more || p.Text != text
	if more && !strings.HasSuffix(p.Text, "…") {
		p.Text += "…"
	}
	return p
}

// contentPrefix returns the content's text, or for a long string content
// enough of its beginning to make a preview of limit bytes (more reports
// the text goes on): decoding a
// large tool output whole to show its first lines would cost most of the
// record.
func contentPrefix(c abi.Content, limit int) (text string, more bool) {
	raw := c.Raw()
	// A JSON escape is at most 6 bytes for at least one byte of text.
	n := 6*limit + 8
	if len(raw) <= n || raw[0] != '"' {
		return c.Text(), false
	}
	// Cut before any escape that the cut would split.
	head := raw[:n]
	if k := bytes.LastIndexByte(head[len(head)-12:], '\\'); k >= 0 {
		head = head[:len(head)-12+k]
	}
	var s string
	if err := json.Unmarshal(append(append([]byte{}, head...), '"'), &s); err != nil {
		return c.Text(), false
	}
	return s, true
}

// cut shortens s to at most limit bytes on a rune boundary, marking the
// cut with "…".
func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	k := limit
	for k > 0 && !utf8.RuneStart(s[k]) {
		k--
	}
	return s[:k] + "…"
}
