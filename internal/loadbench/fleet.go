package loadbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// FleetOptions configure Fleet: one daemon on its own bbolt store against
// a fleet of daemons sharing one real redis-server, on the same requests.
type FleetOptions struct {
	// Bin and Plugins are compactd and the built-in plugins; CacheDir the
	// compilation cache the daemons share.
	Bin, Plugins, CacheDir string
	// RedisBin is redis-server (default: found on $PATH).
	RedisBin string
	// Dir is a scratch directory.
	Dir string
	// Replicas is the fleet's size (default 3).
	Replicas int
	// Policies are measured one after the other, on the same daemons.
	Policies []string
	// Set, Clients, Warmup and MinTime are as in LoadOptions.
	Set     *Set
	Clients int
	Warmup  int
	MinTime time.Duration
}

// FleetSide is one side of a fleet comparison.
type FleetSide struct {
	Requests int
	P50, P99 time.Duration
}

// FleetResult is one policy measured on one daemon on bbolt (Single) and
// on the fleet on Redis, interleaved request by request: Sticky with each
// conversation on one replica (a load balancer with affinity), Fleet with
// every turn on the next replica (round robin).
type FleetResult struct {
	Set, Policy           string
	Replicas, Clients     int
	Single, Sticky, Fleet FleetSide
	// Commands is the Redis commands the fleet sent per measured request
	// (INFO commandstats, the sweeper's and probes' included).
	Commands float64
	// Conversations is how many conversations the shared store tracked
	// after the run, and MemoryPerConversation Redis's used_memory growth
	// over the run divided by the conversations it added.
	Conversations         int64
	MemoryPerConversation float64
	// KeyBytes is MEMORY USAGE of a conversation's keys (status, plugin
	// state, last-compaction record), mean over a sample.
	KeyBytes float64
	// RedisCPU is redis-server's CPU time per measured fleet request.
	RedisCPU time.Duration
	// SingleLoad and ReplicaLoad are throughput runs (Load, every client
	// on one daemon, no conversation ids) on the bbolt daemon and on one
	// replica of the fleet alone: requests per second and the daemon's
	// CPU per request.
	SingleLoad, ReplicaLoad *Result
}

// Fleet starts a redis-server, one daemon on bbolt and opts.Replicas
// daemons on the redis-server, then for each policy sends every request
// of the set to the single daemon and twice to the fleet, interleaved:
// each client takes a conversation and sends each turn to the three sides
// (which goes first rotating): the bbolt daemon, the fleet with the
// conversation kept on one replica, the fleet taking its turns
// round-robin.
// Every request carries a conversation id new to the run, so each
// policy's plugin state and each conversation's status go through the
// store as in an agent's conversation.
func Fleet(ctx context.Context, opts FleetOptions) ([]*FleetResult, error) {
	if opts.Replicas <= 0 {
		opts.Replicas = 3
	}
	if opts.Clients <= 0 {
		opts.Clients = 2
	}
	if opts.MinTime <= 0 {
		opts.MinTime = 3 * time.Second
	}
	if len(opts.Policies) == 0 {
		return nil, errors.New("loadbench: fleet: no policies")
	}
	// Only the measured policies' plugins: four daemons compile less.
	plugins := filepath.Join(opts.Dir, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		return nil, err
	}
	for _, p := range opts.Policies {
		b, err := os.ReadFile(filepath.Join(opts.Plugins, p+".wasm"))
		if err != nil {
			return nil, fmt.Errorf("loadbench: fleet: policy %s: %w", p, err)
		}
		if err := os.WriteFile(filepath.Join(plugins, p+".wasm"), b, 0o644); err != nil {
			return nil, err
		}
	}
	rds, err := StartRedis(ctx, opts.RedisBin, filepath.Join(opts.Dir, "redis"))
	if err != nil {
		return nil, err
	}
	defer rds.Stop()
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: rds.Socket})
	defer rdb.Close()

	daemon := func(name, cfg string) (*Server, error) {
		return StartCompiled(ctx, Daemon{Bin: opts.Bin, Plugins: plugins, CacheDir: opts.CacheDir,
			Dir: filepath.Join(opts.Dir, name), Config: cfg, Policies: opts.Policies})
	}
	single, err := daemon("single", "")
	if err != nil {
		return nil, err
	}
	defer single.Stop()
	fleet := make([]*Server, opts.Replicas)
	for i := range fleet {
		if fleet[i], err = daemon(fmt.Sprintf("replica-%d", i), "state:\n  url: unix://"+rds.Socket+"\n"); err != nil {
			return nil, err
		}
		defer fleet[i].Stop()
	}
	logs := func() string {
		var b strings.Builder
		for _, s := range append([]*Server{single}, fleet...) {
			fmt.Fprintf(&b, "--- %s\n%s", s.Socket, s.Log())
		}
		return b.String()
	}

	var out []*FleetResult
	for run, policy := range opts.Policies {
		r, err := fleetPolicy(ctx, opts, policy, run, single, fleet, rdb, rds.PID())
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", policy, err, logs())
		}
		out = append(out, r)
	}
	return out, nil
}

