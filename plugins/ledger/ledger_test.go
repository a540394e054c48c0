package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
	"github.com/compactd/compactd/internal/plugtest"
	"github.com/compactd/compactd/pdk"
	"github.com/compactd/compactd/plugins/internal/decision"
	"github.com/compactd/compactd/plugins/internal/fingerprint"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// agent builds a coding agent's conversation: a system prompt, the task,
// then n tool turns whose commands and results name files, functions,
// errors, ids and numbers; tokens 100 per message unless tok says.
func agent(n int) []abi.Message {
	msgs := []abi.Message{
		{Role: abi.RoleSystem, Content: abi.TextContent("You are a coding agent."), Tokens: 100},
		{Role: abi.RoleUser, Content: abi.TextContent("Fix the crash in pkg/parse/lexer.go. You must not modify the tests."), Tokens: 100},
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("call_%d", i)
		cmd := fmt.Sprintf(`{"command":"cd /repo && grep -n tokenize_%d pkg/mod%d/file%d.py | head"}`, i, i, i)
		out := fmt.Sprintf("pkg/mod%d/file%d.py:%d:def tokenize_%d(text):\nValueError: bad token %d at col 7\ncommit ab%dcd%de %d", i, i, 1000+i, i, i, i, i, 4000+i)
		msgs = append(msgs,
			abi.Message{Role: abi.RoleAssistant, Content: abi.TextContent(fmt.Sprintf("Step %d: look at tokenize_%d.", i, i)), Tokens: 100,
				ToolCalls: []abi.ToolCall{{ID: id, Type: "function", Function: abi.FunctionCall{Name: "bash", Arguments: cmd}}}},
			abi.Message{Role: abi.RoleTool, ToolCallID: id, Content: abi.TextContent(out), Tokens: 100})
	}
	return msgs
}

// small folds early: no minimum size, a jump every 3 tool turns.
func small(kv ...any) map[string]any {
	cfg := map[string]any{"min_tokens": 0, "min_turns": 0, "fold_tokens": 600}
	for i := 0; i+1 < len(kv); i += 2 {
		cfg[kv[i].(string)] = kv[i+1]
	}
	return cfg
}

func TestCompact(t *testing.T) {
	tests := []struct {
		name  string
		msgs  []abi.Message
		cfg   map[string]any
		want  string
		marks string
	}{
		{"below fold_tokens: nothing folded, the task marked", agent(3), small(), "r0 r1 r2 r3 r4 r5 r6 r7", "[1]"},
		{"one jump: the turns before the newest become one chunk", agent(4), small(), "r0 r1 m r8 r9", "[1 2]"},
		{"then the tail grows verbatim", agent(6), small(), "r0 r1 m r8 r9 r10 r11 r12 r13", "[1 2]"},
		{"a second jump appends a chunk", agent(7), small(), "r0 r1 m m r14 r15", "[1 3]"},
		{"past max_chunks the oldest merge", agent(13), small("max_chunks", 2), "r0 r1 m m r26 r27", "[1 3]"},
		{"min_turns holds the first fold back", agent(4), small("min_turns", 5), "r0 r1 r2 r3 r4 r5 r6 r7 r8 r9", "[1]"},
		{"min_tokens holds it back too", agent(4), small("min_tokens", 5000), "r0 r1 r2 r3 r4 r5 r6 r7 r8 r9", "[1]"},
		{"keep_task false: the task is folded, the ledger opens", agent(4), small("keep_task", false), "r0 m r8 r9", "[0 1]"},
		{"no system message", agent(4)[1:], small(), "r0 m r7 r8", "[0 1]"},
		{"an unanswered final call stays with its unit", append(agent(4), abi.Message{Role: abi.RoleAssistant, Tokens: 100, Content: abi.TextContent(""),
			ToolCalls: []abi.ToolCall{{ID: "x", Type: "function", Function: abi.FunctionCall{Name: "bash", Arguments: `{"command":"submit"}`}}}}), small(), "r0 r1 m r8 r9 r10", "[1 2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, tt.msgs, tt.cfg)
			if got := plugtest.Shape(res.Messages); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if got := fmt.Sprint(res.CacheBreakpoints); got != tt.marks {
				t.Fatalf("marks %s, want %s", got, tt.marks)
			}
			if res.Compacted != strings.Contains(tt.want, "m") {
				t.Fatalf("compacted %v", res.Compacted)
			}
		})
	}
}

