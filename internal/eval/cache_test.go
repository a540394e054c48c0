package eval

import (
	"encoding/json"
	"math"
	"testing"
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

func TestSplitBreakpoints(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want Usage
	}{
		{"first request writes everything up to the last message",
			Request{Tokens: 5000, First: true, System: 2000},
			Usage{Input: 3, CacheWrite: 5000}},
		{"previous request unchanged: read it, write the new messages",
			Request{Tokens: 6000, Prefix: 5000, PrevTokens: 5000, PrevIsPrefix: true, System: 2000},
			Usage{Input: 3, CacheRead: 5000, CacheWrite: 1000}},
		{"compacted: only the system breakpoint matches",
			Request{Tokens: 3000, Prefix: 2500, PrevTokens: 6000, PrevIsPrefix: false, System: 2000},
			Usage{Input: 3, CacheRead: 2000, CacheWrite: 1000}},
		{"compacted with a system prompt under the minimum: nothing read",
			Request{Tokens: 3000, Prefix: 2500, PrevTokens: 6000, System: 800},
			Usage{Input: 3, CacheWrite: 3000}},
		{"request under the minimum: plain input",
			Request{Tokens: 1000, Prefix: 900, PrevTokens: 900, PrevIsPrefix: true, System: 500},
			Usage{Input: 1003}},
		{"previous request was under the minimum, so it was not written",
			Request{Tokens: 1500, Prefix: 900, PrevTokens: 900, PrevIsPrefix: true, System: 500},
			Usage{Input: 3, CacheWrite: 1500}},
		{"same request again: all read, nothing written",
			Request{Tokens: 4000, Prefix: 4000, PrevTokens: 4000, PrevIsPrefix: true, System: 1000},
			Usage{Input: 3, CacheRead: 4000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Priming = 3
			if u := anthropic.Split(tt.req); u != tt.want {
				t.Errorf("Split = %+v, want %+v", u, tt.want)
			}
		})
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
