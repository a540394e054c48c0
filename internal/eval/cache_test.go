package eval

import (
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/compactd/compactd/abi"
)

var (
	openAI    = Rules{Mode: CacheAutomatic, MinTokens: 1024, Increment: 128}
	anthropic = Rules{Mode: CacheBreakpoints, MinTokens: 1024}
	deepSeek  = Rules{Mode: CacheAutomatic, MinTokens: 64, Increment: 64}
)

func TestSplitAutomatic(t *testing.T) {
	tests := []struct {
		name   string
		rules  Rules
		req    Request
		cached int
	}{
		{"first request is never cached", openAI, Request{Tokens: 5000, Prefix: 0, First: true}, 0},
		{"below the 1,024 minimum", openAI, Request{Tokens: 5000, Prefix: 1023}, 0},
		{"exactly the minimum", openAI, Request{Tokens: 5000, Prefix: 1024}, 1024},
		{"one short of the next 128 step", openAI, Request{Tokens: 5000, Prefix: 1151}, 1024},
		{"the next 128 step", openAI, Request{Tokens: 5000, Prefix: 1152}, 1152},
		// 5000-1024 = 3976 = 31×128 + 8 → 1024 + 3968.
		{"long prefix rounds down to a step", openAI, Request{Tokens: 6000, Prefix: 5000}, 4992},
		{"the whole request shared", openAI, Request{Tokens: 2048, Prefix: 2048}, 2048},
		{"no prefix", openAI, Request{Tokens: 3000}, 0},
		{"deepseek 64-token units", deepSeek, Request{Tokens: 1000, Prefix: 200}, 192},
		{"deepseek below 64", deepSeek, Request{Tokens: 1000, Prefix: 63}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Priming = 3
			tt.req.Output = 77
			u := tt.rules.Split(tt.req)
			want := Usage{Input: tt.req.Tokens + 3 - tt.cached, CacheRead: tt.cached, Output: 77}
			if u != want {
				t.Errorf("Split = %+v, want %+v", u, want)
			}
		})
	}
}

// shape builds a breakpoint request of messages with these tokens, one
// block each.
func shape(toks []int, prefixMessages int, breaks, alive []int) Request {
	q := Request{Messages: toks, Blocks: make([]int, len(toks)), Breakpoints: breaks, PrefixMessages: prefixMessages, Alive: alive}
	for i, n := range toks {
		q.Tokens += n
		q.Blocks[i] = 1
		if i < prefixMessages {
			q.Prefix += n
		}
	}
	return q
}

