package host

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
	"github.com/hashicorp/go-hclog"
)

// logLimiter bounds what one plugin file writes to the daemon's log: a
// token bucket of abi.LogBurst lines refilled at abi.LogLinesPerSecond,
// and lines cut to abi.MaxLogLineBytes. Lines over the rate are dropped
// and counted; the next line let through is preceded by a note of how
// many were dropped. It is safe for concurrent use (a plugin's instances
// log at once).
type logLimiter struct {
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	pending uint64 // dropped since the last note
	// now is the limiter's clock: time.Now, or a clock a test holds
	// still so that the bucket does not refill while a busy machine
	// slows the guest down (Engine.logClock).
	now func() time.Time

	dropped, truncated atomic.Uint64
}

func newLogLimiter() *logLimiter { return &logLimiter{tokens: abi.LogBurst, now: time.Now} }

// allow takes one line from the bucket. It returns whether the line may
// be written and how many lines were dropped since the last line written.
func (l *logLimiter) allow(now time.Time) (ok bool, droppedBefore uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(abi.LogBurst, l.tokens+now.Sub(l.last).Seconds()*abi.LogLinesPerSecond)
	}
	l.last = now
	if l.tokens < 1 {
		l.pending++
		l.dropped.Add(1)
		return false, 0
	}
	l.tokens--
	droppedBefore, l.pending = l.pending, 0
	return true, droppedBefore
}

// pluginLog writes a plugin's log message: dropped below the logger's
// level (not counted), dropped over the rate limit (counted), otherwise
// cut to abi.MaxLogLineBytes with newlines and invalid UTF-8 escaped, so
// a plugin can neither flood the log nor forge lines in it. size is the
// message's full length when msg holds only its beginning.
func pluginLog(logger hclog.Logger, limits *logLimiter, level hclog.Level, msg []byte, size int) {
	if level < logger.GetLevel() {
		return
	}
	ok, dropped := limits.allow(limits.now())
	if !ok {
		return
	}
	if dropped > 0 {
		logger.Warn(fmt.Sprintf("plugin log rate limit: %d lines dropped (limit %d lines a second, bursts of %d)", dropped, abi.LogLinesPerSecond, abi.LogBurst))
	}
	line, used := escapeLogLine(msg, abi.MaxLogLineBytes)
	if used < size {
		line = fmt.Sprintf("%s… (%d more bytes cut)", line, size-used)
		limits.truncated.Add(1)
	}
	logger.Log(level, line)
}

// escapeLogLine returns msg as one line of printable UTF-8 of at most
// limit bytes (control characters other than tab written as \xNN, \n as
// \n, invalid UTF-8 as U+FFFD) and how many bytes of msg it holds.
func escapeLogLine(msg []byte, limit int) (string, int) {
	var b strings.Builder
	b.Grow(min(len(msg), limit))
	i := 0
	for i < len(msg) {
		r, n := utf8.DecodeRune(msg[i:])
		var piece string
		switch {
		case r == '\n':
			piece = `\n`
		case r == '\r':
			piece = `\r`
		case r < 0x20 && r != '\t' || r == 0x7f:
			piece = fmt.Sprintf(`\x%02x`, r)
		case r == utf8.RuneError && n == 1:
			piece = "\uFFFD"
		default:
			piece = string(msg[i : i+n])
		}
		if b.Len()+len(piece) > limit {
			break
		}
		b.WriteString(piece)
		i += n
	}
	return b.String(), i
}