// fleetPolicy measures one policy on the running daemons.
func fleetPolicy(ctx context.Context, opts FleetOptions, policy string, run int, single *Server, fleet []*Server, rdb *redis.Client, redisPID int) (*FleetResult, error) {
	type conn struct {
		single *loadClient
		fleet  []*loadClient
	}
	conns := make([]conn, opts.Clients)
	for i := range conns {
		conns[i].single = newLoadClient(single.Socket)
		defer conns[i].single.close()
		for _, s := range fleet {
			c := newLoadClient(s.Socket)
			defer c.close()
			conns[i].fleet = append(conns[i].fleet, c)
		}
	}
	pass := 0
	// onePass sends every turn of the set to the three sides and returns
	// each side's latencies: the bbolt daemon, the fleet with each
	// conversation on one replica (sticky), the fleet taking its turns
	// round-robin.
	onePass := func(check bool) (lat [3][]time.Duration, err error) {
		var (
			next     atomic.Int64
			mu       sync.Mutex
			firstErr error
			wg       sync.WaitGroup
		)
		pass++
		for _, c := range conns {
			wg.Go(func() {
				var mine [3][]time.Duration
				defer func() {
					mu.Lock()
					for i := range lat {
						lat[i] = append(lat[i], mine[i]...)
					}
					mu.Unlock()
				}()
				for {
					ci := int(next.Add(1) - 1)
					if ci >= len(opts.Set.Convs) || ctx.Err() != nil {
						return
					}
					id := fmt.Sprintf("lb%d-%d-%d", run, pass, ci)
					for k, n := range opts.Set.Turns[ci] {
						msgs := opts.Set.Convs[ci][:n]
						send := func(s int) error {
							var to *loadClient
							var cid string
							switch s {
							case 0:
								to, cid = c.single, "s-"+id
							case 1:
								to, cid = c.fleet[ci%len(c.fleet)], "k-"+id
							default:
								to, cid = c.fleet[(ci+k)%len(c.fleet)], "f-"+id
							}
							d, body, err := to.post(ctx, Body{Policy: policy, Model: "gpt-4o", ConversationID: cid}, msgs)
							if err == nil && check {
								err = CheckCompact(body)
							}
							mine[s] = append(mine[s], d)
							return err
						}
						// Which side goes first rotates.
						var err error
						for j := 0; j < 3 && err == nil; j++ {
							err = send((ci + k + j) % 3)
						}
						if err != nil {
							mu.Lock()
							if firstErr == nil {
								firstErr = fmt.Errorf("%s: conversation %d, %d messages: %w", opts.Set.Name, ci, n, err)
							}
							mu.Unlock()
							next.Store(int64(len(opts.Set.Convs)))
							return
						}
					}
				}
			})
		}
		wg.Wait()
		if firstErr == nil {
			firstErr = ctx.Err()
		}
		return lat, firstErr
	}
	for i := 0; i < opts.Warmup; i++ {
		if _, err := onePass(true); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	mem0, err := redisInfoInt(ctx, rdb, "memory", "used_memory")
	if err != nil {
		return nil, err
	}
	convs0, err := rdb.ZCard(ctx, "compactd:convs").Result()
	if err != nil {
		return nil, err
	}
	cmds0, err := redisCommands(ctx, rdb)
	if err != nil {
		return nil, err
	}
	cpu0, err := ProcCPU(redisPID)
	if err != nil {
		return nil, err
	}
	var lat [3][]time.Duration
	start := time.Now()
	for len(lat[0]) == 0 || time.Since(start) < opts.MinTime {
		l, err := onePass(false)
		if err != nil {
			return nil, err
		}
		for i := range lat {
			lat[i] = append(lat[i], l[i]...)
		}
	}
	cpu1, err := ProcCPU(redisPID)
	if err != nil {
		return nil, err
	}
	cmds1, err := redisCommands(ctx, rdb)
	if err != nil {
		return nil, err
	}
	mem1, err := redisInfoInt(ctx, rdb, "memory", "used_memory")
	if err != nil {
		return nil, err
	}
	convs1, err := rdb.ZCard(ctx, "compactd:convs").Result()
	if err != nil {
		return nil, err
	}
	res := &FleetResult{Set: opts.Set.Name, Policy: policy, Replicas: len(fleet), Clients: opts.Clients,
		Single: side(lat[0]), Sticky: side(lat[1]), Fleet: side(lat[2]), Conversations: convs1}
	// The commands INFO itself and the ZCARD above sent are the run's
	// noise: a few against thousands.
	res.Commands = float64(cmds1-cmds0) / float64(len(lat[1])+len(lat[2]))
	res.RedisCPU = (cpu1 - cpu0) / time.Duration(len(lat[1])+len(lat[2]))
	if convs1 > convs0 {
		res.MemoryPerConversation = float64(mem1-mem0) / float64(convs1-convs0)
	}
	if res.KeyBytes, err = conversationKeyBytes(ctx, rdb, fmt.Sprintf("f-lb%d-", run)); err != nil {
		return nil, err
	}
	// Throughput: the bbolt daemon, then one replica, each alone.
	for _, t := range []struct {
		srv *Server
		dst **Result
	}{{single, &res.SingleLoad}, {fleet[0], &res.ReplicaLoad}} {
		r, err := Load(ctx, LoadOptions{Socket: t.srv.Socket, PID: t.srv.PID(), Set: opts.Set, Body: Body{Policy: policy, Model: "gpt-4o"},
			Clients: opts.Clients, Warmup: 1, MinTime: opts.MinTime})
		if err != nil {
			return nil, fmt.Errorf("throughput: %w", err)
		}
		*t.dst = r
	}
	return res, nil
}

// side summarizes one side's latencies.
func side(lat []time.Duration) FleetSide {
	s := slices.Clone(lat)
	slices.Sort(s)
	return FleetSide{Requests: len(s), P50: s[len(s)/2], P99: s[len(s)*99/100]}
}

// conversationKeyBytes is the mean MEMORY USAGE of the keys of up to 200
// conversations whose ids start with prefix.
func conversationKeyBytes(ctx context.Context, rdb *redis.Client, prefix string) (float64, error) {
	ids, err := rdb.ZRange(ctx, "compactd:convs", 0, -1).Result()
	if err != nil {
		return 0, err
	}
	var total int64
	n := 0
	for _, id := range ids {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		for _, kind := range []string{"st", "ps", "lc"} {
			b, err := rdb.MemoryUsage(ctx, "compactd:{"+id+"}:"+kind).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return 0, err
			}
			total += b
		}
		if n++; n == 200 {
			break
		}
	}
	if n == 0 {
		return 0, nil
	}
	return float64(total) / float64(n), nil
}

