package tokens

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/compactd/compactd/abi"
)

// conversation returns n distinct messages of mixed kinds.
func conversation(n int) []abi.Message {
	msgs := make([]abi.Message, n)
	for i := range msgs {
		switch i % 3 {
		case 0:
			msgs[i] = abi.Message{Role: "user", Content: abi.TextContent(fmt.Sprintf("Question %d: what does line %d print?", i, i*7))}
		case 1:
			msgs[i] = abi.Message{Role: "assistant", Content: abi.TextContent(""), ToolCalls: []abi.ToolCall{{
				ID: fmt.Sprint("call_", i), Type: "function",
				Function: abi.FunctionCall{Name: "bash", Arguments: fmt.Sprintf(`{"command":"sed -n %dp main.go"}`, i)},
			}}}
		default:
			msgs[i] = abi.Message{Role: "tool", ToolCallID: fmt.Sprint("call_", i-1), Content: abi.TextContent(fmt.Sprintf("fmt.Println(%d)", i*i))}
		}
	}
	return msgs
}

func TestReplayIsCached(t *testing.T) {
	c := New(Options{})
	tok := c.ForModel("gpt-4o")
	msgs := conversation(30)

	first := tok.CountMessages(clone(msgs))
	s1 := c.Stats()
	if s1.Misses != 30 || s1.Hits != 0 || s1.Entries != 30 || s1.BytesTokenized == 0 {
		t.Fatalf("after first count: %+v, want 30 misses, 30 entries, bytes > 0", s1)
	}

	again := clone(msgs)
	for i := range again {
		again[i].Tokens = 12345 // the input's own count is not part of the key
	}
	if second := tok.CountMessages(again); second != first {
		t.Errorf("second CountMessages = %d, want %d", second, first)
	}
	s2 := c.Stats()
	if s2.Hits != s1.Hits+30 || s2.Misses != s1.Misses || s2.BytesTokenized != s1.BytesTokenized {
		t.Errorf("re-sent history was re-tokenized: before %+v, after %+v", s1, s2)
	}

	// A stateless agent re-sends the history plus one message: only the new
	// message is tokenized.
	longer := append(clone(msgs), abi.Message{Role: "user", Content: abi.TextContent("and now?")})
	tok.CountMessages(longer)
	s3 := c.Stats()
	if s3.Hits != s2.Hits+30 || s3.Misses != s2.Misses+1 {
		t.Errorf("prefix replay: before %+v, after %+v; want 30 hits, 1 miss", s2, s3)
	}
	if got, want := s3.BytesTokenized-s2.BytesTokenized, uint64(len("user")+len("and now?")); got != want {
		t.Errorf("prefix replay tokenized %d bytes, want %d", got, want)
	}
}

func TestCacheSharing(t *testing.T) {
	c := New(Options{})
	msgs := conversation(10)
	exact := c.ForModel("gpt-4o").CountMessages(clone(msgs))
	before := c.Stats()
	claude := c.ForModel("claude-sonnet-4").CountMessages(clone(msgs))
	mid := c.Stats()
	if mid.Hits != before.Hits+10 || mid.BytesTokenized != before.BytesTokenized {
		t.Errorf("claude did not reuse o200k_base counts: before %+v, after %+v", before, mid)
	}
	if claude < exact || claude > exact*13/10+10 {
		t.Errorf("claude estimate %d not about 1.2 × %d", claude, exact)
	}
	c.ForModel("gpt-4").CountMessages(clone(msgs))
	if after := c.Stats(); after.Misses != mid.Misses+10 {
		t.Errorf("cl100k_base reused o200k_base counts: before %+v, after %+v", mid, after)
	}
}

func TestCacheDisabled(t *testing.T) {
	c := New(Options{CacheEntries: -1})
	tok := c.ForModel("gpt-4o")
	msgs := conversation(9)
	a := tok.CountMessages(clone(msgs))
	s1 := c.Stats()
	b := tok.CountMessages(clone(msgs))
	s2 := c.Stats()
	if a != b {
		t.Errorf("counts differ: %d, %d", a, b)
	}
	if s2.Entries != 0 || s2.Hits != 0 || s2.Misses != 18 || s2.BytesTokenized != 2*s1.BytesTokenized {
		t.Errorf("with the cache disabled: %+v after %+v", s2, s1)
	}
}

