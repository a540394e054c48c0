package redisstore

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/store/redisstore/redistest"
	"github.com/hashicorp/go-hclog"
)

// TestDriverLogRateLimited: one kind of go-redis line is logged once per
// driverLogEvery with the count held back since; connection-pool lines at
// debug, others at warn.
func TestDriverLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	d := &driverLog{logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug}), now: func() time.Time { return now }, last: map[string]driverLine{}}
	for i := 0; i < 5; i++ {
		d.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "connection refused")
	}
	d.Printf(context.Background(), "queuedNewConn panic: %+v", "boom")
	now = now.Add(driverLogEvery)
	d.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "connection refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (the first dial failure, the panic, the next minute's with 4 held back):\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"[DEBUG] connection pool: failed to dial after 5 attempts: connection refused", "[WARN]  queuedNewConn panic: boom", "held_back=4"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %q, want %q in it", i+1, lines[i], want)
		}
	}
}

// TestDriverLogNoStderr: while Redis is down, go-redis's "connection pool:
// failed to dial" lines go to the store's hclog logger, not to the
// process's stderr. It runs a store in a child process (go-redis's default
// logger holds the stderr it found at start), kills its Redis, and reads
// both streams.
func TestDriverLogNoStderr(t *testing.T) {
	if os.Getenv("REDISSTORE_DRIVERLOG_CHILD") != "" {
		driverLogChild()
		return
	}
	t.Parallel() // the child waits on its pings' timeouts for seconds
	srv := redistest.Start(t)
	srv.Kill()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDriverLogNoStderr$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDISSTORE_DRIVERLOG_CHILD="+srv.URL())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "connection pool") {
		t.Errorf("go-redis wrote to stderr:\n%s", stderr.String())
	}
	out := stdout.String()
	if n := strings.Count(out, "go-redis: connection pool: failed to dial"); n != 1 {
		t.Errorf("%d go-redis dial lines in the daemon's log, want 1 (the rest held back):\n%s", n, out)
	}
	if !strings.Contains(out, "shared store unreachable") {
		t.Errorf("the store's own warning is missing:\n%s", out)
	}
}

// driverLogChild opens a store on the dead server, logging to stdout at
// debug level, and makes it dial a few times.
func driverLogChild() {
	logger := hclog.New(&hclog.LoggerOptions{Output: os.Stdout, Level: hclog.Debug})
	s, err := Open(Options{URL: os.Getenv("REDISSTORE_DRIVERLOG_CHILD"), Logger: logger, ProbeInterval: time.Hour})
	if err != nil {
		logger.Error("open", "error", err)
		os.Exit(1)
	}
	defer s.Close()
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.Client().Ping(ctx) // fails: the server is gone
		cancel()
	}
}
