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

	dropped, truncated atomic.Uint64
}

func newLogLimiter() *logLimiter { return &logLimiter{tokens: abi.LogBurst} }

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
	ok, dropped := limits.allow(time.Now())
	if !ok {
		return
	}
	if dropped > 0 {
		logger.Warn(fmt.Sprintf("plugin log rate limit: %d lines dropped (limit %d lines a second, bursts of %d)", dropped, abi.LogLinesPerSecond, abi.LogBurst))
	}
	text := string(msg)
	if size > abi.MaxLogLineBytes {
		cut := min(abi.MaxLogLineBytes, len(text))
		for cut > 0 && cut < len(text) && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = fmt.Sprintf("%s… (%d more bytes cut)", text[:cut], size-cut)
		limits.truncated.Add(1)
	}
	logger.Log(level, escapeLogLine(text))
}

// escapeLogLine keeps a message on one line of printable UTF-8: control
// characters other than tab are written as \xNN (\n as \n).
func escapeLogLine(s string) string {
	clean := utf8.ValidString(s)
	for i := 0; clean && i < len(s); i++ {
		clean = s[i] >= 0x20 && s[i] != 0x7f || s[i] == '\t'
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 && r != '\t' || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
