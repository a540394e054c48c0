package proxy

import (
	"bufio"
	"bytes"
	"io"
	"sync"
)

// sseReader passes a text/event-stream body through event by event: each
// Read returns at most one whole event (its lines up to and including the
// blank line that ends it), as soon as the upstream has sent it, so the
// reverse proxy writes and flushes it at once. Nothing beyond the event in
// progress is held. The parser sees every event and may drop one (the
// usage chunk the proxy asked for on the client's behalf).
type sseReader struct {
	body  io.ReadCloser
	src   *bufio.Reader
	parse streamParser
	done  func()
	once  sync.Once
	event []byte // the event being read
	out   []byte // what Read returns next
	err   error
}

func newSSEReader(body io.ReadCloser, parse streamParser, done func()) *sseReader {
	return &sseReader{body: body, src: bufio.NewReaderSize(body, 32<<10), parse: parse, done: done}
}

func (s *sseReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			if s.err == io.EOF {
				s.finish()
			}
			return 0, s.err
		}
		line, err := s.src.ReadSlice('\n')
		s.event = append(s.event, line...)
		switch {
		case err == bufio.ErrBufferFull:
			continue // a long line: keep reading it
		case err != nil:
			s.err = err
			s.endEvent() // a last event without its blank line goes as it is
		case isBlank(line):
			s.endEvent()
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func isBlank(line []byte) bool {
	return len(line) == 1 || len(line) == 2 && line[0] == '\r'
}

// endEvent hands the event read so far to the parser and queues it for
// the client unless the parser drops it.
func (s *sseReader) endEvent() {
	ev := s.event
	s.event = nil // ev is handed out; the next event is read into new memory
	if len(ev) == 0 {
		return
	}
	typ, data := eventFields(ev)
	if data != nil && s.parse.event(typ, data) {
		s.event = ev[:0]
		return
	}
	s.out = ev
}

// eventFields returns an event's type and its data lines joined by "\n"
// (nil when it has none).
func eventFields(ev []byte) (typ string, data []byte) {
	var lines [][]byte
	for len(ev) > 0 {
		i := bytes.IndexByte(ev, '\n')
		var line []byte
		if i < 0 {
			line, ev = ev, nil
		} else {
			line, ev = ev[:i], ev[i+1:]
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case bytes.HasPrefix(line, []byte("data:")):
			lines = append(lines, bytes.TrimPrefix(line[5:], []byte(" ")))
		case bytes.HasPrefix(line, []byte("event:")):
			typ = string(bytes.TrimSpace(line[6:]))
		}
	}
	switch len(lines) {
	case 0:
		return typ, nil
	case 1:
		return typ, lines[0]
	}
	return typ, bytes.Join(lines, []byte("\n"))
}

func (s *sseReader) finish() { s.once.Do(s.done) }

// Close closes the upstream body. A stream cut short (the client went
// away) still reports the usage seen so far.
func (s *sseReader) Close() error {
	s.finish()
	return s.body.Close()
}

// jsonTee passes a JSON body through unchanged and keeps a copy of up to
// limit bytes, handed to done when the body ends (nil when it was
// larger).
type jsonTee struct {
	body  io.ReadCloser
	buf   []byte
	limit int
	over  bool
	done  func(body []byte)
	once  sync.Once
}

func (t *jsonTee) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	if !t.over {
		if len(t.buf)+n > t.limit {
			t.over, t.buf = true, nil
		} else {
			t.buf = append(t.buf, p[:n]...)
		}
	}
	if err == io.EOF {
		t.once.Do(func() {
			if t.over {
				t.done(nil)
				return
			}
			t.done(t.buf)
		})
	}
	return n, err
}

func (t *jsonTee) Close() error { return t.body.Close() }