// redisInfoInt reads one integer field of an INFO section.
func redisInfoInt(ctx context.Context, rdb *redis.Client, section, field string) (int64, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("loadbench: INFO %s has no %s", section, field)
}

// redisCommands is the number of commands the server has run (the sum of
// INFO commandstats' calls).
func redisCommands(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(info, "\r\n") {
		// cmdstat_get:calls=12,usec=…
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("loadbench: commandstats %q: %w", line, err)
		}
		total += n
	}
	return total, nil
}

// StartRedis starts redis-server (bin, or the one on $PATH) on a Unix
// socket in dir, persistence off, as the tests' servers are.
func StartRedis(ctx context.Context, bin, dir string) (*Server, error) {
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("loadbench: the fleet needs redis-server (make deps installs it): %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "r.sock")
	// Ready when it answers PING (on a bare connection: go-redis would
	// log each refused dial to stderr).
	ready := func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		buf := make([]byte, 7)
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != "+PONG\r\n" {
			return fmt.Errorf("redis-server answered %q to PING", buf)
		}
		return nil
	}
	return start(ctx, "redis-server", socket, ready, bin, "--port", "0", "--unixsocket", socket, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir)
}

// WriteFleet writes the fleet comparison as markdown: the latency the
// shared store adds, then the sizing figures.
func WriteFleet(w io.Writer, rs []*FleetResult) {
	if len(rs) == 0 {
		return
	}
	r0 := rs[0]
	fmt.Fprintf(w, "%d daemons sharing one redis-server (Unix socket, persistence off) against one daemon on bbolt, on the same requests: every turn prefix of %s, %d clients, each turn sent to three sides (which goes first rotating): the bbolt daemon; the fleet with each conversation kept on one replica (*sticky*, a load balancer with affinity); the fleet taking a conversation's turns round-robin (*rr*). Every request carries a conversation id, so plugin state and status go through the store. One interleaved run; the machine may be shared, so read the differences and ratios.\n\n",
		r0.Replicas, r0.Set, r0.Clients)
	fmt.Fprintln(w, "| policy | requests each | bbolt p50 / p99 | sticky p50 / p99 | rr p50 / p99 | added, sticky − bbolt p50 / p99 | added, rr − bbolt p50 / p99 | rr ÷ bbolt p50 / p99 | Redis commands per request | redis-server CPU per request |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %d | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s | %.2f / %.2f | %.1f | %s |\n", r.Policy, r.Fleet.Requests,
			ms(r.Single.P50), ms(r.Single.P99), ms(r.Sticky.P50), ms(r.Sticky.P99), ms(r.Fleet.P50), ms(r.Fleet.P99),
			signedMs(r.Sticky.P50-r.Single.P50), signedMs(r.Sticky.P99-r.Single.P99),
			signedMs(r.Fleet.P50-r.Single.P50), signedMs(r.Fleet.P99-r.Single.P99),
			float64(r.Fleet.P50)/float64(r.Single.P50), float64(r.Fleet.P99)/float64(r.Single.P99), r.Commands, us(r.RedisCPU))
	}
	fmt.Fprintf(w, "\nSizing: Redis memory per conversation (used_memory's growth over the measured passes ÷ the conversations they added; and MEMORY USAGE of a conversation's status, plugin-state and last-compaction keys, mean of up to 200), and throughput of one daemon alone (%d clients, no conversation ids): requests per second and the daemon's CPU per request.\n\n", r0.Clients)
	fmt.Fprintln(w, "| policy | conversations in Redis | used_memory per conversation | MEMORY USAGE per conversation | bbolt daemon req/s (CPU/request) | one replica on Redis req/s (CPU/request) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s (%s) | %s (%s) |\n", r.Policy, r.Conversations,
			kb(r.MemoryPerConversation), kb(r.KeyBytes),
			thousands(r.SingleLoad.ReqPerSec), us(r.SingleLoad.CPUPerRequest()),
			thousands(r.ReplicaLoad.ReqPerSec), us(r.ReplicaLoad.CPUPerRequest()))
	}
}

func signedMs(d time.Duration) string {
	if d >= 0 {
		return "+" + ms(d)
	}
	return "−" + ms(-d)
}