func TestSplitBreakpoints(t *testing.T) {
	// A system prompt of 2,000 tokens and turns of 1,000.
	tests := []struct {
		name    string
		req     Request
		want    Usage
		entries []int
	}{
		{"first request writes everything up to the last message",
			func() Request {
				q := shape([]int{2000, 1000, 1000, 1000}, 0, []int{1, 4}, nil)
				q.First = true
				return q
			}(),
			Usage{Input: 3, CacheWrite: 5000}, []int{1, 4}},
		{"previous request unchanged: read it, write the new messages",
			shape([]int{2000, 1000, 1000, 1000, 1000}, 4, []int{1, 5}, []int{1, 4}),
			Usage{Input: 3, CacheRead: 5000, CacheWrite: 1000}, []int{1, 5}},
		{"compacted: only the system breakpoint matches",
			shape([]int{2000, 500, 500}, 2, []int{1, 3}, []int{1, 6}),
			Usage{Input: 3, CacheRead: 2000, CacheWrite: 1000}, []int{1, 3}},
		{"compacted with a system prompt under the minimum: nothing read",
			shape([]int{800, 1000, 1000, 200}, 3, []int{1, 4}, []int{6}),
			Usage{Input: 3, CacheWrite: 3000}, []int{4}},
		{"request under the minimum: plain input",
			shape([]int{500, 300, 200}, 3, []int{1, 3}, []int{1, 2}),
			Usage{Input: 1003}, nil},
		{"previous request was under the minimum, so it left no entry",
			shape([]int{500, 400, 600}, 2, []int{1, 3}, nil),
			Usage{Input: 3, CacheWrite: 1500}, []int{3}},
		{"same request again: all read, nothing written",
			shape([]int{1000, 1000, 1000, 1000}, 4, []int{1, 4}, []int{1, 4}),
			Usage{Input: 3, CacheRead: 4000}, []int{4}},
		{"a policy's mark: the prefix up to it is read after a rewrite behind it",
			// Previous: S T L1 [old tail…] with a mark after L1 (3); now
			// S T L1 L2 last: L1's entry is reached from the mark after L2.
			shape([]int{2000, 1000, 1000, 1500, 500}, 3, []int{1, 4, 5}, []int{1, 3, 8}),
			Usage{Input: 3, CacheRead: 4000, CacheWrite: 2000}, []int{1, 4, 5}},
		{"without the mark the same rewrite falls back to the system prompt",
			shape([]int{2000, 1000, 1000, 1500, 500}, 3, []int{1, 5}, []int{1, 8}),
			Usage{Input: 3, CacheRead: 2000, CacheWrite: 4000}, []int{1, 5}},
		{"an alive entry past the common prefix is not read",
			shape([]int{2000, 1000, 1000}, 2, []int{1, 3}, []int{3}),
			Usage{Input: 3, CacheWrite: 4000}, []int{1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Priming = 3
			if u := anthropic.Split(tt.req); u != tt.want {
				t.Errorf("Split = %+v, want %+v", u, tt.want)
			}
			if e := anthropic.Entries(tt.req); !slices.Equal(e, tt.entries) {
				t.Errorf("Entries = %v, want %v", e, tt.entries)
			}
		})
	}
}

func TestSplitBreakpointsLookback(t *testing.T) {
	// 30 messages of 100 tokens, the first 25 as before; the only entry
	// is after message 24 (prefix 25).
	toks := make([]int, 30)
	for i := range toks {
		toks[i] = 100
	}
	q := shape(toks, 25, []int{30}, []int{25})
	if u := anthropic.Split(q); u.CacheRead != 2500 {
		t.Fatalf("5 blocks back: read %d, want 2500", u.CacheRead)
	}
	// The same entry 21 blocks back from the only breakpoint is not found.
	q.Blocks[26] = 17
	if u := anthropic.Split(q); u.CacheRead != 0 {
		t.Fatalf("21 blocks back: read %d, want 0", u.CacheRead)
	}
	// A mark closer to it finds it again.
	q.Breakpoints = []int{26, 30}
	if u := anthropic.Split(q); u.CacheRead != 2500 {
		t.Fatalf("with a mark: read %d, want 2500", u.CacheRead)
	}
}

func TestBreakpoints(t *testing.T) {
	tests := []struct {
		n, lead int
		marks   []int
		want    []int
	}{
		{5, 1, nil, []int{1, 5}},
		{5, 0, nil, []int{5}},
		{5, 1, []int{2}, []int{1, 3, 5}},
		{5, 1, []int{4}, []int{1, 5}},
		{9, 1, []int{2, 4, 6}, []int{1, 3, 5, 7, 9}[1:]},
		{9, 2, []int{1, 4}, []int{2, 5, 9}},
	}
	for _, tt := range tests {
		if got := Breakpoints(tt.n, tt.lead, tt.marks); !slices.Equal(got, tt.want) {
			t.Errorf("Breakpoints(%d, %d, %v) = %v, want %v", tt.n, tt.lead, tt.marks, got, tt.want)
		}
	}
}

