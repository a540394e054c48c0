package client_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/server"
	"github.com/compactd/compactd/internal/testenv"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// TestMain gives the examples a real daemon (with the lastn plugin) behind
// $COMPACTD_SOCKET, so that client.New("") finds it. The daemon starts at
// the first connection: a run that selects no example (go test -run
// TestEncode, say) starts none. A unit run (internal/testenv) skips the
// examples.
func TestMain(m *testing.M) {
	flag.Parse()
	if testenv.Unit() {
		skip := "^Example"
		if old := flag.Lookup("test.skip").Value.String(); old != "" {
			skip = old + "|" + skip
		}
		flag.Set("test.skip", skip)
		os.Exit(m.Run())
	}
	os.Exit(runWithDaemon(m))
}

func runWithDaemon(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cdc")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "compactd.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d := &lazyDaemon{dir: dir}
	go d.serve(ln)
	os.Setenv("COMPACTD_SOCKET", socket)
	code := m.Run()
	ln.Close()
	d.once.Do(func() {}) // no start after this one; one started is seen
	if d.d != nil {
		d.d.Shutdown(context.Background())
	}
	return code
}

// lazyDaemon starts a daemon at the first connection to its listener and
// passes every connection on to it.
type lazyDaemon struct {
	dir  string
	once sync.Once
	d    *server.Daemon
}

func (l *lazyDaemon) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go l.pipe(conn)
	}
}

func (l *lazyDaemon) pipe(conn net.Conn) {
	defer conn.Close()
	l.once.Do(l.start)
	if l.d == nil {
		return // start failed, and said why
	}
	up, err := net.Dial("unix", l.d.Socket())
	if err != nil {
		fmt.Fprintln(os.Stderr, "example daemon:", err)
		return
	}
	defer up.Close()
	go func() {
		io.Copy(up, conn)
		up.(*net.UnixConn).CloseWrite()
	}()
	io.Copy(conn, up)
}

func (l *lazyDaemon) start() {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "example daemon:", err) }
	lastn, err := wasmbuild.ForTestMain("plugins/lastn/lastn.c")
	if err != nil {
		fail(err)
		return
	}
	cache, err := wasmbuild.TestCacheDirMain()
	if err != nil {
		fail(err)
		return
	}
	plugins := filepath.Join(l.dir, "plugins")
	wasm, err := os.ReadFile(lastn)
	if err == nil {
		if err = os.MkdirAll(plugins, 0o755); err == nil {
			err = os.WriteFile(filepath.Join(plugins, "lastn.wasm"), wasm, 0o644)
		}
	}
	if err != nil {
		fail(err)
		return
	}
	d, err := server.Start(context.Background(), server.DaemonOptions{
		ConfigPath: filepath.Join(l.dir, "config.yaml"),
		Getenv:     func(string) string { return "" },
		Defaults: config.Config{Socket: filepath.Join(l.dir, "d.sock"), PluginsDir: plugins,
			StateDir: filepath.Join(l.dir, "state"), CacheDir: cache},
		Version:      "example",
		CompileFirst: true,
	})
	if err != nil {
		fail(err)
		return
	}
	l.d = d
}

func Example() {
	c := client.New("") // $COMPACTD_SOCKET, else $XDG_RUNTIME_DIR/compactd.sock, ...
	defer c.Close()
	resp, err := c.Compact(context.Background(), &client.CompactRequest{
		Policy: "lastn",
		Config: map[string]any{"n": 2, "step": 1},
		Messages: []json.RawMessage{
			json.RawMessage(`{"role":"system","content":"You are terse."}`),
			json.RawMessage(`{"role":"user","content":"Book a flight to Boston."}`),
			json.RawMessage(`{"role":"assistant","content":"Which date?"}`),
			json.RawMessage(`{"role":"user","content":"Friday."}`),
			json.RawMessage(`{"role":"assistant","content":"Morning or evening?"}`),
			json.RawMessage(`{"role":"user",  "content":"Morning.", "x_client_id": 7}`),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Compacted, resp.Stats.MessagesBefore, "→", resp.Stats.MessagesAfter, "messages")
	for _, m := range resp.Messages {
		fmt.Println(string(m)) // kept messages come back byte for byte
	}
	// Output:
	// true 6 → 4 messages
	// {"role":"system","content":"You are terse."}
	// {"role":"user","content":"Book a flight to Boston."}
	// {"role":"assistant","content":"Morning or evening?"}
	// {"role":"user",  "content":"Morning.", "x_client_id": 7}
}

func ExampleClient_Policy() {
	c := client.New("")
	defer c.Close()
	p, err := c.Policy(context.Background(), "lastn")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Name, p.Version, p.Serving, p.Path)
	// Output: lastn 0.4.0 true fast
}

func ExampleIsCode() {
	c := client.New("")
	defer c.Close()
	_, err := c.Compact(context.Background(), &client.CompactRequest{
		Policy:   "no-such-policy",
		Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
	})
	if client.IsCode(err, "unknown_policy") {
		fmt.Println("unknown policy")
	}
	// Output: unknown policy
}

func ExampleClient_UpdateConfig() {
	c := client.New("")
	defer c.Close()
	ctx := context.Background()
	// Make lastn the default policy and keep 1 message after the system
	// messages and the task (step 1: cut on every message). The daemon checks the update against the plugin's config
	// schema and writes it to its config file.
	_, err := c.UpdateConfig(ctx, map[string]any{
		"policy":   "lastn",
		"policies": map[string]any{"lastn": map[string]any{"n": 1, "step": 1}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, _ := c.Compact(ctx, &client.CompactRequest{Messages: []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"a"}`),
		json.RawMessage(`{"role":"assistant","content":"b"}`),
		json.RawMessage(`{"role":"user","content":"c"}`),
	}})
	fmt.Println(len(resp.Messages), resp.Stats.Stages[0].Policy)

	// A value the schema rejects is refused, and nothing changes.
	_, err = c.UpdateConfig(ctx, map[string]any{"policies": map[string]any{"lastn": map[string]any{"n": 0}}})
	fmt.Println(client.IsCode(err, "invalid_config"))

	// Undo: null deletes a key.
	c.UpdateConfig(ctx, map[string]any{"policy": nil, "policies": nil})
	// Output:
	// 2 lastn
	// true
}

func ExampleClient_Status() {
	c := client.New("")
	defer c.Close()
	ctx := context.Background()
	c.Compact(ctx, &client.CompactRequest{Policy: "lastn", ConversationID: "ticket-42", Model: "gpt-4o",
		Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hello"}`)}})
	conv, err := c.Conversation(ctx, "ticket-42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(conv.ID, conv.Requests, conv.Messages, conv.ContextWindow)
	// Output: ticket-42 1 1 128000
}
