// Package redistest starts real redis-server processes for tests: a
// standalone server on a Unix socket in a temp dir, and a 3-node Redis
// Cluster on loopback ports. No fake stands in for Redis. A test is
// skipped when redis-server is missing, except in CI (CI set), where that
// fails: `make deps` installs it.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary returns redis-server's path, or skips t (fails it in CI).
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not installed (make deps installs it): %v", err)
		}
		t.Skip("redis-server is not installed (make deps installs it)")
	}
	return bin
}

// Server is a running redis-server.
type Server struct {
	t    testing.TB
	bin  string
	Dir  string
	Sock string
	Port int
	args []string
	cmd  *exec.Cmd
}

// Start starts a standalone server on a Unix socket in a temp dir, with
// persistence off; it is killed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "rds") // short: a socket path is limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{t: t, bin: Binary(t), Dir: dir, Sock: filepath.Join(dir, "r.sock")}
	s.args = []string{"--port", "0", "--unixsocket", s.Sock, "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", dir}
	s.start()
	t.Cleanup(s.Kill)
	return s
}

// URL is the server's state.url.
func (s *Server) URL() string {
	if s.Sock != "" {
		return "unix://" + s.Sock
	}
	return "redis://127.0.0.1:" + strconv.Itoa(s.Port)
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.Dir
	// The server dies with the test binary, even one killed by its
	// -timeout before cleanups run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := os.Create(filepath.Join(s.Dir, fmt.Sprintf("log-%d", time.Now().UnixNano())))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	out.Close()
	s.cmd = cmd
	s.waitReady()
}

func (s *Server) waitReady() {
	s.t.Helper()
	c := redis.NewClient(s.options())
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) options() *redis.Options {
	if s.Sock != "" {
		return &redis.Options{Network: "unix", Addr: s.Sock}
	}
	return &redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(s.Port)}
}

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.options())
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server with SIGKILL and waits for it (a second Kill
// does nothing).
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same socket (empty: persistence
// is off).
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	os.Remove(s.Sock)
	s.start()
}

// Cluster is a running 3-node Redis Cluster (3 masters, no replicas).
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts three cluster-enabled servers on free loopback
// ports and joins them, waiting until the cluster is ok.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := Binary(t)
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		port := freePort(t)
		s := &Server{t: t, bin: bin, Dir: dir, Port: port}
		s.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}
		s.start()
		t.Cleanup(s.Kill)
		c.Nodes = append(c.Nodes, s)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli (package redis-tools, with redis-server) is missing: %v", err)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, "127.0.0.1:"+strconv.Itoa(n.Port))
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		rc := redis.NewClient(n.options())
		for {
			info, err := rc.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && clusterKnows(info, 3) {
				break
			}
			if time.Now().After(deadline) {
				rc.Close()
				t.Fatalf("cluster not ok: %v %s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rc.Close()
	}
	return c
}

func clusterKnows(info string, n int) bool {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "cluster_known_nodes:"); ok {
			k, _ := strconv.Atoi(v)
			return k >= n
		}
	}
	return false
}

// URL is the cluster's state.url: its nodes' addresses.
func (c *Cluster) URL() string {
	var parts []string
	for _, n := range c.Nodes {
		parts = append(parts, "redis://127.0.0.1:"+strconv.Itoa(n.Port))
	}
	return strings.Join(parts, ",")
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := l.Addr().(*net.TCPAddr).Port
	if p > 55535 {
		// the cluster bus listens on port+10000
		return freePort(t)
	}
	return p
}
