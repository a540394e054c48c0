package proxy

import (
	"bytes"
	"io"
	"sync"

	"github.com/compactd/compactd/internal/wire"
)

// sseReader passes a text/event-stream body through event by event: each
// Read returns at most one whole event (its lines up to and including the
// blank line that ends it), as soon as the upstream has sent it, so the
// reverse proxy writes and flushes it at once. Nothing beyond the event in
// progress is held, and that within a limit (eventScanner). The parser
// sees every event and may drop one (the usage chunk the proxy asked for
// on the client's behalf).
//
// When the body fails — an event over the limit, a stall — fail gives the
// event that ends the stream in the provider's format, and the client's
// stream ends cleanly after it; when fail gives nil (the client went
// away, the upstream broke the connection) the error is passed on, and
// the client's connection is aborted as the upstream's was.
type sseReader struct {
	body  io.ReadCloser
	scan  *eventScanner
	parse wire.Stream // nil: events are only passed through
	fail  func(error) []byte
	done  func()
	once  sync.Once
	out   []byte // what Read returns next
	end   error  // what Read returns once out is drained
	// pool, if set, gave the scanner's read buffer, which Close gives
	// back.
	pool *relayBuffers
}

func newSSEReader(body io.ReadCloser, limit int, parse wire.Stream, fail func(error) []byte, done func()) *sseReader {
	return &sseReader{body: body, scan: newEventScanner(body, limit), parse: parse, fail: fail, done: done}
}

// newPooledSSEReader is newSSEReader reading through a buffer of pool's,
// given back when the reader is closed.
func newPooledSSEReader(pool *relayBuffers, body io.ReadCloser, limit int, parse wire.Stream, fail func(error) []byte, done func()) *sseReader {
	return &sseReader{body: body, scan: &eventScanner{src: pool.reader(body), limit: limit}, parse: parse, fail: fail, done: done, pool: pool}
}

func (s *sseReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.end != nil {
			if s.end == io.EOF {
				s.finish()
			}
			return 0, s.end
		}
		ev, err := s.scan.Next()
		switch {
		case err == io.EOF:
			s.end = io.EOF
		case err != nil:
			if s.out = s.fail(err); s.out != nil {
				s.end = io.EOF
			} else {
				s.end = err
			}
		case s.parse == nil:
			s.out = ev
		default:
			typ, data := eventFields(ev)
			if data == nil {
				s.out = ev
				break
			}
			switch repl, drop := s.parse.Event(typ, data); {
			case drop:
			case repl != nil:
				s.out = wire.SSEEvent(typ, repl)
			default:
				s.out = ev
			}
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
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

func (s *sseReader) finish() {
	if s.done != nil {
		s.once.Do(s.done)
	}
}

// Close closes the upstream body. A stream cut short (the client went
// away) still reports the usage seen so far. A pooled reader's buffer
// goes back to its pool: the reader must not be read afterwards (the
// reverse proxy reads and closes it on one goroutine).
func (s *sseReader) Close() error {
	s.finish()
	err := s.body.Close()
	if s.pool != nil && s.scan.src != nil {
		s.pool.putReader(s.scan.release())
	}
	return err
}
