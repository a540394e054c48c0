package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/server"
	"github.com/compactd/compactd/internal/wasmbuild"
)

// TestMain runs a real daemon (with the lastn plugin) for the examples,
// and points $COMPACTD_SOCKET at it so that client.New("") finds it.
func TestMain(m *testing.M) {
	os.Exit(runWithDaemon(m))
}

func runWithDaemon(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cdc")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := wasmbuild.ModuleRoot(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	plugins := filepath.Join(dir, "plugins")
	os.MkdirAll(plugins, 0o755)
	if err := wasmbuild.C(context.Background(), filepath.Join(root, "plugins/lastn/lastn.c"), filepath.Join(plugins, "lastn.wasm"), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	socket := filepath.Join(dir, "compactd.sock")
	d, err := server.Start(context.Background(), server.DaemonOptions{
		ConfigPath: filepath.Join(dir, "config.yaml"),
		Getenv:     func(string) string { return "" },
		Defaults:   config.Config{Socket: socket, PluginsDir: plugins, StateDir: filepath.Join(dir, "state"), CacheDir: filepath.Join(dir, "cache")},
		Version:    "example",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer d.Shutdown(context.Background())
	os.Setenv("COMPACTD_SOCKET", socket)
	return m.Run()
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
	// Output: lastn 0.3.0 true fast
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
