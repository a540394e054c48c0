package loadbench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/store/redisstore/redistest"
	"github.com/redis/go-redis/v9"
)

// TestFleetRedis: the fleet's redis-server starts, answers, and the
// figures read from it (commands run, used memory, a conversation's key
// sizes) move with what is written; Stop ends it.
func TestFleetRedis(t *testing.T) {
	bin := redistest.Binary(t)
	dir, err := os.MkdirTemp("", "lbr") // short: a socket path is limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := StartRedis(bg, bin, filepath.Join(dir, "r"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: srv.Socket})
	defer rdb.Close()
	cmds0, err := redisCommands(bg, rdb)
	if err != nil {
		t.Fatal(err)
	}
	mem0, err := redisInfoInt(bg, rdb, "memory", "used_memory")
	if err != nil || mem0 <= 0 {
		t.Fatalf("used_memory %d, %v", mem0, err)
	}
	for _, id := range []string{"f-lb0-1", "f-lb0-2", "s-lb0-1"} {
		rdb.HSet(bg, "compactd:{"+id+"}:st", "requests", 1, "model", strings.Repeat("m", 500))
		rdb.ZAdd(bg, "compactd:convs", redis.Z{Score: 1, Member: id})
	}
	cmds1, err := redisCommands(bg, rdb)
	if err != nil || cmds1-cmds0 < 6 {
		t.Errorf("commands %d → %d (%v): want at least the 6 sent", cmds0, cmds1, err)
	}
	kb, err := conversationKeyBytes(bg, rdb, "f-lb0-")
	if err != nil || kb < 500 {
		t.Errorf("key bytes per conversation %v (%v): want at least the 500-byte field", kb, err)
	}
	if _, err := redisInfoInt(bg, rdb, "memory", "no_such_field"); err == nil {
		t.Error("a missing INFO field read as a number")
	}
	srv.Stop()
	select {
	case <-srv.done:
	case <-time.After(10 * time.Second):
		t.Fatal("redis-server still running after Stop")
	}
}

// TestWriteFleet checks the tables' shape.
func TestWriteFleet(t *testing.T) {
	r := &FleetResult{Set: "tau-bench", Policy: "ledger", Replicas: 3, Clients: 2,
		Single:   FleetSide{Requests: 10, P50: time.Millisecond, P99: 3 * time.Millisecond},
		Sticky:   FleetSide{Requests: 10, P50: 1200 * time.Microsecond, P99: 2 * time.Millisecond},
		Fleet:    FleetSide{Requests: 10, P50: 1300 * time.Microsecond, P99: 4 * time.Millisecond},
		Commands: 8, RedisCPU: 40 * time.Microsecond, Conversations: 5, MemoryPerConversation: 8000, KeyBytes: 7000,
		SingleLoad:  &Result{ReqPerSec: 1000, Requests: 10, ServerCPU: 5 * time.Millisecond},
		ReplicaLoad: &Result{ReqPerSec: 900, Requests: 10, ServerCPU: 6 * time.Millisecond}}
	var b bytes.Buffer
	WriteFleet(&b, []*FleetResult{r})
	for _, want := range []string{"| ledger | 10 | 1.00 ms / 3.00 ms | 1.20 ms / 2.00 ms | 1.30 ms / 4.00 ms | +0.20 ms / −1.00 ms | +0.30 ms / +1.00 ms | 1.30 / 1.33 | 8.0 | 40 µs |",
		"| ledger | 5 | 8.0 KB | 7.0 KB | 1,000 (500 µs) | 900 (600 µs) |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, b.String())
		}
	}
}
