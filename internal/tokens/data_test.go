package tokens

import (
	"encoding/json"
	"io"
	"os"
	"testing"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/dataset"
)

type conversationFile struct {
	ID       string        `json:"id"`
	Messages []abi.Message `json:"messages"`
}

// readConversations reads up to n conversations (all when n < 0) from a
// fixture file of the repository (testdata/conversations).
func readConversations(tb testing.TB, name string, n int) []conversationFile {
	tb.Helper()
	path, err := dataset.Fixture(name)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var convs []conversationFile
	dec := json.NewDecoder(f)
	for n < 0 || len(convs) < n {
		var cv conversationFile
		if err := dec.Decode(&cv); err == io.EOF {
			break
		} else if err != nil {
			tb.Fatalf("%s: conversation %d: %v", name, len(convs), err)
		}
		convs = append(convs, cv)
	}
	return convs
}

// textChars counts the characters CountMessage tokenizes.
func textChars(m *abi.Message) int {
	n := utf8.RuneCountInString(m.Role) + utf8.RuneCountInString(m.Text()) + utf8.RuneCountInString(m.Name)
	for _, tc := range m.ToolCalls {
		n += utf8.RuneCountInString(tc.Function.Name) + utf8.RuneCountInString(tc.Function.Arguments)
	}
	return n
}

// textBytes counts the bytes CountMessage tokenizes.
func textBytes(msgs []abi.Message) int64 {
	var n int64
	for i := range msgs {
		m := &msgs[i]
		n += int64(len(m.Role) + len(m.Text()) + len(m.Name))
		for _, tc := range m.ToolCalls {
			n += int64(len(tc.Function.Name) + len(tc.Function.Arguments))
		}
	}
	return n
}

func TestRealConversations(t *testing.T) {
	convs := readConversations(t, "tau_bench_gpt4o_airline.jsonl", 3)
	if len(convs) != 3 {
		t.Fatalf("read %d conversations, want 3", len(convs))
	}
	for _, cv := range convs {
		t.Run(cv.ID, func(t *testing.T) {
			msgs := clone(cv.Messages)
			total := New(Options{}).ForModel("gpt-4o").CountMessages(msgs)

			single := New(Options{CacheEntries: -1}).ForModel("gpt-4o")
			sum, chars := 0, 0
			for i := range cv.Messages {
				n := single.CountMessage(&cv.Messages[i])
				if msgs[i].Tokens != n {
					t.Errorf("message %d: Tokens = %d, CountMessage = %d", i, msgs[i].Tokens, n)
				}
				sum += n
				chars += textChars(&cv.Messages[i])
			}
			if total != sum {
				t.Errorf("CountMessages = %d, sum of CountMessage = %d", total, sum)
			}
			if total <= chars/8 || total >= chars {
				t.Errorf("%d tokens for %d characters: outside (chars/8, chars)", total, chars)
			}
			t.Logf("%d messages, %d chars, %d tokens (%.2f chars/token)", len(msgs), chars, total, float64(chars)/float64(total))
		})
	}
}

// longestConversation returns the mini-swe-agent conversation with the most
// text.
func longestConversation(b *testing.B) []abi.Message {
	var best []abi.Message
	var bestBytes int64
	for _, cv := range readConversations(b, "mini_swe_agent_deepseek_swebench.jsonl", -1) {
		if n := textBytes(cv.Messages); n > bestBytes {
			best, bestBytes = cv.Messages, n
		}
	}
	return best
}

// BenchmarkCountCold tokenizes a whole long agent conversation with the
// cache disabled: raw tokenizer throughput, parallel across messages.
func BenchmarkCountCold(b *testing.B) {
	msgs := longestConversation(b)
	c := New(Options{CacheEntries: -1})
	tok := c.ForModel("gpt-4o")
	tok.Count("load the vocabulary")
	b.SetBytes(textBytes(msgs))
	b.ReportAllocs()
	for b.Loop() {
		tok.CountMessages(msgs)
	}
}

// BenchmarkCountReplay counts every prefix of a long agent conversation in
// turn, as a stateless agent re-sends its history before each model call,
// with a fresh Counter (cache on) per pass. Bytes are the history processed:
// the sum of all prefixes.
func BenchmarkCountReplay(b *testing.B) {
	msgs := longestConversation(b)
	var history int64
	for k := 1; k <= len(msgs); k++ {
		history += textBytes(msgs[:k])
	}
	b.SetBytes(history)
	b.ReportAllocs()
	var s Stats
	for b.Loop() {
		b.StopTimer()
		c := New(Options{})
		tok := c.ForModel("gpt-4o")
		tok.Count("load the vocabulary")
		work := clone(msgs)
		b.StartTimer()
		for k := 1; k <= len(work); k++ {
			tok.CountMessages(work[:k])
		}
		s = c.Stats()
	}
	b.ReportMetric(float64(s.Hits)/float64(s.Hits+s.Misses), "hit-ratio")
}

// BenchmarkCountHit counts a long conversation whose every message is
// cached: the cost of a re-sent history (one hash per message).
func BenchmarkCountHit(b *testing.B) {
	msgs := clone(longestConversation(b))
	tok := New(Options{}).ForModel("gpt-4o")
	tok.CountMessages(msgs)
	b.SetBytes(textBytes(msgs))
	b.ReportAllocs()
	for b.Loop() {
		tok.CountMessages(msgs)
	}
}

// BenchmarkCountNewMessages counts the texts of a long agent
// conversation the Counter has not seen, after it has counted the other
// conversations of the same fixture: the daemon's case when a message
// arrives (the per-message cache misses; many of its words were seen
// before). "pieces" is the Counter's count, "whole" the codec's alone;
// codec-share is the share of the bytes the codec tokenized.
func BenchmarkCountNewMessages(b *testing.B) {
	convs := readConversations(b, "mini_swe_agent_deepseek_swebench.jsonl", -1)
	longest, most := 0, int64(0)
	for i, cv := range convs {
		if n := textBytes(cv.Messages); n > most {
			longest, most = i, n
		}
	}
	var texts []string
	bytes := 0
	for i := range convs[longest].Messages {
		s := convs[longest].Messages[i].Text()
		texts = append(texts, s)
		bytes += len(s)
	}
	for _, mode := range []string{"pieces", "whole"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			codec := uint64(0)
			runs := 0
			for b.Loop() {
				b.StopTimer()
				c := New(Options{})
				tok := c.ForModel("gpt-4o")
				for i, cv := range convs {
					if i != longest {
						tok.CountMessages(clone(cv.Messages))
					}
				}
				before := c.Stats().CodecBytes
				b.StartTimer()
				for _, s := range texts {
					if mode == "whole" {
						tok.enc.countWhole(s)
					} else {
						tok.enc.count(s)
					}
				}
				codec += c.Stats().CodecBytes - before
				runs++
			}
			b.ReportMetric(float64(codec)/float64(runs*bytes), "codec-share")
		})
	}
}
