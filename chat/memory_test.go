package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/compactd/compactd/jsonscan"
)

// body builds a request body holding msgs.
func body(msgs []string) []byte {
	return []byte(`{"policy":"p","messages":[` + strings.Join(msgs, ",") + `]}`)
}

// scanBody parses the messages of a body through mem.
func scanBody(t testing.TB, mem *Memory, b []byte) *Conversation {
	t.Helper()
	s := jsonscan.New(b)
	s.BeginObject()
	for first := true; ; first = false {
		key, _, more, err := s.NextMember(first)
		if err != nil || !more {
			t.Fatalf("no messages: %v", err)
		}
		if string(key) == "messages" {
			c, err := mem.ScanMessages(s)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		s.Skip()
	}
}

func testMessages(n int, tag string) []string {
	msgs := []string{`{"role":"system","content":"You are terse."}`, `{"role":"user","content":"task ` + tag + `"}`}
	for i := 0; len(msgs) < n; i++ {
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":"step %d\n","tool_calls":[{"id":"c%d","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"ls %d\"}"}}]}`, i, i, i),
			fmt.Sprintf(`{"role":"tool","tool_call_id":"c%d","content":"out %d é"}`, i, i))
	}
	return msgs[:n]
}

// checkSame checks that c (parsed through a memory) equals a fresh parse
// of b, and that every slice it holds views b.
func checkSame(t *testing.T, c *Conversation, b []byte) {
	t.Helper()
	fresh, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != fresh.Len() {
		t.Fatalf("%d messages, want %d", c.Len(), fresh.Len())
	}
	lo := uintptr(unsafe.Pointer(&b[0]))
	hi := lo + uintptr(len(b))
	inB := func(p []byte) bool {
		if len(p) == 0 {
			return true
		}
		x := uintptr(unsafe.Pointer(&p[0]))
		return x >= lo && x < hi
	}
	for i := range c.Raw {
		if !bytes.Equal(c.Raw[i], fresh.Raw[i]) || !sameMessage(c.Messages[i], fresh.Messages[i]) {
			t.Fatalf("message %d: %s / %+v, want %s / %+v", i, c.Raw[i], c.Messages[i], fresh.Raw[i], fresh.Messages[i])
		}
		if !inB(c.Raw[i]) || !c.Messages[i].Content.IsNull() && !inB(c.Messages[i].Content.Raw()) {
			t.Fatalf("message %d does not view the new request's bytes", i)
		}
		if text := c.Messages[i].Content.Text(); c.Messages[i].Content.IsString() && !strings.Contains(string(c.Raw[i]), `\`) && len(text) > 0 &&
			!inB(unsafe.Slice(unsafe.StringData(text), len(text))) {
			t.Fatalf("message %d: plain text does not view the new request's bytes", i)
		}
	}
}

func TestMemoryExtends(t *testing.T) {
	mem := NewMemory(MemoryOptions{})
	msgs := testMessages(41, "a")
	c := scanBody(t, mem, body(msgs[:20]))
	for i := range c.Messages {
		c.Messages[i].Tokens = i + 1
	}
	Remember(c, "tok")
	for _, n := range []int{21, 41} {
		b := body(msgs[:n])
		c := scanBody(t, mem, b)
		checkSame(t, c, b)
		if got := c.Counted("tok"); got != 20 && n == 21 || n == 41 && got != 21 {
			t.Errorf("%d messages: %d counted, want the remembered ones", n, got)
		}
		if c.Counted("other") != 0 {
			t.Error("counts of another tokenizer reused")
		}
		for i := 0; i < c.Counted("tok"); i++ {
			if c.Messages[i].Tokens != i+1 {
				t.Fatalf("message %d: tokens %d", i, c.Messages[i].Tokens)
			}
		}
		for i := c.Counted("tok"); i < c.Len(); i++ {
			if c.Messages[i].Tokens != 0 {
				t.Fatalf("new message %d has tokens", i)
			}
			c.Messages[i].Tokens = i + 1
		}
		c.SetCounted("tok")
		Remember(c, "tok")
	}
	st := mem.Stats()
	if st.Hits != 2 || st.Reused != 20+21 || st.Entries != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestMemoryKeepsTheLongest: a shorter request of a conversation, out of
// order, does not replace the longer one remembered; the longer one then
// comes back parsed for nothing.
func TestMemoryKeepsTheLongest(t *testing.T) {
	t.Parallel()
	mem := NewMemory(MemoryOptions{})
	msgs := testMessages(41, "a")
	for _, n := range []int{41, 20} {
		b := body(msgs[:n])
		c := scanBody(t, mem, b)
		checkSame(t, c, b)
		Remember(c, "")
	}
	b := body(msgs)
	c := scanBody(t, mem, b)
	checkSame(t, c, b)
	if st := mem.Stats(); st.Reused != 20+41 || st.Entries != 1 {
		t.Errorf("stats %+v: want the 20 and then all 41 messages reused, from one entry", st)
	}
}

func TestMemoryEditedHistory(t *testing.T) {
	mem := NewMemory(MemoryOptions{})
	msgs := testMessages(30, "a")
	Remember(scanBody(t, mem, body(msgs)), "")
	edited := append([]string(nil), msgs...)
	edited[10] = strings.Replace(edited[10], "step", "STEP", 1)
	b := body(edited)
	c := scanBody(t, mem, b)
	checkSame(t, c, b)
	if c.memo.reused != 10 {
		t.Errorf("reused %d, want the 10 messages before the edit", c.memo.reused)
	}
	// Whitespace between messages is part of the bytes compared.
	spaced := []byte(strings.Replace(string(body(msgs)), `},{"role":"tool"`, `}, {"role":"tool"`, 3))
	c = scanBody(t, mem, spaced)
	checkSame(t, c, spaced)
	// A shorter request (a retry of an earlier turn) reuses what it has.
	b = body(msgs[:12])
	c = scanBody(t, mem, b)
	checkSame(t, c, b)
}

func TestMemorySharedKey(t *testing.T) {
	mem := NewMemory(MemoryOptions{})
	// Conversations with the same system and first user message: one key.
	var convs [][]string
	for k := 0; k < 6; k++ {
		msgs := testMessages(12, "same")
		msgs[5] = strings.Replace(msgs[5], "out", fmt.Sprintf("branch %d", k), 1)
		convs = append(convs, msgs)
		Remember(scanBody(t, mem, body(msgs)), "")
	}
	if st := mem.Stats(); st.Entries != maxPerKey {
		t.Errorf("%d entries, want %d per key", st.Entries, maxPerKey)
	}
	for k, msgs := range convs {
		b := body(append(msgs, `{"role":"user","content":"next"}`))
		checkSame(t, scanBody(t, mem, b), b)
		_ = k
	}
}

func TestMemoryBound(t *testing.T) {
	mem := NewMemory(MemoryOptions{MaxBytes: 64 << 10})
	for k := 0; k < 50; k++ {
		Remember(scanBody(t, mem, body(testMessages(20, fmt.Sprint(k)))), "")
		if st := mem.Stats(); st.Bytes > 64<<10 {
			t.Fatalf("holds %d bytes, bound %d", st.Bytes, 64<<10)
		}
	}
	// A conversation over a quarter of the bound is not kept.
	big := testMessages(400, "big")
	Remember(scanBody(t, mem, body(big)), "")
	c := scanBody(t, mem, body(append(big, `{"role":"user","content":"x"}`)))
	if c.memo.reused != 0 {
		t.Error("a conversation over a quarter of the bound was remembered")
	}
}

func TestMemoryConcurrent(t *testing.T) {
	mem := NewMemory(MemoryOptions{MaxBytes: 256 << 10})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			msgs := testMessages(60, fmt.Sprint(g%2)) // two goroutines per conversation
			for n := 3; n <= 60; n++ {
				b := body(msgs[:n])
				c := scanBody(t, mem, b)
				checkSame(t, c, b)
				Remember(c, "")
			}
		})
	}
	wg.Wait()
}

// FuzzMemory: whatever was remembered, a request parsed through the
// memory equals its fresh parse.
func FuzzMemory(f *testing.F) {
	f.Add(uint8(10), uint8(12), uint8(3), []byte("x"))
	f.Add(uint8(20), uint8(5), uint8(0), []byte(`"`))
	f.Fuzz(func(t *testing.T, first, second, edit uint8, junk []byte) {
		mem := NewMemory(MemoryOptions{})
		msgs := testMessages(int(first%40)+1, "f")
		Remember(scanBody(t, mem, body(msgs)), "tok")
		next := testMessages(int(second%40)+1, "f")
		if int(edit) < len(next) {
			next[edit] = `{"role":"user","content":` + strconvQuote(string(junk)) + `}`
		}
		b := body(next)
		if _, err := Parse(b); err != nil {
			return
		}
		checkSame(t, scanBody(t, mem, b), b)
	})
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestMemoryKeyUnparsed: a request that repeats a remembered one is read
// without parsing its key messages (scanRemembered), and answers exactly
// as a fresh parse does: the same messages, or the same error.
func TestMemoryKeyUnparsed(t *testing.T) {
	t.Parallel()
	sys := `{"role":"system","content":"You are terse.\nKeep \"quotes\"."}`
	base := append([]string{sys}, testMessages(10, "k")[1:]...)
	next := `{"role":"user","content":"next"}`
	spaced := `{ "content" : "You are terse.\nKeep \"quotes\".", "role" : "system" }`
	escapedKey := `{"r\u006fle":"user","content":"task k"}`
	cases := []struct {
		name  string
		msgs  []string
		reuse int // messages taken from the memory
		err   bool
	}{
		{name: "next turn", msgs: append(base, next), reuse: 10},
		{name: "same request", msgs: base, reuse: 10},
		{name: "the key alone", msgs: base[:2]}, // nothing past the key: parsed as before
		{name: "edited system prompt", msgs: append([]string{strings.Replace(sys, "terse", "brief", 1)}, append(base[1:], next)...)},
		{name: "key spaced differently", msgs: append([]string{spaced}, append(base[1:], next)...)},
		{name: "role key escaped", msgs: append([]string{sys, escapedKey}, append(base[2:], next)...)},
		{name: "malformed message after the reused ones", msgs: append(base, `{"role":"user","content":5}`), err: true},
		{name: "not an object after the reused ones", msgs: append(base, `"hi"`), err: true},
		{name: "key not an object", msgs: append([]string{`[1]`}, base[1:]...), err: true},
		{name: "key message malformed", msgs: append([]string{`{"role":"system","content":{}}`}, base[1:]...), err: true},
		{name: "syntax error in the key", msgs: append([]string{`{"role":"system",}`}, base[1:]...), err: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem := NewMemory(MemoryOptions{})
			Remember(scanBody(t, mem, body(base)), "tok")
			b := body(tc.msgs)
			s := jsonscan.New(b)
			s.Seek(bytes.Index(b, []byte(`[`)))
			c, err := mem.ScanMessages(s)
			fs := jsonscan.New(b)
			fs.Seek(bytes.Index(b, []byte(`[`)))
			_, want := ScanMessages(fs)
			if tc.err {
				if err == nil || want == nil || err.Error() != want.Error() {
					t.Fatalf("error %v, want %v", err, want)
				}
				return
			}
			if err != nil || want != nil {
				t.Fatalf("error %v (fresh parse: %v)", err, want)
			}
			checkSame(t, c, b)
			if c.memo.reused != tc.reuse {
				t.Errorf("reused %d messages, want %d", c.memo.reused, tc.reuse)
			}
			if s.Pos() != fs.Pos() {
				t.Errorf("scanner at %d after the array, want %d", s.Pos(), fs.Pos())
			}
		})
	}
}

// BenchmarkMemoryNextTurn: one agent turn (two new messages) on a
// remembered conversation with a long system prompt, the daemon's
// common request.
func BenchmarkMemoryNextTurn(b *testing.B) {
	sys := `{"role":"system","content":` + strconvQuote(strings.Repeat("# Policy\nDo not book a flight without the user's \"yes\".\n", 150)) + `}`
	msgs := append([]string{sys}, testMessages(30, "b")[1:]...)
	mem := NewMemory(MemoryOptions{})
	Remember(scanBody(b, mem, body(msgs[:28])), "tok")
	req := body(msgs)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		scanBody(b, mem, req)
	}
}