func TestBlocks(t *testing.T) {
	tests := []struct {
		msg  string
		want int
	}{
		{`{"role":"user","content":"hi"}`, 1},
		{`{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"f"}},{"id":"b","type":"function","function":{"name":"g"}}]}`, 2},
		{`{"role":"assistant","content":"let me look","tool_calls":[{"id":"a","type":"function","function":{"name":"f"}}]}`, 2},
		{`{"role":"tool","tool_call_id":"a","content":"x"}`, 1},
		{`{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}`, 3},
		{`{"role":"assistant","content":null}`, 1},
	}
	for _, tt := range tests {
		var m abi.Message
		if err := json.Unmarshal([]byte(tt.msg), &m); err != nil {
			t.Fatal(err)
		}
		if got := Blocks(&m); got != tt.want {
			t.Errorf("Blocks(%s) = %d, want %d", tt.msg, got, tt.want)
		}
	}
}

func TestSplitNoCache(t *testing.T) {
	u := Rules{Mode: CacheNone}.Split(Request{Tokens: 5000, Prefix: 5000, Priming: 3, Output: 9})
	if want := (Usage{Input: 5003, Output: 9}); u != want {
		t.Errorf("Split = %+v, want %+v", u, want)
	}
}

func TestCost(t *testing.T) {
	p, err := LoadPricing("default")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model string
		usage Usage
		want  float64
	}{
		// (1000×2.50 + 4000×1.25 + 500×10.00) / 1e6
		{"gpt-4o", Usage{Input: 1000, CacheRead: 4000, Output: 500}, 0.0125},
		// (3×3.00 + 10000×0.30 + 2000×3.75 + 100×15.00) / 1e6: reads are
		// 0.1× and writes 1.25× the input price.
		{"claude-sonnet-4-5-20250929", Usage{Input: 3, CacheRead: 10000, CacheWrite: 2000, Output: 100}, 0.012009},
		// (1e6×0.28 + 1e6×0.028 + 1e6×0.42) / 1e6
		{"deepseek-chat", Usage{Input: 1_000_000, CacheRead: 1_000_000, Output: 1_000_000}, 0.728},
	}
	for _, tt := range tests {
		pm, err := p.Lookup(tt.model)
		if err != nil {
			t.Fatal(err)
		}
		if got := pm.Price.Cost(tt.usage); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: Cost(%+v) = %v, want %v", tt.model, tt.usage, got, tt.want)
		}
	}
	sonnet, _ := p.Lookup("claude-sonnet-4")
	if r, w := sonnet.Price.CachedInput/sonnet.Price.Input, sonnet.Price.CacheWrite/sonnet.Price.Input; math.Abs(r-0.1) > 1e-9 || math.Abs(w-1.25) > 1e-9 {
		t.Errorf("claude-sonnet-4: read %.3f×, write %.3f× the input price; want 0.1× and 1.25×", r, w)
	}
}

func TestCommonPrefix(t *testing.T) {
	raw := func(ss ...string) []json.RawMessage {
		out := make([]json.RawMessage, len(ss))
		for i, s := range ss {
			out[i] = json.RawMessage(s)
		}
		return out
	}
	tests := []struct {
		name      string
		prev, cur []json.RawMessage
		tokens    []int
		msgs, tok int
	}{
		{"grown by two", raw(`{"a":1}`, `{"b":2}`), raw(`{"a":1}`, `{"b":2}`, `{"c":3}`, `{"d":4}`), []int{10, 20, 30, 40}, 2, 30},
		{"a partial match of a message counts nothing of it", raw(`{"a":1}`, `{"b":"long text"}`), raw(`{"a":1}`, `{"b":"long text, longer"}`), []int{10, 500}, 1, 10},
		{"cut after the first", raw(`{"a":1}`, `{"b":2}`, `{"c":3}`), raw(`{"a":1}`, `{"m":0}`, `{"c":3}`), []int{10, 5, 30}, 1, 10},
		{"nothing before", nil, raw(`{"a":1}`), []int{10}, 0, 0},
		{"bytes, not meaning: key order matters", raw(`{"a":1,"b":2}`), raw(`{"b":2,"a":1}`), []int{10}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, n := CommonPrefix(tt.prev, tt.cur, tt.tokens)
			if m != tt.msgs || n != tt.tok {
				t.Errorf("CommonPrefix = %d messages, %d tokens; want %d, %d", m, n, tt.msgs, tt.tok)
			}
		})
	}
}