func run(t testing.TB, msgs []abi.Message, cfg map[string]any) *abi.CompactResult {
	t.Helper()
	res := plugtest.Run(t, compact, msgs, cfg, nil)
	if err := convo.CheckCompactResult(msgs, res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestLedgerText: what a chunk lists, each item once across chunks (and
// not what the task holds), in order of first appearance.
func TestLedgerText(t *testing.T) {
	res := run(t, agent(7), small())
	first, second := res.Messages[2].Message.Text(), res.Messages[3].Message.Text()
	for _, want := range []string{
		"[compactd ledger: what the turns after the task ran and met",
		"\nran: bash grep head\n",
		"\nfiles: pkg/mod0/file0.py pkg/mod1/file1.py pkg/mod2/file2.py\n",
		"\nnames: tokenize_0 ValueError tokenize_1 tokenize_2\n",
		"\nerrors:\n- ValueError: bad token 0 at col 7\n- ValueError: bad token 1 at col 7\n- ValueError: bad token 2 at col 7\n",
		"\nids: ab0cd0e ab1cd1e ab2cd2e\n",
		"\nnumbers: 1000 4000 1001 4001 1002 4002",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("chunk 1 lacks %q:\n%s", want, first)
		}
	}
	if strings.Contains(first, "lexer.go") {
		t.Errorf("chunk 1 lists the task's file:\n%s", first)
	}
	// The second chunk lists only what is new: not bash, grep, ValueError
	// or file0.py again.
	if !strings.HasPrefix(second, "files: pkg/mod3/file3.py pkg/mod4/file4.py pkg/mod5/file5.py\nnames: tokenize_3 tokenize_4 tokenize_5\n") ||
		strings.Contains(second, "ran:") || strings.Contains(second, "file0.py") {
		t.Errorf("chunk 2:\n%s", second)
	}
	for i, it := range res.Messages[2:4] {
		if it.Message.Role != abi.RoleAssistant {
			t.Errorf("chunk %d is the %s's", i, it.Message.Role)
		}
	}
	// A short user message after the task is quoted whole, on one line;
	// a long one only by its instructions, clipped to user_chars.
	msgs := agent(4)
	msgs = append(msgs[:4:4], append([]abi.Message{{Role: abi.RoleUser, Content: abi.TextContent("Also never touch   setup.cfg, please; and keep it short"), Tokens: 100}}, msgs[4:]...)...)
	res = run(t, msgs, small())
	if text := res.Messages[2].Message.Text(); !strings.Contains(text, "\nuser said:\n- Also never touch setup.cfg, please; and keep it short") {
		t.Errorf("no user quote:\n%s", text)
	}
	res = run(t, msgs, small("user_chars", 20))
	if text := res.Messages[2].Message.Text(); !strings.Contains(text, "\nuser said:\n- Also never touch set…") {
		t.Errorf("no clipped instruction:\n%s", text)
	}
	res = run(t, msgs, small("user_chars", 0))
	if text := res.Messages[2].Message.Text(); strings.Contains(text, "user said") {
		t.Errorf("user_chars 0 quotes:\n%s", text)
	}
}

// TestAppendOnly replays a conversation's growth: between merges, every
// request starts with the previous request's system messages, task and
// ledger chunks, byte for byte (so a prompt cache reads them), and the
// newest chunk is marked.
func TestAppendOnly(t *testing.T) {
	msgs := agent(60)
	cfg := small("max_chunks", 4)
	var prevChunks []string
	merges, jumps := 0, 0
	for n := 4; n <= len(msgs); n += 2 {
		res := run(t, msgs[:n], cfg)
		var chunks []string
		for _, it := range res.Messages {
			if !it.IsRef() {
				chunks = append(chunks, it.Message.Text())
			}
		}
		if len(chunks) > 0 {
			if want := 2 + len(chunks) - 1; res.CacheBreakpoints[len(res.CacheBreakpoints)-1] != want {
				t.Fatalf("prefix %d: marks %v, want the newest chunk (%d)", n, res.CacheBreakpoints, want)
			}
		}
		kept := len(prevChunks) <= len(chunks)
		for i := 0; kept && i < len(prevChunks); i++ {
			kept = prevChunks[i] == chunks[i]
		}
		switch {
		case !kept:
			merges++
			if len(chunks) >= len(prevChunks) {
				t.Fatalf("prefix %d: a chunk changed without a merge", n)
			}
		case len(chunks) > len(prevChunks):
			jumps++
		}
		prevChunks = chunks
	}
	if jumps < 10 || merges < 2 || merges > jumps/2 {
		t.Fatalf("%d jumps, %d merges", jumps, merges)
	}
}

// TestFanMerge: the newest groups merge while fan of them hold as many
// chunks, so older groups never change and the ledger stays a few
// messages.
func TestFanMerge(t *testing.T) {
	grow := func(jumps, fan int) [][2]int {
		var groups [][2]int
		for c := 0; c < jumps; c++ {
			groups = fanMerge(append(groups, [2]int{c, c + 1}), fan)
		}
		return groups
	}
	tests := []struct {
		jumps, fan int
		want       string
	}{
		{3, 4, "[[0 1] [1 2] [2 3]]"},
		{4, 4, "[[0 4]]"},
		{6, 4, "[[0 4] [4 5] [5 6]]"},
		{16, 4, "[[0 16]]"},
		{21, 4, "[[0 16] [16 20] [20 21]]"},
		{3, 0, "[[0 1] [1 2] [2 3]]"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(grow(tt.jumps, tt.fan)); got != tt.want {
			t.Errorf("%d jumps, fan %d: %s, want %s", tt.jumps, tt.fan, got, tt.want)
		}
	}
	// Between two requests, the groups that stay are a prefix.
	prev := grow(1, 8)
	for j := 2; j < 600; j++ {
		cur := grow(j, 8)
		same := 0
		for same < len(prev) && same < len(cur) && prev[same] == cur[same] {
			same++
		}
		if changed := prev[same:]; len(changed) > 0 && changed[0][0] < prev[len(prev)-1][0]-64 && j%512 != 0 {
			t.Fatalf("jump %d rewrote groups from chunk %d: %v → %v", j, changed[0][0], prev, cur)
		}
		prev = cur
	}
}

// TestBreakpoints: the newest ledger message, the ends of the groups the
// next merges leave alone, and the task, at most three.
func TestBreakpoints(t *testing.T) {
	tests := []struct {
		pinned int
		groups [][2]int
		fan    int
		want   string
	}{
		{2, [][2]int{{0, 1}}, 8, "[1 2]"},
		{2, [][2]int{{0, 8}, {8, 9}}, 8, "[1 2 3]"},
		{2, [][2]int{{0, 64}, {64, 72}, {72, 73}}, 8, "[2 3 4]"},
		{2, [][2]int{{0, 8}}, 8, "[1 2]"},
		{0, [][2]int{{0, 1}, {1, 2}}, 8, "[1]"},
		{2, [][2]int{{0, 3}, {3, 4}}, 0, "[1 3]"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(breakpoints(tt.pinned, tt.groups, tt.fan)); got != tt.want {
			t.Errorf("breakpoints(%d, %v, %d) = %s, want %s", tt.pinned, tt.groups, tt.fan, got, tt.want)
		}
	}
}

func TestSummaryRole(t *testing.T) {
	res := run(t, agent(4), small("summary_role", "user"))
	if m := res.Messages[2].Message; m.Role != abi.RoleUser {
		t.Fatalf("role %s", m.Role)
	}
}

// TestMemo: a result made with the extraction memo is the one made
// without it.
func TestMemo(t *testing.T) {
	msgs := agent(30)
	req := plugtest.Request(msgs, small(), nil)
	chunkMemo.clear()
	cold, err := compact(&pdk.TestHost{}, req)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := compact(&pdk.TestHost{}, req)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, cold), mustJSON(t, warm); a != b {
		t.Fatalf("the memo changed the result:\n%s\n%s", a, b)
	}
	// A memo too small for anything still gives the same result.
	saved := chunkMemo.max
	chunkMemo.max = 1
	chunkMemo.clear()
	tiny, _ := compact(&pdk.TestHost{}, req)
	chunkMemo.max = saved
	if mustJSON(t, tiny) != mustJSON(t, cold) {
		t.Fatal("a full memo changed the result")
	}
}

// TestCursor: a request whose first chunks come from a conversation's
// cursor (what its previous request rendered) gets the result computed
// afresh, whatever order the requests come in: a conversation's turns in
// order, backwards and shuffled, two conversations with the same task
// taking turns, and one that differs from another only in a message in the
// middle. The messages carry hashes, as the host sends them.
func TestCursor(t *testing.T) {
	hashed := func(msgs []abi.Message) []abi.Message {
		for i := range msgs {
			var h fingerprint.Hash
			h.Message(&msgs[i])
			msgs[i].Hash = h.Sum128()
		}
		return msgs
	}
	a := hashed(agent(30))
	b := slices.Clone(a) // the same task, other results
	for i := 2; i < len(b); i++ {
		if b[i].Role == abi.RoleTool {
			b[i].Content = abi.TextContent(b[i].Content.Text() + fmt.Sprintf("\nother/file%d.go", i))
		}
	}
	b = hashed(b)
	c := slices.Clone(a) // a with one result in the middle changed
	c[21].Content = abi.TextContent("src/changed.rs: changed_fn")
	c = hashed(c)
	type call struct {
		msgs  []abi.Message
		cfg   map[string]any
		state json.RawMessage
	}
	var calls []call
	for _, cfg := range []map[string]any{small(), small("max_chunks", 3, "merge_fan", 2)} {
		for _, msgs := range [][]abi.Message{a, b, c} {
			for _, n := range plugtest.TurnPrefixes(msgs) {
				calls = append(calls, call{msgs: msgs[:n:n], cfg: cfg})
			}
		}
	}
	half := len(calls) / 2
	// a's turns again with jumps the host forced (remembered in the
	// state): the same messages, other chunks.
	for _, n := range plugtest.TurnPrefixes(a) {
		calls = append(calls, call{a[:n:n], small(), decision.WithForced(nil, []int{4, 5, 7})})
	}
	want := make([]string, len(calls))
	for i, x := range calls {
		chunkMemo.clear()
		want[i] = mustJSON(t, plugtest.Run(t, compact, x.msgs, x.cfg, x.state))
	}
	inOrder := make([]int, len(calls))
	for i := range inOrder {
		inOrder[i] = i
	}
	backwards := slices.Clone(inOrder)
	slices.Reverse(backwards)
	var alternate []int // a's, b's and c's turns taking turns, then a's forced ones with a's
	per := half / 3
	for k := 0; k < per; k++ {
		alternate = append(alternate, k, per+k, 2*per+k)
	}
	for k := 0; k < per; k++ {
		alternate = append(alternate, 2*half+k, k)
	}
	shuffled := slices.Clone(inOrder)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, order := range []struct {
		name string
		idx  []int
	}{{"in order", inOrder}, {"backwards", backwards}, {"taking turns", alternate}, {"shuffled", shuffled}} {
		chunkMemo.clear()
		for _, i := range order.idx {
			if got := mustJSON(t, plugtest.Run(t, compact, calls[i].msgs, calls[i].cfg, calls[i].state)); got != want[i] {
				t.Fatalf("%s: request %d differs from its result computed afresh:\n%s\n%s", order.name, i, got, want[i])
			}
		}
	}
	// The cursor was kept (the test exercised it).
	cfg, err := decodeConfig(plugtest.Request(a, small(), nil))
	if err != nil {
		t.Fatal(err)
	}
	chunkMemo.clear()
	plugtest.Run(t, compact, a, small(), nil)
	if _, ok := chunkMemo.get(cursorKey(pinnedKey(a[:2], cfg))).(*cursor); !ok {
		t.Fatal("no cursor kept for a conversation with hashes")
	}
}

func mustJSON(t *testing.T, res *abi.CompactResult) string {
	t.Helper()
	b, err := appendJSON(res)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeterminism(t *testing.T) {
	plugtest.Deterministic(t, policy, plugtest.Request(agent(40), small(), nil))
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []map[string]any{{"max_chunks": 1}, {"max_chunks": 4, "merge_keep": 4}, {"share": -1}, {"merge_fan": 1}, {"merge_fan": -2}, {"fold_tokens": 0}, {"summary_role": "system"}, {"nope": 1}} {
		if _, err := compact(&pdk.TestHost{}, plugtest.Request(agent(2), cfg, nil)); err == nil {
			t.Errorf("%v accepted", cfg)
		}
	}
}

func TestGolden(t *testing.T) {
	p := policy()
	plugtest.Golden(t, &p, *update)
}

// TestRealData checks the contract on sampled prefixes of every fixture
// conversation: valid results; the system messages and the task kept as
// refs first; new messages only right after them (the ledger); the newest
// chunk marked; then a contiguous suffix of the input.
func TestRealData(t *testing.T) {
	configs := []map[string]any{nil, small(), small("max_chunks", 2, "share", 0.05, "summary_role", "user")}
	plugtest.RealData(t, compact, configs, 10, func(tb testing.TB, id string, in []abi.Message, res *abi.CompactResult, cfg map[string]any) {
		if err := convo.CheckBreakpoints(len(res.Messages), res.CacheBreakpoints); err != nil {
			tb.Fatalf("%s: %v", id, err)
		}
		pinned := convo.Pinned(in, true)
		items := res.Messages
		for i := 0; i < pinned; i++ {
			if !items[i].IsRef() || items[i].Ref != i {
				tb.Fatalf("%s: item %d is not the kept prefix", id, i)
			}
		}
		k := pinned
		for k < len(items) && !items[k].IsRef() {
			k++
		}
		if k > pinned && (len(res.CacheBreakpoints) == 0 || res.CacheBreakpoints[len(res.CacheBreakpoints)-1] != k-1) {
			tb.Fatalf("%s: the newest chunk (%d) is not marked: %v", id, k-1, res.CacheBreakpoints)
		}
		for j := k; j < len(items); j++ {
			if !items[j].IsRef() || items[j].Ref != items[k].Ref+j-k {
				tb.Fatalf("%s: the verbatim tail is not contiguous", id)
			}
		}
	})
}

// appendJSON encodes a result as the plugin's export does.
func appendJSON(res *abi.CompactResult) (string, error) {
	b, err := json.Marshal(res)
	return string(b), err
}

// TestMemoTake: a taken key's place in the eviction order is dropped in
// time, and evicting it frees nothing twice.
func TestMemoTake(t *testing.T) {
	m := &memo{max: 1 << 10}
	for i := uint64(0); i < 10000; i++ {
		m.put([2]uint64{i, 0}, i, 8)
		if got := m.take([2]uint64{i, 0}); got != i {
			t.Fatalf("take %d: %v", i, got)
		}
	}
	if len(m.order) > 2*m.m.len()+65 || m.size != 0 {
		t.Fatalf("after 10000 takes: order %d, size %d", len(m.order), m.size)
	}
	for i := uint64(0); i < 1000; i++ {
		m.put([2]uint64{i, 1}, i, 8)
	}
	if m.size > m.max || m.m.len() != m.max/8 || m.get([2]uint64{999, 1}) != uint64(999) || m.get([2]uint64{0, 1}) != nil {
		t.Fatalf("eviction: size %d of %d, %d entries", m.size, m.max, m.m.len())
	}
}

// TestMemoTakeAndPutAgain: a key taken and put back on every call, as a
// conversation's cursor is, keeps one slot in the eviction order, not
// one per call, and its stale slots do not evict it.
func TestMemoTakeAndPutAgain(t *testing.T) {
	m := &memo{max: 100 * 8}
	for i := uint64(0); i < 50; i++ {
		m.put([2]uint64{i, 2}, i, 8)
	}
	cursor := [2]uint64{7, 7}
	m.put(cursor, 0, 8)
	for i := 1; i <= 10000; i++ {
		v, _ := m.take(cursor).(int)
		m.put(cursor, v+1, 8)
		if len(m.order) > 2*m.m.len()+64 {
			t.Fatalf("call %d: %d slots for %d entries", i, len(m.order), m.m.len())
		}
	}
	if got := m.get(cursor); got != 10000 {
		t.Fatalf("cursor after 10000 calls: %v", got)
	}
	// Filling the rest of the memo evicts the 50 older entries first,
	// not the cursor put since them.
	for i := uint64(0); i < 99; i++ {
		m.put([2]uint64{i, 3}, i, 8)
	}
	if m.get(cursor) != 10000 || m.get([2]uint64{0, 2}) != nil || m.size > m.max {
		t.Fatalf("after filling: cursor %v, oldest %v, size %d of %d", m.get(cursor), m.get([2]uint64{0, 2}), m.size, m.max)
	}
}

// extractCounter counts the host's extraction calls (the ledger asks for
// a range of messages' facts, and extracts nothing else).
type extractCounter struct {
	pdk.TestHost
	calls int
}

func (h *extractCounter) MessageFacts(msgs []abi.Message, first int, opts facts.Options) (*facts.Set, error) {
	h.calls++
	return h.TestHost.MessageFacts(msgs, first, opts)
}

func (h *extractCounter) ExtractIdentifiers([]idents.Input) ([][]idents.Item, error) {
	return nil, errors.New("the ledger asks for facts, not identifiers")
}

// TestMemoHoldsManyConversations: a team's agents take turns with long
// histories (here 96 conversations of the fixtures' mini-swe-agent turns
// stitched into one of 300 messages, told apart by their task), and each
// one's next request renders only its new chunk: the memo still holds what
// the conversation's last request rendered. At 8 MiB it did not, and every
// request rendered its whole ledger again.
func TestMemoHoldsManyConversations(t *testing.T) {
	var long []abi.Message
	for _, c := range plugtest.Load(t, true, "mini_swe_agent_deepseek_swebench.jsonl") {
		if long == nil {
			long = slices.Clone(c.Messages)
			continue
		}
		long = append(long, c.Messages[convo.Pinned(c.Messages, true):]...)
	}
	const n = 300
	if len(long) < n+1 {
		t.Fatalf("the stitched conversation has %d messages, want %d", len(long), n+1)
	}
	long = long[:n+1]
	const conversations = 96
	variants := make([][]abi.Message, conversations)
	task := convo.Pinned(long, true) - 1
	for j := range variants {
		msgs := slices.Clone(long)
		msgs[task].Content = abi.TextContent(fmt.Sprintf("%s [agent %d]", msgs[task].Text(), j))
		for i := range msgs {
			var h fingerprint.Hash
			h.Message(&msgs[i])
			msgs[i].Hash = h.Sum128()
		}
		variants[j] = msgs
	}
	chunkMemo.clear()
	defer chunkMemo.clear()
	for _, msgs := range variants {
		if _, err := compact(&pdk.TestHost{}, plugtest.Request(msgs[:n], nil, nil)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the memo holds %d bytes after %d conversations", chunkMemo.size, conversations)
	for j, msgs := range variants {
		h := &extractCounter{}
		if _, err := compact(h, plugtest.Request(msgs, nil, nil)); err != nil {
			t.Fatal(err)
		}
		if h.calls > 1 {
			t.Fatalf("conversation %d: its next request extracted %d times: the memo lost its ledger", j, h.calls)
		}
	}
	if chunkMemo.size > chunkMemo.max {
		t.Fatalf("the memo holds %d bytes, more than its %d", chunkMemo.size, chunkMemo.max)
	}
}

// TestHashSet: the set holds what was added, zero included, and nothing
// else, as a map does, through growth and colliding probes.
func TestHashSet(t *testing.T) {
	t.Parallel()
	s := newHashSet(0)
	want := map[uint64]bool{}
	for i := uint64(0); i < 5000; i++ {
		h := i * 0x100000000 // many share their low bits
		if i%7 == 0 {
			h = i
		}
		if i%3 == 0 {
			if added := s.add(h); added == want[h] {
				t.Fatalf("add(%#x) = %v with the set holding it: %v", h, added, want[h])
			}
			if s.add(h) { // twice: still once
				t.Fatalf("add(%#x) again = true", h)
			}
			want[h] = true
		}
	}
	for i := uint64(0); i < 5000; i++ {
		for _, h := range []uint64{i * 0x100000000, i} {
			if s.has(h) != want[h] {
				t.Fatalf("has(%#x) = %v, want %v", h, s.has(h), want[h])
			}
		}
	}
	if s.len() != len(want) || !want[0] {
		t.Fatalf("len %d, want %d (zero held: %v)", s.len(), len(want), want[0])
	}
}

// TestMemoMap runs the memo's table against Go's map: random sets, gets
// and deletes of keys that share their low bits often (long probe runs,
// wrapping the table's end), checking every answer and, at the end, that
// every key is found where a probe from its home reaches it.
func TestMemoMap(t *testing.T) {
	t.Parallel()
	var m memoMap
	want := map[[2]uint64]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() [2]uint64 {
		k := rng.Uint64N(400)
		if k%2 == 0 { // homes at the table's end: probes wrap
			return [2]uint64{^(k % 7) &^ (1 << 40), k}
		}
		return [2]uint64{k<<20 | k%7, k} // low bits: only 7 homes for 200 keys
	}
	for i := range 200000 {
		k := key()
		switch op := rng.IntN(3); op {
		case 0:
			m.set(k, memoEntry{size: i})
			want[k] = i
		case 1:
			e, ok := m.del(k)
			w, wok := want[k]
			if ok != wok || ok && e.size != w {
				t.Fatalf("op %d: del(%v) = %d, %v; want %d, %v", i, k, e.size, ok, w, wok)
			}
			delete(want, k)
		default:
			e, ok := m.get(k)
			w, wok := want[k]
			if ok != wok || ok && e.size != w {
				t.Fatalf("op %d: get(%v) = %d, %v; want %d, %v", i, k, e.size, ok, w, wok)
			}
		}
		if m.len() != len(want) {
			t.Fatalf("op %d: len %d, want %d", i, m.len(), len(want))
		}
	}
	for k, w := range want {
		if e, ok := m.get(k); !ok || e.size != w {
			t.Fatalf("get(%v) = %d, %v at the end; want %d", k, e.size, ok, w)
		}
	}
	if 2*m.len() > len(m.slots) {
		t.Fatalf("%d keys in %d slots: more than half full", m.len(), len(m.slots))
	}
}
