package loadbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/compactd/compactd/client"
)

// Server is a target process serving HTTP on a Unix socket.
type Server struct {
	Name   string
	Socket string
	cmd    *exec.Cmd
	done   chan struct{}
	log    *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// PID returns the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Log returns what the server wrote to stderr.
func (s *Server) Log() string { return s.log.String() }

// Stop sends SIGTERM and waits for the process (killing it after 30s).
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// start runs a command and waits until ready succeeds (or the process
// exits, or a minute passes).
func start(ctx context.Context, name, socket string, ready func(ctx context.Context) error, bin string, args ...string) (*Server, error) {
	s := &Server{Name: name, Socket: socket, done: make(chan struct{}), log: &lockedBuffer{}}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stderr = s.log
	s.cmd.Stdout = s.log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("loadbench: %s exited before it served:\n%s", name, s.Log())
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		default:
		}
		err := ready(ctx)
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("loadbench: %s not ready after a minute: %v\n%s", name, err, s.Log())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// StartBaseline starts a baseline service (echo or json) in a child
// process: exe is a program that runs ServeBaseline for the arguments
// "baseline -mode NAME -socket PATH" (the loadbench command).
func StartBaseline(ctx context.Context, exe, name, dir string) (*Server, error) {
	socket := filepath.Join(dir, name+".sock")
	ready := func(ctx context.Context) error {
		c := newLoadClient(socket)
		defer c.close()
		_, _, err := c.post(ctx, Body{Policy: "ping"}, []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)})
		return err
	}
	return start(ctx, name, socket, ready, exe, "baseline", "-mode", name, "-socket", socket)
}

// Daemon says how to start compactd.
type Daemon struct {
	// Bin is the compactd binary; Plugins the plugins directory;
	// CacheDir the compilation cache ("" for a fresh one in Dir).
	Bin, Plugins, CacheDir string
	// Dir holds the socket, state and config file.
	Dir string
	// Config is written to the config file when not empty.
	Config string
	// Policies must serve before the daemon counts as started.
	Policies []string
}

// StartCompactd starts `compactd serve` and waits until each of
// d.Policies answers a compaction.
func StartCompactd(ctx context.Context, d Daemon) (*Server, error) {
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return nil, err
	}
	socket := filepath.Join(d.Dir, "compactd.sock")
	cfg := filepath.Join(d.Dir, "config.yaml")
	if d.Config != "" {
		if err := os.WriteFile(cfg, []byte(d.Config), 0o600); err != nil {
			return nil, err
		}
	}
	cache := d.CacheDir
	if cache == "" {
		cache = filepath.Join(d.Dir, "cache")
	}
	c := client.New(socket)
	ready := func(ctx context.Context) error {
		defer c.Close()
		return compactEach(ctx, c, d.Policies)
	}
	return start(ctx, "compactd", socket, ready, d.Bin, "serve", "--socket", socket, "--plugins", d.Plugins,
		"--state-dir", filepath.Join(d.Dir, "state"), "--config", cfg, "--cache-dir", cache, "--log-level", "warn")
}

// StartCompiled starts compactd as StartCompactd does and waits until
// every plugin runs compiled code (a new plugin serves interpreted while
// the compiler works in the background): what a daemon that has run for
// a while serves with.
func StartCompiled(ctx context.Context, d Daemon) (*Server, error) {
	srv, err := StartCompactd(ctx, d)
	if err != nil {
		return nil, err
	}
	if err := waitCompiled(ctx, srv, ""); err != nil {
		srv.Stop()
		return nil, err
	}
	return srv, nil
}

// compactEach compacts a small conversation with each policy; it fails
// unless every policy answers without a warning.
func compactEach(ctx context.Context, c *client.Client, policies []string) error {
	msgs := []json.RawMessage{
		json.RawMessage(`{"role":"system","content":"You are a helpful assistant."}`),
		json.RawMessage(`{"role":"user","content":"Book a flight to Boston."}`),
		json.RawMessage(`{"role":"assistant","content":"Which date?"}`),
		json.RawMessage(`{"role":"user","content":"Friday."}`),
	}
	for _, p := range policies {
		resp, err := c.Compact(ctx, &client.CompactRequest{Policy: p, Messages: msgs})
		if err != nil {
			return err
		}
		if len(resp.Warnings) > 0 {
			return fmt.Errorf("%s: %v", p, resp.Warnings)
		}
	}
	return nil
}

// CheckCompact checks a compactd answer: valid JSON, no warnings (a
// failed policy answers 200 with its input and a warning).
func CheckCompact(body []byte) error {
	var resp struct {
		Messages []json.RawMessage `json:"messages"`
		Warnings []string          `json:"warnings"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	if len(resp.Messages) == 0 {
		return errors.New("answer has no messages")
	}
	if len(resp.Warnings) > 0 {
		return fmt.Errorf("warnings: %v", resp.Warnings)
	}
	return nil
}