func TestCacheBound(t *testing.T) {
	tests := []struct {
		name     string
		entries  int
		messages int
	}{
		{name: "one", entries: 1, messages: 20},
		{name: "two", entries: 2, messages: 20},
		{name: "odd", entries: 7, messages: 50},
		{name: "small", entries: 64, messages: 500},
		{name: "sharded", entries: 5000, messages: 12000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{CacheEntries: tt.entries})
			tok := c.ForModel("gpt-4o")
			for i := range tt.messages {
				m := abi.Message{Role: "user", Content: abi.TextContent(fmt.Sprint("m", i))}
				tok.CountMessage(&m)
				if i%97 == 0 || i == tt.messages-1 {
					if n := c.Stats().Entries; n > tt.entries || n == 0 {
						t.Fatalf("after %d messages Entries = %d, bound %d", i+1, n, tt.entries)
					}
				}
			}
		})
	}
}

// The shard arithmetic keeps every bound, whatever it is.
func TestCacheBoundArithmetic(t *testing.T) {
	for n := 1; n <= 5000; n += 1 + n/7 {
		c := newCache(n)
		for i := range 3 * n {
			c.put(key{hash: uint64(i) * 0x9E3779B97F4A7C15, size: i}, i)
		}
		if got := c.len(); got > n || got < n/4 {
			t.Errorf("newCache(%d) holds %d after %d puts", n, got, 3*n)
		}
	}
}

// An entry used between every few insertions survives however many others
// pass through the cache.
func TestCacheKeepsHotEntries(t *testing.T) {
	c := New(Options{CacheEntries: 100})
	tok := c.ForModel("gpt-4o")
	hot := abi.Message{Role: "system", Content: abi.TextContent("You are a coding agent.")}
	tok.CountMessage(&hot)
	for i := range 2000 {
		m := abi.Message{Role: "user", Content: abi.TextContent(fmt.Sprint("cold ", i))}
		tok.CountMessage(&m)
		if i%20 == 0 {
			before := c.Stats().Hits
			tok.CountMessage(&hot)
			if c.Stats().Hits != before+1 {
				t.Fatalf("hot entry evicted after %d cold messages", i+1)
			}
		}
	}
}

// Many goroutines count overlapping conversations with every tokenizer,
// through both entry points, while a small cache evicts. Run with -race.
func TestConcurrent(t *testing.T) {
	big := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 140) // ~6 KB
	msgs := conversation(60)
	for i := 0; i < len(msgs); i += 10 {
		msgs[i].Content = abi.TextContent(fmt.Sprint(i, big))
	}
	models := []string{"gpt-4o", "gpt-4", "claude-3-5-sonnet", "gemini-2.5-pro"}

	want := map[string][]int{} // per model, per message, from a cache-less counter
	ref := New(Options{CacheEntries: -1})
	for _, model := range models {
		tok := ref.ForModel(model)
		for i := range msgs {
			want[model] = append(want[model], tok.CountMessage(&msgs[i]))
		}
	}

	if runtime.GOMAXPROCS(0) < 4 { // exercise CountMessages's parallel path
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	}
	goroutines, rounds := 16, 8
	if testing.Short() {
		rounds = 3
	}
	for _, entries := range []int{0, 40} {
		c := New(Options{CacheEntries: entries})
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				model := models[g%len(models)]
				tok := c.ForModel(model)
				for r := range rounds {
					lo := (g + r) % 20
					hi := lo + 20 + (g*7+r)%20
					part := clone(msgs[lo:hi])
					sum := 0
					for i := range part {
						sum += want[model][lo+i]
					}
					if g%2 == 0 {
						if got := tok.CountMessages(part); got != sum {
							t.Errorf("%s: CountMessages(msgs[%d:%d]) = %d, want %d", model, lo, hi, got, sum)
							return
						}
						continue
					}
					for i := range part {
						if got := tok.CountMessage(&part[i]); got != want[model][lo+i] {
							t.Errorf("%s: CountMessage(msgs[%d]) = %d, want %d", model, lo+i, got, want[model][lo+i])
							return
						}
					}
				}
			})
		}
		wg.Wait()
		if s := c.Stats(); entries > 0 && s.Entries > entries {
			t.Errorf("Entries = %d, bound %d", s.Entries, entries)
		}
	}
}
