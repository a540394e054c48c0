package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/requestlog"
	"github.com/compactd/compactd/internal/store/redisstore"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
	"github.com/redis/go-redis/v9"
)

// roundTrips is a go-redis hook that counts round trips to the server: a
// command sent alone is one, a pipeline (or a MULTI/EXEC) is one, with the
// commands it carried.
type roundTrips struct {
	mu       sync.Mutex
	trips    int
	commands int
	names    []string
	// logTrips are the request log's copy of its records (the bucket
	// requestlog.BucketName), written off the request path: counted apart.
	logTrips int
}

// logCommand reports whether cmd touches the request log's bucket.
func logCommand(cmd redis.Cmder) bool {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, ":b:"+requestlog.BucketName+":") {
			return true
		}
	}
	return false
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hello" {
			return next(ctx, cmd) // a new connection's handshake
		}
		if logCommand(cmd) {
			r.mu.Lock()
			r.logTrips++
			r.mu.Unlock()
			return next(ctx, cmd)
		}
		r.mu.Lock()
		r.trips++
		r.commands++
		r.names = append(r.names, cmd.Name())
		r.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if logCommand(c) {
				r.mu.Lock()
				r.logTrips++
				r.mu.Unlock()
				return next(ctx, cmds)
			}
		}
		r.mu.Lock()
		r.trips++
		r.commands += len(cmds)
		r.names = append(r.names, fmt.Sprintf("pipeline(%d)", len(cmds)))
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the counts since the last take and resets them.
func (r *roundTrips) take() (trips, commands int, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	trips, commands, names = r.trips, r.commands, r.names
	r.trips, r.commands, r.names = 0, 0, nil
	return
}

// takeLog returns the request log's round trips since the last call.
func (r *roundTrips) takeLog() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.logTrips
	r.logTrips = 0
	return n
}

// TestStoreRoundTripsPerRequest: a compaction's traffic to the shared
// store is a fixed number of round trips, pipelined, whatever the
// conversation's length: counted with a hook on the daemon's Redis client
// while one conversation grows from 8 to 120 messages through a stateful
// policy (hierarchical: the status and state read, the state's CAS
// script, the state-bytes counter, the status pipeline) and a stateless
// one (sliding: the read and the status pipeline). The last-compaction
// records go in one pipeline per flush, for every conversation at once.
func TestStoreRoundTripsPerRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	td := setup(t, "", pluginSliding, "plugins/hierarchical")
	td.opts.StoreFlush = time.Hour // the last-compaction records are written by the flush, counted apart
	td.opts.Getenv = func(k string) string {
		if k == "COMPACTD_STATE_URL" {
			return srv.URL()
		}
		return ""
	}
	td.start(t)
	rs, ok := td.Daemon.store.(*redisstore.Store)
	if !ok {
		t.Fatalf("the daemon's store is %T, want the Redis store", td.Daemon.store)
	}
	hook := &roundTrips{}
	rs.Client().AddHook(hook)
	compact := func(policy, id string, turns int) {
		t.Helper()
		code, body, _ := td.raw(t, http.MethodPost, "/v1/compact",
			fmt.Sprintf(`{"policy":%q,"conversation_id":%q,"messages":%s}`, policy, id, mustJSON(t, chatMessages(turns))))
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", policy, code, body)
		}
	}
	for _, policy := range []string{"hierarchical", "sliding"} {
		// Warm: connections open, the CAS script loaded (EVALSHA's first
		// NOSCRIPT costs one EVAL per server).
		compact(policy, "warm-"+policy, 15)
		compact(policy, "warm-"+policy, 30)
		id := "rt-" + policy
		perLength := map[int]int{}
		for _, turns := range []int{4, 15, 30, 60} {
			td.waitLogged(t, 0)
			hook.take()
			hook.takeLog()
			held := td.Daemon.requests.Stats().Held
			compact(policy, id, turns)
			td.waitLogged(t, held+1)
			if n := hook.takeLog(); n > 3 {
				t.Errorf("%s, %d messages: the request log's copy took %d round trips, want at most 3", policy, 2*turns, n)
			}
			trips, commands, names := hook.take()
			t.Logf("%s, %d messages: %d round trips, %d commands: %v", policy, 2*turns, trips, commands, names)
			perLength[turns] = trips
			if trips > 4 {
				t.Errorf("%s, %d messages: %d round trips to the store (%v), want at most 4", policy, 2*turns, trips, names)
			}
		}
		if perLength[30] != perLength[60] {
			t.Errorf("%s: round trips per request grow with the conversation: %v", policy, perLength)
		}
	}
	rs.Flush()
	trips, commands, _ := hook.take()
	t.Logf("flush of the pending last-compaction records: %d round trips, %d commands", trips, commands)
}

// waitLogged waits until the request log holds n records in memory (no
// store traffic) and has copied what it holds to the store.
func (td *testDaemon) waitLogged(t testing.TB, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d records in the request log", n), 2*time.Minute, func() bool {
		return td.Daemon.requests.Stats().Held >= n
	})
	td.Daemon.requests.Flush()
}
