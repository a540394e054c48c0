package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// go-redis logs some events itself (a connection pool that failed to
// dial, a panic in a background dial) through one process-wide logger,
// stderr by default: while Redis is down that is a "connection pool:
// failed to dial" line per attempt, outside the daemon's log format and
// level. routeDriverLog replaces that logger (redis.SetLogger: the only
// package-level state here is go-redis's own, which it forces) with a
// driverLog on the store's hclog logger. A process has one: the last
// store opened gets go-redis's lines, which in the daemon is the only one.

// driverLogEvery is how often one kind of go-redis line is logged; the
// lines in between are counted and the count goes with the next.
const driverLogEvery = time.Minute

// routeDriverLog sends go-redis's own log lines to logger.
func routeDriverLog(logger hclog.Logger) {
	redis.SetLogger(&driverLog{logger: logger.Named("go-redis"), now: time.Now, last: map[string]driverLine{}})
}

// driverLog is go-redis's logger on hclog. Connection-pool lines (the
// dials an outage makes fail) go at debug level: the store itself logs an
// outage once at warn, with the error, and its end at info. Other lines
// go at warn. Each kind (its format) is logged at most once per
// driverLogEvery, with the number of lines held back since.
type driverLog struct {
	logger hclog.Logger
	now    func() time.Time

	mu   sync.Mutex
	last map[string]driverLine
}

type driverLine struct {
	at         time.Time
	suppressed int
}

// Printf implements go-redis's internal.Logging.
func (d *driverLog) Printf(_ context.Context, format string, v ...any) {
	now := d.now()
	d.mu.Lock()
	l, seen := d.last[format]
	if seen && now.Sub(l.at) < driverLogEvery {
		l.suppressed++
		d.last[format] = l
		d.mu.Unlock()
		return
	}
	held := l.suppressed
	d.last[format] = driverLine{at: now}
	d.mu.Unlock()

	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	args := []any{}
	if held > 0 {
		args = append(args, "held_back", held, "note", fmt.Sprintf("lines like this are logged once per %v", driverLogEvery))
	}
	if strings.HasPrefix(msg, "connection pool:") {
		d.logger.Debug(msg, args...)
		return
	}
	d.logger.Warn(msg, args...)
}
