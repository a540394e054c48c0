package proxy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// endless is a body that never ends: pattern, over and over. It counts
// the bytes read from it.
type endless struct {
	pattern []byte
	off     int
	read    int64
}

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.pattern[e.off]
		e.off = (e.off + 1) % len(e.pattern)
	}
	e.read += int64(len(p))
	return len(p), nil
}

func TestEventScanner(t *testing.T) {
	events := []string{
		"data: a\n\n",
		"event: x\r\ndata: b\r\ndata: c\r\n\r\n",
		": comment\n\n",
		"\n", // an empty event
		"data: " + strings.Repeat("y", 70<<10) + "\n\n", // longer than the read buffer
		"data: last, without its blank line\n",
	}
	all := strings.Join(events, "")
	for _, size := range []int{1, 3, 7, 4096, len(all)} {
		var chunks []string
		for i := 0; i < len(all); i += size {
			chunks = append(chunks, all[i:min(i+size, len(all))])
		}
		s := newEventScanner(&chunkedReader{chunks: chunks}, 1<<20)
		var got []string
		for {
			ev, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("chunks of %d: %v", size, err)
			}
			got = append(got, string(ev))
		}
		if len(got) != len(events) {
			t.Fatalf("chunks of %d: %d events, want %d", size, len(got), len(events))
		}
		for i := range got {
			if got[i] != events[i] {
				t.Fatalf("chunks of %d: event %d = %.60q, want %.60q", size, i, got[i], events[i])
			}
		}
		if _, err := s.Next(); err != io.EOF {
			t.Fatalf("after the end: %v", err)
		}
	}
}

// TestEventScannerBlankLineAtBufferEdge: a line whose newline comes
// exactly after a full read buffer is not taken for a blank line.
func TestEventScannerBlankLineAtBufferEdge(t *testing.T) {
	line := "data: " + strings.Repeat("z", 32<<10-6) // fills the 32 KiB buffer
	stream := line + "\n" + "data: more\n\n"
	s := newEventScanner(strings.NewReader(stream), 1<<20)
	ev, err := s.Next()
	if err != nil || string(ev) != stream {
		t.Fatalf("%v: event of %d bytes, want the whole %d", err, len(ev), len(stream))
	}
}

// TestEventScannerBound: a line without a newline and an event without
// its blank line end the scan with an *EventLimitError once they pass
// the limit, having read no more than the limit and a buffer of them.
func TestEventScannerBound(t *testing.T) {
	const limit = 256 << 10
	for _, tc := range []struct {
		name            string
		prefix, pattern string
		line            bool
	}{
		{"line without a newline", "", "a", true},
		{"typed event, its data line without a newline", "event: content_block_delta\ndata: {\"x\":\"", "a", true},
		{"event without a blank line", "", "data: x\n", false},
		{"event of CRLF lines", "", "data: 1\r\ndata: 2\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &endless{pattern: []byte(tc.pattern)}
			s := newEventScanner(io.MultiReader(strings.NewReader("data: ok\n\n"+tc.prefix), src), limit)
			if ev, err := s.Next(); err != nil || string(ev) != "data: ok\n\n" {
				t.Fatalf("first event: %q %v", ev, err)
			}
			_, err := s.Next()
			var le *EventLimitError
			if !errors.As(err, &le) || le.Limit != limit || le.Line != tc.line {
				t.Fatalf("err = %#v", err)
			}
			if src.read > limit+64<<10 {
				t.Fatalf("read %d bytes for a limit of %d", src.read, limit)
			}
			if !strings.Contains(err.Error(), "proxy.max_event_bytes") {
				t.Fatalf("the error does not name the setting: %v", err)
			}
			if _, again := s.Next(); again != err {
				t.Fatalf("after the limit: %v", again)
			}
		})
	}
}

// TestEventScannerDropsEventOnError: a body that fails in the middle of
// an event ends the scan without handing out the half event.
func TestEventScannerDropsEventOnError(t *testing.T) {
	boom := errors.New("boom")
	s := newEventScanner(io.MultiReader(strings.NewReader("data: whole\n\ndata: hal"), &failing{boom}), 1<<20)
	if ev, err := s.Next(); err != nil || string(ev) != "data: whole\n\n" {
		t.Fatalf("%q %v", ev, err)
	}
	if ev, err := s.Next(); err != boom || ev != nil {
		t.Fatalf("%q %v", ev, err)
	}
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }

// BenchmarkEventScanner: a stream of small events, as providers send.
func BenchmarkEventScanner(b *testing.B) {
	ev := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"word"}}]}` + "\n\n")
	stream := bytes.Repeat(ev, 1000)
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		s := newEventScanner(bytes.NewReader(stream), 16<<20)
		for {
			if _, err := s.Next(); err != nil {
				break
			}
		}
	}
}

// TestStallWatch: a body that goes silent is cut by the watch; one that
// keeps sending is not, though it runs three times the watch's limit.
func TestStallWatch(t *testing.T) {
	t.Parallel()
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		stalled := make(chan struct{})
		var progress atomic.Int64
		w := newStallWatch(50*time.Millisecond, func() { close(stalled) }, func() { progress.Add(1) })
		w.start()
		defer w.stop()
		<-stalled // the test's own timeout catches a watch that never fires
		if progress.Load() != 1 {
			t.Fatalf("progress called %d times", progress.Load())
		}
	})
	// In a synctest bubble: the clock is the bubble's, so six seconds of
	// a body sending a byte a millisecond pass at once, and a busy
	// machine cannot delay a read past the limit.
	t.Run("sending", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var stalled atomic.Bool
			const limit = 2 * time.Second
			w := newStallWatch(limit, func() { stalled.Store(true) }, nil)
			w.start()
			defer w.stop()
			body := w.watched(io.NopCloser(&endless{pattern: []byte("x")}))
			buf := make([]byte, 1)
			for start := time.Now(); time.Since(start) < 3*limit; { // every read re-arms the watch
				if _, err := body.Read(buf); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond)
			}
			if stalled.Load() {
				t.Fatal("a body that kept sending was taken for stalled")
			}
		})
	})
}
