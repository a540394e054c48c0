package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"
)

// This file is the proxy's bounded reading of an upstream's body: events
// of a text/event-stream one at a time within a byte limit, and a
// watchdog on the silences between reads. Neither knows a provider's
// wire format.

// EventLimitError reports an upstream stream that ran past the bound on
// one event (proxy.max_event_bytes) before ending it.
type EventLimitError struct {
	// Limit is the bound, in bytes.
	Limit int
	// Line is true when most of it was one line, without its newline;
	// false when it was many lines, without the blank line that ends an
	// event.
	Line bool
}

func (e *EventLimitError) Error() string {
	if e.Line {
		return fmt.Sprintf("the upstream's stream ran past %d bytes (proxy.max_event_bytes) in one event, most of it a line without its newline", e.Limit)
	}
	return fmt.Sprintf("the upstream's stream ran past %d bytes (proxy.max_event_bytes) in one event, without the blank line that ends an event", e.Limit)
}

// eventScanner splits a text/event-stream body into events: each is its
// lines up to and including the blank line that ends it. It reads no
// further than the event it returns, and holds at most limit bytes of an
// event (plus its 32 KiB read buffer): a line or an event that runs past
// limit is an *EventLimitError, never a larger buffer.
type eventScanner struct {
	src   *bufio.Reader
	limit int
	event []byte
	err   error
}

// keepBelow is the largest event buffer kept for the next event; a
// larger one (a rare big event) is given back.
const keepBelow = 256 << 10

func newEventScanner(r io.Reader, limit int) *eventScanner {
	return &eventScanner{src: bufio.NewReaderSize(r, relayBufferSize), limit: limit}
}

// errScannerClosed is what a scanner returns once its read buffer was
// given back (release).
var errScannerClosed = errors.New("the stream's reader was closed")

// release ends the scan and returns its read buffer, which the scanner
// no longer uses: every later Next fails.
func (s *eventScanner) release() *bufio.Reader {
	src := s.src
	s.src, s.event, s.err = nil, nil, errScannerClosed
	return src
}

// Next returns the next event. The slice is valid until the next call.
// At the end of the body it returns io.EOF, after a last event that ends
// without its blank line (returned as it is). Any other error (the
// body's, or an *EventLimitError) ends the scan: the event in progress is
// dropped, and every later call returns the same error.
func (s *eventScanner) Next() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if cap(s.event) > keepBelow {
		s.event = nil
	}
	s.event = s.event[:0]
	line := 0 // where the line being read starts in s.event
	for {
		chunk, err := s.src.ReadSlice('\n')
		if len(s.event)+len(chunk) > s.limit {
			s.err = &EventLimitError{Limit: s.limit, Line: len(s.event)-line+len(chunk) > s.limit/2}
			s.event = nil
			return nil, s.err
		}
		s.event = append(s.event, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue // a long line: read on
		case err == io.EOF:
			s.err = err
			if len(s.event) > 0 {
				return s.event, nil
			}
			return nil, err
		case err != nil:
			s.err = err
			s.event = nil
			return nil, err
		case isBlank(s.event[line:]):
			return s.event, nil
		}
		line = len(s.event)
	}
}

// isBlank reports whether a line (with its newline) is empty.
func isBlank(line []byte) bool {
	return len(line) == 1 || len(line) == 2 && line[0] == '\r'
}

// stallWatch ends an exchange whose upstream goes silent: armed once the
// response's headers arrived, re-armed by every read that brings bytes,
// it calls stalled when limit passes without one. It counts silence, not
// the answer's length: a stream that keeps sending is never cut.
type stallWatch struct {
	limit    time.Duration
	stalled  func()
	progress func() // also called on every read with bytes (nil: nothing)
	timer    *time.Timer
}

func newStallWatch(limit time.Duration, stalled, progress func()) *stallWatch {
	return &stallWatch{limit: limit, stalled: stalled, progress: progress}
}

// start arms the watch. It is called once, on the goroutine that reads.
func (w *stallWatch) start() {
	w.timer = time.AfterFunc(w.limit, w.stalled)
	if w.progress != nil {
		w.progress()
	}
}

// kick re-arms a started watch: bytes arrived.
func (w *stallWatch) kick() {
	w.timer.Reset(w.limit)
	if w.progress != nil {
		w.progress()
	}
}

// stop disarms the watch (safe before start).
func (w *stallWatch) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// watched returns body with every read that brings bytes kicking w.
func (w *stallWatch) watched(body io.ReadCloser) io.ReadCloser { return &watchedBody{body, w} }

type watchedBody struct {
	io.ReadCloser
	w *stallWatch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.kick()
	}
	return n, err
}
